// load_data(): CSV tables (standardised numbers, one-hot text, classes, regression
// targets, missing values, unseen categories, a seeded split) and NumPy arrays become
// one Dataset with a schema; the schema round-trips through JSON and, given back,
// applies the saved transform; bad data is refused naming file, line and column.
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/dataset.h"
#include "data/npy.h"
#include "data/npz.h"
#include "support.h"
#include "util/error.h"

namespace {

using kiln::data::DataOptions;
using kiln::data::load_data;
using kiln::data::Task;

std::string write(const kiln::test::TempDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string error_of(const DataOptions& o, const kiln::data::DataSchema* saved = nullptr) {
  return kiln::test::input_error_of([&] { load_data(o, saved); });
}

// An .npy of strings as np.save writes them: descr '<U<n>' (UCS-4, little-endian) or
// '|S<n>' (bytes: each code point's low byte), n the longest label; shape (N,) or (N, 1).
std::string write_strings(const kiln::test::TempDir& dir, const std::string& name,
                          const std::vector<std::u32string>& labels, bool unicode, bool column = false) {
  size_t n = 1;
  for (const auto& l : labels) n = std::max(n, l.size());
  std::string header = "{'descr': '" + std::string(unicode ? "<U" : "|S") + std::to_string(n) +
                       "', 'fortran_order': False, 'shape': (" + std::to_string(labels.size()) +
                       (column ? ", 1), }" : ",), }");
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  for (const auto& l : labels)
    for (size_t k = 0; k < n; ++k) {
      const char32_t c = k < l.size() ? l[k] : 0;
      if (!unicode) {
        bytes += static_cast<char>(c & 0xff);
        continue;
      }
      for (int b = 0; b < 4; ++b) bytes += static_cast<char>((c >> (8 * b)) & 0xff);
    }
  return write(dir, name, bytes);
}

// 10 rows: a numeric column, a text column, a string label.
const char* kPenguins =
    "mass,island,species\n"
    "3.0,Biscoe,Adelie\n"
    "4.0,Dream,Gentoo\n"
    "5.0,Biscoe,Gentoo\n"
    "3.5,Torgersen,Adelie\n"
    "4.5,Dream,Chinstrap\n"
    "3.2,Biscoe,Adelie\n"
    "5.2,Dream,Gentoo\n"
    "3.9,Torgersen,Chinstrap\n"
    "4.1,Biscoe,Adelie\n"
    "4.8,Dream,Gentoo\n";

}  // namespace

TEST_CASE("CSV classification: numbers standardised, text one-hot, labels as sorted classes",
          "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  const auto train = write(dir, "train.csv", kPenguins);
  const auto test = write(dir, "test.csv", "species,island,mass\nGentoo,Dream,4.4\n");  // other column order
  const auto d = load_data(DataOptions().train(train).test(test).label("species"));
  const auto& s = d.schema;
  REQUIRE(s.format == "csv");
  REQUIRE(s.task == Task::kClassification);
  REQUIRE(s.classes == std::vector<std::string>{"Adelie", "Chinstrap", "Gentoo"});
  REQUIRE(s.input_shape == std::vector<int64_t>{4});  // mass + 3 islands
  REQUIRE(d.train.size() == 10);
  // The numeric column has mean 0 and deviation 1 over the training rows.
  const auto mass = d.train.x.select(1, 0).to(at::kDouble);
  CHECK(std::abs(mass.mean().item<double>()) < 1e-6);
  CHECK(std::abs(mass.std(false).item<double>() - 1.0) < 1e-6);
  // One-hot: exactly one island per row; Biscoe, Dream, Torgersen in sorted order.
  CHECK(d.train.x.narrow(1, 1, 3).sum(1).eq(1).all().item<bool>());
  CHECK(d.train.x[0][1].item<float>() == 1.0f);  // row 1 is Biscoe
  CHECK(d.train.x[3][3].item<float>() == 1.0f);  // row 4 is Torgersen
  CHECK(d.train.y[1].item<int64_t>() == 2);      // Gentoo
  // The test file's columns are found by name; it is standardised with training statistics.
  const double m = s.transform["columns"][0]["mean"], sd = s.transform["columns"][0]["std"];
  CHECK(d.test.x[0][0].item<float>() == Approx((4.4 - m) / sd));
  CHECK(d.test.x[0][2].item<float>() == 1.0f);  // Dream
  CHECK(d.test.y[0].item<int64_t>() == 2);
}

TEST_CASE("CSV without a test file: a seeded split of test_fraction of the rows",
          "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  const auto train = write(dir, "train.csv", kPenguins);
  const auto o = DataOptions().train(train).label("species").test_fraction(0.3).unseen("zero");
  const auto a = load_data(o), b = load_data(o), c = load_data(DataOptions(o).seed(7));
  REQUIRE(a.train.size() == 7);
  REQUIRE(a.test.size() == 3);
  REQUIRE(at::equal(a.test.x, b.test.x));
  REQUIRE_FALSE(at::equal(a.test.x, c.test.x));
  // Statistics come from the 7 training rows alone.
  CHECK(std::abs(a.train.x.select(1, 0).to(at::kDouble).mean().item<double>()) < 1e-6);
}

TEST_CASE("CSV regression: fractional labels are targets, standardised and saved",
          "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  const auto train = write(dir, "r.csv", "x,y\n1,2.5\n2,4.5\n3,6.5\n4,8.5\n");
  const auto d = load_data(DataOptions().train(train).test(train).label("y"));
  REQUIRE(d.schema.task == Task::kRegression);
  REQUIRE(d.schema.outputs == 1);
  REQUIRE(d.schema.target_mean[0] == Approx(5.5));
  REQUIRE(d.schema.target_std[0] == Approx(std::sqrt(5.0)));
  REQUIRE(d.train.y.sizes() == at::IntArrayRef{4, 1});
  CHECK(d.train.y[0][0].item<float>() == Approx((2.5 - 5.5) / std::sqrt(5.0)));
}

TEST_CASE("CSV labels of whole numbers need data.task; as classes they sort as numbers",
          "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  const auto train = write(dir, "w.csv", "x,label\n1,10\n2,2\n3,10\n4,2\n5,9\n");
  CHECK_THAT(error_of(DataOptions().train(train).label("label")),
             Catch::Contains("w.csv: column 2 (label): the label holds whole numbers only") &&
                 Catch::Contains("set data.task"));
  const auto d = load_data(DataOptions().train(train).test(train).label("label").task("classification"));
  REQUIRE(d.schema.classes == std::vector<std::string>{"2", "9", "10"});
  const auto r = load_data(DataOptions().train(train).test(train).label("label").task("regression"));
  REQUIRE(r.schema.task == Task::kRegression);
}

TEST_CASE("CSV missing values: an error naming line and column, dropped rows, or means",
          "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  const auto train = write(dir, "m.csv",
                           "a,c,y\n1,u,p\n,v,q\n3,NA,p\n5,u,q\n7,v,p\n9,u,q\n");
  const auto o = DataOptions().train(train).test(train).label("y");
  CHECK_THAT(error_of(o), Catch::Contains("m.csv: line 3, column 1 (a): expected a value, found "
                                          "an empty field; set data.missing"));
  const auto dropped = load_data(DataOptions(o).missing("drop"));
  REQUIRE(dropped.train.size() == 4);
  const auto filled = load_data(DataOptions(o).missing("mean"));
  REQUIRE(filled.train.size() == 6);
  CHECK(filled.train.x[1][0].item<float>() == 0.0f);  // the mean, standardised
  CHECK(filled.train.x[2].narrow(0, 1, 2).sum().item<float>() == 0.0f);  // no category
  // A missing label can only be dropped.
  const auto nolabel = write(dir, "l.csv", "a,y\n1,p\n2,\n3,q\n4,p\n");
  CHECK_THAT(error_of(DataOptions().train(nolabel).label("y").missing("mean")),
             Catch::Contains("l.csv: line 3, column 2 (y)") && Catch::Contains("only be dropped"));
}

