// The .pt writer and reader: values are first made picklable for the weights-only
// unpickler (plain lists and dicts, CPU tensors), then pickled by libtorch's own
// Pickler into a PyTorchStreamWriter archive, the records torch.save writes.
#include "util/torch_pickle.h"

#include <c10/util/StringUtil.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/storage_context.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "util/error.h"
#include "util/files.h"

namespace kiln::torch_pickle {
namespace {

// The dtypes whose storage classes (torch.<Name>Storage, the name the Pickler writes)
// the weights-only unpickler knows.
bool has_storage_class(at::ScalarType t) {
  switch (t) {
    case at::kBool: case at::kByte: case at::kChar: case at::kShort: case at::kInt:
    case at::kLong: case at::kHalf: case at::kBFloat16: case at::kFloat: case at::kDouble:
      return true;
    default:
      return false;
  }
}

// Tensors as the Pickler writes them: CPU, detached, views of one storage still
// views of one storage. A storage on another device is copied once, whole, and each
// tensor over it becomes the same view (offset, sizes, strides) of the copy.
class CpuStorages {
 public:
  at::Tensor to_cpu(const at::Tensor& t, const std::string& where) {
    TORCH_CHECK(t.layout() == at::kStrided && !t.is_quantized() && t.has_storage() && !t.is_meta(),
                "torch_pickle: ", where, ": expected a dense tensor with data, got a ",
                t.layout(), " ", t.device(), t.is_quantized() ? " quantized" : "", " tensor");
    TORCH_CHECK(has_storage_class(t.scalar_type()), "torch_pickle: ", where,
                ": expected bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32 "
                "or float64, got ", t.scalar_type());
    TORCH_CHECK(!t.is_conj() && !t.is_neg(), "torch_pickle: ", where,
                ": expected no lazy conjugate or negative bit; resolve_conj()/resolve_neg() it");
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    auto [it, fresh] = seen_.try_emplace(storage, Seen{t.scalar_type(), where, {}});
    TORCH_CHECK(it->second.dtype == t.scalar_type(), "torch_pickle: ", where, " (", t.scalar_type(),
                ") shares its storage with ", it->second.where, " (", it->second.dtype,
                "); a storage is read back as one dtype: write a clone() of one of them");
    const int64_t itemsize = static_cast<int64_t>(t.element_size());
    TORCH_CHECK(t.storage().nbytes() % itemsize == 0, "torch_pickle: ", where, ": its storage of ",
                t.storage().nbytes(), " bytes is not a whole number of ", t.scalar_type(), " elements");
    at::Tensor d = t.detach();
    if (d.is_cpu()) return d;
    if (fresh) {
      const int64_t n = static_cast<int64_t>(t.storage().nbytes()) / itemsize;
      it->second.cpu = at::empty({0}, d.options()).set_(d.storage(), 0, {n}, {1}).cpu();
    }
    return it->second.cpu.as_strided(d.sizes(), d.strides(), d.storage_offset());
  }

