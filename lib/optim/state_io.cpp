// The non-template half of state_io.h: keys, the header check and the typed,
// checked reads.
#include "optim/state_io.h"

namespace kiln::optim {

std::string group_key(size_t g, std::string_view name) { return c10::str("group", g, "_", name); }
std::string state_key(size_t g, size_t i, std::string_view name) {
  return c10::str("state", g, "_", i, "_", name);
}

StateWriter::StateWriter(torch::serialize::OutputArchive& ar, std::string_view kind,
                         const std::vector<torch::optim::OptimizerParamGroup>& groups)
    : ar_(ar) {
  ar_.write("kind", c10::IValue(std::string(kind)));
  ar_.write("groups", c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t g = 0; g < groups.size(); ++g)
    ar_.write(group_key(g, "size"), c10::IValue(static_cast<int64_t>(groups[g].params().size())));
}

void StateWriter::write(const std::string& key, double v) { ar_.write(key, c10::IValue(v)); }
void StateWriter::write(const std::string& key, int64_t v) { ar_.write(key, c10::IValue(v)); }
void StateWriter::write(const std::string& key, bool v) { ar_.write(key, c10::IValue(v)); }
void StateWriter::write(const std::string& key, const torch::Tensor& t) { ar_.write(key, t); }

StateReader::StateReader(torch::serialize::InputArchive& ar, std::string_view kind,
                         const std::vector<torch::optim::OptimizerParamGroup>& groups)
    : ar_(ar) {
  std::string short_kind(kind);
  if (const auto colon = short_kind.rfind(':'); colon != std::string::npos)
    short_kind = short_kind.substr(colon + 1);
  who_ = short_kind + " state: ";
  c10::IValue k;
  const bool has_kind = ar_.try_read("kind", k) && k.isString();
  TORCH_CHECK(has_kind && k.toStringRef() == kind, who_, "expected a ", kind, " state, got ",
              has_kind ? k.toStringRef() : std::string("a file without a kiln optimizer kind"));
  int64_t n = 0;
  read("groups", n);
  TORCH_CHECK(n == static_cast<int64_t>(groups.size()), who_, "expected ", groups.size(),
              " parameter groups, the file has ", n);
  for (size_t g = 0; g < groups.size(); ++g) {
    read(group_key(g, "size"), n);
    TORCH_CHECK(n == static_cast<int64_t>(groups[g].params().size()), who_, "group ", g,
                ": expected ", groups[g].params().size(), " parameters, the file has ", n);
  }
}

bool StateReader::has(const std::string& key) {
  c10::IValue v;
  return ar_.try_read(key, v);
}

c10::IValue StateReader::value(const std::string& key, const char* what) {
  c10::IValue v;
  TORCH_CHECK(ar_.try_read(key, v), who_, "missing entry '", key, "' (", what, ")");
  return v;
}

void StateReader::read(const std::string& key, double& v) {
  const auto iv = value(key, "a float");
  TORCH_CHECK(iv.isDouble(), who_, "entry '", key, "': expected a float, got ", iv.tagKind());
  v = iv.toDouble();
}
void StateReader::read(const std::string& key, int64_t& v) {
  const auto iv = value(key, "an integer");
  TORCH_CHECK(iv.isInt(), who_, "entry '", key, "': expected an integer, got ", iv.tagKind());
  v = iv.toInt();
}
void StateReader::read(const std::string& key, bool& v) {
  const auto iv = value(key, "a bool");
  TORCH_CHECK(iv.isBool(), who_, "entry '", key, "': expected a bool, got ", iv.tagKind());
  v = iv.toBool();
}

void StateReader::read_like(size_t g, size_t i, std::string_view name, const torch::Tensor& param,
                            torch::Tensor& out) {
  torch::Tensor t;
  TORCH_CHECK(ar_.try_read(state_key(g, i, name), t), who_, "group ", g, " parameter ", i,
              ": missing ", name);
  TORCH_CHECK(t.sizes() == param.sizes() && t.scalar_type() == param.scalar_type(), who_, "group ",
              g, " parameter ", i, ": ", name, " is ", t.scalar_type(), t.sizes(),
              " but the parameter is ", param.scalar_type(), param.sizes());
  out = t.to(param.device());
}

}  // namespace kiln::optim
