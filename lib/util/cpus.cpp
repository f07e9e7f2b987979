// usable_cpus() and set_threads(): sched_getaffinity for the CPUs the process may run
// on, the cgroup's CPU quota for how much of them it gets. Written here: neither
// libtorch nor a Debian library reads the cgroup quota (std::thread::hardware_concurrency
// counts the machine's CPUs; ATen's default counts its cores).
#include "util/cpus.h"

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kiln::util {
namespace {

std::optional<std::string> first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// ceil(quota / period) for a positive quota and period, else none.
std::optional<int> cpus_of(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<long long>(1, (quota + period - 1) / period));
}

// The cgroup path of this process for a controller ("" for v2's unified one), from
// /proc/self/cgroup ("0::/user.slice/…" or "4:cpu,cpuacct:/docker/…").
std::optional<std::string> own_cgroup(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (controller.empty() ? controllers.empty()
                           : ("," + controllers + ",").find("," + controller + ",") != std::string::npos)
      return line.substr(b + 1);
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> cgroup_cpu_limit(const std::string& root) {
  if (const auto max = first_line(root + "/cpu.max")) {  // v2: "QUOTA PERIOD" or "max PERIOD"
    std::istringstream s(*max);
    std::string quota;
    long long period = 0;
    if (!(s >> quota >> period) || quota == "max") return std::nullopt;
    return cpus_of(std::atoll(quota.c_str()), period);
  }
  const auto quota = first_line(root + "/cpu.cfs_quota_us");  // v1
  const auto period = first_line(root + "/cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  return cpus_of(std::atoll(quota->c_str()), std::atoll(period->c_str()));
}

int usable_cpus() {
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = 1;
  // The quota of this process's own cgroup and of each above it (a container's limit
  // may sit on a parent), where they are mounted; inside a container the own cgroup is
  // usually the mount's root.
  std::optional<int> limit;
  const auto tighten = [&](std::optional<int> l) {
    if (l && (!limit || *l < *limit)) limit = l;
  };
  for (const auto& [mount, controller] : {std::pair<std::string, std::string>{"/sys/fs/cgroup", ""},
                                          {"/sys/fs/cgroup/cpu,cpuacct", "cpu"},
                                          {"/sys/fs/cgroup/cpu", "cpu"}}) {
    tighten(cgroup_cpu_limit(mount));
    if (auto path = own_cgroup(controller)) {
      for (std::string p = *path; !p.empty() && p != "/"; p = p.substr(0, p.rfind('/')))
        tighten(cgroup_cpu_limit(mount + p));
    }
  }
  return limit ? std::min(cpus, *limit) : cpus;
}

int set_threads(int64_t threads) {
  if (threads > 0) {
    at::set_num_threads(static_cast<int>(threads));
  } else {
    const int fallback = at::intraop_default_num_threads();  // OMP_NUM_THREADS when set
    const char* env = std::getenv("OMP_NUM_THREADS");
    at::set_num_threads(env && *env ? fallback : std::min(fallback, usable_cpus()));
  }
  return at::get_num_threads();
}

}  // namespace kiln::util