 private:
  struct Seen {
    at::ScalarType dtype;
    std::string where;  // the first tensor over the storage, for the message
    at::Tensor cpu;     // the whole storage on the CPU (non-CPU storages only)
  };
  std::unordered_map<const c10::StorageImpl*, Seen> seen_;
};

std::string key_text(const c10::IValue& key) {
  if (key.isString()) return "['" + key.toStringRef() + "']";
  std::ostringstream s;
  s << '[' << key << ']';
  return s.str();
}

// `v` in the form the weights-only unpickler accepts: every list a generic list (the
// Pickler writes int, float and bool lists as calls of torch.jit._pickle builders,
// which it refuses), every tensor as CpuStorages gives it.
c10::IValue picklable(const c10::IValue& v, const std::string& where, CpuStorages& storages) {
  if (v.isTensor()) return storages.to_cpu(v.toTensor(), where);
  if (v.isNone() || v.isBool() || v.isInt() || v.isDouble() || v.isString()) return v;
  if (v.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    const auto items = v.toListRef();
    for (size_t i = 0; i < items.size(); ++i)
      out.push_back(picklable(items[i], c10::str(where, '[', i, ']'), storages));
    return out;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> out;
    const auto items = v.toTupleRef().elements();
    for (size_t i = 0; i < items.size(); ++i)
      out.push_back(picklable(items[i], c10::str(where, '[', i, ']'), storages));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  if (v.isGenericDict()) {
    const auto dict = v.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    for (const auto& entry : dict) {
      const c10::IValue& key = entry.key();
      TORCH_CHECK(key.isString() || key.isInt() || key.isBool() || key.isDouble(), "torch_pickle: ",
                  where, ": expected str, int, bool or float keys, got a ", key.tagKind());
      out.insert(key, picklable(entry.value(), where + key_text(key), storages));
    }
    return out;
  }
  TORCH_CHECK(false, "torch_pickle: ", where, ": expected a tensor, None, bool, int, float, str, "
              "list, tuple or dict, got a ", v.tagKind());
}

bool reserved_record(const std::string& name) {
  return name == "data.pkl" || name == "version" || name == "byteorder" || name.starts_with("data/") ||
         name.starts_with(".data/");
}

// The archive reader over bytes already in memory.
class BytesReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReader(std::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  std::string_view bytes_;
};

// Walks a pickle's opcodes up to STOP and checks that each one's argument lies within
// the pickle, before libtorch's Unpickler sees it: the Unpickler reserves a string of
// the length an opcode declares before it reads it, so a damaged length of 2^32 or
// 2^64 in a 200-byte file was a 4 GiB allocation or a crash (the fuzzer's find). Our
// own scan because the Unpickler has no limit to set and pickletools is Python; it
// knows the argument layout of every opcode of protocols 0–5, and the one other thing
// the Unpickler sizes by: its memo is a vector, which a BINPUT or LONG_BINPUT index
// past its end extends to that index (a 4-byte index of 2^30 from a 300-byte file was
// 10 GB, the fuzzer's second find). Picklers number their memo entries in order
// (Python's put index is len(memo)), so an index may name an existing entry or the
// next one, nothing further.
void check_pickle(std::string_view p, const std::string& source) {
  const auto fail = [&](size_t at, const std::string& what) {
    throw InputError(c10::str(source, ": data.pkl: byte ", at, ": ", what));
  };
  const auto little = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[at + i]);
    return v;
  };
  size_t pos = 0;
  uint64_t memo_size = 0;  // entries the Unpickler's memo would hold here
  const auto put = [&](size_t at, uint64_t index) {
    if (index > memo_size)
      fail(at, c10::str("a memo index of ", index, " where the memo holds ", memo_size,
                        " entries; expected at most ", memo_size, " (the next entry)"));
    memo_size = std::max(memo_size, index + 1);
  };
  while (pos < p.size()) {
    const size_t at = pos;
    const auto op = static_cast<uint8_t>(p[pos++]);
    const auto need = [&](uint64_t n, const char* what) {
      if (n > p.size() - pos)
        fail(at, c10::str("opcode 0x", std::hex, int{op}, std::dec, " declares ", n, " bytes of ",
                          what, ", the pickle has ", p.size() - pos, " left"));
      pos += n;
    };
    const auto line = [&]() {
      const auto end = p.find('\n', pos);
      if (end == std::string_view::npos)
        fail(at, c10::str("opcode 0x", std::hex, int{op}, std::dec, ": expected a line, found the end"));
      pos = end + 1;
    };
    const auto counted = [&](int width, const char* what) {
      need(width, "length");
      const uint64_t n = little(pos - width, width);
      if ((op == 'T' || op == 0x8b) && n >> 31) fail(at, "a negative length");  // signed int32
      need(n, what);
    };
    switch (op) {
      case '.': return;  // STOP
      case '0': case '1': case '2': case '(': case 'N': case 0x88: case 0x89: case '}': case ']':
      case ')': case 't': case 0x85: case 0x86: case 0x87: case 'a': case 'e': case 'l': case 'd':
      case 's': case 'u': case 'b': case 'R': case 0x81: case 0x92: case 0x93: case 0x8f:
      case 0x90: case 0x91: case 'Q': case 'o': case 0x97: case 0x98:
        break;
      case 0x94: ++memo_size; break;  // MEMOIZE: the next entry
      case 'q': need(1, "argument"); put(at, little(pos - 1, 1)); break;  // BINPUT
      case 'r': need(4, "argument"); put(at, little(pos - 4, 4)); break;  // LONG_BINPUT
      case 'K': case 'h': case 0x80: case 0x82: need(1, "argument"); break;
      case 'M': case 0x83: need(2, "argument"); break;
      case 'J': case 'j': case 0x84: need(4, "argument"); break;
      case 'G': case 0x95: need(8, "argument"); break;
      case 'U': case 'C': case 0x8c: case 0x8a: counted(1, "data"); break;
      case 'T': case 'B': case 'X': case 0x8b: counted(4, "data"); break;
      case 0x8d: case 0x8e: case 0x96: counted(8, "data"); break;
      case 'I': case 'L': case 'F': case 'S': case 'V': case 'P': case 'g': case 'p': line(); break;
      case 'c': case 'i': line(); line(); break;
      default:
        fail(at, c10::str("expected a pickle opcode, found 0x", std::hex, int{op}));
    }
  }
  fail(p.size(), "expected the STOP opcode, found the end of the pickle");
}

// libtorch's getRecord allocates the size a record's zip entry declares before it reads
// a byte: a 3 KB file whose directory says 4 GiB allocated 4 GiB (the checkpoint
// fuzzer's finding). torch.save and kiln store records uncompressed, so each record's
// data must lie inside the file; one that does not is refused before it is read.
void check_record_sizes(caffe2::serialize::PyTorchStreamReader& reader, size_t file_bytes,
                        const std::string& source) {
  for (const auto& name : reader.getAllRecords()) {
    const size_t size = reader.getRecordSize(name), offset = reader.getRecordOffset(name);
    if (offset > file_bytes || size > file_bytes - offset)
      throw InputError(c10::str(source, ": record '", printable(name), "' declares ", size,
                                " bytes at byte ", offset, ", past the end of the file's ",
                                file_bytes, " bytes; expected a .pt file (torch.save's zip "
                                "format, records stored uncompressed) that holds its records"));
  }
}

// Runs `fn` on a reader of `bytes`; libtorch's errors become one InputError naming `source`.
template <typename Fn>
auto with_reader(std::string_view bytes, const std::string& source, Fn fn) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesReader>(bytes));
    check_record_sizes(reader, bytes.size(), source);
    return fn(reader);
  } catch (const c10::Error& e) {
    throw InputError(c10::str(source, ": expected a .pt file (torch.save's zip format) of tensors "
                              "and plain values, dicts not OrderedDicts (save dict(state_dict)); "
                              "libtorch's reader says: ", e.what_without_backtrace()));
  }
}

}  // namespace

