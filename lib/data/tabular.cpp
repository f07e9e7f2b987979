// table_data(): picks the columns, decides each one's kind and the task, sets
// missing values aside, splits, fits on the training rows and encodes both splits.
#include "data/tabular.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "data/formats.h"
#include "util/error.h"

namespace kiln::data {
namespace {

using json = nlohmann::ordered_json;

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// What pandas and R write for "no value" (and UCI's "?").
bool is_missing(std::string_view v) {
  v = trim(v);
  for (const char* na : {"", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?"})
    if (v == na) return true;
  return false;
}

// The fields of the columns a data set uses, each parsed once: a number, a missing
// value, text, or a number that is not finite in float32 (the dtype kiln trains in:
// inf, -inf, nan(…), 1e999, 1e39), which a numeric column refuses, naming the field.
enum : uint8_t { kNumber, kMissing, kText, kNonFinite };

struct Field {
  uint8_t kind;
  double value;  // the number (kNumber), else NaN
};

Field parse_field(std::string_view v) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  if (is_missing(v)) return {kMissing, nan};
  v = trim(v);
  if (!v.empty() && v.front() == '+') v.remove_prefix(1);
  double out = 0.0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || end != v.data() + v.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return {kText, nan};
  // Out of double's range: from_chars leaves `out` as it was; strtod tells an overflow
  // (±HUGE_VAL: not finite) from an underflow (a value at or near 0, a number).
  if (ec == std::errc::result_out_of_range) out = std::strtod(std::string(v).c_str(), nullptr);
  if (!std::isfinite(out) || std::abs(out) > static_cast<double>(std::numeric_limits<float>::max()))
    return {kNonFinite, nan};
  return {kNumber, out};
}

std::optional<double> parse_number(std::string_view v) {
  const Field f = parse_field(v);
  if (f.kind != kNumber) return std::nullopt;
  return f.value;
}

// Each used column's fields, parsed once (the reader's speed depends on this).
struct ParsedColumn {
  std::vector<double> value;  // the number (kNumber), else NaN
  std::vector<uint8_t> kind;
};

class Parsed {
 public:
  Parsed(const CsvTable& t, std::vector<int64_t> cols) : t_(t), cols_(static_cast<size_t>(t.columns())) {
    std::sort(cols.begin(), cols.end());  // each column parsed by one thread, once
    cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
    at::parallel_for(0, static_cast<int64_t>(cols.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        ParsedColumn& c = cols_[static_cast<size_t>(cols[static_cast<size_t>(i)])];
        if (!c.kind.empty()) continue;
        c.value.resize(static_cast<size_t>(t.rows()));
        c.kind.resize(static_cast<size_t>(t.rows()));
        for (int64_t r = 0; r < t.rows(); ++r) {
          const Field f = parse_field(t.at(r, cols[static_cast<size_t>(i)]));
          c.kind[r] = f.kind;
          c.value[r] = f.value;
        }
      }
    });
  }
  const CsvTable& table() const { return t_; }
  bool missing(int64_t r, int64_t c) const { return col(c).kind[r] == kMissing; }
  bool non_finite(int64_t r, int64_t c) const { return col(c).kind[r] == kNonFinite; }
  std::optional<double> number(int64_t r, int64_t c) const {
    const auto& pc = col(c);
    if (pc.kind[r] != kNumber) return std::nullopt;
    return pc.value[r];
  }

 private:
  const ParsedColumn& col(int64_t c) const {
    const auto& pc = cols_[static_cast<size_t>(c)];
    TORCH_INTERNAL_ASSERT(!pc.kind.empty(), "column ", c, " was not parsed");
    return pc;
  }
  const CsvTable& t_;
  std::vector<ParsedColumn> cols_;
};

// "FILE: line L, column C (NAME)".
std::string where(const CsvTable& t, int64_t row, int64_t col) {
  return c10::str(t.path, ": line ", t.lines[static_cast<size_t>(row)], ", column ", col + 1,
                  " (", t.header[static_cast<size_t>(col)], ")");
}

std::string column_list(const CsvTable& t) {
  std::string s;
  for (const auto& h : t.header) s += (s.empty() ? "" : ", ") + h;
  return s;
}

int64_t column_index(const CsvTable& t, const std::string& name, const std::string& key) {
  const auto it = std::find(t.header.begin(), t.header.end(), name);
  if (it == t.header.end())
    throw InputError(c10::str(t.path, ": ", key, ": expected one of the columns (",
                              column_list(t), "), found '", name, "'", delimiter_hint(t)));
  return it - t.header.begin();
}

enum class Missing { kError, kDrop, kMean };

Missing missing_mode(const std::string& s) {
  if (s == "error") return Missing::kError;
  if (s == "drop") return Missing::kDrop;
  if (s == "mean") return Missing::kMean;
  throw InputError(c10::str("data.missing: expected error, drop or mean, found '", s, "'"));
}

// One feature column: its name, kind and fitted statistics.
struct Feature {
  std::string name;
  bool categorical = false;
  double mean = 0.0, stddev = 1.0;
  std::vector<std::string> categories;
  int64_t width() const { return categorical ? static_cast<int64_t>(categories.size()) : 1; }
};

// "FILE: line L, column C (NAME): expected a finite number[ WHAT] (at most 3.4e38 …),
// found 'inf'": a numeric column's field past float32's range (kNonFinite).
InputError non_finite_error(const CsvTable& t, int64_t row, int64_t col, std::string_view what) {
  return InputError(c10::str(where(t, row, col), ": expected a finite number", what,
                             " (at most 3.4e38 in magnitude: kiln trains in float32), found '",
                             trim(t.at(row, col)), "'"));
}

// A column is numeric when every value present parses as a number, categorical when
// none does (or the user says so); a mix is a bad value in a numeric column, and so is
// a number past float32's range in one (inf, 1e39).
bool decide_categorical(const Parsed& p, int64_t col, bool forced) {
  if (forced) return true;
  const CsvTable& t = p.table();
  int64_t first_number = -1, first_text = -1, first_non_finite = -1;
  for (int64_t r = 0; r < t.rows(); ++r) {
    if (p.missing(r, col)) continue;
    if (p.number(r, col)) {
      if (first_number < 0) first_number = r;
    } else if (p.non_finite(r, col)) {
      if (first_non_finite < 0) first_non_finite = r;
    } else if (first_text < 0) {
      first_text = r;
    }
    if (first_number >= 0 && first_text >= 0) break;
  }
  if (first_number >= 0 && first_text >= 0)
    throw InputError(c10::str(where(t, first_text, col), ": expected a number (the column holds "
                              "numbers, as on line ", t.lines[first_number], "), found '",
                              t.at(first_text, col), "'; list the column in data.categorical to "
                              "one-hot encode it as text"));
  if (first_text < 0 && first_non_finite >= 0) throw non_finite_error(t, first_non_finite, col, "");
  return first_text >= 0;
}

class TableEncoder {
 public:
  TableEncoder(std::vector<Feature> features, DataSchema schema, const DataOptions& options)
      : features_(std::move(features)), schema_(std::move(schema)), options_(options) {
    for (const auto& f : features_) width_ += f.width();
    for (size_t i = 0; i < schema_.classes.size(); ++i)
      class_ids_[schema_.classes[i]] = static_cast<int64_t>(i);
    zero_unseen_ = options.unseen() == "zero";
  }

