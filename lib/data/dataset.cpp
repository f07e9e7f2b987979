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
#include "data/npy.h"
#include "data/npz.h"
#include "data/text.h"
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
  if (!j.contains("transform") || !j["transform"].is_object()) throw bad("transform", "an object");
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

std::string resolve_format(const DataOptions& o) {
  if (o.format() != "auto") {
    const auto& f = data_formats();
    if (std::find(f.begin(), f.end(), o.format()) == f.end()) {
      std::string names;
      for (const auto& n : f) names += (names.empty() ? "" : ", ") + n;
      throw InputError(c10::str("data.format: expected one of auto, ", names, "; found '",
                                o.format(), "'"));
    }
    return o.format();
  }
  if (o.train().empty()) return "idx";
  auto ext = fs::path(o.train()).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  if (ext == ".csv" || ext == ".tsv") return "csv";
  if (ext == ".npy" || ext == ".npz") return "npy";
  if (ext == ".txt" || ext == ".md" || fs::is_directory(o.train())) return "text";
  throw InputError(c10::str("data.format: \"auto\" cannot tell the format of data.train = \"",
                            o.train(), "\" (", ext.empty() ? "no extension" : ext,
                            "); set data.format to one of idx, csv, npy, text"));
}

namespace {

// --- idx: Fashion-MNIST and MNIST ------------------------------------------------

Data idx_data(const DataOptions& o, const DataSchema* saved) {
  const auto train_set = load_fashion_mnist(o.root(), Split::kTrain, o.train_limit());
  const auto test_set = load_fashion_mnist(o.root(), Split::kTest, o.test_limit());
  Data d;
  if (saved) {
    d.schema = *saved;
  } else {
    const auto norm = pixel_statistics(train_set.images);
    d.schema.format = "idx";
    d.schema.task = Task::kClassification;
    d.schema.input_shape = {train_set.images.size(1) * train_set.images.size(2)};
    d.schema.outputs = 10;
    for (int c = 0; c < 10; ++c) d.schema.classes.push_back(std::to_string(c));
    // The model sees (pixel · scale − mean) / std.
    d.schema.transform = {{"scale", 1.0 / 255.0}, {"mean", norm.mean}, {"std", norm.stddev}};
  }
  const Normalization norm{d.schema.transform.at("mean").get<double>(),
                           d.schema.transform.at("std").get<double>()};
  d.train = {normalize_images(train_set.images, norm), train_set.labels};
  d.test = {normalize_images(test_set.images, norm), test_set.labels};
  return d;
}

// --- npy: x.npy and y.npy -----------------------------------------------------------

struct Arrays {
  at::Tensor x, y;
  std::string x_path, y_path;
};

// An .npz holds both: arrays named x and y.
Arrays read_archive(const std::string& path, const std::string& y_path, const char* key) {
  if (!y_path.empty())
    throw InputError(c10::str("data.", key, "_targets: expected none beside the archive data.",
                              key, " = \"", path, "\" (its arrays x and y), found \"", y_path, "\""));
  Arrays a;
  std::string names;
  for (auto& [name, t] : read_npz(path)) {
    names += (names.empty() ? "" : ", ") + name;
    if (name == "x") a.x = t;
    if (name == "y") a.y = t;
  }
  if (!a.x.defined() || !a.y.defined())
    throw InputError(c10::str(path, ": expected arrays named x and y (np.savez(path, x=X, y=Y)), "
                              "found ", names.empty() ? std::string("none") : names));
  a.x_path = path + ":x";
  a.y_path = path + ":y";
  return a;
}

Arrays read_arrays(const std::string& x_path, const std::string& y_path, const char* key) {
  const bool archive = fs::path(x_path).extension() == ".npz";
  if (y_path.empty() && !archive)
    throw InputError(c10::str("data.", key, "_targets: expected the targets' .npy file beside data.",
                              key, " = \"", x_path, "\", found none"));
  Arrays a = archive ? read_archive(x_path, y_path, key)
                     : Arrays{read_npy(x_path), read_npy(y_path), x_path, y_path};
  if (a.x.dim() == 0) throw InputError(c10::str(x_path, ": expected an array of examples (rank ≥ 1), found a scalar"));
  if (a.y.dim() == 0 || a.y.dim() > 2)
    throw InputError(c10::str(y_path, ": expected targets of shape (N) or (N, K), found rank ", a.y.dim()));
  if (a.x.size(0) != a.y.size(0))
    throw InputError(c10::str(y_path, ": has ", a.y.size(0), " targets but ", x_path, " has ",
                              a.x.size(0), " examples"));
  if (a.x.size(0) == 0) throw InputError(c10::str(x_path, ": expected examples, found none"));
  if (a.x.dim() == 1) a.x = a.x.unsqueeze(1);
  if (a.x.scalar_type() == at::kBool) a.x = a.x.to(at::kFloat);
  if (at::isFloatingType(a.x.scalar_type()) && !at::isfinite(a.x).all().item<bool>())
    throw InputError(c10::str(x_path, ": expected finite values, found NaN or inf at flat index ",
                              (~at::isfinite(a.x)).flatten().nonzero()[0].item<int64_t>()));
  return a;
}

Data array_data(const DataOptions& o, const DataSchema* saved) {
  Arrays train = read_arrays(o.train(), o.train_targets(), "train");
  Arrays test;
  if (!o.test().empty()) {
    test = read_arrays(o.test(), o.test_targets(), "test");
    const auto shape = train.x.sizes().slice(1), got = test.x.sizes().slice(1);
    if (shape != got)
      throw InputError(c10::str(test.x_path, ": expected examples of shape ", shape, " (as ",
                                train.x_path, "), found ", got));
  } else {
    const auto [tr, te] = split_indices(train.x.size(0), o.test_fraction(), o.seed(), train.x_path);
    test = {train.x.index_select(0, te), train.y.index_select(0, te), train.x_path, train.y_path};
    train.x = train.x.index_select(0, tr);
    train.y = train.y.index_select(0, tr);
  }
  const auto limit = [](at::Tensor t, int64_t n) { return n > 0 && n < t.size(0) ? t.narrow(0, 0, n) : t; };
  train.x = limit(train.x, o.train_limit());
  train.y = limit(train.y, o.train_limit());
  test.x = limit(test.x, o.test_limit());
  test.y = limit(test.y, o.test_limit());

  Data d;
  if (saved) {
    d.schema = *saved;
  } else {
    DataSchema& s = d.schema;
    s.format = "npy";
    const bool integral = !at::isFloatingType(train.y.scalar_type());
    if (o.task() == "classification" || (o.task() == "auto" && integral)) {
      s.task = Task::kClassification;
    } else if (o.task() == "regression" || o.task() == "auto") {
      s.task = Task::kRegression;
    } else {
      throw InputError(c10::str("data.task: expected auto, classification or regression, found '",
                                o.task(), "'"));
    }
    if (s.task == Task::kClassification) {
      if (train.y.dim() != 1)
        throw InputError(c10::str(train.y_path, ": class labels: expected shape (N), found ",
                                  train.y.sizes()));
      s.outputs = train.y.max().item<int64_t>() + 1;
      for (int64_t c = 0; c < s.outputs; ++c) s.classes.push_back(std::to_string(c));
    } else {
      const auto y = train.y.to(at::kDouble).reshape({train.y.size(0), -1});
      s.outputs = y.size(1);
      const auto mean = y.mean(0), sd = y.std(0, /*unbiased=*/false);
      for (int64_t k = 0; k < s.outputs; ++k) {
        s.target_mean.push_back(mean[k].item<double>());
        const double v = sd[k].item<double>();
        s.target_std.push_back(v > 0.0 ? v : 1.0);
      }
    }
    s.input_shape.assign(train.x.sizes().begin() + 1, train.x.sizes().end());
    if (o.standardize()) {
      // ATen accumulates a float tensor's moments in double on the CPU.
      const auto x = train.x.reshape({train.x.size(0), -1});
      const auto [sd_f, mean_f] = at::std_mean(x.is_floating_point() ? x : x.to(at::kFloat), 0,
                                               /*correction=*/0);
      const auto mean = mean_f.to(at::kDouble), sd = sd_f.to(at::kDouble);
      const auto sd1 = at::where(sd > 0, sd, at::ones_like(sd));
      const auto list = [](const at::Tensor& t) {
        const auto c = t.contiguous();
        return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
      };
      s.transform = {{"mean", list(mean)}, {"std", list(sd1)}};
    } else {
      s.transform = json::object();
    }
  }
  const DataSchema& s = d.schema;
  const auto shape = train.x.sizes().slice(1);
  if (std::vector<int64_t>(shape.begin(), shape.end()) != s.input_shape)
    throw InputError(c10::str(train.x_path, ": expected examples of shape ",
                              c10::IntArrayRef(s.input_shape), " (the run's data.json), found ", shape));

  // Inputs: float32, standardised per feature when the schema says so.
  const auto inputs = [&](const at::Tensor& x) {
    if (!s.transform.contains("mean")) return x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
    const auto mean = at::tensor(s.transform["mean"].get<std::vector<double>>(), at::kDouble);
    const auto sd = at::tensor(s.transform["std"].get<std::vector<double>>(), at::kDouble);
    if (mean.numel() != x[0].numel())
      throw InputError(c10::str("data.json: transform.mean: expected ", x[0].numel(),
                                " values (one per input feature), found ", mean.numel()));
    return x.reshape({x.size(0), -1}).to(at::kFloat).sub(mean.to(at::kFloat)).div(sd.to(at::kFloat)).reshape(x.sizes());
  };
  // Targets: class ids in 0..outputs−1, or standardised floats (N, outputs).
  const auto targets = [&](const Arrays& a, const at::Tensor& y) {
    if (s.task == Task::kClassification) {
      if (at::isFloatingType(y.scalar_type()) && !y.eq(y.round()).all().item<bool>())
        throw InputError(c10::str(a.y_path, ": class labels: expected whole numbers, found ",
                                  y.masked_select(y.ne(y.round()))[0].item<double>()));
      const auto ids = y.to(at::kLong);
      const auto bad = (ids < 0).logical_or(ids >= s.outputs);
      if (bad.any().item<bool>()) {
        const int64_t i = bad.nonzero()[0][0].item<int64_t>();
        throw InputError(c10::str(a.y_path, ": index ", i, ": expected a class id in 0..",
                                  s.outputs - 1, ", found ", ids[i].item<int64_t>()));
      }
      return ids.contiguous();
    }
    const auto v = y.to(at::kDouble).reshape({y.size(0), -1});
    if (v.size(1) != s.outputs)
      throw InputError(c10::str(a.y_path, ": expected ", s.outputs, " targets per example, found ",
                                v.size(1)));
    if (!at::isfinite(v).all().item<bool>())
      throw InputError(c10::str(a.y_path, ": expected finite targets, found NaN or inf"));
    const auto mean = at::tensor(s.target_mean, at::kDouble), sd = at::tensor(s.target_std, at::kDouble);
    return v.sub(mean).div(sd).to(at::kFloat);
  };
  d.train = {inputs(train.x), targets(train, train.y)};
  d.test = {inputs(test.x), targets(test, test.y)};
  return d;
}

// --- text: a character (or byte) language model's windows ------------------------

Data text_data(const DataOptions& o, const DataSchema* saved) {
  if (o.block_size() < 1) throw InputError(c10::str("data.block_size: expected >= 1, found ", o.block_size()));
  if (o.stride() < 1) throw InputError(c10::str("data.stride: expected >= 1, found ", o.stride()));
  if (o.vocabulary() != "char" && o.vocabulary() != "byte")
    throw InputError(c10::str("data.vocabulary: expected char or byte, found '", o.vocabulary(), "'"));
  const std::string train_text = read_text(o.train());
  const std::string test_text = o.test().empty() ? std::string() : read_text(o.test());
  Data d;
  DataSchema& s = d.schema;
  if (saved) {
    s = *saved;
  } else {
    // A character vocabulary is the alphabet of all the text the run reads (a missing
    // character could not be encoded), not a statistic fitted on the training part.
    const auto vocab = o.vocabulary() == "byte" ? Vocabulary::bytes()
                                                : Vocabulary::characters(train_text + test_text);
    s.format = "text";
    s.task = Task::kClassification;
    s.input_shape = {o.block_size()};
    s.outputs = vocab.size();
    for (int64_t id = 0; id < vocab.size(); ++id)
      s.classes.push_back(vocab.decode(at::tensor({id}, at::kLong)));
    s.transform = {{"encoding", "one_hot"},
                   {"block_size", o.block_size()},
                   {"vocabulary", json::parse(vocab.to_json().dump())}};
    s.read = {{"stride", o.stride()}};
  }
  const auto vocab = Vocabulary::from_json(nlohmann::json::parse(s.transform.at("vocabulary").dump()),
                                           "data.json: transform.vocabulary");
  const int64_t block = s.transform.at("block_size").get<int64_t>();
  // Without a test file the last test_fraction of the text is the test set: windows
  // overlap, so a random split would put every test window's tokens in training too.
  at::Tensor train_tokens = vocab.encode(train_text), test_tokens;
  if (o.test().empty()) {
    if (!(o.test_fraction() > 0.0 && o.test_fraction() < 1.0))
      throw InputError(c10::str("data.test_fraction: expected a fraction in (0, 1), found ", o.test_fraction()));
    const int64_t n = train_tokens.numel();
    const int64_t cut = n - std::llround(o.test_fraction() * static_cast<double>(n));
    test_tokens = train_tokens.narrow(0, cut, n - cut).contiguous();
    train_tokens = train_tokens.narrow(0, 0, cut).contiguous();
  } else {
    test_tokens = vocab.encode(test_text);
  }
  const auto windows = [&](const at::Tensor& tokens, const std::string& what, int64_t limit) {
    if (tokens.numel() < block + 1)
      throw InputError(c10::str(what, ": expected at least data.block_size + 1 = ", block + 1,
                                " tokens, found ", tokens.numel()));
    const auto w = make_windows(tokens, block, o.stride());
    Dataset set{w.x, w.next_token};
    if (limit > 0 && limit < set.size()) set = {set.x.narrow(0, 0, limit), set.y.narrow(0, 0, limit)};
    return set;
  };
  d.train = windows(train_tokens, o.train(), o.train_limit());
  d.test = windows(test_tokens, o.test().empty() ? c10::str(o.train(), " (its last ", o.test_fraction(),
                                                            " held out for testing)")
                                                 : o.test(),
                   o.test_limit());
  return d;
}

}  // namespace

at::Tensor model_inputs(const at::Tensor& x, const DataSchema& schema) {
  if (schema.transform.value("encoding", "") != "one_hot") return x;
  // x: (B, T) token ids → (B, T·V) one-hot.
  return at::one_hot(x, schema.outputs).flatten(1).to(at::kFloat);
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
    if (o.delimiter().size() != 1)
      throw InputError(c10::str("data.delimiter: expected one character, found \"", o.delimiter(), "\""));
    const CsvOptions csv{o.delimiter()[0]};
    const auto train = read_csv(o.train(), csv);
    std::optional<CsvTable> test;
    if (!o.test().empty()) test = read_csv(o.test(), csv);
    d = table_data(train, test ? &*test : nullptr, o, saved);
  } else if (format == "npy") {
    d = array_data(o, saved);
  } else if (format == "text") {
    d = text_data(o, saved);
  } else {
    throw InputError(c10::str("data.json: format: expected one of idx, csv, npy, text, found '",
                              format, "'"));
  }
  if (d.train.size() == 0) throw InputError("data: the training split is empty");
  if (d.test.size() == 0) throw InputError("data: the test split is empty");
  return d;
}

}  // namespace kiln::data