std::string serialize(const c10::IValue& value, const Records& records) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the byteorder record says little");
  for (const auto& [name, bytes] : records)
    TORCH_CHECK(!name.empty() && !reserved_record(name), "torch_pickle: record '", name,
                "': expected a name the archive does not use itself (data.pkl, data/..., "
                "version, byteorder, .data/...)");
  CpuStorages storages;
  const c10::IValue plain = picklable(value, "value", storages);

  std::string pickle;
  torch::jit::Pickler pickler([&](const char* p, size_t n) { pickle.append(p, n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(plain);
  pickler.stop();

  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
    return n;
  });
  // What torch::jit::writeArchiveAndTensors("data", …) does: storage i as data/i.
  const auto& tensors = pickler.tensorData();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto data = torch::jit::getWriteableTensorData(tensors[i]);
    writer.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
  }
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
  return out;
}

c10::IValue deserialize(std::string_view bytes, const std::string& source) {
  return with_reader(bytes, source, [&](caffe2::serialize::PyTorchStreamReader& reader) {
    if (reader.hasRecord("data.pkl")) {
      const auto [pickle, size] = reader.getRecord("data.pkl");
      check_pickle(std::string_view(static_cast<const char*>(pickle.get()), size), source);
    }
    // The storage context loads each storage record once: Python's pickler names a
    // shared storage again for every view of it, kiln's refers back to the first.
    return torch::jit::readArchiveAndTensors(
        "data", /*pickle_prefix=*/"", /*tensor_prefix=*/"", /*type_resolver=*/std::nullopt,
        /*obj_loader=*/std::nullopt, /*device=*/std::nullopt, reader,
        torch::jit::Unpickler::defaultTypeParser,
        std::make_shared<torch::jit::DeserializationStorageContext>());
  });
}

void save_file(const std::string& path, const c10::IValue& value, const Records& records) {
  files::replace_synced(path, serialize(value, records));
}

c10::IValue load_file(const std::string& path) { return deserialize(files::read(path), path); }

std::vector<std::string> record_names(std::string_view bytes, const std::string& source) {
  return with_reader(bytes, source, [](caffe2::serialize::PyTorchStreamReader& reader) {
    return reader.getAllRecords();
  });
}

std::optional<std::string> read_record(const std::string& path, const std::string& name) {
  const std::string bytes = files::read(path);
  return with_reader(bytes, path, [&](caffe2::serialize::PyTorchStreamReader& reader) {
    std::optional<std::string> out;
    if (!reader.hasRecord(name)) return out;
    auto [data, size] = reader.getRecord(name);
    out.emplace(static_cast<const char*>(data.get()), size);
    return out;
  });
}

}  // namespace kiln::torch_pickle
