// Archives to dicts and back through torch::serialize's public API: an OutputArchive is
// read back as an InputArchive and walked key by key; a dict is written into a fresh
// OutputArchive and read back as an InputArchive. Tensors are copied exactly, so a
// resume from these files is as bit-exact as from TorchScript archives.
#include "util/torch_archive.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <sstream>

#include "util/error.h"
#include "util/torch_pickle.h"

namespace kiln::torch_pickle {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

c10::impl::GenericDict dict_of(InputArchive& ar, const std::string& where) {
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  for (const auto& key : ar.keys()) {
    InputArchive nested;
    if (ar.try_read(key, nested)) {
      out.insert(key, dict_of(nested, where + "/" + key));
      continue;
    }
    c10::IValue v;
    ar.read(key, v);
    TORCH_CHECK(!v.isGenericDict(), "serialize_archive: ", where, "/", key,
                ": a dict value could not be told from a nested archive; write it as one");
    out.insert(key, std::move(v));
  }
  return out;
}

// A list read back from a pickle is List[Any]; an archive keeps typed lists (List[int], …).
c10::IValue typed(const c10::IValue& v) {
  if (v.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& e : v.toTupleRef().elements()) items.push_back(typed(e));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (!v.isList()) return v;
  c10::impl::GenericList out(c10::AnyType::get());
  c10::TypePtr element;
  for (const auto& e : v.toListRef()) {
    out.push_back(typed(e));
    const auto t = out.get(out.size() - 1).type();
    element = !element || *element == *t ? t : c10::AnyType::get();
  }
  if (element) out.unsafeSetElementType(element);
  return out;
}

void fill(OutputArchive& ar, const c10::impl::GenericDict& dict, const std::string& where) {
  for (const auto& entry : dict) {
    TORCH_CHECK(entry.key().isString(), where, ": expected string keys, found a ",
                entry.key().tagKind());
    const std::string& key = entry.key().toStringRef();
    const c10::IValue& v = entry.value();
    if (v.isGenericDict()) {
      OutputArchive nested(ar.compilation_unit());
      fill(nested, v.toGenericDict(), where + "/" + key);
      ar.write(key, nested);
    } else if (v.isTensor()) {
      ar.write(key, v.toTensor());
    } else {
      ar.write(key, typed(v));
    }
  }
}

std::string bytes_of(OutputArchive& ar) {
  std::ostringstream out;
  ar.save_to(out);
  return std::move(out).str();
}

}  // namespace

std::string serialize_archive(OutputArchive& archive) {
  const std::string script = bytes_of(archive);
  InputArchive back;  // on the CPU: a device's state is not held twice on the device
  back.load_from(script.data(), script.size(), torch::kCPU);
  return serialize(dict_of(back, "archive"));
}

void load_archive(InputArchive& archive, std::string_view bytes, const std::string& source) {
  const auto names = record_names(bytes, source);  // kiln::InputError for a file that is no archive
  const bool torchscript = std::find(names.begin(), names.end(), "constants.pkl") != names.end();
  try {
    if (torchscript) {
      archive.load_from(bytes.data(), bytes.size());
      return;
    }
    const c10::IValue value = deserialize(bytes, source);
    TORCH_CHECK(value.isGenericDict(), "expected a dict (an archive), found a ", value.tagKind());
    OutputArchive rebuilt;
    fill(rebuilt, value.toGenericDict(), "archive");
    const std::string script = bytes_of(rebuilt);
    archive.load_from(script.data(), script.size());
  } catch (const c10::Error& e) {
    throw InputError(c10::str(source, ": not a readable archive (", e.what_without_backtrace(), ")"));
  }
}

}  // namespace kiln::torch_pickle
