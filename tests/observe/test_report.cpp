// kiln report: reading a run directory (observe/run_log.h), the page (observe/report.h)
// and the command (app/report_command.h) — points per line for known input, runs
// overlaid, NaN, resumed and long runs, and bad input refused with its file and line.
#include <filesystem>
#include <fstream>

#include "observe/report.h"
#include "observe/report_tables.h"
#include "observe/run_log.h"
#include "observe_support.h"
#include "report_command.h"
#include "run_files.h"
#include "support.h"
#include "util/files.h"

using namespace kiln::observe;
using Catch::Matchers::Contains;
using kiln::test::input_error_of;
using kiln::test::write_file;
namespace fs = std::filesystem;

namespace {

// A run directory of known lines: `train` train lines, `test` test lines, `memory` reports.
std::string make_run(const kiln::test::TempDir& dir, const std::string& name, int train, int test, int memory) {
  const std::string run = dir / name;
  fs::create_directories(run);
  write_file(run + "/metrics.jsonl", kiln::test::metrics_lines(train, test));
  if (memory > 0) write_file(run + "/memory.jsonl", kiln::test::memory_lines(memory));
  write_file(run + "/config.toml", "[optim]\nlr = 0.001  # peak # rate\nname = 'adamw'\n# beta1 = 0.9  # unset\n");
  return run;
}

// The files under `dir` with their sizes and times, for "nothing else was written".
std::string listing(const std::string& dir) {
  std::string s;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    s += e.path().string() + " " + std::to_string(e.is_regular_file() ? e.file_size() : 0) + " " +
         std::to_string(fs::last_write_time(e.path()).time_since_epoch().count()) + "\n";
  return s;
}

}  // namespace

TEST_CASE("read_run gives each key's points by step, one per step, the later line winning", "[observe][report]") {
  kiln::test::TempDir dir;
  fs::create_directories(dir / "r");
  write_file(dir / "r/metrics.jsonl",
             "{\"split\":\"train\",\"step\":20,\"loss\":2.0}\n"
             "{\"split\":\"train\",\"step\":10,\"loss\":3.0}\n"
             "{\"split\":\"train\",\"step\":20,\"loss\":1.5}\n"          // the step again: this one wins
             "{\"split\":\"train\",\"step\":30,\"loss\":null}\n"         // NaN as nlohmann writes it
             "{\"split\":\"train\",\"step\":40,\"loss\":NaN}\n"          // as Python's json writes it
             "\n"
             "{\"split\":\"test\",\"step\":40,\"loss\":1.0,\"accuracy\":0.9,\"per_class_accuracy\":{\"a\":1}}\n"
             "{\"split\":\"val\",\"step\":40,\"loss\":1.0}\n"
             "{\"split\":\"train\",\"step\":50,\"lo");  // cut short: a run still writing
  write_file(dir / "r/memory.jsonl", "{\"step\":10,\"rss_bytes\":100,\"activation_peak_bytes\":null,"
                                     "\"cuda\":{\"allocated_bytes\":7,\"device\":0}}\n");
  const auto run = read_run(dir / "r/");
  REQUIRE(run.name == "r");
  const auto& loss = run.train.values.at("loss");
  REQUIRE(loss.size() == 2);
  REQUIRE(loss[0].x == 10);
  REQUIRE(loss[0].y == 3.0);
  REQUIRE(loss[1].x == 20);
  REQUIRE(loss[1].y == 1.5);
  REQUIRE(run.train.non_finite.at("loss") == std::vector<int64_t>{30, 40});
  REQUIRE(run.train.repeated_steps == 1);  // step 10 after step 20
  REQUIRE(run.test.values.at("accuracy").size() == 1);
  REQUIRE(!run.test.has("per_class_accuracy"));  // nested: kept in the last test line only
  REQUIRE(run.last_test.at("per_class_accuracy").at("a") == 1);
  REQUIRE(run.other_splits.at("val") == 1);
  REQUIRE(run.warnings.size() == 1);
  REQUIRE_THAT(run.warnings[0], Contains("metrics.jsonl:9: skipped the last line: it is cut short"));
  REQUIRE(run.memory.values.at("cuda.allocated_bytes").at(0).y == 7);
  REQUIRE(!run.memory.has("activation_peak_bytes"));  // null there means "not measured"
  REQUIRE(run.memory.non_finite.empty());
  REQUIRE(run.config_toml.empty());
}

