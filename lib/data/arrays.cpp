// array_data(): NumPy arrays as a data set — x.npy and y.npy, or an .npz holding
// both — with classes or regression targets told from y's dtype and the inputs
// standardised per feature with training statistics.
#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <string_view>

#include "data/formats.h"
#include "data/npy.h"
#include "data/npz.h"
#include "data/utf8.h"
#include "util/error.h"
#include "util/log.h"

namespace kiln::data {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
namespace {

// --- npy: x.npy and y.npy -----------------------------------------------------------

struct Arrays {
  at::Tensor x, y;
  std::string x_path, y_path;
  std::vector<std::string> labels;  // y's strings (class names), when y holds strings
};

// NumPy string labels ('<U', '|S': read_npy's uint32 code points [N, chars]) as UTF-8
// strings, the NUL padding dropped; 'S' bytes above 0x7F read as Latin-1.
std::vector<std::string> string_labels(const at::Tensor& codes, const std::string& path) {
  const auto c = codes.contiguous();
  const auto* p = static_cast<const uint32_t*>(c.data_ptr());
  const int64_t n = c.size(0), chars = c.size(1);
  std::vector<std::string> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = chars;
    while (len > 0 && p[i * chars + len - 1] == 0) --len;
    for (int64_t k = 0; k < len; ++k) {
      const uint32_t code = p[i * chars + k];
      if (code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
        throw InputError(c10::str(path, ": index ", i, ": class label holds ", code > 0x10ffff ? "a code point above U+10FFFF" : "a UTF-16 surrogate",
                                  " (", code, "), not a character"));
      append_utf8(out[static_cast<size_t>(i)], code);
    }
  }
  return out;
}

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

// Finite values that float32, the dtype kiln trains in, holds: a float64 1e39 is finite
// in the file and inf once cast, and the first step's loss would be NaN.
void require_float32_values(const at::Tensor& t, const std::string& path, const char* what) {
  const auto finite = at::isfinite(t);
  if (!finite.all().item<bool>())
    throw InputError(c10::str(path, ": expected finite ", what, ", found NaN or inf at flat index ",
                              (~finite).flatten().nonzero()[0].item<int64_t>()));
  if (t.scalar_type() != at::kDouble) return;  // float32 and the half types fit
  const auto over = t.abs() > static_cast<double>(std::numeric_limits<float>::max());
  if (over.any().item<bool>()) {
    const int64_t i = over.flatten().nonzero()[0].item<int64_t>();
    throw InputError(c10::str(path, ": expected ", what, " that float32 holds (|v| <= 3.4028235e38), found ",
                              t.flatten()[i].item<double>(), " at flat index ", i));
  }
}

Arrays read_arrays(const std::string& x_path, const std::string& y_path, const char* key) {
  const bool archive = fs::path(x_path).extension() == ".npz";
  if (y_path.empty() && !archive)
    throw InputError(c10::str("data.", key, "_targets: expected the targets' .npy file beside data.",
                              key, " = \"", x_path, "\", found none"));
  Arrays a = archive ? read_archive(x_path, y_path, key)
                     : Arrays{read_npy(x_path), read_npy(y_path), x_path, y_path};
  if (a.x.scalar_type() == at::kUInt32)
    throw InputError(c10::str(a.x_path, ": expected numbers as inputs, found strings (a NumPy U or S dtype)"));
  if (a.y.scalar_type() == at::kUInt32) {  // strings: [*shape, chars]
    if (a.y.dim() == 3 && a.y.size(1) == 1) a.y = a.y.squeeze(1);  // a column of labels
    if (a.y.dim() != 2)
      throw InputError(c10::str(a.y_path, ": class labels as strings: expected shape (N) or (N, 1), found (",
                                c10::IntArrayRef(a.y.sizes()).slice(0, a.y.dim() - 1), ")"));
    a.labels = string_labels(a.y, a.y_path);
    a.y = at::zeros({a.y.size(0)}, at::kLong);  // the ids, once the classes are known (label_ids)
  }
  if (a.x.dim() == 0) throw InputError(c10::str(a.x_path, ": expected an array of examples (rank ≥ 1), found a scalar"));
  if (a.y.dim() == 0 || a.y.dim() > 2)
    throw InputError(c10::str(a.y_path, ": expected targets of shape (N) or (N, K), found rank ", a.y.dim()));
  if (a.x.size(0) != a.y.size(0))
    throw InputError(c10::str(a.y_path, ": has ", a.y.size(0), " targets but ", a.x_path, " has ",
                              a.x.size(0), " examples"));
  if (a.x.size(0) == 0) throw InputError(c10::str(a.x_path, ": expected examples, found none"));
  // A dimension of 0 after the first: examples of no values, or targets of none.
  if (a.x.numel() == 0)
    throw InputError(c10::str(a.x_path, ": expected examples of at least one value each, found shape ",
                              a.x.sizes()));
  if (a.y.numel() == 0)
    throw InputError(c10::str(a.y_path, ": expected at least one target per example, found shape ", a.y.sizes()));
  if (a.y.dim() == 2 && a.y.size(1) == 1) a.y = a.y.squeeze(1);  // a column: one target each
  if (a.x.dim() == 1) a.x = a.x.unsqueeze(1);
  if (a.x.scalar_type() == at::kBool) a.x = a.x.to(at::kFloat);
  if (at::isFloatingType(a.x.scalar_type())) require_float32_values(a.x, a.x_path, "values");
  if (at::isFloatingType(a.y.scalar_type())) require_float32_values(a.y, a.y_path, "targets");
  return a;
}

// Float targets with at most this many distinct whole values get a warning: classes?
constexpr int64_t kFewValues = 20;

// Class labels of shape (N, K) as (N) ids: each row must be one-hot (K − 1 zeros and
// a one), and becomes the index of its one. Returns K (0 for labels already ids).
int64_t one_hot_to_ids(Arrays& a) {
  if (a.y.dim() == 1) return 0;
  const auto v = a.y.to(at::kDouble);
  const auto bad = v.eq(0).logical_or(v.eq(1)).all(1).logical_not().logical_or(v.sum(1).ne(1));
  if (bad.any().item<bool>()) {
    const int64_t row = bad.nonzero()[0][0].item<int64_t>();
    std::string shown;
    for (int64_t k = 0; k < std::min<int64_t>(v.size(1), 8); ++k)
      shown += c10::str(k ? ", " : "", v[row][k].item<double>());
    if (v.size(1) > 8) shown += ", …";
    throw InputError(c10::str(a.y_path, ": class labels: expected shape (N), (N, 1) or one-hot rows (N, K), "
                              "found (", a.y.size(0), ", ", a.y.size(1), ") with row ", row, " not one-hot (",
                              shown, "); for ", a.y.size(1), " regression targets per example set "
                              "data.task = \"regression\""));
  }
  const int64_t k = a.y.size(1);
  a.y = a.y.argmax(1);
  return k;
}

// String labels as ids: each label's index in `classes` (in id order), which must hold it.
void label_ids(Arrays& a, const std::vector<std::string>& classes, const std::string& whose) {
  std::map<std::string_view, int64_t> id_of;
  for (size_t c = 0; c < classes.size(); ++c) id_of.emplace(classes[c], static_cast<int64_t>(c));
  auto ids = at::empty({static_cast<int64_t>(a.labels.size())}, at::kLong);
  auto* out = ids.data_ptr<int64_t>();
  for (size_t i = 0; i < a.labels.size(); ++i) {
    const auto it = id_of.find(a.labels[i]);
    if (it == id_of.end())
      throw InputError(c10::str(a.y_path, ": index ", i, ": class label \"", a.labels[i], "\" is none of the ",
                                classes.size(), " classes of ", whose, " (", preview(classes), ")"));
    out[i] = it->second;
  }
  a.y = ids;
}

}  // namespace

Data array_data(const DataOptions& o, const DataSchema* saved) {
  Arrays train = read_arrays(o.train(), o.train_targets(), "train");
  // String labels are classes, named by themselves: the sorted distinct labels of the
  // training file (or the run's data.json) in order, ids by that order.
  const bool strings = !train.labels.empty();
  if (strings && (saved ? saved->task == Task::kRegression : o.task() == "regression"))
    throw InputError(c10::str(train.y_path, ": expected numbers as regression targets (data.task = \"regression\"",
                              saved ? ", the run's data.json" : "", "), found strings"));
  std::vector<std::string> names;  // the classes in id order
  const std::string whose = saved ? "the run's data.json" : train.y_path;
  if (strings) {
    if (saved) {
      names = saved->classes;
    } else {
      names = train.labels;
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
    }
    label_ids(train, names, whose);
  }
  // data.task is auto, classification or regression (load_data checked it); a run's
  // data.json decides for a resume.
  const bool classes = saved ? saved->task == Task::kClassification
                             : o.task() == "classification" ||
                                   (o.task() == "auto" && !at::isFloatingType(train.y.scalar_type()));
  // One-hot rows are read as the ids of their classes, by the file's row numbers; their
  // width is the number of classes, as the run's data.json or the training file has it.
  const auto read_one_hot = [&](Arrays& a, int64_t want, const std::string& whose) {
    const int64_t width = classes ? one_hot_to_ids(a) : 0;
    if (width > 0 && want > 0 && width != want)
      throw InputError(c10::str(a.y_path, ": class labels: expected one-hot rows of ", want, " (as ", whose,
                                "), found rows of ", width));
    return width;
  };
  const int64_t one_hot = read_one_hot(train, saved ? saved->outputs : 0, "the run's data.json");
  Arrays test;
  if (!o.test().empty()) {
    test = read_arrays(o.test(), o.test_targets(), "test");
    if (strings != !test.labels.empty())
      throw InputError(c10::str(test.y_path, ": expected class labels as ", strings ? "strings" : "numbers", " (as ",
                                train.y_path, "), found ", strings ? "numbers" : "strings"));
    if (strings) label_ids(test, names, whose);
    read_one_hot(test, saved ? saved->outputs : one_hot, whose);
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
    s.task = classes ? Task::kClassification : Task::kRegression;
    if (s.task == Task::kClassification) {
      const auto ids = train.y.to(at::kLong);
      // One-hot rows: K classes, whether or not each appears.
      s.outputs = strings ? static_cast<int64_t>(names.size()) : std::max(one_hot, ids.max().item<int64_t>() + 1);
      if (strings) s.classes = names;
      else
        for (int64_t c = 0; c < s.outputs; ++c) s.classes.push_back(std::to_string(c));
      // One class is no classification (every prediction right, a 100 % that means
      // nothing), as for CSV.
      if (ids.numel() > 0 && ids.min().item<int64_t>() >= 0) {
        const auto present = std::get<0>(at::_unique(ids, /*sorted=*/true));
        if (present.numel() < 2)
          throw InputError(c10::str(train.y_path, ": classification needs at least 2 classes, the training split has ",
                                    present.numel(), " (class ", s.classes.at(present[0].item<int64_t>()), ")"));
      }
      // Ids that are labels rather than indices (0 and 1000000 for two classes) give
      // the model an output for every id between: say so (a negative id is refused below).
      if (ids.numel() > 0 && ids.min().item<int64_t>() >= 0) {
        const int64_t present = at::bincount(ids, {}, s.outputs).gt(0).sum().item<int64_t>();
        if (s.outputs - present > std::max<int64_t>(s.outputs / 2, 10))
          log::warn(c10::str(train.y_path, ": class ids run 0..", s.outputs - 1, " but only ", present,
                             " of them appear in the training split: the model gets ", s.outputs,
                             " outputs, one per id; if the ids are labels rather than indices, map them to "
                             "0..K-1 first (NumPy: np.unique(y, return_inverse=True))"));
      }
    } else {
      const auto y = train.y.to(at::kDouble).reshape({train.y.size(0), -1});
      // Float targets of a few whole values are often classes saved as floats.
      if (o.task() == "auto" && y.eq(y.round()).all().item<bool>()) {
        const auto values = std::get<0>(at::_unique(y.flatten(), /*sorted=*/true));
        if (values.numel() <= kFewValues) {
          std::string list;
          for (int64_t i = 0; i < std::min<int64_t>(values.numel(), 5); ++i)
            list += c10::str(i ? ", " : "", values[i].item<double>());
          if (values.numel() > 5) list += ", …";
          log::warn(c10::str(train.y_path, ": the targets are ", train.y.scalar_type(), " and take only ",
                             values.numel(), " whole values (", list, "): trained as regression, as "
                             "data.task = \"auto\" reads a float type; if they are classes, set data.task = "
                             "\"classification\" (or save them as integers)"));
        }
      }
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
    const auto mean = at::tensor(s.target_mean, at::kDouble), sd = at::tensor(s.target_std, at::kDouble);
    return v.sub(mean).div(sd).to(at::kFloat);
  };
  d.train = {inputs(train.x), targets(train, train.y)};
  d.test = {inputs(test.x), targets(test, test.y)};
  return d;
}

}  // namespace kiln::data
