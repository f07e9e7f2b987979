// Reads and writes safetensors files. The layout follows the format's
// specification (and the reference library's choices where the spec leaves
// one: tensor order, compact JSON, space padding), so files are byte-identical
// to `safetensors.torch.save_file`'s.
#include "util/safetensors.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "util/error.h"
#include "util/files.h"

namespace kiln::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; kiln copies it as is");

// The reference library refuses headers above this size; so does kiln.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct Dtype {
  const char* name;
  at::ScalarType type;
  int order;  // position in the reference library's Dtype enum (increasing alignment)
};
constexpr Dtype kDtypes[] = {
    {"BOOL", at::kBool, 0}, {"U8", at::kByte, 1},      {"I8", at::kChar, 2},
    {"I16", at::kShort, 5}, {"F16", at::kHalf, 7},     {"BF16", at::kBFloat16, 8},
    {"I32", at::kInt, 9},   {"F32", at::kFloat, 11},   {"F64", at::kDouble, 12},
    {"I64", at::kLong, 13}};
constexpr const char* kDtypeList = "F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL";

const Dtype* find_dtype(at::ScalarType type) {
  for (const auto& d : kDtypes)
    if (d.type == type) return &d;
  return nullptr;
}

const Dtype* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// A header entry, checked against itself; the spans are checked together later.
struct Entry {
  std::string name;
  const Dtype* dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  template <typename... Args>
  [[noreturn]] void fail(const Args&... parts) const {
    throw InputError(c10::str(source_, ": ", parts...));
  }

  // What a JSON value is, for "found …": its type and its text.
  static std::string describe(const nlohmann::json* v) {
    if (!v) return "nothing";
    return c10::str(v->type_name(), " ", v->dump());
  }

  // A non-negative integer that fits `limit`, or nullopt.
  static std::optional<uint64_t> unsigned_value(const nlohmann::json& v, uint64_t limit) {
    if (!v.is_number_unsigned()) return std::nullopt;
    const auto u = v.get<uint64_t>();
    return u <= limit ? std::optional<uint64_t>(u) : std::nullopt;
  }

  Entry entry(const std::string& name, const nlohmann::json& j) const {
    const auto where = c10::str("tensor '", name, "'");
    if (!j.is_object())
      fail(where, ": expected an object with dtype, shape and data_offsets, found ", describe(&j));
    const auto field = [&](const char* key) -> const nlohmann::json* {
      const auto it = j.find(key);
      return it == j.end() ? nullptr : &*it;
    };
    Entry e{name, nullptr, {}, 0, 0};

    const auto* dtype = field("dtype");
    if (!dtype || !dtype->is_string())
      fail(where, ": dtype: expected a string, one of ", kDtypeList, ", found ", describe(dtype));
    e.dtype = find_dtype(dtype->get<std::string>());
    if (!e.dtype)
      fail(where, ": dtype: expected one of ", kDtypeList, ", found ", dtype->dump());

    const auto* shape = field("shape");
    if (!shape || !shape->is_array())
      fail(where, ": shape: expected an array of non-negative integers, found ", describe(shape));
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : *shape) {
      const auto size = unsigned_value(d, std::numeric_limits<int64_t>::max());
      if (!size)
        fail(where, ": shape: expected an array of non-negative integers, found ", shape->dump());
      e.shape.push_back(static_cast<int64_t>(*size));
      overflow |= __builtin_mul_overflow(numel, *size, &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, c10::elementSize(e.dtype->type), &nbytes);

    const auto* offsets = field("data_offsets");
    const auto bad_offsets = [&] {
      fail(where, ": data_offsets: expected [begin, end] with 0 <= begin <= end, found ",
           describe(offsets));
    };
    if (!offsets || !offsets->is_array() || offsets->size() != 2) bad_offsets();
    const auto begin = unsigned_value((*offsets)[0], std::numeric_limits<uint64_t>::max());
    const auto end = unsigned_value((*offsets)[1], std::numeric_limits<uint64_t>::max());
    if (!begin || !end || *begin > *end) bad_offsets();
    e.begin = *begin;
    e.end = *end;
    if (overflow || e.end - e.begin != nbytes)
      fail(where, ": ", e.dtype->name, " ", c10::IntArrayRef(e.shape), " needs ",
           overflow ? std::string("more than 2^64") : std::to_string(nbytes),
           " bytes, but its data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin);
    return e;
  }

 private:
  const std::string& source_;
};

}  // namespace

