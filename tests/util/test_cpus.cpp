// util/cpus.h: a cgroup's CPU quota read from v2's cpu.max and v1's cfs files (in
// directories made here), the usable CPUs within the affinity mask, and the threads
// set_threads gives ATen.
#include <ATen/Parallel.h>
#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "support.h"
#include "util/cpus.h"
#include "util/files.h"

namespace {

std::optional<int> limit_of(const kiln::test::TempDir& dir, const std::string& name,
                            std::vector<std::pair<std::string, std::string>> files) {
  const std::string root = dir / name;
  std::filesystem::create_directories(root);
  for (const auto& [file, text] : files) kiln::files::write_synced(root + "/" + file, text);
  return kiln::util::cgroup_cpu_limit(root);
}

}  // namespace

TEST_CASE("a cgroup's CPU quota is read from cgroup v2 and v1 files, rounded up", "[util][cpus]") {
  kiln::test::TempDir dir;
  CHECK(limit_of(dir, "v2_two", {{"cpu.max", "200000 100000\n"}}) == 2);
  CHECK(limit_of(dir, "v2_one_and_a_half", {{"cpu.max", "150000 100000\n"}}) == 2);
  CHECK(limit_of(dir, "v2_small", {{"cpu.max", "10000 100000\n"}}) == 1);
  CHECK(limit_of(dir, "v2_max", {{"cpu.max", "max 100000\n"}}) == std::nullopt);
  CHECK(limit_of(dir, "v2_garbled", {{"cpu.max", "lots\n"}}) == std::nullopt);
  CHECK(limit_of(dir, "v1_four", {{"cpu.cfs_quota_us", "400000\n"}, {"cpu.cfs_period_us", "100000\n"}}) == 4);
  CHECK(limit_of(dir, "v1_none", {{"cpu.cfs_quota_us", "-1\n"}, {"cpu.cfs_period_us", "100000\n"}}) ==
        std::nullopt);
  CHECK(limit_of(dir, "v1_no_period", {{"cpu.cfs_quota_us", "50000\n"}}) == std::nullopt);
  CHECK(limit_of(dir, "empty", {}) == std::nullopt);
}

TEST_CASE("usable CPUs lie within the affinity mask; threads = 0 sets no more", "[util][cpus]") {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const int usable = kiln::util::usable_cpus();
  CHECK(usable >= 1);
  CHECK(usable <= CPU_COUNT(&set));
  CHECK(kiln::util::set_threads(3) == 3);
  CHECK(at::get_num_threads() == 3);
  if (const char* env = std::getenv("OMP_NUM_THREADS"); !env || !*env) {
    const int threads = kiln::util::set_threads(0);
    CHECK(threads >= 1);
    CHECK(threads <= usable);
  }
}