  int64_t width() const { return width_; }

  // x: (rows, width) float32; y: (rows) int64 or (rows, 1) float32 standardised.
  Dataset encode(const Parsed& p, const std::vector<int64_t>& rows,
                 const std::vector<int64_t>& cols, int64_t label_col) const {
    const CsvTable& t = p.table();
    const auto n = static_cast<int64_t>(rows.size());
    auto x = at::zeros({n, width_}, at::kFloat);
    const bool regression = schema_.task == Task::kRegression;
    auto y = regression ? at::empty({n, 1}, at::kFloat) : at::empty({n}, at::kLong);
    float* xp = x.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = rows[static_cast<size_t>(i)];
      float* out = xp + i * width_;
      for (size_t f = 0; f < features_.size(); ++f) {
        const Feature& feat = features_[f];
        const int64_t c = cols[f];
        const auto v = t.at(r, c);
        if (feat.categorical) {
          if (!p.missing(r, c)) {
            const auto key = trim(v);
            const auto it = std::lower_bound(feat.categories.begin(), feat.categories.end(), key);
            if (it != feat.categories.end() && *it == key) {
              out[it - feat.categories.begin()] = 1.0f;
            } else if (!zero_unseen_) {
              throw InputError(c10::str(where(t, r, c), ": the category '", key, "' is not one of "
                                        "the training split's ", feat.categories.size(),
                                        " (", preview(feat.categories), "); set data.unseen = "
                                        "\"zero\" to encode it as an all-zero row"));
            }
          }
          out += feat.width();
          continue;
        }
        double value = feat.mean;  // a missing value that got past the missing check: "mean"
        if (!p.missing(r, c)) {
          const auto parsed = p.number(r, c);
          if (!parsed && p.non_finite(r, c)) throw non_finite_error(t, r, c, "");
          if (!parsed)
            throw InputError(c10::str(where(t, r, c), ": expected a number, found '", v, "'"));
          value = *parsed;
        }
        *out++ = static_cast<float>((value - feat.mean) / feat.stddev);
      }
      const auto label = t.at(r, label_col);
      if (regression) {
        const auto parsed = p.number(r, label_col);
        if (!parsed && p.non_finite(r, label_col))
          throw non_finite_error(t, r, label_col, " as the regression target");
        if (!parsed)
          throw InputError(c10::str(where(t, r, label_col), ": expected a number (the regression "
                                    "target), found '", label, "'"));
        y.data_ptr<float>()[i] =
            static_cast<float>((*parsed - schema_.target_mean[0]) / schema_.target_std[0]);
      } else {
        const auto it = class_ids_.find(std::string(trim(label)));
        if (it == class_ids_.end())
          throw InputError(c10::str(where(t, r, label_col), ": the class '", trim(label),
                                    "' is not one of the training split's ",
                                    schema_.classes.size(), " (", preview(schema_.classes), ")"));
        y.data_ptr<int64_t>()[i] = it->second;
      }
    }
    return {x, y};
  }