TEST_CASE("read_run refuses bad input naming the file, the line, what it expected and found", "[observe][report]") {
  kiln::test::TempDir dir;
  REQUIRE_THAT(input_error_of([&] { read_run(dir / "none"); }),
               Contains("none: expected a run directory (with metrics.jsonl), found nothing there"));
  write_file(dir / "file", "x");
  REQUIRE_THAT(input_error_of([&] { read_run(dir / "file"); }), Contains("file: expected a run directory"));
  fs::create_directories(dir / "runs/a");
  write_file(dir / "runs/a/metrics.jsonl", "");
  REQUIRE_THAT(input_error_of([&] { read_run(dir / "runs"); }),
               Contains("runs: expected a run directory (with metrics.jsonl, as kiln train writes), found "
                        "a directory of runs (" + dir / "runs/a" + "): give those"));
  fs::create_directories(dir / "r");
  const auto error_for = [&](const std::string& text) {
    write_file(dir / "r/metrics.jsonl", text);
    return input_error_of([&] { read_run(dir / "r"); });
  };
  const std::string ok = "{\"split\":\"train\",\"step\":1,\"loss\":1}\n";
  // A line cut short in the middle is an error, not a warning: only the last may be.
  REQUIRE_THAT(error_for(ok + "{\"split\":\"train\",\"st\n" + ok),
               Contains("r/metrics.jsonl:2: expected a JSON object, found '{\"split\":\"train\",\"st' (parse error"));
  // A whole last line (with its newline) that is not JSON is an error too.
  REQUIRE_THAT(error_for(ok + "garbage\n"), Contains("metrics.jsonl:2: expected a JSON object, found 'garbage'"));
  REQUIRE_THAT(error_for(ok + "[1,2]\n"), Contains("metrics.jsonl:2: expected a JSON object, found a JSON array"));
  REQUIRE_THAT(error_for("{\"split\":\"train\",\"loss\":1}\n"),
               Contains("metrics.jsonl:1: expected a \"step\" (a whole number >= 0), found none"));
  REQUIRE_THAT(error_for("{\"split\":\"train\",\"step\":\"7\"}\n"),
               Contains("metrics.jsonl:1: expected \"step\" to be a whole number >= 0, found \"7\""));
  REQUIRE_THAT(error_for("{\"split\":\"train\",\"step\":-1}\n"), Contains("found -1"));
  REQUIRE_THAT(error_for("{\"step\":3}\n"),
               Contains("metrics.jsonl:1: expected \"split\": \"train\" or \"test\", found none"));
  write_file(dir / "r/metrics.jsonl", ok);
  write_file(dir / "r/memory.jsonl", "{\"rss_bytes\":1}\n");
  REQUIRE_THAT(input_error_of([&] { read_run(dir / "r"); }),
               Contains("r/memory.jsonl:1: expected a \"step\" (a whole number >= 0), found none"));
}

