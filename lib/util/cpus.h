// The CPUs this process may use, and the thread count that train.threads = 0 (and
// kiln sample --threads 0) gives ATen: its own default, capped by the CPUs this
// process may run on and by a container's CPU quota, which ATen does not read (in a
// container limited to 2 CPUs on a 64-core host it would start 64 threads, each
// waiting its turn at every parallel region).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kiln::util {

/// A cgroup CPU quota as CPUs, rounded up: v2's cpu.max ("200000 100000" → 2; "max …"
/// → none) or v1's cpu.cfs_quota_us over cpu.cfs_period_us (−1 → none). Example:
/// cgroup_cpu_limit("/sys/fs/cgroup") == 2
std::optional<int> cgroup_cpu_limit(const std::string& cgroup_root);

/// The CPUs this process may use: its affinity mask's count, capped by the quota of
/// the cgroup it runs in (both v1 and v2 mounts under /sys/fs/cgroup); at least 1.
int usable_cpus();

/// Sets ATen's intra-op threads to `threads` when > 0; for 0, to ATen's default capped
/// by usable_cpus() (OMP_NUM_THREADS, when set, is the user's choice and kept). Returns
/// the count set. Example: kiln::util::set_threads(config.train.threads);
int set_threads(int64_t threads);

}  // namespace kiln::util
