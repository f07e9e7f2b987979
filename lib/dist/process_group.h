// Data-parallel training's processes: the environment torchrun gives each of them,
// and a c10d process group over a TCPStore (Gloo on the CPU) with the collectives the
// trainer needs. The c10d and Gloo headers stay inside process_group.cpp.
#pragma once
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::dist {

/// What torchrun (or a user) sets for each process: RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and TORCHELASTIC_USE_AGENT_STORE
/// (torchrun's agent hosts the store: every rank, rank 0 included, connects to it).
struct Env {
  int64_t rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;
};

/// The process's Env from its environment variables; nullopt when WORLD_SIZE is unset
/// (one process, no group). A variable that is missing or not a number in range
/// throws kiln::InputError naming it, what was expected and what was found.
/// Example: if (auto env = kiln::dist::env_from_environment()) …
std::optional<Env> env_from_environment();

/// A process group of env.world_size processes: Gloo over TCP for CPU tensors, and with
/// `cuda` NCCL for CUDA tensors (each process on its own GPU, cuda:LOCAL_RANK).
/// Collectives wait for their result; a peer that does not answer within `timeout`
/// (it died, it hangs) makes them throw naming the operation.
/// Example: Group g(*env, std::chrono::seconds(60)); g.all_reduce_sum(grads);
class Group {
 public:
  /// Connects to (rank 0 without torchrun's agent: hosts) the TCPStore at
  /// MASTER_ADDR:MASTER_PORT and builds the group. An unreachable store or a port
  /// in use throws kiln::InputError naming the address.
  Group(const Env& env, std::chrono::milliseconds timeout, bool cuda = false);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int64_t rank() const { return env_.rank; }
  int64_t size() const { return env_.world_size; }
  const Env& env() const { return env_; }

  /// Every rank's tensors become rank `root`'s (in place); CPU tensors over Gloo,
  /// CUDA tensors over NCCL.
  void broadcast_(std::vector<at::Tensor>& tensors, int64_t root = 0);
  /// Every rank's tensors become the element-wise sum over the ranks (in place), as broadcast_.
  void all_reduce_sum_(std::vector<at::Tensor>& tensors);
  /// Returns when every rank has called it.
  void barrier();

  /// The c10d::ProcessGroup (for c10d::Reducer), as an opaque pointer: process_group.cpp
  /// and the files that include c10d's headers cast it back.
  void* c10d_process_group() const;

 private:
  struct Impl;
  Env env_;
  std::unique_ptr<Impl> impl_;
};

/// What a process says when a collective failed because a peer is gone (Gloo's
/// "Connection reset by peer", a timeout): its rank, when, which ranks it may be
/// (with two processes, the other one), and the first line of `error`.
/// Example: throw std::runtime_error(lost_peer_message(group, "step 12", e));
std::string lost_peer_message(const Group& group, const std::string& when, const std::exception& error);

}  // namespace kiln::dist
