// summarize(): the run's model and optimizer built as kiln train builds them, one
// traced forward for the output shapes, and the step's memory measured on meta or,
// where the step cannot run there, by short steps on the run's device.
#include "train/summary.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/StringUtil.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "nn/trace.h"
#include "train/amp.h"
#include "train/device.h"
#include "train/memory.h"
#include "train/meta_memory.h"
#include "train/run_parts.h"
#include "util/cpus.h"
#include "util/error.h"

namespace kiln::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The batch sizes the device method measures at: two small ones whose activations
// give the line through them (activations are affine in the batch size: what each
// example keeps, plus what does not grow with it, such as autocast's lower-precision
// copies of the weights), or the micro-batch itself when it is that small.
constexpr int64_t kSmallBatch = 4, kLargerBatch = 16;

// "kiln::nn::LinearImpl" → "kiln::nn::Linear"; a class in an anonymous namespace
// without the namespace.
std::string type_name(const torch::nn::Module& module) {
  std::string name = module.name();
  const std::string anonymous = "(anonymous namespace)::";
  for (size_t at; (at = name.find(anonymous)) != std::string::npos;) name.erase(at, anonymous.size());
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

// One training step's forward, loss and backward on batch (x, y), autocast as the
// run's precision says; `forward_done` runs between the loss and backward.
void forward_backward(torch::nn::AnyModule& model, const at::Tensor& x, const at::Tensor& y,
                      const data::DataSchema& schema, const PrecisionPlan& plan, c10::DeviceType autocast_on,
                      const std::function<void()>& forward_done) {
  at::Tensor loss;
  {
    AutocastGuard amp(autocast_on, plan.dtype, plan.autocast);  // fp32: autocast off
    loss = training_loss(model.forward(data::model_inputs(x, schema)), y, schema);
  }
  forward_done();
  loss.backward();
}

// The first `rows` examples of a split as the loader gathers a batch (contiguous), on `device`.
std::pair<at::Tensor, at::Tensor> first_rows(const data::Dataset& split, int64_t rows, const c10::Device& device) {
  return {split.x.narrow(0, 0, rows).contiguous().to(device), split.y.narrow(0, 0, rows).contiguous().to(device)};
}

// Moves every module to meta, leaves first; the first one that cannot move (a
// libtorch module keeps its parameters' TensorImpl, and a CPU one cannot become a
// meta one) is named in the InputError.
void move_to_meta(torch::nn::Module& model) {
  const auto modules = model.named_modules("", /*include_self=*/true);
  for (auto it = modules.items().rbegin(); it != modules.items().rend(); ++it) {
    try {
      it->value()->to(at::kMeta);
    } catch (const c10::Error&) {
      throw InputError(c10::str(type_name(*it->value()), " (", it->key().empty() ? "the model" : it->key(),
                                ") cannot move to the meta device: libtorch's modules keep their "
                                "parameters' CPU tensors"));
    }
  }
}

struct Measured {
  MemoryEstimate memory;
  std::unordered_map<const torch::nn::Module*, nn::OutputTracer::Output> outputs;
};

// Copies what the tracer saw, by module (the tracer dies with its scope).
// What the model and the optimizer hold after a step: parameters, gradients, state.
void count_held(const torch::optim::Optimizer& optimizer, Measured& m) {
  const auto held = model_memory(optimizer);
  m.memory.parameter_bytes = held.parameter_bytes;
  m.memory.gradient_bytes = held.gradient_bytes;
  m.memory.optimizer_state_bytes = held.optimizer_state_bytes;
  m.memory.uncounted_optimizer_states = held.uncounted_optimizer_states;
}

void keep_outputs(const nn::OutputTracer& tracer, const torch::nn::Module& model, Measured& m) {
  for (const auto& module : model.modules(/*include_self=*/true))
    if (const auto* o = tracer.find(*module)) m.outputs[module.get()] = *o;
}

// The whole step on meta at the micro-batch: model, batch, optimizer and the
// step's storages counted, nothing allocated. Throws where the step cannot run there.
void measure_on_meta(torch::nn::AnyModule& model, const RunSpec& spec, const data::Data& data,
                     const PrecisionPlan& plan, Measured& m) {
  if (plan.autocast)
    throw InputError(c10::str(plan.name, " autocast does not run on the meta device (meta tensors have "
                              "no autocast dispatch key: they would stay float32)"));
  auto& module = *model.ptr();
  move_to_meta(module);
  auto optimizer = build_optimizer(spec.optim, module);
  const auto meta = [](const at::Tensor& t, int64_t rows) {
    auto sizes = t.sizes().vec();
    sizes[0] = rows;
    return at::empty(sizes, t.options().device(at::kMeta));
  };
  const auto x = meta(data.train.x, m.memory.micro_batch), y = meta(data.train.y, m.memory.micro_batch);
  optimizer->zero_grad();
  MetaMemoryProbe probe;
  {
    nn::OutputTracer tracer;
    forward_backward(model, x, y, data.schema, plan, c10::kCPU, [&] { probe.forward_done(); });
    keep_outputs(tracer, module, m);
  }
  m.memory.activation_bytes = probe.forward_bytes();
  m.memory.step_peak_bytes = probe.peak_bytes();  // before the optimizer makes its state
  optimizer->step();
  count_held(*optimizer, m);
  m.memory.method = "meta";
  m.memory.method_detail = c10::str("one step (forward, loss, backward, optimizer) on the meta device at batch ",
                                    m.memory.micro_batch, ", every storage it made counted");
}

// Short steps on the run's device: a warm-up step and a measured one (ActivationProbe)
// at two small batch sizes, extrapolated along the line through them; the first
// warm-up also steps the optimizer, whose state is then counted. Then one forward
// without autograd at the micro-batch for the output shapes.
void measure_on_device(torch::nn::AnyModule& model, const RunSpec& spec, const data::Data& data,
                       const PrecisionPlan& plan, const c10::Device& device, Measured& m) {
  auto& module = *model.ptr();
  module.to(device);
  auto optimizer = build_optimizer(spec.optim, module);
  const int64_t micro = m.memory.micro_batch;
  const std::vector<int64_t> sizes =
      micro <= kLargerBatch ? std::vector<int64_t>{micro} : std::vector<int64_t>{kSmallBatch, kLargerBatch};
  std::vector<std::pair<int64_t, int64_t>> forward, peak;  // (batch, bytes)
  for (const int64_t b : sizes) {
    const auto [x, y] = first_rows(data.train, b, device);
    // The first step at a batch size also makes what later ones reuse (the BLAS's
    // workspace, oneDNN's primitives for the shapes): it is not measured.
    optimizer->zero_grad();
    forward_backward(model, x, y, data.schema, plan, device.type(), [] {});
    if (b == sizes.front()) {
      optimizer->step();
      count_held(*optimizer, m);
    }
    optimizer->zero_grad();
    ActivationProbe probe(device);
    forward_backward(model, x, y, data.schema, plan, device.type(), [&] { probe.forward_done(); });
    forward.emplace_back(b, probe.forward_bytes());
    peak.emplace_back(b, probe.bytes());
  }
  const auto at_micro = [&](const std::vector<std::pair<int64_t, int64_t>>& points) {
    if (points.size() == 1) return points[0].second;
    const auto [b1, a1] = points[0];
    const auto [b2, a2] = points[1];
    const double per_example = static_cast<double>(a2 - a1) / static_cast<double>(b2 - b1);
    return static_cast<int64_t>(std::llround(static_cast<double>(a1) + per_example * static_cast<double>(micro - b1)));
  };
  m.memory.activation_bytes = at_micro(forward);
  if (device.is_cuda()) m.memory.step_peak_bytes = at_micro(peak);
  m.memory.method = "device";
  m.memory.method_detail =
      sizes.size() == 1
          ? c10::str("one training step on ", device, " at batch ", micro, " (ActivationProbe, after a warm-up step)")
          : c10::str("training steps on ", device, " at batches ", sizes[0], " and ", sizes[1],
                     " (ActivationProbe, each after a warm-up step), extrapolated along the line through them to ",
                     micro);
  optimizer->zero_grad();
  torch::NoGradGuard no_grad;
  nn::OutputTracer tracer;
  const auto x = first_rows(data.train, micro, device).first;
  AutocastGuard amp(device.type(), plan.dtype, plan.autocast);
  model.forward(data::model_inputs(x, data.schema));
  keep_outputs(tracer, module, m);
}

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "float32";
    case c10::kDouble: return "float64";
    case c10::kHalf: return "float16";
    case c10::kBFloat16: return "bfloat16";
    default: return c10::toString(t);
  }
}