 private:
  std::vector<Feature> features_;
  DataSchema schema_;
  const DataOptions& options_;
  std::map<std::string, int64_t, std::less<>> class_ids_;
  int64_t width_ = 0;
  bool zero_unseen_ = false;
};

// The rows whose used columns all hold values; a missing one is an error, drops the
// row, or (kMean, features only) stays to be filled.
std::vector<int64_t> usable_rows(const Parsed& p, const std::vector<int64_t>& cols,
                                 int64_t label_col, Missing mode) {
  const CsvTable& t = p.table();
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(t.rows()));
  for (int64_t r = 0; r < t.rows(); ++r) {
    bool keep = true;
    for (size_t i = 0; i <= cols.size() && keep; ++i) {
      const int64_t c = i < cols.size() ? cols[i] : label_col;
      if (!p.missing(r, c)) continue;
      const bool is_label = c == label_col;
      if (mode == Missing::kDrop) {
        keep = false;
      } else if (mode == Missing::kError || is_label) {
        throw InputError(c10::str(
            where(t, r, c), ": expected a value, found ",
            trim(t.at(r, c)).empty() ? std::string("an empty field") : c10::str("'", t.at(r, c), "'"),
            is_label ? "; a row without its label can only be dropped (data.missing = \"drop\")"
                     : "; set data.missing = \"drop\" (drop the row) or \"mean\" (fill it in)"));
      }
    }
    if (keep) rows.push_back(r);
  }
  if (rows.empty())
    throw InputError(c10::str(t.path, ": no row is left once rows with missing values are "
                                      "dropped (data.missing = \"drop\")"));
  return rows;
}

std::vector<int64_t> take(const std::vector<int64_t>& rows, const at::Tensor& idx, int64_t limit) {
  std::vector<int64_t> out;
  const auto* p = idx.data_ptr<int64_t>();
  const int64_t n = limit > 0 ? std::min(limit, idx.numel()) : idx.numel();
  for (int64_t i = 0; i < n; ++i) out.push_back(rows[static_cast<size_t>(p[i])]);
  return out;
}

std::vector<int64_t> first(std::vector<int64_t> rows, int64_t limit) {
  if (limit > 0 && limit < static_cast<int64_t>(rows.size())) rows.resize(static_cast<size_t>(limit));
  return rows;
}

