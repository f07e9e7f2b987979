// The fake accelerator of the tests (fake_device.h): CPU kernels over host memory on
// the PrivateUse1 key, so a CPU tensor where a device tensor belongs fails without a GPU.
#include "fake_device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/FakeGuardImpl.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

namespace kiln::test {
namespace {

constexpr c10::DeviceType kFake = c10::DeviceType::PrivateUse1;
const c10::Device kFake0(kFake, 0);

// Device memory is host memory, so copies are memcpy and the CPU kernels can run on
// it; the DataPtr's device (fake:0) is what makes its tensors device tensors.
struct FakeAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n > 0 ? c10::alloc_cpu(n) : nullptr;
    return {p, p, &c10::free_cpu, kFake0};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &c10::free_cpu; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
FakeAllocator g_allocator;

// What ATen asks of an accelerator through its hooks (every one of them fails with
// "register PrivateUse1HooksInterface" unless a backend answers it).
struct FakeHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  // Random ops run the CPU kernels, which draw from the CPU's generator: naming it
  // the device's generator keeps seeding (and saving RNG state) honest.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override { return kFake0; }
  bool isPinnedPtr(const void*) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
};

// ---- Kernels the CPU fallback cannot provide: allocation, copies across the
// device boundary, and views (a fallback returns a copy, not an alias).

constexpr c10::DispatchKeySet kFakeKeys(c10::DispatchKey::PrivateUse1);

// fake:0 is the only device: memory asked for on fake:1 would silently land on fake:0.
void check_layout_and_index(std::optional<at::Layout> layout, std::optional<at::Device> device) {
  TORCH_CHECK(c10::layout_or_default(layout) == at::kStrided, "fake: only strided tensors");
  TORCH_CHECK(!device || !device->has_index() || device->index() == 0,
              "fake: fake:0 is the only device, got ", *device);
}

at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                 std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  check_layout_and_index(layout, device);
  return at::detail::empty_generic(size, &g_allocator, kFakeKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool>) {
  check_layout_and_index(layout, device);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kFakeKeys,
                                           c10::dtype_or_default(dtype));
}

// `t` as a CPU tensor over the same memory, for the CPU kernels to read or write: a
// view of a CPU tensor over t's whole storage, so views taken of it point into t's.
at::Tensor host(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  const auto& storage = t.storage();
  const auto all = static_cast<int64_t>(storage.nbytes() / t.itemsize());
  return at::from_blob(storage.mutable_data(), {all}, t.options().device(at::kCPU))
      .as_strided(t.sizes(), t.strides(), t.storage_offset());
}

// copy_ sends every copy that involves fake:0 here (CPU→fake, fake→CPU, fake→fake);
// on host memory each is the CPU's copy, dtype conversion and strides included.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.numel() > 0) host(dst).copy_(host(self), non_blocking);
  return dst;
}

// How the CPU fallback writes an in-place result back into a fake tensor.
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) { return host(self).item(); }

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

// Module::to swaps each parameter's data (Variable::set_data), which only types
// ATen calls "shallow-copy compatible" may do: dense CPU and CUDA tensors are, and
// fake:0 joins them the way CUDA does.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && !t.is_quantized() && (t.is_cpu() || t.is_privateuseone());
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self) && dense(from));
}

// ---- Every other op: the CPU kernel (on copies, through at::native::cpu_fallback),
// after the device check that CUDA's kernels make and the CPU ones cannot.

// The last n values on the stack: an op's arguments before the call, its returns after.
std::span<c10::IValue> top(torch::jit::Stack* stack, size_t n) {
  return {stack->data() + stack->size() - n, n};
}

// The op's device (its first tensor argument not on the CPU) after checking that
// every tensor argument is there, with CUDA's message; nullopt when all are on the CPU.
// Allowed elsewhere, as ATen allows them: a 0-dim CPU tensor the op only reads (a
// scalar) and CPU indices in a Tensor?[] (index, index_put_: "dev[cpu_indices]").
std::optional<c10::Device> checked_device(const c10::OperatorHandle& op,
                                          c10::ArrayRef<c10::IValue> args) {
  const auto& schema = op.schema().arguments();
  struct Arg {
    at::Tensor t;
    bool cpu_ok;
  };
  std::vector<Arg> tensors;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool written = schema[i].alias_info() && schema[i].alias_info()->isWrite();
    const auto add = [&](const at::Tensor& t, bool index) {
      if (t.defined()) tensors.push_back({t, index || (t.dim() == 0 && !written)});
    };
    if (args[i].isTensor()) {
      add(args[i].toTensor(), false);
    } else if (args[i].isTensorList()) {
      for (const auto& t : args[i].toTensorVector()) add(t, false);
    } else if (args[i].isOptionalTensorList()) {
      for (const auto& t : args[i].toOptionalTensorVector())
        if (t) add(*t, true);
    }
  }
  std::optional<c10::Device> device;
  for (const auto& a : tensors)
    if (!a.t.is_cpu()) {
      device = a.t.device();
      break;
    }
  if (!device) return std::nullopt;
  for (const auto& a : tensors)
    TORCH_CHECK(a.t.device() == *device || (a.t.is_cpu() && a.cpu_ok),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device, " and ", a.t.device(), "! (in ", op.schema().operator_name(), ")");
  return device;
}

