// load_data(): one entry for every format; each reader gives tensors, the schema
// says what they mean and how the inputs were transformed.
#include "data/dataset.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <filesystem>

#include "data/csv.h"
#include "data/fashion_mnist.h"
#include "data/formats.h"
#include "data/tabular.h"
#include "util/error.h"

namespace kiln::data {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const char* task_name(Task task) {
  return task == Task::kRegression ? "regression" : "classification";
}

const std::vector<std::string>& data_formats() {
  static const std::vector<std::string> names = {"idx", "csv", "npy", "text"};
  return names;
}

// --- the schema as JSON ---------------------------------------------------------

json DataSchema::to_json() const {
  json j = {{"format", format},       {"task", task_name(task)},
            {"input_shape", input_shape}, {"outputs", outputs}};
  if (task == Task::kClassification) j["classes"] = classes;
  else j["target"] = {{"mean", target_mean}, {"std", target_std}};
  j["transform"] = transform.is_null() ? json::object() : transform;
  j["read"] = read.is_null() ? json::object() : read;
  return j;
}

namespace {

// The transform's fields that its format's reader uses (docs/data.md), checked where a
// saved schema is read: a damaged data.json is named here, with the field, rather than
// failing inside a reader or dividing by a zero deviation.
void check_transform(const std::string& format, const json& t, const std::string& source) {
  const auto field = [](const json& j, const char* key) -> const json* {
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const auto fail = [&](const std::string& name, const std::string& expected, const json* found) {
    throw InputError(c10::str(source, ": transform.", name, ": expected ", expected, ", found ",
                              found ? found->dump() : std::string("nothing")));
  };
  const auto finite = [](const json* v) { return v && v->is_number() && std::isfinite(v->get<double>()); };
  const auto positive = [&](const json* v) { return finite(v) && v->get<double>() > 0; };
  const auto numbers = [&](const char* key, bool above_zero) -> size_t {
    const json* v = field(t, key);
    const bool ok = v && v->is_array() && std::all_of(v->begin(), v->end(), [&](const json& x) {
      return above_zero ? positive(&x) : finite(&x);
    });
    if (!ok) fail(key, above_zero ? "a list of numbers > 0" : "a list of finite numbers", v);
    return v->size();
  };
  if (format == "idx") {
    if (!finite(field(t, "mean"))) fail("mean", "a finite number", field(t, "mean"));
    if (!positive(field(t, "std"))) fail("std", "a number > 0", field(t, "std"));
  } else if (format == "npy") {
    if (!t.contains("mean") && !t.contains("std")) return;  // data.standardize = false
    if (numbers("mean", false) != numbers("std", true))
      fail("std", c10::str(t["mean"].size(), " values, as transform.mean has"), field(t, "std"));
  } else if (format == "csv") {
    const json* columns = field(t, "columns");
    if (!columns || !columns->is_array()) fail("columns", "a list of columns", columns);
    for (size_t i = 0; i < columns->size(); ++i) {
      const json& c = (*columns)[i];
      const std::string at = c10::str("columns[", i, "]");
      if (!c.is_object() || !field(c, "name") || !c["name"].is_string())
        fail(at, "{\"name\": NAME, \"kind\": ...}", &c);
      const json* kind = field(c, "kind");
      if (kind && *kind == "numeric") {
        if (!finite(field(c, "mean"))) fail(at + ".mean", "a finite number", field(c, "mean"));
        if (!positive(field(c, "std"))) fail(at + ".std", "a number > 0", field(c, "std"));
      } else if (kind && *kind == "categorical") {
        const json* cats = field(c, "categories");
        if (!cats || !cats->is_array() ||
            !std::all_of(cats->begin(), cats->end(), [](const json& x) { return x.is_string(); }))
          fail(at + ".categories", "a list of strings", cats);
      } else {
        fail(at + ".kind", "\"numeric\" or \"categorical\"", kind);
      }
    }
  } else if (format == "text") {
    // The vocabulary's own reader checks it in full (Vocabulary::from_json).
    if (!field(t, "vocabulary") || !t["vocabulary"].is_object())
      fail("vocabulary", "an object", field(t, "vocabulary"));
    const json* block = field(t, "block_size");
    if (!block || !block->is_number_integer() || block->get<int64_t>() < 1)
      fail("block_size", "an integer >= 1", block);
  } else {
    throw InputError(c10::str(source, ": format: expected one of ", c10::Join(", ", data_formats()),
                              ", found \"", format, "\""));
  }
}

}  // namespace

DataSchema DataSchema::from_json(const json& j, const std::string& source) {
  const auto bad = [&](const std::string& field, const std::string& expected) {
    const auto it = j.is_object() ? j.find(field) : j.end();
    return InputError(c10::str(source, ": ", field, ": expected ", expected, ", found ",
                               it == j.end() ? std::string("nothing") : it->dump()));
  };
  if (!j.is_object()) throw InputError(c10::str(source, ": expected a JSON object, found ", j.dump()));
  DataSchema s;
  if (!j.contains("format") || !j["format"].is_string()) throw bad("format", "a string");
  s.format = j["format"];
  if (!j.contains("task") || (j["task"] != "classification" && j["task"] != "regression"))
    throw bad("task", "\"classification\" or \"regression\"");
  s.task = j["task"] == "regression" ? Task::kRegression : Task::kClassification;
  try {
    s.input_shape = j.at("input_shape").get<std::vector<int64_t>>();
  } catch (const json::exception&) {
    throw bad("input_shape", "a list of sizes");
  }
  if (s.input_shape.empty() ||
      std::any_of(s.input_shape.begin(), s.input_shape.end(), [](int64_t d) { return d <= 0; }))
    throw bad("input_shape", "a list of positive sizes");
  if (!j.contains("outputs") || !j["outputs"].is_number_integer() || j["outputs"].get<int64_t>() < 1)
    throw bad("outputs", "a positive integer");
  s.outputs = j["outputs"];
  try {
    if (s.task == Task::kClassification) {
      s.classes = j.at("classes").get<std::vector<std::string>>();
    } else {
      s.target_mean = j.at("target").at("mean").get<std::vector<double>>();
      s.target_std = j.at("target").at("std").get<std::vector<double>>();
    }
  } catch (const json::exception&) {
    throw bad(s.task == Task::kClassification ? "classes" : "target",
              s.task == Task::kClassification ? "a list of class names"
                                              : "{\"mean\": [...], \"std\": [...]}");
  }
  if (s.task == Task::kClassification && static_cast<int64_t>(s.classes.size()) != s.outputs)
    throw bad("classes", c10::str(s.outputs, " names (outputs)"));
  if (s.task == Task::kRegression &&
      (static_cast<int64_t>(s.target_mean.size()) != s.outputs ||
       static_cast<int64_t>(s.target_std.size()) != s.outputs))
    throw bad("target", c10::str(s.outputs, " means and deviations (outputs)"));
  if (s.task == Task::kRegression &&
      !std::all_of(s.target_std.begin(), s.target_std.end(), [](double v) { return v > 0; }))
    throw bad("target", "deviations > 0");
  if (!j.contains("transform") || !j["transform"].is_object()) throw bad("transform", "an object");
  check_transform(s.format, j["transform"], source);
  s.transform = j["transform"];
  s.read = j.value("read", json::object());
  return s;
}

// --- shared pieces ------------------------------------------------------------

std::pair<at::Tensor, at::Tensor> split_indices(int64_t n, double fraction, uint64_t seed,
                                                const std::string& source) {
  if (!(fraction > 0.0 && fraction < 1.0))
    throw InputError(c10::str("data.test_fraction: expected a fraction in (0, 1) to hold out "
                              "from ", source, " (there is no data.test), found ", fraction));
  if (n < 2)
    throw InputError(c10::str(source, ": expected at least 2 examples to split into training "
                              "and test sets, found ", n));
  const int64_t test = std::clamp<int64_t>(std::llround(fraction * static_cast<double>(n)), 1, n - 1);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x5eed7e57ULL);
  const auto order = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  return {order.narrow(0, test, n - test), order.narrow(0, 0, test)};
}

namespace {

// "idx, csv, npy, text", for messages.
std::string format_list() {
  std::string names;
  for (const auto& n : data_formats()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

// A path's extension in lower case (".csv"), "" for none.
std::string lower_extension(const std::string& path) {
  auto ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  return ext;
}

}  // namespace

std::string resolve_format(const DataOptions& o) {
  if (o.format() != "auto") {
    const auto& f = data_formats();
    if (std::find(f.begin(), f.end(), o.format()) == f.end())
      throw InputError(c10::str("data.format: expected one of auto, ", format_list(), "; found '",
                                o.format(), "'"));
    return o.format();
  }
  if (o.train().empty()) return "idx";
  const auto ext = lower_extension(o.train());
  if (ext == ".csv" || ext == ".tsv" || ext == ".tab") return "csv";
  if (ext == ".npy" || ext == ".npz") return "npy";
  if (ext == ".txt" || ext == ".md" || fs::is_directory(o.train())) return "text";
  throw InputError(c10::str("data.format: \"auto\" cannot tell the format of data.train = \"",
                            o.train(), "\" (", ext.empty() ? "no extension" : ext,
                            "); set data.format to one of ", format_list()));
}

// --- idx: Fashion-MNIST and MNIST ------------------------------------------------

Data idx_data(const DataOptions& o, const DataSchema* saved) {
  const auto train_set = load_fashion_mnist(o.root(), Split::kTrain, o.train_limit());
  const auto test_set = load_fashion_mnist(o.root(), Split::kTest, o.test_limit());
  // One model takes both splits: the test images must have the training images' size
  // (and, on a resume, the size the run's model was built for).
  const std::vector<int64_t> train_hw{train_set.images.size(1), train_set.images.size(2)};
  const std::vector<int64_t> test_hw{test_set.images.size(1), test_set.images.size(2)};
  const auto size_text = [](const std::vector<int64_t>& hw) { return c10::str(hw[0], "×", hw[1]); };
  if (test_hw != train_hw)
    throw InputError(c10::str((fs::path(o.root()) / "t10k-images-idx3-ubyte").string(),
                              ": expected images of ", size_text(train_hw), " (the training images'), found ",
                              size_text(test_hw)));
  if (saved && saved->input_shape.size() == 3 &&
      std::vector<int64_t>(saved->input_shape.begin() + 1, saved->input_shape.end()) != train_hw)
    throw InputError(c10::str((fs::path(o.root()) / "train-images-idx3-ubyte").string(),
                              ": expected images of ", size_text({saved->input_shape[1], saved->input_shape[2]}),
                              " (the run's data.json), found ", size_text(train_hw)));
  Data d;
  if (saved) {
    d.schema = *saved;
  } else {
    const auto norm = pixel_statistics(train_set.images);
    d.schema.format = "idx";
    d.schema.task = Task::kClassification;
    d.schema.input_shape = {1, train_set.images.size(1), train_set.images.size(2)};  // (C, H, W)
    d.schema.outputs = 10;
    for (int c = 0; c < 10; ++c) d.schema.classes.push_back(std::to_string(c));
    // The model sees (pixel · scale − mean) / std.
    d.schema.transform = {{"scale", 1.0 / 255.0}, {"mean", norm.mean}, {"std", norm.stddev}};
  }
  // The pixels stay uint8, (N, H·W); model_inputs() decodes each batch (decode_pixels).
  const auto flat = [](const at::Tensor& images) { return images.reshape({images.size(0), -1}); };
  d.train = {flat(train_set.images), train_set.labels};
  d.test = {flat(test_set.images), test_set.labels};
  return d;
}

at::Tensor model_inputs(const at::Tensor& x, const DataSchema& schema) {
  if (x.scalar_type() == at::kByte && schema.transform.contains("scale"))  // idx pixels
    return decode_pixels(x, {schema.transform.at("mean").get<double>(), schema.transform.at("std").get<double>()});
  if (schema.transform.value("encoding", "") != "one_hot") return x;
  // x: (B, T) token ids → (B, T·V) one-hot.
  return at::one_hot(x, schema.outputs).flatten(1).to(at::kFloat);
}

at::Tensor to_device(const at::Tensor& t, const at::Device& device) {
  if (t.device() == device || t.is_non_overlapping_and_dense()) return t.to(device);
  const int64_t items = static_cast<int64_t>(t.storage().nbytes()) / t.element_size();
  const auto buffer = at::empty({0}, t.options()).set_(t.storage(), 0, {items}, {1});  // (items)
  return buffer.to(device).as_strided(t.sizes(), t.strides(), t.storage_offset());
}

bool takes_tokens(const DataSchema& schema) {
  return schema.transform.value("encoding", "") == "tokens";
}

int64_t model_input_size(const DataSchema& schema) {
  int64_t n = 1;
  for (const int64_t d : schema.input_shape) n *= d;
  return schema.transform.value("encoding", "") == "one_hot" ? n * schema.outputs : n;
}

Data load_data(const DataOptions& o, const DataSchema* saved) {
  const std::string format = saved ? saved->format : resolve_format(o);
  if (saved && o.format() != "auto" && o.format() != format)
    throw InputError(c10::str("data.format: the run was trained on ", format, " data (its "
                              "data.json), found '", o.format(), "'"));
  if (format != "idx" && o.train().empty())
    throw InputError(c10::str("data.train: expected the training data's path for data.format = ",
                              format, ", found none"));
  if (o.task() != "auto" && o.task() != "classification" && o.task() != "regression")
    throw InputError(c10::str("data.task: expected auto, classification or regression, found '",
                              o.task(), "'"));
  Data d;
  if (format == "idx") {
    d = idx_data(o, saved);
  } else if (format == "csv") {
    if (o.delimiter() != "auto" && o.delimiter().size() != 1)
      throw InputError(c10::str("data.delimiter: expected auto or one character, found \"", o.delimiter(), "\""));
    // auto: a tab-separated file by its name, else a comma.
    const auto options_for = [&](const std::string& path) {
      if (o.delimiter() != "auto") return CsvOptions{o.delimiter()[0]};
      const auto ext = lower_extension(path);
      return CsvOptions{ext == ".tsv" || ext == ".tab" ? '\t' : ','};
    };
    const auto train = read_csv(o.train(), options_for(o.train()));
    std::optional<CsvTable> test;
    if (!o.test().empty()) test = read_csv(o.test(), options_for(o.test()));
    d = table_data(train, test ? &*test : nullptr, o, saved);
  } else if (format == "npy") {
    d = array_data(o, saved);
  } else if (format == "text") {
    d = text_data(o, saved);
  } else {
    throw InputError(c10::str("data.json: format: expected one of ", format_list(), ", found '",
                              format, "'"));
  }
  if (d.train.size() == 0) throw InputError("data: the training split is empty");
  if (d.test.size() == 0) throw InputError("data: the test split is empty");
  return d;
}

}  // namespace kiln::data