TEST_CASE("CSV bad values: unknown columns, text in numbers, unseen categories and classes",
          "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  const auto train = write(dir, "train.csv", kPenguins);
  CHECK_THAT(error_of(DataOptions().train(train).label("kind")),
             Catch::Contains("data.label: expected one of the columns (mass, island, species), found 'kind'"));
  CHECK_THAT(error_of(DataOptions().train(train)), Catch::Contains("data.label: expected the name"));
  CHECK_THAT(error_of(DataOptions().train(train).label("species").features({"mass", "beak"})),
             Catch::Contains("data.features: expected one of the columns"));
  CHECK_THAT(error_of(DataOptions().train(train).label("species").features({"mass", "island", "mass"})),
             Catch::Contains("data.features: 'mass' is listed twice"));
  const auto mixed = write(dir, "mixed.csv", "a,y\n1,p\n2,q\nthree,p\n4,q\n");
  CHECK_THAT(error_of(DataOptions().train(mixed).label("y")),
             Catch::Contains("mixed.csv: line 4, column 1 (a): expected a number (the column holds "
                             "numbers, as on line 2), found 'three'"));
  const auto unseen = write(dir, "unseen.csv", "mass,island,species\n4.0,Mars,Adelie\n");
  const auto o = DataOptions().train(train).test(unseen).label("species");
  CHECK_THAT(error_of(o), Catch::Contains("unseen.csv: line 2, column 2 (island): the category "
                                          "'Mars' is not one of the training split's 3"));
  const auto zero = load_data(DataOptions(o).unseen("zero"));
  CHECK(zero.test.x[0].narrow(0, 1, 3).sum().item<float>() == 0.0f);
  const auto new_class = write(dir, "cls.csv", "mass,island,species\n4.0,Dream,Emperor\n");
  CHECK_THAT(error_of(DataOptions().train(train).test(new_class).label("species")),
             Catch::Contains("cls.csv: line 2, column 3 (species): the class 'Emperor' is not one of"));
}