std::string serialize(const NamedTensors& tensors, const Metadata& metadata) {
  struct Item {
    const std::string* name;
    const Dtype* dtype;
    at::Tensor data;  // contiguous, on the CPU
  };
  std::vector<Item> items;
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    TORCH_CHECK(name != "__metadata__",
                "safetensors::serialize: expected tensor names other than __metadata__ (the "
                "header's metadata key), got a tensor of that name");
    TORCH_CHECK(seen.insert(name).second, "safetensors::serialize: expected unique names, got '",
                name, "' twice");
    TORCH_CHECK(t.defined(), "safetensors::serialize: '", name, "': expected a tensor, got none");
    const Dtype* dtype = find_dtype(t.scalar_type());
    TORCH_CHECK(dtype, "safetensors::serialize: '", name, "': expected a dtype of ", kDtypeList,
                ", got ", t.scalar_type());
    items.push_back({&name, dtype, t.detach().to(at::kCPU).contiguous()});
  }
  // The reference library's order: dtype alignment descending, then name.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.dtype->order != b.dtype->order ? a.dtype->order > b.dtype->order : *a.name < *b.name;
  });

  // ordered_json keeps insertion order: __metadata__ first, then the data order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& item : items) {
    const uint64_t n = item.data.nbytes();
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = item.dtype->name;
    entry["shape"] = item.data.sizes().vec();
    entry["data_offsets"] = {offset, offset + n};
    header[*item.name] = std::move(entry);
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), 8);  // little-endian (static_assert above)
  out += text;
  for (const auto& item : items)
    out.append(static_cast<const char*>(item.data.const_data_ptr()), item.data.nbytes());
  return out;
}

Contents deserialize(std::string_view bytes, const std::string& source) {
  const Reader r(source);
  if (bytes.size() < 8)
    r.fail("expected at least 8 bytes (the header length), found ", bytes.size(),
           " (not a safetensors file, or truncated)");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const uint64_t after_length = bytes.size() - 8;
  if (n > kMaxHeaderBytes)
    r.fail("header length: expected at most ", kMaxHeaderBytes, " bytes, found ", n,
           " (not a safetensors file?)");
  if (n > after_length)
    r.fail("truncated: the header length says ", n, " bytes, but only ", after_length,
           " bytes follow it");
  const std::string_view text = bytes.substr(8, n);
  const std::string_view data = bytes.substr(8 + n);

  // nlohmann keeps the last of two equal keys; the callback sees every top-level key.
  std::set<std::string> names;
  std::string duplicate;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        text.begin(), text.end(),
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
              !names.insert(parsed.get<std::string>()).second && duplicate.empty())
            duplicate = parsed.get<std::string>();
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    r.fail("header: expected JSON, found text that does not parse (", e.what(), ")");
  }
  if (!header.is_object()) r.fail("header: expected a JSON object, found ", header.type_name());
  if (!duplicate.empty())
    r.fail("header: expected each tensor name once, found '", duplicate, "' more than once");

  Contents out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") {
      entries.push_back(r.entry(name, value));
      continue;
    }
    if (!value.is_object())
      r.fail("__metadata__: expected an object of strings, found ", Reader::describe(&value));
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string())
        r.fail("__metadata__ '", key, "': expected a string, found ", Reader::describe(&v));
      out.metadata[key] = v.get<std::string>();
    }
  }

  // The spans, in data order, must tile the data buffer exactly.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.end > data.size())
      r.fail("tensor '", e.name, "': data_offsets [", e.begin, ", ", e.end,
             "] reach past the end of the ", data.size(), "-byte data buffer (truncated?)");
    if (e.begin < covered)
      r.fail("tensors '", entries[i - 1].name, "' and '", e.name, "' overlap: data_offsets [",
             entries[i - 1].begin, ", ", entries[i - 1].end, "] and [", e.begin, ", ", e.end, "]");
    if (e.begin > covered)
      r.fail("data bytes [", covered, ", ", e.begin,
             ") belong to no tensor (expected the tensors to cover the data buffer without gaps)");
    covered = e.end;
  }
  if (covered != data.size())
    r.fail("data bytes [", covered, ", ", data.size(), ") belong to no tensor (expected the ",
           data.size(), "-byte data buffer to end where the last tensor ends)");

  for (const auto& e : entries) {
    auto t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype->type));
    if (e.end > e.begin) std::memcpy(t.mutable_data_ptr(), data.data() + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void save_file(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  files::write_synced(path, serialize(tensors, metadata));
}

Contents load_file(const std::string& path) { return deserialize(files::read(path), path); }

}  // namespace kiln::safetensors