TEST_CASE("a report overlays runs: each chart has a line per run with one point per step", "[observe][report]") {
  kiln::test::TempDir dir;
  const auto a = read_run(make_run(dir, "a", 60, 6, 5));
  const auto b = read_run(make_run(dir, "b", 40, 4, 0));
  const std::string html = render_report({a, b});
  const auto charts = kiln::test::charts(html);
  // loss, test accuracy, lr, grad norm, samples/s; memory: process, model, activations (a only).
  REQUIRE(charts.size() == 8);
  REQUIRE_THAT(charts[0], Contains("<title>loss</title>"));
  const auto loss = kiln::test::polylines(charts[0]);
  REQUIRE(loss.size() == 4);  // a train, a test, b train, b test
  REQUIRE((loss[0].colour == 0 && loss[0].dash == 0 && loss[0].points == 60));
  REQUIRE((loss[1].colour == 0 && loss[1].dash == 1 && loss[1].points == 6));
  REQUIRE((loss[2].colour == 1 && loss[2].dash == 0 && loss[2].points == 40));
  REQUIRE((loss[3].colour == 1 && loss[3].dash == 1 && loss[3].points == 4));
  REQUIRE_THAT(charts[1], Contains("test accuracy"));
  const auto accuracy = kiln::test::polylines(charts[1]);
  REQUIRE(accuracy.size() == 2);
  REQUIRE(accuracy[0].points == 6);
  REQUIRE(accuracy[1].points == 4);
  REQUIRE_THAT(charts[5], Contains("memory: process"));
  const auto process = kiln::test::polylines(charts[5]);
  REQUIRE(process.size() == 3);  // run a's resident, peak, heap; b has no memory.jsonl
  for (const auto& p : process) REQUIRE((p.colour == 0 && p.points == 5));
  REQUIRE_THAT(html, Contains("b: no memory.jsonl"));
  REQUIRE(html.find("one memory report") == std::string::npos);  // a has five
  REQUIRE(html.find("<title>loss scale") == std::string::npos);  // no run scaled its loss: no such chart
  REQUIRE(html.find("holds no loss scale") == std::string::npos);  // nor skipped a step: no note
  // The final metrics: each run's last test line (a: step 600, 74.00 %; b: step 400, 66.00 %).
  REQUIRE_THAT(html, Contains("<td>600</td><td>1</td>"));
  REQUIRE_THAT(html, Contains("<td>74.00 %</td>"));
  REQUIRE_THAT(html, Contains("<td>66.00 %</td>"));
}

TEST_CASE("a report draws what a run has: no test lines yet, NaN skipped, a long line downsampled",
          "[observe][report]") {
  kiln::test::TempDir dir;
  fs::create_directories(dir / "long");
  std::string lines;
  for (int step = 1; step <= 5000; ++step)
    lines += "{\"split\":\"train\",\"step\":" + std::to_string(step) + ",\"loss\":" +
             (step % 1000 == 0 ? std::string("null") : std::to_string(1.0 + (step % 17) * 0.01)) +
             ",\"lr\":0.1,\"grad_norm\":0,\"skipped_steps\":" + std::to_string(step / 2500) + "}\n";
  write_file(dir / "long/metrics.jsonl", lines);
  write_file(dir / "long/memory.jsonl", kiln::test::memory_lines(1));
  const std::string html = render_report({read_run(dir / "long")});
  REQUIRE_THAT(html, Contains("long: no test lines yet (no evaluation has run)"));
  REQUIRE_THAT(html, Contains("No test lines yet"));
  REQUIRE_THAT(html, Contains("long: loss (train): 5 values were NaN or infinite, not drawn (step 1000, 2000, 3000, 4000, 5000)"));
  REQUIRE_THAT(html, Contains("long: loss (train): 4995 points drawn as 2000"));
  const auto charts = kiln::test::charts(html);
  const auto loss = kiln::test::polylines(charts.at(0));
  REQUIRE(loss.size() == 1);
  REQUIRE(loss[0].points <= 2000);
  REQUIRE(loss[0].points >= 1990);
  // A gradient norm of 0 cannot be drawn on a log axis: linear, and the chart says so.
  bool grad_norm = false, skipped = false;
  for (const auto& c : charts) {
    if (c.find("<title>gradient norm") != std::string::npos) {
      grad_norm = true;
      REQUIRE_THAT(c, Contains("linear scale: a value is ≤ 0"));
    }
    skipped |= c.find("<title>steps skipped") != std::string::npos;
  }
  REQUIRE(grad_norm);
  REQUIRE(skipped);  // skipped_steps rose above 0: drawn
  REQUIRE_THAT(html, Contains("metrics.jsonl holds no loss scale (a run from before kiln logged it): the count of skipped steps is drawn alone"));
  REQUIRE_THAT(html, Contains("long: one memory report, at the end"));
  REQUIRE_THAT(html, Contains("long: no config.toml"));
}