TEST_CASE("CSV numbers past float32's range (inf, 1e999, 1e39) are refused in numeric columns, "
          "names among text", "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  // A regression label of inf had made the label column text, so classes, each number one.
  const auto label = write(dir, "inf_label.csv", "x,y\n1,2.5\n2,inf\n3,6.5\n4,8.5\n");
  CHECK_THAT(error_of(DataOptions().train(label).label("y")),
             Catch::Contains("inf_label.csv: line 3, column 2 (y): expected a finite number as the label "
                             "(at most 3.4e38 in magnitude: kiln trains in float32), found 'inf'"));
  CHECK_THAT(error_of(DataOptions().train(label).label("y").task("regression")),
             Catch::Contains("line 3, column 2 (y): expected a finite number as the regression target"));
  CHECK_THAT(error_of(DataOptions().train(label).label("y").task("classification")),
             Catch::Contains("found 'inf'"));
  // In a feature: 1e999 overflows double, 1e39 float32; both had been text, or inf in x.
  for (const std::string v : {"-inf", "1e999", "1e39", "nan(1)"}) {
    const auto feature = write(dir, "f.csv", "a,y\n1,p\n" + v + ",q\n3,p\n4,q\n");
    CHECK_THAT(error_of(DataOptions().train(feature).label("y")),
               Catch::Contains("f.csv: line 3, column 1 (a): expected a finite number (at most") &&
                   Catch::Contains("found '" + v + "'"));
  }
  // In the test split's numeric column and regression target.
  const auto good = write(dir, "good.csv", "x,y\n1,2.5\n2,4.5\n3,6.5\n4,8.5\n");
  const auto test_x = write(dir, "test_x.csv", "x,y\n1e40,2.5\n");
  CHECK_THAT(error_of(DataOptions().train(good).test(test_x).label("y")),
             Catch::Contains("test_x.csv: line 2, column 1 (x): expected a finite number"));
  const auto test_y = write(dir, "test_y.csv", "x,y\n1,-inf\n");
  CHECK_THAT(error_of(DataOptions().train(good).test(test_y).label("y")),
             Catch::Contains("test_y.csv: line 2, column 2 (y): expected a finite number as the regression target"));
  // Among text, 'inf' is a name like any other; an underflow (1e-400) is the number 0.
  const auto names = write(dir, "names.csv", "a,y\n1e-400,inf\n2,cat\n3,inf\n4,cat\n");
  const auto d = load_data(DataOptions().train(names).test(names).label("y"));
  CHECK(d.schema.classes == std::vector<std::string>{"cat", "inf"});
  const auto text = write(dir, "text.csv", "a,y\ninf,p\nred,q\ninf,p\nred,q\n");
  CHECK(load_data(DataOptions().train(text).test(text).label("y")).train.x.size(1) == 2);  // one-hot
  // 3.4e38 is float32's: kept.
  const auto edge = write(dir, "edge.csv", "x,y\n3.4e38,2.5\n-3.4e38,4.5\n0,6.5\n1,8.5\n");
  CHECK(load_data(DataOptions().train(edge).test(edge).label("y")).train.x.isfinite().all().item<bool>());
}

TEST_CASE("CSV delimiters: auto reads .tsv and .tab files at tabs; a header of one column says which to set",
          "[data][dataset][csv]") {
  kiln::test::TempDir dir;
  std::string tsv = kPenguins;
  std::replace(tsv.begin(), tsv.end(), ',', '\t');
  for (const char* name : {"train.tsv", "train.TAB"}) {
    const auto d = load_data(DataOptions().train(write(dir, name, tsv)).label("species"));
    CHECK(d.train.size() + d.test.size() == 10);
    CHECK(d.schema.classes.size() == 3);
    CHECK(d.schema.read["delimiter"] == "\t");  // the one it was read with, not "auto"
  }
  // Each file by its own name: a .csv training table with a .tsv test table.
  const auto both = load_data(DataOptions()
                                  .train(write(dir, "train.csv", kPenguins))
                                  .test(write(dir, "test.tsv", tsv))
                                  .label("species"));
  CHECK(both.test.size() == 10);
  CHECK(both.schema.read["delimiter"] == ",");
  // An explicit delimiter wins over the name.
  CHECK_THAT(error_of(DataOptions().train(write(dir, "t2.tsv", tsv)).label("species").delimiter(",")),
             Catch::Contains("data.label: expected one of the columns (mass\tisland\tspecies), found "
                             "'species'; the header is one column, which a tab would split into 3: set "
                             "data.delimiter = \"\\t\""));
  std::string semi = kPenguins;
  std::replace(semi.begin(), semi.end(), ',', ';');
  const auto semi_csv = write(dir, "semi.csv", semi);
  CHECK_THAT(error_of(DataOptions().train(semi_csv).label("species")),
             Catch::Contains("the header is one column, which ';' would split into 3: set data.delimiter = \";\""));
  CHECK(load_data(DataOptions().train(semi_csv).label("species").delimiter(";")).schema.classes.size() == 3);
  // A one-column header whose rows have more fields: the ragged-row message says it too.
  const auto ragged = write(dir, "ragged.csv", "a;b\n1,2\n");
  CHECK_THAT(error_of(DataOptions().train(ragged).label("a")),
             Catch::Contains("line 2: expected 1 fields (as the header has), found 2; the header is one "
                             "column, which ';' would split into 2"));
  // A table of one column with nothing that splits it: no advice.
  CHECK_THAT(error_of(DataOptions().train(write(dir, "one.csv", "x\n1\n2\n")).label("y")),
             !Catch::Contains("data.delimiter"));
}

