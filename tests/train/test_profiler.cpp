// The profiler window of a run (train/profiler.h): profile.steps parsing, the trace
// (read back by Python's json as Chrome's trace format, with kiln's ops, the loop's
// phases and the steps as scopes), top_ops.txt, a window the run leaves early, and
// no profile at all when it is off or lies after the run.
#include <filesystem>
#include <fstream>
#include <set>

#include "run_files.h"
#include "support.h"
#include "train/profiler.h"
#include "util/block_cache.h"

namespace fs = std::filesystem;
using kiln::train::parse_profile_steps;

namespace {

// RUN/profile/trace.json, parsed.
nlohmann::json read_trace(const std::string& run) {
  std::ifstream in(run + "/profile/trace.json");
  return nlohmann::json::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("profile.steps: A:B, A or empty; anything else names the key", "[train][profile]") {
  auto o = parse_profile_steps("101:110", "profile.steps");
  REQUIRE(o.first() == 101);
  REQUIRE(o.last() == 110);
  o = parse_profile_steps("7", "profile.steps");
  REQUIRE((o.first() == 7 && o.last() == 7));
  REQUIRE(parse_profile_steps("", "profile.steps").first() == 0);
  for (const char* bad : {"0:3", "5:3", "a:b", "3:", ":3", "-1:2", "1:2:3", "1.5:3", " 1:3"}) {
    INFO(bad);
    REQUIRE_THAT(kiln::test::input_error_of([&] { parse_profile_steps(bad, "profile.steps"); }),
                 Catch::Contains("profile.steps: expected steps") && Catch::Contains(bad));
  }
}

TEST_CASE("a profiled window writes a Chrome trace with kiln's ops, the phases and the steps, and top_ops.txt",
          "[train][profile]") {
  kiln::test::TempDir dir;
  const std::string run = dir / "run";
  REQUIRE(kiln::test::train("configs/tiny.toml", run,
                            {"data.train_limit=640", "train.threads=1", "profile.steps=\"3:5\""}) == 0);
  const auto trace = read_trace(run);
  REQUIRE(trace.contains("traceEvents"));
  std::set<std::string> ops, scopes;
  int64_t memory_events = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string cat = e.value("cat", "");
    const std::string name = e.value("name", "");
    if (cat == "cpu_op") ops.insert(name);
    if (cat == "user_annotation") scopes.insert(name);
    if (name == "[memory]") ++memory_events;
  }
  for (const char* op : {"kiln::linear", "kiln::linear_relu", "kiln::relu_backward", "kiln::cross_entropy_forward",
                         "kiln::fused_adamw_", "kiln::grad_norm"}) {
    INFO(op);
    REQUIRE(ops.count(op));
  }
  for (const char* scope : {"data", "forward", "backward", "clip", "optimizer", "ProfilerStep#3",
                            "ProfilerStep#4", "ProfilerStep#5"}) {
    INFO(scope);
    REQUIRE(scopes.count(scope));
  }
  REQUIRE_FALSE(scopes.count("ProfilerStep#2"));
  REQUIRE_FALSE(scopes.count("ProfilerStep#6"));
  REQUIRE(memory_events > 0);

  const auto table = read_text(run + "/profile/top_ops.txt");
  REQUIRE_THAT(table, Catch::Contains("kiln profile: steps 3..5 on cpu"));
  REQUIRE_THAT(table, Catch::Contains("profiled steps took"));
  REQUIRE_THAT(table, Catch::Contains("unprofiled steps before them"));  // step 2 ran unprofiled
  REQUIRE_THAT(table, Catch::Contains("Top operators by self CPU time"));
  REQUIRE_THAT(table, Catch::Contains("Top operators by self allocated memory"));
  REQUIRE_THAT(table, Catch::Contains("[128, 784]") || Catch::Contains("[64, 784]"));  // input shapes
  // train.log, not the console, holds what Kineto printed.
  REQUIRE_THAT(read_text(run + "/train.log"), Catch::Contains("profiler: steps 3..5 written to"));
}

TEST_CASE("Python's json reads the trace as Chrome's trace event format", "[train][profile][interop]") {
  const auto py = kiln::test::python_or_skip("json");
  if (!py) return;
  kiln::test::TempDir dir;
  const std::string run = dir / "run";
  REQUIRE(kiln::test::train("configs/tiny.toml", run,
                            {"data.train_limit=320", "train.threads=1", "profile.steps=\"2:3\""}) == 0);
  std::ofstream(dir / "check.py") << R"(import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
complete = [e for e in events if e.get("ph") == "X"]
assert complete, "no complete events"
for e in complete:
    assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)), e
    assert "pid" in e and "tid" in e and e["name"], e
