// Group over c10d: a TCPStore (hosted by rank 0, or by torchrun's agent), a PrefixStore
// that keeps kiln's keys apart from the agent's, and ProcessGroupGloo attached to a
// c10d::ProcessGroup as its CPU backend. Gloo's headers are vendored
// (third_party/gloo/ORIGIN.md: why, and why that commit).
#include "dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef KILN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <limits>

#include "util/error.h"
#include "util/stderr_to_log.h"

namespace kiln::dist {
namespace {

// The integer in variable `name`, in [lo, hi]; `fallback` when unset (nullopt: required).
int64_t integer_env(const char* name, std::optional<int64_t> fallback, int64_t lo, int64_t hi) {
  const char* text = std::getenv(name);
  if (!text || !*text) {
    if (fallback) return *fallback;
    throw InputError(std::string("environment: ") + name + ": expected an integer (torchrun sets it), found none");
  }
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno || end == text || *end || v < lo || v > hi)
    throw InputError(std::string("environment: ") + name + ": expected an integer in " + std::to_string(lo) +
                     ".." + std::to_string(hi) + ", found \"" + text + "\"");
  return v;
}

}  // namespace

std::optional<Env> env_from_environment() {
  const char* world = std::getenv("WORLD_SIZE");
  if (!world || !*world) return std::nullopt;
  Env e;
  e.world_size = integer_env("WORLD_SIZE", std::nullopt, 1, 1 << 20);
  e.rank = integer_env("RANK", std::nullopt, 0, e.world_size - 1);
  e.local_world_size = integer_env("LOCAL_WORLD_SIZE", e.world_size, 1, e.world_size);
  e.local_rank = integer_env("LOCAL_RANK", e.rank % e.local_world_size, 0, e.local_world_size - 1);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) e.master_addr = addr;
  else if (e.world_size > 1)
    throw InputError("environment: MASTER_ADDR: expected the address of rank 0's store (torchrun sets it), found none");
  e.master_port = static_cast<int>(integer_env("MASTER_PORT", e.world_size > 1 ? std::nullopt : std::optional<int64_t>(29500), 1, 65535));
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE"))
    e.agent_store = std::string(agent) == "True" || std::string(agent) == "true" || std::string(agent) == "1";
  return e;
}

struct Group::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  c10::intrusive_ptr<c10d::Backend> nccl;  // with cuda
  c10::intrusive_ptr<c10d::ProcessGroup> group;

  c10d::Backend& backend_for(const at::Tensor& t) { return t.is_cuda() && nccl ? *nccl : *gloo; }
};

Group::Group(const Env& env, std::chrono::milliseconds timeout, bool cuda)
    : env_(env), impl_(std::make_unique<Impl>()) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = env.rank == 0 && !env.agent_store;
  o.numWorkers = env.agent_store ? std::nullopt : std::optional<std::size_t>(env.world_size);
  o.waitWorkers = !env.agent_store;
  o.timeout = timeout;
  try {
    // c10d logs each retry with a stack trace on stderr: into the log instead.
    StderrToLog quiet("store " + where + ", stderr: ");
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    impl_->store = c10::make_intrusive<c10d::PrefixStore>("kiln", tcp);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw InputError("MASTER_ADDR:MASTER_PORT " + where + ": " +
                     (o.isServer ? "rank 0 could not host the store there (a port in use?)"
                                 : "rank " + std::to_string(env.rank) + " could not reach the store there") +
                     " within " + std::to_string(timeout.count() / 1000) + " s: " + what.substr(0, what.find('\n')));
  }
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, static_cast<int>(env.rank),
                                                            static_cast<int>(env.world_size), options);
  impl_->group = c10::make_intrusive<c10d::ProcessGroup>(impl_->store, static_cast<int>(env.rank),
                                                         static_cast<int>(env.world_size));
  impl_->group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, impl_->gloo);
  impl_->group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  if (cuda) {
#ifdef KILN_WITH_NCCL
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, static_cast<int>(env.rank),
                                                              static_cast<int>(env.world_size), options);
    impl_->group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, impl_->nccl);
    impl_->group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
#else
    throw InputError("train.device: data-parallel training on CUDA needs NCCL, and this kiln was built "
                     "without it (no nccl.h at configure time: docs/distributed.md)");
#endif
  }
}

Group::~Group() = default;

void Group::broadcast_(std::vector<at::Tensor>& tensors, int64_t root) {
  c10d::BroadcastOptions o;
  o.rootRank = root;
  for (auto& t : tensors) {  // one tensor per call: Gloo's broadcast takes one per device
    std::vector<at::Tensor> one{t};
    impl_->backend_for(t).broadcast(one, o)->wait();
  }
}

void Group::all_reduce_sum_(std::vector<at::Tensor>& tensors) {
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    impl_->backend_for(t).allreduce(one)->wait();
  }
}

void Group::barrier() { impl_->gloo->barrier()->wait(); }

void* Group::c10d_process_group() const { return impl_->group.get(); }

std::string lost_peer_message(const Group& group, const std::string& when, const std::exception& error) {
  std::string first = error.what();
  first = first.substr(0, first.find('\n'));
  // Gloo's own messages start with the source file that raised them: "[…/pair.cc:545] ".
  if (!first.empty() && first[0] == '[' && first.find("] ") != std::string::npos) first = first.substr(first.find("] ") + 2);
  const int64_t r = group.rank(), w = group.size();
  const std::string peers = w == 2 ? "rank " + std::to_string(1 - r) : "one of the other " + std::to_string(w - 1) + " ranks";
  return "data-parallel: rank " + std::to_string(r) + " of " + std::to_string(w) + " lost contact with " + peers +
         " at " + when + " (it died, or hung past dist.timeout_s); its own output says why: " + first;
}

}  // namespace kiln::dist