TEST_CASE("the schema round-trips through JSON and, given back, applies the saved transform",
          "[data][dataset]") {
  kiln::test::TempDir dir;
  const auto train = write(dir, "train.csv", kPenguins);
  const auto o = DataOptions().train(train).test(train).label("species");
  const auto first = load_data(o);
  const auto schema = kiln::data::DataSchema::from_json(first.schema.to_json(), "data.json");
  REQUIRE(schema.to_json() == first.schema.to_json());
  // The file gains a row with other values: the saved statistics still apply, so the
  // first ten rows come out as before, where statistics fitted again would move them.
  write(dir, "train.csv", std::string(kPenguins) + "9.9,Dream,Adelie\n");
  const auto again = load_data(o, &schema);
  REQUIRE(again.schema.to_json() == first.schema.to_json());
  REQUIRE(at::equal(again.train.x.narrow(0, 0, 10), first.train.x));
  const auto refit = load_data(o);
  REQUIRE_FALSE(at::equal(refit.train.x.narrow(0, 0, 10), first.train.x));
  // A damaged schema is refused by field.
  auto j = first.schema.to_json();
  j["outputs"] = 0;
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Contains("d.json: outputs: expected a positive integer, found 0"));
  j = first.schema.to_json();
  j["classes"] = {"a"};
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Contains("d.json: classes: expected 3 names"));
  // The transform's fields its reader uses, by format: each refused with its path.
  j = first.schema.to_json();
  j["transform"]["columns"][0]["std"] = 0;
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Equals("d.json: transform.columns[0].std: expected a number > 0, found 0"));
  j["transform"]["columns"][0]["kind"] = "ordinal";
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Contains("transform.columns[0].kind: expected \"numeric\" or \"categorical\", "
                                    "found \"ordinal\""));
  j["format"] = "idx";
  j["transform"] = {{"scale", 1.0 / 255}, {"std", 0.3}};
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Equals("d.json: transform.mean: expected a finite number, found nothing"));
  j["format"] = "npy";
  j["transform"] = {{"mean", {0.0, 1.0}}, {"std", {1.0}}};
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Equals("d.json: transform.std: expected 2 values, as transform.mean has, found [1.0]"));
  j["transform"] = nlohmann::ordered_json::object();  // data.standardize = false
  CHECK_NOTHROW(kiln::data::DataSchema::from_json(j, "d.json"));
  j["format"] = "text";
  j["transform"] = {{"vocabulary", {{"type", "bytes"}, {"size", 256}}}, {"block_size", 0}};
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Equals("d.json: transform.block_size: expected an integer >= 1, found 0"));
  j["format"] = "parquet";
  CHECK_THROWS_WITH(kiln::data::DataSchema::from_json(j, "d.json"),
                    Catch::Equals("d.json: format: expected one of idx, csv, npy, text, found \"parquet\""));
}

TEST_CASE("NumPy arrays: integer targets are classes, float targets regression, inputs standardised",
          "[data][dataset][npy]") {
  kiln::test::TempDir dir;
  torch::manual_seed(3);
  const auto x = at::randn({40, 2, 3}) * 4 + 1;
  kiln::data::write_npy(dir / "x.npy", x);
  kiln::data::write_npy(dir / "y.npy", at::randint(0, 4, {40}, at::kByte));
  const auto d = load_data(DataOptions().train(dir / "x.npy").train_targets(dir / "y.npy"));
  REQUIRE(d.schema.format == "npy");
  REQUIRE(d.schema.task == Task::kClassification);
  REQUIRE(d.schema.input_shape == std::vector<int64_t>{2, 3});
  REQUIRE(d.schema.outputs == 4);
  REQUIRE(d.train.size() == 32);
  REQUIRE(d.test.size() == 8);
  REQUIRE(d.train.x.scalar_type() == at::kFloat);
  CHECK(d.train.x.reshape({32, 6}).mean(0).abs().max().item<float>() < 1e-5f);
  REQUIRE(d.train.y.scalar_type() == at::kLong);

  kiln::data::write_npy(dir / "t.npy", at::randn({40, 2}, at::kDouble) * 10 + 5);
  const auto r = load_data(DataOptions().train(dir / "x.npy").train_targets(dir / "t.npy"));
  REQUIRE(r.schema.task == Task::kRegression);
  REQUIRE(r.schema.outputs == 2);
  REQUIRE(r.train.y.sizes() == at::IntArrayRef{32, 2});

  // Without standardisation a float32 array with its own test file stays the file's mapping.
  const auto raw = load_data(DataOptions()
                                 .train(dir / "x.npy").train_targets(dir / "y.npy")
                                 .test(dir / "x.npy").test_targets(dir / "y.npy")
                                 .standardize(false));
  REQUIRE(at::equal(raw.train.x, x));
}

