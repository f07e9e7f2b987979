// Archives to dicts and back: an OutputArchive is read back as an InputArchive and
// walked key by key; a dict is written into a fresh OutputArchive whose module is handed
// to the InputArchive as it is, so that loading a state file never compiles or runs
// anything (see ArchiveModule). Tensors are copied exactly: a resume is bit-exact.
#include "util/torch_archive.h"

#include <c10/util/StringUtil.h>

#include <algorithm>

#include "util/error.h"
#include "util/torch_pickle.h"

namespace kiln::torch_pickle {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// The torch::jit::Module an archive holds. InputArchive fills its module only through
// load_from, which imports a TorchScript archive: it parses and compiles the code/ the
// file holds, so a state file would be code (a mutated one gave TorchScript compiler
// errors, issue 16). OutputArchive::write builds the same kind of module from values
// alone (register_attribute, register_parameter, register_module: no code), and that
// module is what InputArchive's readers walk. libtorch has no accessor for either
// member; an explicit instantiation may name a private member ([temp.spec.general]/6),
// which is how these two pointers-to-member are taken — once, here.
template <typename Tag, typename Tag::type Member>
struct MemberOf {
  friend typename Tag::type member(Tag) { return Member; }
};
struct InputModule {
  using type = torch::jit::Module InputArchive::*;
  friend type member(InputModule);
};
struct OutputModule {
  using type = torch::jit::Module OutputArchive::*;
  friend type member(OutputModule);
};
template struct MemberOf<InputModule, &InputArchive::module_>;
template struct MemberOf<OutputModule, &OutputArchive::module_>;

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

}  // namespace

std::string serialize_archive(OutputArchive& archive) {
  // The archive's module read as it is (no TorchScript export and re-import per save);
  // serialize() copies device tensors to the CPU one storage at a time.
  InputArchive back;
  back.*member(InputModule{}) = archive.*member(OutputModule{});
  return serialize(dict_of(back, "archive"));
}

void load_archive(InputArchive& archive, std::string_view bytes, const std::string& source) {
  const auto names = record_names(bytes, source);  // kiln::InputError for a file that is no archive
  const auto has = [&](const char* name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (has("constants.pkl") || has("code/__torch__.py"))
    throw InputError(c10::str(
        source, ": expected a data-only .pt file (a dict of tensors and plain values), found a "
        "TorchScript archive (kiln wrote these before 2026-11-30): loading one compiles the code "
        "it holds, which kiln does not do; resume it with the kiln that wrote it"));
  try {
    const c10::IValue value = deserialize(bytes, source);
    TORCH_CHECK(value.isGenericDict(), "expected a dict (an archive), found a ", value.tagKind());
    OutputArchive rebuilt;
    fill(rebuilt, value.toGenericDict(), "archive");
    archive.*member(InputModule{}) = rebuilt.*member(OutputModule{});
  } catch (const c10::Error& e) {
    throw InputError(c10::str(source, ": not a readable archive (", e.what_without_backtrace(), ")"));
  }
}

}  // namespace kiln::torch_pickle