TEST_CASE("a CUDA run's memory reports get a chart of the allocator's figures", "[observe][report]") {
  kiln::test::TempDir dir;
  fs::create_directories(dir / "gpu");
  write_file(dir / "gpu/metrics.jsonl", kiln::test::metrics_lines(10, 1));
  std::string memory;
  for (int step = 50; step <= 100; step += 50)
    memory += "{\"step\":" + std::to_string(step) + ",\"rss_bytes\":1048576,\"activation_peak_bytes\":null,"
              "\"cuda\":{\"device\":0,\"allocated_bytes\":2097152,\"reserved_bytes\":4194304,"
              "\"peak_allocated_bytes\":3145728,\"peak_reserved_bytes\":4194304,\"alloc_retries\":0,"
              "\"ooms\":0,\"total_bytes\":150000000000}}\n";
  write_file(dir / "gpu/memory.jsonl", memory);
  const auto charts = kiln::test::charts(render_report({read_run(dir / "gpu")}));
  const auto cuda = std::find_if(charts.begin(), charts.end(),
                                 [](const std::string& c) { return c.find("<title>memory: CUDA") != std::string::npos; });
  REQUIRE(cuda != charts.end());
  const auto lines = kiln::test::polylines(*cuda);
  REQUIRE(lines.size() == 4);  // allocated, reserved and their peaks; not the device's total
  for (const auto& l : lines) REQUIRE(l.points == 2);
  REQUIRE_THAT(*cuda, Contains(">peak reserved</text>"));
  for (const auto& c : charts) REQUIRE(c.find("activations") == std::string::npos);  // null: not measured
}

TEST_CASE("a run that has written nothing yet gives a page that says so", "[observe][report]") {
  kiln::test::TempDir dir;
  fs::create_directories(dir / "new");
  write_file(dir / "new/metrics.jsonl", "");
  const std::string html = render_report({read_run(dir / "new")});
  const auto charts = kiln::test::charts(html);
  REQUIRE(charts.size() == 1);  // the loss chart, empty
  REQUIRE_THAT(charts[0], Contains("no data"));
  REQUIRE_THAT(html, Contains("new: no test lines yet"));
}

TEST_CASE("a run without train lines draws its train loss from the test lines, and says so", "[observe][report]") {
  kiln::test::TempDir dir;
  fs::create_directories(dir / "r");
  write_file(dir / "r/metrics.jsonl", "{\"split\":\"test\",\"step\":32,\"loss\":1.1,\"accuracy\":0.6,\"train_loss\":1.3}\n"
                                      "{\"split\":\"test\",\"step\":64,\"loss\":0.9,\"accuracy\":0.7,\"train_loss\":1.0}\n");
  const std::string html = render_report({read_run(dir / "r")});
  const auto loss = kiln::test::polylines(kiln::test::charts(html).at(0));
  REQUIRE(loss.size() == 2);
  REQUIRE((loss[0].dash == 0 && loss[0].points == 2));
  REQUIRE_THAT(html, Contains("r: no train lines (train.log_every is longer than the run?)"));
}

TEST_CASE("the page fetches nothing and runs nothing", "[observe][report]") {
  kiln::test::TempDir dir;
  const std::string html = render_report({read_run(make_run(dir, "a", 20, 2, 2))});
  for (const char* s : {"<script", "<link", "src=", "href=", "url(", "@import", "<iframe", "<img"}) {
    INFO(s);
    REQUIRE(html.find(s) == std::string::npos);
  }
  // The only address is the SVG namespace, a name that nothing fetches.
  size_t addresses = 0, namespaces = 0;
  for (size_t at = html.find("http"); at != std::string::npos; at = html.find("http", at + 1)) {
    ++addresses;
    namespaces += html.compare(at, 26, "http://www.w3.org/2000/svg") == 0;
  }
  REQUIRE(addresses == namespaces);
  REQUIRE_THAT(html, Contains(kReportMarker));
}