// The schema's features and task, fitted on `rows` of the training table.
DataSchema fit(const Parsed& p, const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
               int64_t label_col, std::vector<Feature>& features, const DataOptions& o) {
  const CsvTable& t = p.table();
  DataSchema s;
  s.format = "csv";
  for (size_t f = 0; f < features.size(); ++f) {
    Feature& feat = features[f];
    const int64_t c = cols[f];
    if (feat.categorical) {
      std::set<std::string, std::less<>> seen;
      for (const int64_t r : rows)
        if (!p.missing(r, c)) seen.emplace(trim(t.at(r, c)));
      feat.categories.assign(seen.begin(), seen.end());
      continue;
    }
    double sum = 0.0, sq = 0.0;
    int64_t n = 0;
    for (const int64_t r : rows)
      if (const auto v = p.number(r, c)) {
        sum += *v;
        ++n;
      }
    feat.mean = n ? sum / n : 0.0;
    for (const int64_t r : rows)
      if (const auto v = p.number(r, c)) sq += (*v - feat.mean) * (*v - feat.mean);
    const double sd = n ? std::sqrt(sq / n) : 0.0;
    feat.stddev = o.standardize() && sd > 0.0 ? sd : 1.0;
    if (!o.standardize()) feat.mean = n ? sum / n : 0.0;  // still fills missing values
  }

  // The task: text labels are classes, fractional ones regression targets; whole
  // numbers could be either, and the user says which.
  // A number past float32's range (inf, 1e39) is text among text labels (a class's
  // name) and an error among numbers, or where data.task is regression.
  bool any_text = false, any_fraction = false, any_number = false;
  int64_t first_non_finite = -1;
  for (const int64_t r : rows) {
    if (const auto v = p.number(r, label_col)) {
      any_number = true;
      if (*v != std::floor(*v)) any_fraction = true;
    } else if (p.non_finite(r, label_col)) {
      if (first_non_finite < 0) first_non_finite = r;
    } else {
      any_text = true;
    }
  }
  if (first_non_finite >= 0 && (o.task() == "regression" || (any_number && !any_text)))
    throw non_finite_error(t, first_non_finite, label_col,
                           o.task() == "regression" ? " as the regression target" : " as the label");
  any_text = any_text || first_non_finite >= 0;
  const std::string where_label = c10::str(t.path, ": column ", label_col + 1, " (",
                                           t.header[static_cast<size_t>(label_col)], ")");
  if (o.task() == "regression") {
    if (any_text) {
      for (const int64_t r : rows)
        if (!p.number(r, label_col))
          throw InputError(c10::str(where(t, r, label_col), ": data.task is regression: expected a "
                                    "number, found '", t.at(r, label_col), "'"));
    }
    s.task = Task::kRegression;
  } else if (o.task() == "classification" || any_text) {
    s.task = Task::kClassification;
  } else if (any_fraction) {
    s.task = Task::kRegression;
  } else {
    throw InputError(c10::str(where_label, ": the label holds whole numbers only, which may be "
                              "classes or regression targets; set data.task = "
                              "\"classification\" or \"regression\""));
  }
  if (s.task == Task::kClassification) {
    std::set<std::string> names;
    for (const int64_t r : rows) names.emplace(trim(t.at(r, label_col)));
    s.classes.assign(names.begin(), names.end());
    if (!any_text)  // numbers in numeric order: "2" before "10"
      std::sort(s.classes.begin(), s.classes.end(), [](const auto& a, const auto& b) {
        return *parse_number(a) < *parse_number(b);
      });
    if (s.classes.size() < 2)
      throw InputError(c10::str(where_label, ": classification needs at least 2 classes, the "
                                "training split has ", s.classes.size(), " ('",
                                s.classes.empty() ? "" : s.classes[0], "')"));
    s.outputs = static_cast<int64_t>(s.classes.size());
  } else {
    double sum = 0.0, sq = 0.0;
    for (const int64_t r : rows) sum += *p.number(r, label_col);
    const double mean = sum / static_cast<double>(rows.size());
    for (const int64_t r : rows) {
      const double d = *p.number(r, label_col) - mean;
      sq += d * d;
    }
    const double sd = std::sqrt(sq / static_cast<double>(rows.size()));
    s.target_mean = {mean};
    s.target_std = {sd > 0.0 ? sd : 1.0};
    s.outputs = 1;
  }
  return s;
}

}  // namespace