TEST_CASE("NumPy arrays: empty feature dimensions, values float32 cannot hold and a single class are refused",
          "[data][dataset][npy]") {
  kiln::test::TempDir dir;
  const auto y = at::randint(0, 3, {40}, at::kLong);
  kiln::data::write_npy(dir / "y.npy", y);
  kiln::data::write_npy(dir / "x.npy", at::randn({40, 4}));
  const auto with = [&](const std::string& x, const std::string& t) {
    return error_of(DataOptions().train(dir / x).train_targets(dir / t));
  };
  kiln::data::write_npy(dir / "x0.npy", at::zeros({40, 0}));
  REQUIRE(with("x0.npy", "y.npy") == dir / "x0.npy" + ": expected examples of at least one value each, found shape [40, 0]");
  kiln::data::write_npy(dir / "x050.npy", at::zeros({40, 0, 5}));
  REQUIRE(with("x050.npy", "y.npy") == dir / "x050.npy" + ": expected examples of at least one value each, found shape [40, 0, 5]");
  kiln::data::write_npy(dir / "y0.npy", at::zeros({40, 0}));
  REQUIRE(with("x.npy", "y0.npy") == dir / "y0.npy" + ": expected at least one target per example, found shape [40, 0]");
  // Finite in float64, inf in float32: refused, naming the value, before any step.
  auto big = at::randn({40, 4}, at::kDouble);
  big[3][1] = 1e39;
  kiln::data::write_npy(dir / "big.npy", big);
  REQUIRE(with("big.npy", "y.npy") ==
          dir / "big.npy" + ": expected values that float32 holds (|v| <= 3.4028235e38), found 1e+39 at flat index 13");
  auto targets = at::randn({40}, at::kDouble);
  targets[5] = -1e300;
  kiln::data::write_npy(dir / "t.npy", targets);
  REQUIRE(with("x.npy", "t.npy") ==
          dir / "t.npy" + ": expected targets that float32 holds (|v| <= 3.4028235e38), found -1e+300 at flat index 5");
  big[3][1] = 3e38;  // the largest float32 is 3.4028235e38: this one fits
  kiln::data::write_npy(dir / "big.npy", big);
  REQUIRE_NOTHROW(load_data(DataOptions().train(dir / "big.npy").train_targets(dir / "y.npy")));
  // In an archive the arrays are named by the archive and their names.
  kiln::data::write_npz(dir / "d.npz", {{"x", at::randn({40, 4})}, {"y", at::randint(0, 3, {30}, at::kLong)}});
  REQUIRE(error_of(DataOptions().train(dir / "d.npz")) ==
          dir / "d.npz" + ":y: has 30 targets but " + dir / "d.npz" + ":x has 40 examples");
  // One class: every prediction right, an accuracy that means nothing (CSV refuses it too).
  kiln::data::write_npy(dir / "one.npy", at::full({40}, 2, at::kLong));
  REQUIRE(with("x.npy", "one.npy") == dir / "one.npy" + ": classification needs at least 2 classes, the training split has 1 (class 2)");
}

TEST_CASE("NumPy arrays: class ids that are labels, not indices, warn that every id gets an output",
          "[data][dataset][npy]") {
  kiln::test::TempDir dir;
  kiln::data::write_npy(dir / "x.npy", at::randn({40, 3}));
  const kiln::test::CapturedWarnings captured;
  const auto& warnings = captured.messages();
  // Two classes named 0 and 1000: 1001 outputs, 999 of them for ids no example has.
  kiln::data::write_npy(dir / "sparse.npy", at::randint(0, 2, {40}, at::kLong) * 1000);
  const auto d = load_data(DataOptions().train(dir / "x.npy").train_targets(dir / "sparse.npy"));
  // Dense ids (0..3, all present) and a few absent of ten (0..9 with 0..5 present) do not warn.
  kiln::data::write_npy(dir / "dense.npy", at::arange(40, at::kLong) % 4);
  load_data(DataOptions().train(dir / "x.npy").train_targets(dir / "dense.npy"));
  auto few = at::arange(40, at::kLong) % 6;
  few[0] = 9;
  kiln::data::write_npy(dir / "few.npy", few);
  load_data(DataOptions().train(dir / "x.npy").train_targets(dir / "few.npy").test_fraction(0.0001));
  REQUIRE(d.schema.outputs == 1001);
  REQUIRE(warnings.size() == 1);
  REQUIRE_THAT(warnings[0], Catch::Contains("sparse.npy: class ids run 0..1000 but only 2 of them appear in the "
                                            "training split: the model gets 1001 outputs") &&
                                Catch::Contains("np.unique(y, return_inverse=True)"));
}