// The rows of the module table, before the forward ran: names, types, parameters
// and bytes of each subtree.
std::vector<ModuleRow> module_rows(const torch::nn::Module& model) {
  std::vector<ModuleRow> rows;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const auto& module = *item.value();
    ModuleRow row;
    row.name = item.key();
    row.type = type_name(module);
    std::unordered_set<const void*> seen;
    for (const auto& p : module.parameters())
      if (seen.insert(p.unsafeGetTensorImpl()).second) {
        row.parameters += p.numel();
        row.bytes += p.numel() * static_cast<int64_t>(p.element_size());
      }
    for (const auto& b : module.buffers())
      if (seen.insert(b.unsafeGetTensorImpl()).second) row.bytes += b.numel() * static_cast<int64_t>(b.element_size());
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string describe_data(const data::Data& data) {
  const auto& s = data.schema;
  std::ostringstream out;
  out << s.format << " data, " << data::task_name(s.task) << ", " << data.train.size() << " train / "
      << data.test.size() << " test examples of shape (" << c10::Join(", ", s.input_shape) << "), " << s.outputs
      << (s.task == data::Task::kRegression ? " targets" : " classes");
  return out.str();
}

}  // namespace

ModelSummary summarize(const RunSpec& spec, const SummaryOptions& options) {
  const auto& method = options.activations();
  TORCH_CHECK(method == "auto" || method == "meta" || method == "device",
              "summarize: activations: expected auto, meta or device, got \"", method, "\"");
  const auto& t = spec.train;
  const c10::Device device = resolve_device(t.device());
  const PrecisionPlan plan = precision_plan(t.precision(), device.type());
  util::set_threads(t.threads());
  ModelSummary s;

  auto start = Clock::now();
  const data::Data data = load_run_data(spec.data, spec.model.name);
  s.data_seconds = seconds_since(start);
  s.data = describe_data(data);
  s.data_bytes = storage_bytes({data.train.x, data.train.y, data.test.x, data.test.y});

  start = Clock::now();
  torch::manual_seed(t.seed());  // the run's initial weights (they do not change the figures)
  auto model = build_model(spec.model, data.schema);
  {
    std::ostringstream description;
    model.ptr()->pretty_print(description);  // the model's own line, not its modules'
    s.model = description.str();
  }
  s.optimizer = spec.optim.name;
  s.modules = module_rows(*model.ptr());
  std::unordered_set<const void*> seen;
  for (const auto& p : model.ptr()->parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) {
      s.parameters += p.numel();
      if (p.requires_grad()) s.trainable_parameters += p.numel();
      s.parameter_bytes_by_dtype[dtype_name(p.scalar_type())] += p.numel() * static_cast<int64_t>(p.element_size());
    }
  for (const auto& b : model.ptr()->buffers()) {
    s.buffers += b.numel();
    s.buffer_bytes += b.numel() * static_cast<int64_t>(b.element_size());
  }
  s.model_seconds = seconds_since(start);

  start = Clock::now();
  Measured m;
  m.memory.batch_size = t.batch_size();
  // The trainer's micro-batch: a batch (no more examples than the split has) in
  // train.accumulate parts, the first the largest.
  const int64_t rows = std::min(t.batch_size(), data.train.size());
  m.memory.micro_batch = (rows + t.accumulate() - 1) / t.accumulate();
  m.memory.precision = plan.name;
  m.memory.device = device.str();
  const MemoryEstimate base = m.memory;
  std::string not_meta;
  if (method != "device") {
    try {
      measure_on_meta(model, spec, data, plan, m);
    } catch (const std::exception& e) {
      if (method == "meta") throw;
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
      not_meta = c10_error ? c10_error->what_without_backtrace() : e.what();
      not_meta = not_meta.substr(0, not_meta.find('\n'));
      m = Measured{base, {}};
      torch::manual_seed(t.seed());
      model = build_model(spec.model, data.schema);  // the meta attempt may have moved part of it
    }
  }
  if (m.memory.method.empty()) {
    measure_on_device(model, spec, data, plan, device, m);
    if (!not_meta.empty()) m.memory.method_detail += c10::str("; not on meta: ", not_meta);
  }
  s.estimate_seconds = seconds_since(start);
  s.memory = m.memory;

  // The forward's outputs by module; a module without one says why.
  const auto modules = model.ptr()->named_modules("", /*include_self=*/true);
  for (size_t i = 0; i < modules.size(); ++i) {
    const auto* module = modules[i].value().get();
    auto& row = s.modules[i];
    if (const auto it = m.outputs.find(module); it != m.outputs.end()) {
      row.shape = it->second.shape;
      row.dtype = it->second.dtype;
    } else if (dynamic_cast<const torch::nn::ModuleListImpl*>(module) ||
               dynamic_cast<const torch::nn::ModuleDictImpl*>(module)) {
      row.no_output = "a container: it has no forward of its own; its modules are listed under it";
    } else {
      row.no_output = "its forward did not run in the traced step";
    }
  }
  return s;
}

}  // namespace kiln::train