TEST_CASE("config entries and the keys in which runs differ", "[observe][report]") {
  const auto e = config_entries("[train]\nepochs = 2  # passes\n# beta1 = 0.9  # unset\n[data]\n"
                                "exclude = ['*#x', \"a\\\"#\"]  # patterns\n");
  REQUIRE(e.size() == 2);
  REQUIRE(e[0] == std::make_pair(std::string("train.epochs"), std::string("2")));
  REQUIRE(e[1] == std::make_pair(std::string("data.exclude"), std::string("['*#x', \"a\\\"#\"]")));
  kiln::test::TempDir dir;
  auto a = read_run(make_run(dir, "a", 5, 0, 0));
  auto b = read_run(make_run(dir, "b", 5, 0, 0));
  b.config_toml = "[optim]\nlr = 0.003\nname = 'adamw'\n[schedule]\nname = 'cosine'\n";
  const std::string html = render_report({a, b});
  REQUIRE_THAT(html, Contains("<td class=\"text\">optim.lr</td><td class=\"text\">0.001</td><td class=\"text\">0.003</td>"));
  REQUIRE_THAT(html, Contains("<td class=\"text\">schedule.name</td><td class=\"text\"><span class=\"aside\">unset</span></td>"));
  REQUIRE(html.find("<td class=\"text\">optim.name</td>") == std::string::npos);
}

TEST_CASE("two runs of one name are told apart by their directories", "[observe][report]") {
  kiln::test::TempDir dir;
  fs::create_directories(dir / "x");
  fs::create_directories(dir / "y");
  const auto a = read_run(make_run(dir, "x/run", 5, 0, 0));
  const auto b = read_run(make_run(dir, "y/run", 5, 0, 0));
  REQUIRE(run_labels({a, b}) == std::vector<std::string>{dir / "x/run", dir / "y/run"});
}

TEST_CASE("kiln report writes RUN/report.html, or -o, and nothing else", "[observe][report][app]") {
  kiln::test::TempDir dir;
  const std::string a = make_run(dir, "a", 30, 3, 3), b = make_run(dir, "b", 20, 2, 0);
  const std::string before = listing(a);
  REQUIRE(kiln::app::run_report({{a}, ""}) == 0);
  REQUIRE(fs::exists(a + "/report.html"));
  std::string after = listing(a);
  after.erase(after.find(a + "/report.html"), after.find('\n', after.find(a + "/report.html")) + 1 - after.find(a + "/report.html"));
  REQUIRE(after == before);  // only report.html was added
  REQUIRE(kiln::app::run_report({{a}, ""}) == 0);  // an earlier report is replaced
  // Several runs: -o is required, and nothing is written without it.
  REQUIRE_THAT(input_error_of([&] { kiln::app::run_report({{a, b}, ""}); }),
               Contains("-o: expected the file to write the report of 2 runs to, found none"));
  REQUIRE(!fs::exists(b + "/report.html"));
  REQUIRE(kiln::app::run_report({{a, b}, dir / "both.html"}) == 0);
  REQUIRE(kiln::test::charts(kiln::files::read(dir / "both.html")).size() >= 6);
  // A file that is not a report is never replaced.
  write_file(dir / "notes.html", "<p>my notes</p>");
  REQUIRE_THAT(input_error_of([&] { kiln::app::run_report({{a}, dir / "notes.html"}); }),
               Contains("notes.html: -o: already exists and is not a kiln report"));
  REQUIRE(kiln::files::read(dir / "notes.html") == "<p>my notes</p>");
  REQUIRE_THAT(input_error_of([&] { kiln::app::run_report({{a}, dir / "nowhere/r.html"}); }),
               Contains("r.html: -o: expected an existing directory to write into, found no"));
  REQUIRE_THAT(input_error_of([&] { kiln::app::run_report({{a}, dir.path()}); }),
               Contains(": -o: expected a file to write, found a directory"));
  // Unwritable (as root too: /proc takes no new files).
  REQUIRE_THAT(input_error_of([&] { kiln::app::run_report({{a}, "/proc/kiln-report.html"}); }),
               Contains("/proc/kiln-report.html: -o: cannot write the report"));
  // A bad run is refused before anything is written.
  REQUIRE_THAT(input_error_of([&] { kiln::app::run_report({{a, dir / "missing"}, dir / "x.html"}); }),
               Contains("missing: expected a run directory"));
  REQUIRE(!fs::exists(dir / "x.html"));
  REQUIRE_THAT(input_error_of([&] { kiln::app::run_report({{}, ""}); }), Contains("RUN_DIR: expected a run directory, found none"));
}