TEST_CASE("NumPy arrays: class labels as a column or one-hot rows; float labels of few whole values warn",
          "[data][dataset][npy]") {
  kiln::test::TempDir dir;
  torch::manual_seed(5);
  const auto x = at::randn({40, 3});
  kiln::data::write_npy(dir / "x.npy", x);
  const auto ids = at::arange(40, at::kLong) % 3;
  kiln::data::write_npy(dir / "y.npy", ids);
  const auto o = DataOptions().train(dir / "x.npy").train_targets(dir / "y.npy");
  const auto flat = load_data(o);
  // The same labels as a (N, 1) column and as one-hot rows (of 4: class 3 absent).
  kiln::data::write_npy(dir / "col.npy", ids.unsqueeze(1));
  kiln::data::write_npy(dir / "hot.npy", at::one_hot(ids, 4).to(at::kByte));
  for (const char* name : {"col.npy", "hot.npy"}) {
    INFO(name);
    const auto d = load_data(DataOptions(o).train_targets(dir / name));
    CHECK(d.schema.task == Task::kClassification);
    CHECK(d.schema.outputs == (std::string(name) == "hot.npy" ? 4 : 3));
    CHECK(at::equal(d.train.y, flat.train.y));
    CHECK(at::equal(d.test.y, flat.test.y));
  }
  // Rows that are not one-hot are refused by the file's row; K integer targets each
  // are regression when data.task says so.
  auto two = at::one_hot(ids, 3);
  two[7][0] = 1;
  two[7][1] = 1;
  kiln::data::write_npy(dir / "two.npy", two);
  CHECK_THAT(error_of(DataOptions(o).train_targets(dir / "two.npy")),
             Catch::Contains("two.npy: class labels: expected shape (N), (N, 1) or one-hot rows (N, K), found "
                             "(40, 3) with row 7 not one-hot (1, 1, 0); for 3 regression targets per example set "
                             "data.task = \"regression\""));
  CHECK(load_data(DataOptions(o).train_targets(dir / "two.npy").task("regression")).schema.outputs == 3);
  // A test file's one-hot rows must be as wide as the training file's.
  kiln::data::write_npy(dir / "hot5.npy", at::one_hot(ids, 5));
  CHECK_THAT(error_of(DataOptions(o).train_targets(dir / "hot.npy").test(dir / "x.npy").test_targets(dir / "hot5.npy")),
             Catch::Contains("hot5.npy: class labels: expected one-hot rows of 4 (as ") &&
                 Catch::Contains("hot.npy), found rows of 5"));

  // Float labels 0, 1, 2: regression under auto, with a warning; classes when told.
  const kiln::test::CapturedWarnings captured;
  const auto& warnings = captured.messages();
  kiln::data::write_npy(dir / "f.npy", ids.to(at::kFloat));
  const auto reg = load_data(DataOptions(o).train_targets(dir / "f.npy"));
  const auto cls = load_data(DataOptions(o).train_targets(dir / "f.npy").task("classification"));
  kiln::data::write_npy(dir / "real.npy", at::randn({40}));  // real values: no warning
  load_data(DataOptions(o).train_targets(dir / "real.npy"));
  CHECK(reg.schema.task == Task::kRegression);
  CHECK(cls.schema.task == Task::kClassification);
  CHECK(at::equal(cls.train.y, flat.train.y));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("f.npy: the targets are Float and take only 3 whole values (0, 1, 2): "
                                          "trained as regression") &&
                              Catch::Contains("set data.task = \"classification\""));
}

TEST_CASE("NumPy arrays: mismatched counts, class ids outside the classes and missing targets are refused",
          "[data][dataset][npy]") {
  kiln::test::TempDir dir;
  kiln::data::write_npy(dir / "x.npy", at::randn({10, 3}));
  kiln::data::write_npy(dir / "y9.npy", at::zeros({9}, at::kLong));
  kiln::data::write_npy(dir / "y.npy", at::arange(10, at::kLong) % 3);
  kiln::data::write_npy(dir / "ybad.npy", at::full({10}, 5, at::kLong));
  const auto x = dir / "x.npy";
  CHECK_THAT(error_of(DataOptions().train(x)),
             Catch::Contains("data.train_targets: expected the targets' .npy file"));
  CHECK_THAT(error_of(DataOptions().train(x).train_targets(dir / "y9.npy")),
             Catch::Contains("y9.npy: has 9 targets but ") && Catch::Contains("x.npy has 10 examples"));
  CHECK_THAT(error_of(DataOptions().train(x).train_targets(dir / "y.npy").test(x).test_targets(dir / "ybad.npy")),
             Catch::Contains("ybad.npy: index 0: expected a class id in 0..2, found 5"));
  CHECK_THAT(error_of(DataOptions().train(dir / "x.bin")),
             Catch::Contains("data.format: \"auto\" cannot tell the format of data.train"));
}

