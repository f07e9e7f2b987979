// ModelSummary::table(): the module table, its footnotes, the totals and the
// memory estimate as text.
#include <c10/util/ArrayRef.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>

#include "train/summary.h"

namespace kiln::train {
namespace {

// 535818 → "535,818"
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// 2143272 → "2.0 MiB"
std::string bytes_text(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string dtype_suffix(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "";
    case c10::kBFloat16: return " bf16";
    case c10::kHalf: return " fp16";
    case c10::kDouble: return " fp64";
    default: return std::string(" ") + c10::toString(t);
  }
}

std::string pad(const std::string& s, size_t width, bool right = false) {
  // Width in characters: the table's only multi-byte character is "—" (3 bytes, 1 column).
  size_t columns = 0;
  for (const unsigned char c : s) columns += (c & 0xC0) != 0x80;
  if (columns >= width) return s;
  return right ? std::string(width - columns, ' ') + s : s + std::string(width - columns, ' ');
}

}  // namespace

std::string ModelSummary::table() const {
  std::ostringstream out;
  out << "model      " << model << "\n"
      << "data       " << data << "\n"
      << "optimizer  " << optimizer << "\n\n";

  // The module table: names indented by depth; a missing output points to a footnote.
  std::vector<std::string> notes;
  std::vector<std::array<std::string, 5>> cells = {{"module", "type", "output", "parameters", "bytes"}};
  for (const auto& row : modules) {
    const auto depth = row.name.empty() ? 0 : std::count(row.name.begin(), row.name.end(), '.') + 1;
    std::string output;
    if (row.shape) {
      output = c10::str("(", c10::Join(", ", *row.shape), ")", dtype_suffix(row.dtype));
    } else {
      auto it = std::find(notes.begin(), notes.end(), row.no_output);
      if (it == notes.end()) it = notes.insert(notes.end(), row.no_output);
      output = c10::str("— (", it - notes.begin() + 1, ")");
    }
    cells.push_back({std::string(2 * static_cast<size_t>(depth), ' ') + (row.name.empty() ? "(model)" : row.name), row.type,
                     output, with_commas(row.parameters), bytes_text(row.bytes)});
  }
  std::array<size_t, 5> width{};
  for (const auto& c : cells)
    for (size_t i = 0; i < c.size(); ++i) width[i] = std::max(width[i], pad(c[i], 0).size());
  for (const auto& c : cells)
    out << pad(c[0], width[0]) << "  " << pad(c[1], width[1]) << "  " << pad(c[2], width[2]) << "  "
        << pad(c[3], width[3], true) << "  " << pad(c[4], width[4], true) << "\n";
  for (size_t i = 0; i < notes.size(); ++i) out << "(" << i + 1 << ") " << notes[i] << "\n";
  out << "output: one micro-batch's, as each module's forward returned it (bf16/fp16: autocast's dtype); "
         "parameters and bytes: the module's and its submodules', buffers in the bytes too\n\n";

  std::vector<std::string> by_dtype;
  int64_t parameter_bytes = 0;
  for (const auto& [dtype, bytes] : parameter_bytes_by_dtype) {
    by_dtype.push_back(dtype + " " + bytes_text(bytes));
    parameter_bytes += bytes;
  }
  out << "parameters " << with_commas(parameters) << " (" << with_commas(trainable_parameters)
      << " trainable), " << bytes_text(parameter_bytes) << " (" << c10::Join(", ", by_dtype) << ")";
  if (buffers > 0) out << "; buffers " << with_commas(buffers) << ", " << bytes_text(buffer_bytes);
  out << "\n\n";

  const auto& e = memory;
  out << "memory estimate: a training step at batch " << e.batch_size;
  if (e.micro_batch != e.batch_size) out << " (forward at micro-batches of " << e.micro_batch << ")";
  out << ", " << e.precision << ", on " << e.device << "\n";
  const auto line = [&](const char* what, int64_t bytes, const std::string& note) {
    out << "  " << pad(what, 16) << pad(bytes_text(bytes), 11, true) << (note.empty() ? "" : "  " + note) << "\n";
  };
  line("parameters", e.parameter_bytes, "");
  line("gradients", e.gradient_bytes, "");
  line("optimizer state", e.optimizer_state_bytes,
       e.uncounted_optimizer_states
           ? c10::str(optimizer, " after one step; ", e.uncounted_optimizer_states,
                      " states the optimizer does not report are not counted")
           : optimizer + " after one step");
  line("activations", e.activation_bytes, "what forward keeps for backward (" + e.method + ")");
  line("total", e.total_bytes(), "");
  if (e.step_peak_bytes)
    line("step peak", *e.step_peak_bytes,
         "the most a step holds above parameters and optimizer state: activations, then gradients and "
         "backward's buffers");
  line("data set", data_bytes, "the train and test tensors as loaded (on the device: train.data_on_device)");
  out << "activations: " << e.method_detail << "\n";
  char timing[160];
  std::snprintf(timing, sizeof timing, "summarised in %.2f s (data %.2f s, model %.2f s, memory %.2f s)\n",
                data_seconds + model_seconds + estimate_seconds, data_seconds, model_seconds, estimate_seconds);
  out << timing;
  return out.str();
}

}  // namespace kiln::train