names = {e["name"] for e in complete}
assert "kiln::linear" in names and "forward" in names, sorted(names)[:20]
steps = sorted(e["name"] for e in complete if e["name"].startswith("ProfilerStep#"))
assert steps == ["ProfilerStep#2", "ProfilerStep#3"], steps
print("ok", len(events))
)";
  const std::string cmd = *py + " " + (dir / "check.py") + " " + run + "/profile/trace.json";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

TEST_CASE("a window the run ends inside is written at the end; none when off or after the run",
          "[train][profile]") {
  kiln::test::TempDir dir;
  // tiny: 10 steps of 64 on 640 examples; the window 8:50 ends with the run.
  REQUIRE(kiln::test::train("configs/tiny.toml", dir / "late",
                            {"data.train_limit=640", "train.threads=1", "profile.steps=\"8:50\""}) == 0);
  REQUIRE_THAT(read_text(dir / "late/profile/top_ops.txt"), Catch::Contains("steps 8..10"));
  REQUIRE(fs::exists(dir / "late/profile/trace.json"));
  REQUIRE_FALSE(fs::exists(dir / "late/profile/trace.partial.json"));
  // Stopped by max_steps inside the window, too.
  REQUIRE(kiln::test::train("configs/tiny.toml", dir / "stopped",
                            {"data.train_limit=640", "train.threads=1", "profile.steps=\"4:9\"",
                             "train.max_steps=6"}) == 0);
  REQUIRE_THAT(read_text(dir / "stopped/profile/top_ops.txt"), Catch::Contains("steps 4..6"));
  REQUIRE(kiln::test::train("configs/tiny.toml", dir / "off", {"data.train_limit=640", "train.threads=1"}) == 0);
  REQUIRE_FALSE(fs::exists(dir / "off/profile"));
  // A window after the run's last step (a config's window in a short run) profiles nothing.
  REQUIRE(kiln::test::train("configs/tiny.toml", dir / "after",
                            {"data.train_limit=640", "train.threads=1", "profile.steps=\"11:12\""}) == 0);
  REQUIRE_FALSE(fs::exists(dir / "after/profile"));
  REQUIRE_THAT(read_text(dir / "after/train.log"),
               Catch::Contains("profile.steps 11:12 lies after the run's 10 steps: nothing is profiled"));
}

TEST_CASE("a profiled window has kiln's block cache serve blocks from 128 KiB, and restores the bound after",
          "[train][profile]") {
  // util/block_cache.h: the profiler's records would split the step's freed blocks
  // below 2 MiB and its outputs fault in fresh pages every profiled step.
  using kiln::heap::cached_blocks_from;
  kiln::test::TempDir dir;
  const auto options = kiln::train::ProfileOptions().first(2).last(3).memory(false);
  REQUIRE(cached_blocks_from() == kiln::heap::kMinBlock);
  {
    kiln::train::StepProfiler profiler(options, dir / "profile", at::kCPU);
    profiler.begin_step(1);
    CHECK(cached_blocks_from() == kiln::heap::kMinBlock);
    profiler.end_step(1);
    profiler.begin_step(2);
    REQUIRE(profiler.recording());
    CHECK(cached_blocks_from() == kiln::heap::kProfiledMinBlock);
    profiler.end_step(2);
    profiler.begin_step(3);
    CHECK(cached_blocks_from() == kiln::heap::kProfiledMinBlock);
    REQUIRE(profiler.end_step(3).has_value());  // the window's end
    CHECK(cached_blocks_from() == kiln::heap::kMinBlock);
  }
  {  // a run that throws inside the window: the profiler's destructor restores it
    kiln::train::StepProfiler profiler(options, dir / "profile2", at::kCPU);
    profiler.begin_step(2);
    REQUIRE(profiler.recording());
    CHECK(cached_blocks_from() == kiln::heap::kProfiledMinBlock);
  }
  CHECK(cached_blocks_from() == kiln::heap::kMinBlock);
}