TEST_CASE("NumPy arrays: string labels are classes named by themselves, sorted", "[data][dataset][npy]") {
  kiln::test::TempDir dir;
  torch::manual_seed(8);
  kiln::data::write_npy(dir / "x.npy", at::randn({30, 4}));
  const std::vector<std::u32string> species = {U"setosa", U"versicolor", U"virginica"};
  std::vector<std::u32string> labels;
  for (int i = 0; i < 30; ++i) labels.push_back(species[(i * 7) % 3]);
  const auto o = DataOptions().train(dir / "x.npy").test_fraction(0.2);
  const auto d = load_data(DataOptions(o).train_targets(write_strings(dir, "u.npy", labels, true)));
  REQUIRE(d.schema.task == Task::kClassification);
  REQUIRE(d.schema.outputs == 3);
  REQUIRE(d.schema.classes == std::vector<std::string>{"setosa", "versicolor", "virginica"});
  // The ids are the labels' places in that order: the same as integer labels would give.
  std::vector<int64_t> ids;
  for (int i = 0; i < 30; ++i) ids.push_back((i * 7) % 3);
  kiln::data::write_npy(dir / "ids.npy", at::tensor(ids));
  const auto by_id = load_data(DataOptions(o).train_targets(dir / "ids.npy"));
  REQUIRE(at::equal(d.train.y, by_id.train.y));
  REQUIRE(at::equal(d.test.y, by_id.test.y));
  // Bytes ('|S'), a (N, 1) column, and the run's data.json given back: the same.
  for (const auto& path : {write_strings(dir, "s.npy", labels, false), write_strings(dir, "col.npy", labels, true, true)}) {
    INFO(path);
    const auto e = load_data(DataOptions(o).train_targets(path));
    CHECK(e.schema.classes == d.schema.classes);
    CHECK(at::equal(e.train.y, d.train.y));
  }
  const auto resumed = load_data(DataOptions(o).train_targets(dir / "u.npy"), &d.schema);
  CHECK(at::equal(resumed.train.y, d.train.y));
  // A test file of its own maps through the training file's classes; a label it lacks is named.
  const auto t = load_data(DataOptions(o).train_targets(dir / "u.npy").test(dir / "x.npy")
                               .test_targets(write_strings(dir, "t.npy", std::vector<std::u32string>(30, U"setosa"), true)));
  CHECK(t.test.y.eq(0).all().item<bool>());
  std::vector<std::u32string> test_labels(30, U"setosa");
  test_labels[4] = U"arctica";
  CHECK(error_of(DataOptions(o).train_targets(dir / "u.npy").test(dir / "x.npy")
                     .test_targets(write_strings(dir, "bad.npy", test_labels, true))) ==
        dir / "bad.npy" + ": index 4: class label \"arctica\" is none of the 3 classes of " + dir / "u.npy" +
            " (setosa, versicolor, virginica)");
  // Non-ASCII: UCS-4 as it is, bytes above 0x7F as Latin-1; both are UTF-8 "café".
  std::vector<std::u32string> cafe(30, U"caf\u00e9");
  for (size_t i = 0; i < cafe.size(); i += 2) cafe[i] = U"bar";  // two classes: one is none
  CHECK(load_data(DataOptions(o).train_targets(write_strings(dir, "cu.npy", cafe, true))).schema.classes ==
        std::vector<std::string>{"bar", "caf\xc3\xa9"});
  CHECK(load_data(DataOptions(o).train_targets(write_strings(dir, "cs.npy", cafe, false))).schema.classes ==
        std::vector<std::string>{"bar", "caf\xc3\xa9"});
  // Strings are no regression targets, no inputs; numbers beside strings are refused.
  CHECK_THAT(error_of(DataOptions(o).train_targets(dir / "u.npy").task("regression")),
             Catch::Contains("u.npy: expected numbers as regression targets (data.task = \"regression\"), found strings"));
  CHECK_THAT(error_of(DataOptions().train(dir / "u.npy").train_targets(dir / "ids.npy")),
             Catch::Contains("u.npy: expected numbers as inputs, found strings"));
  CHECK_THAT(error_of(DataOptions(o).train_targets(dir / "u.npy").test(dir / "x.npy").test_targets(dir / "ids.npy")),
             Catch::Contains("ids.npy: expected class labels as strings (as ") && Catch::Contains("found numbers"));
  std::vector<std::u32string> surrogate(30, U"a");
  surrogate[2] = std::u32string(1, static_cast<char32_t>(0xd800));
  CHECK_THAT(error_of(DataOptions(o).train_targets(write_strings(dir, "sur.npy", surrogate, true))),
             Catch::Contains("sur.npy: index 2: class label holds a UTF-16 surrogate (55296), not a character"));
}