Data table_data(const CsvTable& train, const CsvTable* test, const DataOptions& o,
                const DataSchema* saved) {
  const Missing mode = missing_mode(o.missing());
  if (o.unseen() != "error" && o.unseen() != "zero")
    throw InputError(c10::str("data.unseen: expected error or zero, found '", o.unseen(), "'"));
  const std::string label =
      saved ? saved->read.value("label", std::string()) : o.label();
  if (label.empty())
    throw InputError(c10::str(train.path, ": data.label: expected the name of the label column, "
                              "found none; the columns are: ", column_list(train)));
  const int64_t label_col = column_index(train, label, "data.label");

  // The features and their kinds: the saved schema's, or chosen now.
  std::vector<Feature> features;
  if (saved) {
    for (const auto& c : saved->transform.at("columns")) {
      Feature f;
      f.name = c.at("name").get<std::string>();
      f.categorical = c.at("kind") == "categorical";
      if (f.categorical) {
        f.categories = c.at("categories").get<std::vector<std::string>>();
      } else {
        f.mean = c.at("mean").get<double>();
        f.stddev = c.at("std").get<double>();
      }
      features.push_back(std::move(f));
    }
  } else {
    std::vector<std::string> names = o.features();
    if (names.empty())
      for (const auto& h : train.header)
        if (h != label) names.push_back(h);
    if (names.empty())
      throw InputError(c10::str(train.path, ": expected feature columns besides the label '",
                                label, "', found none"));
    for (const auto& c : o.categorical())
      if (std::find(names.begin(), names.end(), c) == names.end())
        throw InputError(c10::str(train.path, ": data.categorical: '", c, "' is not a feature "
                                  "column; the features are the columns ", column_list(train),
                                  " less the label"));
    for (size_t i = 0; i < names.size(); ++i)
      if (std::find(names.begin(), names.begin() + static_cast<long>(i), names[i]) != names.begin() + static_cast<long>(i))
        throw InputError(c10::str(train.path, ": data.features: '", names[i], "' is listed twice"));
    for (const auto& n : names) {
      if (n == label)
        throw InputError(c10::str(train.path, ": data.features: the label column '", label,
                                  "' cannot be a feature too"));
      Feature f;
      f.name = n;
      column_index(train, n, "data.features");  // names the columns when it is not one
      features.push_back(std::move(f));
    }
  }
  const auto indices = [&](const CsvTable& t) {
    std::vector<int64_t> cols;
    for (const auto& f : features) cols.push_back(column_index(t, f.name, "a feature column"));
    return cols;
  };
  const auto with_label = [](std::vector<int64_t> cols, int64_t label) {
    cols.push_back(label);
    return cols;
  };
  const auto train_cols = indices(train);
  const Parsed train_p(train, with_label(train_cols, label_col));
  if (!saved)
    for (size_t i = 0; i < features.size(); ++i) {
      const auto& c = o.categorical();
      const bool forced = std::find(c.begin(), c.end(), features[i].name) != c.end();
      features[i].categorical = decide_categorical(train_p, train_cols[i], forced);
    }
  const auto train_usable = usable_rows(train_p, train_cols, label_col, mode);

  std::vector<int64_t> train_rows, test_rows;
  if (test) {
    train_rows = first(train_usable, o.train_limit());
  } else {
    const auto [tr, te] = split_indices(static_cast<int64_t>(train_usable.size()),
                                        o.test_fraction(), o.seed(), train.path);
    train_rows = take(train_usable, tr, o.train_limit());
    test_rows = take(train_usable, te, o.test_limit());
  }

  DataSchema schema = saved ? *saved : fit(train_p, train_rows, train_cols, label_col, features, o);
  if (!saved) {
    schema.transform = {{"columns", json::array()}};
    for (const auto& f : features) {
      if (f.categorical)
        schema.transform["columns"].push_back(
            {{"name", f.name}, {"kind", "categorical"}, {"categories", f.categories}});
      else
        schema.transform["columns"].push_back(
            {{"name", f.name}, {"kind", "numeric"}, {"mean", f.mean}, {"std", f.stddev}});
    }
    schema.read = {{"label", label}, {"delimiter", std::string(1, train.delimiter)}};
  }
  TableEncoder encoder(features, schema, o);
  schema.input_shape = {encoder.width()};

  Data d;
  d.train = encoder.encode(train_p, train_rows, train_cols, label_col);
  if (test) {
    const int64_t test_label = column_index(*test, label, "data.label");
    const auto test_cols = indices(*test);
    const Parsed test_p(*test, with_label(test_cols, test_label));
    test_rows = first(usable_rows(test_p, test_cols, test_label, mode), o.test_limit());
    d.test = encoder.encode(test_p, test_rows, test_cols, test_label);
  } else {
    d.test = encoder.encode(train_p, test_rows, train_cols, label_col);
  }
  d.schema = std::move(schema);
  return d;
}

}  // namespace kiln::data