TEST_CASE("a real tiny run's report has its loss, accuracy, lr, gradient norm, throughput and memory",
          "[observe][report][train]") {
  kiln::test::TempDir dir;
  const std::string run = dir / "run";
  REQUIRE(kiln::test::train("configs/tiny.toml", run, {"train.log_every=2", "memory.report_every=10",
                                                       "train.eval_every=10", "train.threads=1"}) == 0);
  REQUIRE(kiln::app::run_report({{run}, ""}) == 0);
  const std::string html = kiln::files::read(run + "/report.html");
  const auto charts = kiln::test::charts(html);
  std::vector<std::string> titles;
  for (const auto& c : charts) titles.push_back(c.substr(c.find("<title>") + 7, c.find("</title>") - c.find("<title>") - 7));
  std::vector<std::string> expected{"loss", "test accuracy (0..1)", "learning rate",
                                    "gradient norm (before clipping)", "throughput: samples/s",
                                    "memory: process", "memory: model", "memory: activations (step peak)"};
  REQUIRE(titles == expected);
  // One point per line of metrics.jsonl: a train line every 2 steps, a test line every 10 and at the end.
  size_t train = 0, test = 0;
  for (const auto& l : kiln::test::read_metrics(run)) (l["split"] == "train" ? train : test) += 1;
  REQUIRE(test >= 3);
  const auto loss = kiln::test::polylines(charts[0]);
  REQUIRE(loss.size() == 2);
  REQUIRE(loss[0].points == train);
  REQUIRE(loss[1].points == test);
  const auto memory = kiln::test::polylines(charts[5]);
  REQUIRE(memory.size() == 3);
  REQUIRE(memory[0].points == kiln::test::read_json_lines(run + "/memory.jsonl").size());
}

TEST_CASE("an fp16 run's loss scale gets its own chart, one point per train line", "[observe][report]") {
  kiln::test::TempDir dir;
  const std::string run = dir / "fp16";
  REQUIRE(kiln::test::train("configs/tiny.toml", run,
                            {"data.train_limit=640", "train.threads=1", "train.precision=fp16",
                             "train.log_every=2"}) == 0);  // 10 steps: train lines at 2, 4, …, 10
  const std::string html = render_report({read_run(run)});
  bool found = false;
  for (const auto& c : kiln::test::charts(html)) {
    if (c.find("<title>loss scale (fp16)") == std::string::npos) continue;
    found = true;
    const auto lines = kiln::test::polylines(c);
    REQUIRE(lines.size() == 1);
    REQUIRE(lines[0].points == 5);
  }
  REQUIRE(found);
}

TEST_CASE("the per-class table shows the first 1000 classes of a run with more, and says so", "[observe][report]") {
  // A run whose class ids were labels (0 and 1000000) has an output, and an accuracy,
  // for every id between; metrics.jsonl keeps them all.
  kiln::test::TempDir dir;
  fs::create_directories(dir / "many");
  std::string per = "{";
  for (int c = 0; c < 2500; ++c) per += (c ? ",\"" : "\"") + std::to_string(c) + "\":" + (c % 2 ? "0.5" : "null");
  per += "}";
  write_file(dir / "many/metrics.jsonl",
             "{\"split\":\"test\",\"step\":4,\"loss\":1.0,\"accuracy\":0.5,\"per_class_accuracy\":" + per + "}\n");
  const std::string html = render_report({read_run(dir / "many")});
  const auto table = html.substr(html.find("<table class=\"per-class\">"));
  const auto rows = table.substr(0, table.find("</table>"));
  size_t n = 0;
  for (size_t at = rows.find("<tr><td"); at != std::string::npos; at = rows.find("<tr><td", at + 1)) ++n;
  REQUIRE(n == 1000);
  // In the run's numbering (not "0", "1", "10", "100", …), a class without test
  // examples (null) a dash as on the console.
  REQUIRE_THAT(rows, Contains("<tr><td class=\"text\">0</td><td>–</td></tr>\n"
                              "<tr><td class=\"text\">1</td><td>50.00 %</td></tr>\n"
                              "<tr><td class=\"text\">2</td>"));
  REQUIRE_THAT(rows, Contains(">999</td>"));
  REQUIRE_THAT(rows, !Contains(">1000</td>"));
  REQUIRE_THAT(html, Contains("The first 1000 of 2500 classes; every class is in the runs' metrics.jsonl"));
}