TEST_CASE("text: windows of block_size tokens, the next one the label, the tail the test set",
          "[data][dataset][text]") {
  kiln::test::TempDir dir;
  const auto path = write(dir, "t.txt", "abcdefghijklmnopqrstuvwxyz0123456789");  // 36 characters
  const auto d = load_data(DataOptions().format("text").train(path).block_size(4).test_fraction(0.25));
  REQUIRE(d.schema.format == "text");
  REQUIRE(d.schema.outputs == 36);
  REQUIRE(d.schema.input_shape == std::vector<int64_t>{4});
  REQUIRE(kiln::data::model_input_size(d.schema) == 4 * 36);
  // 27 training characters give 23 windows; the last 9 (test) give 5.
  REQUIRE(d.train.size() == 23);
  REQUIRE(d.test.size() == 5);
  const auto id = [&](char c) {
    const auto& cls = d.schema.classes;
    return static_cast<int64_t>(std::find(cls.begin(), cls.end(), std::string(1, c)) - cls.begin());
  };
  CHECK(d.train.x[1][0].item<int64_t>() == id('b'));
  CHECK(d.train.y[1].item<int64_t>() == id('f'));
  CHECK(d.test.x[0][0].item<int64_t>() == id('1'));  // the test text starts at character 27
  const auto one_hot = kiln::data::model_inputs(d.train.x.narrow(0, 0, 2), d.schema);
  REQUIRE(one_hot.sizes() == at::IntArrayRef{2, 4 * 36});
  REQUIRE(one_hot.sum().item<float>() == 8.0f);
  CHECK_THAT(error_of(DataOptions().format("text").train(path).block_size(30).test_fraction(0.25)),
             Catch::Contains("t.txt: expected at least data.block_size + 1 = 31 tokens, found 27"));
  CHECK_THAT(error_of(DataOptions().format("text").train(path).block_size(12).test_fraction(0.25)),
             Catch::Contains("t.txt (its last 0.25 held out for testing): expected at least "
                             "data.block_size + 1 = 13 tokens, found 9"));
  // A test file with a character the run's vocabulary lacks is named.
  const auto saved = d.schema;
  const auto other = write(dir, "o.txt", "abc!defghijk");
  CHECK_THAT(error_of(DataOptions().format("text").train(path).test(other).block_size(4), &saved),
             Catch::Contains("U+0021"));
}

TEST_CASE("text: a byte vocabulary reads any bytes; a character one says how to read what is not UTF-8",
          "[data][dataset][text]") {
  kiln::test::TempDir dir;
  std::string bytes;
  for (int i = 0; i < 600; ++i) bytes += static_cast<char>((i * 37) % 256);  // every byte value
  std::filesystem::create_directories(dir / "corpus");
  write(dir, "corpus/a.txt", "plain text, as UTF-8 wants it\n");
  const auto bin = write(dir, "corpus/b.bin", bytes);
  const auto o = DataOptions().format("text").train(dir / "corpus").block_size(8).vocabulary("byte");
  const auto d = load_data(o);
  REQUIRE(d.schema.outputs == 256);
  // The schema is JSON (data.json, a checkpoint's, the metrics' class names): bytes
  // above 0x7F are named by value, the rest by their text. It used to throw json's
  // "invalid UTF-8 byte" here, so no byte-vocabulary run could start.
  CHECK(d.schema.classes[0x41] == "A");
  CHECK(d.schema.classes[0x80] == "\\x80");
  CHECK(d.schema.classes[0xFF] == "\\xFF");
  const auto j = d.schema.to_json();
  CHECK_NOTHROW(j.dump());
  // A resume reads the files as the run's data.json says: bytes.
  CHECK(load_data(DataOptions(o).vocabulary("char"), &d.schema).train.size() == d.train.size());

  // Characters: the file that is not UTF-8, and three ways out.
  CHECK_THAT(error_of(DataOptions(o).vocabulary("char")),
             Catch::Contains("b.bin: invalid UTF-8 at byte") &&
                 Catch::Contains("leave it out of the folder with data.exclude = [\"b.bin\"]") &&
                 Catch::Contains("iconv -f latin1 -t utf-8") && Catch::Contains("data.vocabulary = \"byte\""));
  CHECK_THAT(error_of(DataOptions(o).train(bin).vocabulary("char")),
             Catch::Contains("b.bin: invalid UTF-8") && !Catch::Contains("data.exclude"));
  CHECK(load_data(DataOptions(o).vocabulary("char").exclude({"*.bin"}).block_size(2)).schema.outputs < 256);
}