// An op that returns a view of an input (kiln::scaled_add_backward hands back its
// grad): cpu_fallback, working on copies, could only return a copy. The device's
// memory is host memory, so here the CPU kernel runs on aliases of the inputs, and
// each view it returns becomes the same view of the fake input.
void view_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device) {
  std::vector<at::Tensor> inputs;
  const auto no_lists = [&](const c10::IValue& v) {
    TORCH_CHECK(!v.isTensorList(), "fake: ", op.schema().operator_name(),
                " (a view op with a tensor list) needs a kernel of its own");
  };
  for (auto& v : top(stack, op.schema().arguments().size())) {
    no_lists(v);
    if (v.isTensor() && v.toTensor().defined() && !v.toTensor().is_cpu()) {
      inputs.push_back(v.toTensor());
      v = host(v.toTensor());
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (auto& v : top(stack, op.schema().returns().size())) {
    no_lists(v);
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const auto r = v.toTensor();
    const at::Tensor* base = nullptr;  // the input r is a view of, if any
    for (const auto& in : inputs)
      if (r.storage().data() == in.storage().data() && r.dtype() == in.dtype()) base = &in;
    if (!base)
      v = r.to(device);
    else if (r.sizes() == base->sizes() && r.strides() == base->strides() &&
             r.storage_offset() == base->storage_offset())
      v = *base;  // the input itself, as the CPU and CUDA kernels return it
    else
      v = base->as_strided(r.sizes(), r.strides(), r.storage_offset());
  }
}

void fake_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto device = checked_device(op, top(stack, op.schema().arguments().size()));
  const auto& returns = op.schema().returns();
  const bool returns_view = std::any_of(returns.begin(), returns.end(), [](const auto& r) {
    return r.alias_info() && !r.alias_info()->isWrite();
  });
  if (device && returns_view) return view_fallback(op, stack, *device);
  at::native::cpu_fallback(op, stack);
}

}  // namespace

c10::Device fake_device() {
  // Lazily, so a test binary that never asks sees no accelerator: once a PrivateUse1
  // backend has a name, at::getAccelerator() answers it before CUDA.
  static const bool registered = [] {
    c10::register_privateuse1_backend("fake");
    c10::SetAllocator(kFake, &g_allocator);
    at::RegisterPrivateUse1HooksInterface(new FakeHooks());  // lives as long as the process
    return true;
  }();
  (void)registered;
  return kFake0;
}

// The kernels are registered statically: without a fake tensor nothing reaches them.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("resize_", TORCH_FN(at::native::resize_));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  // torch::save reads a device tensor's whole storage through set_.
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fake_fallback>());
}

// Autocast on fake:0 follows CUDA's policy, from the op lists ATen exports for other
// backends. libtorch registers nothing for AutocastPrivateUse1, not even the
// fallthrough, so without these every op under autocast on the device would fail.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // The lists' signatures name ATen's types unqualified, and which types differs by
  // version (torch 2.11's name DimnameList, which 2.14 no longer has).
  using namespace at;
#define KILN_FAKE_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define KILN_FAKE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define KILN_FAKE_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define KILN_FAKE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(KILN_FAKE_LOWER_PRECISION)
  AT_FORALL_FP32(KILN_FAKE_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(KILN_FAKE_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(KILN_FAKE_PROMOTE)
#undef KILN_FAKE_LOWER_PRECISION
#undef KILN_FAKE_FP32
#undef KILN_FAKE_FP32_SET_OPT_DTYPE
#undef KILN_FAKE_PROMOTE
}

// c10's FakeGuardImpl (a final class) with one device instead of its 8, as the
// hooks say: resolving "fake:1" is refused as "cuda:1" is on a one-GPU machine.
struct OneDeviceGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::impl::FakeGuardImpl<kFake> fake;
  c10::DeviceType type() const override { return kFake; }
  c10::Device exchangeDevice(c10::Device d) const override { return fake.exchangeDevice(d); }
  c10::Device getDevice() const override { return fake.getDevice(); }
  void setDevice(c10::Device d) const override { fake.setDevice(d); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { fake.uncheckedSetDevice(d); }
  c10::Stream getStream(c10::Device d) const override { return fake.getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return fake.exchangeStream(s); }
  void destroyEvent(void* e, const c10::DeviceIndex i) const noexcept override {
    fake.destroyEvent(e, i);
  }
  void record(void** e, const c10::Stream& s, const c10::DeviceIndex i,
              const c10::EventFlag f) const override {
    fake.record(e, s, i, f);
  }
  void block(void* e, const c10::Stream& s) const override { fake.block(e, s); }
  bool queryEvent(void* e) const override { return fake.queryEvent(e); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, OneDeviceGuardImpl);

}  // namespace kiln::test
