// The model registry: a name and a constructor per model.
#include "nn/factory.h"

#include <c10/util/StringUtil.h>
#include <c10/util/accumulate.h>

#include <algorithm>

#include "util/error.h"
#include "util/log.h"

namespace kiln::nn {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"mlp", "deep_mlp", "dynamic_mlp", "convnet", "gpt"};
  return names;
}

bool takes_tokens(const std::string& name) { return name == "gpt"; }

void fit_to_data(ModelSpec& spec, const std::vector<int64_t>& input_shape, int64_t in_features,
                 int64_t outputs, bool tokens) {
  if (takes_tokens(spec.name) && (!tokens || input_shape.size() != 1))
    throw InputError(c10::str("model.name = \"", spec.name, "\": expected text (data.format = "
                              "\"text\"), token windows of shape (block_size), found examples of shape ",
                              c10::IntArrayRef(input_shape)));
  if (tokens) spec.gpt.block_size(input_shape[0]).vocab_size(outputs);
  spec.mlp.in_features(in_features).out_features(outputs);
  spec.deep_mlp.in_features(in_features).out_features(outputs);
  spec.dynamic_mlp.in_features(in_features).out_features(outputs);
  if (spec.name == "convnet") {
    const int64_t flat = c10::multiply_integers(input_shape);
    if ((input_shape.size() != 2 && input_shape.size() != 3) || flat != in_features)
      throw InputError(c10::str("model.name = \"convnet\": expected images, examples of shape "
                                "(C, H, W) or (H, W), found ", c10::IntArrayRef(input_shape),
                                flat != in_features ? " (encoded as tokens)" : "",
                                "; a table or text trains with mlp, deep_mlp or dynamic_mlp"));
    // (H, W, C) images, as PIL, TensorFlow and most NumPy pipelines keep them, would
    // train as C = H channels of H × C pixels: nothing fails, the model just sees noise.
    if (input_shape.size() == 3 && input_shape[0] > 4 && input_shape[1] > 4 &&
        (input_shape[2] == 1 || input_shape[2] == 3 || input_shape[2] == 4))
      log::warn(c10::str("model.name = \"convnet\": examples of shape ", c10::IntArrayRef(input_shape),
                         " are read as (C, H, W): ", input_shape[0], " channels of ", input_shape[1], " x ",
                         input_shape[2], " pixels; if they are (H, W, C) images (channels last), transpose "
                         "them first (NumPy: x.transpose(0, 3, 1, 2))"));
    // Each 2×2 pool halves the image; one of 1×1 has nothing left to pool. The config's
    // to fix (exit 2), said before the model is built, whatever the images' size.
    const int64_t rows = input_shape[input_shape.size() - 2], cols = input_shape.back();
    int64_t h = rows, w = cols, pooled = 0;
    const auto& pools = spec.convnet.pool_after();
    for (int64_t block = 1; block <= static_cast<int64_t>(spec.convnet.channels().size()); ++block) {
      if (std::count(pools.begin(), pools.end(), block) == 0) continue;
      if (h < 2 || w < 2) {
        int64_t most = 0;
        for (int64_t r = rows, c = cols; r >= 2 && c >= 2; r /= 2, c /= 2) ++most;
        throw InputError(c10::str("model.pool_after: block ", block, " pools a ", h, "×", w, " image (the data's ",
                                  rows, "×", cols, " after ", pooled, " pools); expected at most ", most,
                                  " pooling blocks for ", rows, "×", cols, " images"));
      }
      h /= 2;
      w /= 2;
      ++pooled;
    }
  }
  spec.convnet.input_shape(input_shape).out_features(outputs);
}

torch::nn::AnyModule make_model(const ModelSpec& spec) {
  if (spec.name == "mlp") return torch::nn::AnyModule(Mlp(spec.mlp));
  if (spec.name == "deep_mlp") return torch::nn::AnyModule(DeepMlp(spec.deep_mlp));
  if (spec.name == "dynamic_mlp") return torch::nn::AnyModule(DynamicMlp(spec.dynamic_mlp));
  if (spec.name == "convnet") return torch::nn::AnyModule(ConvNet(spec.convnet));
  if (spec.name == "gpt") return torch::nn::AnyModule(Gpt(spec.gpt));
  std::string valid;
  for (const auto& n : model_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InputError(c10::str("model.name: expected one of ", valid, ", found \"", spec.name, "\""));
}

std::vector<std::string> head_parameters(const torch::nn::Module& model) {
  const auto* head = dynamic_cast<const OutputHead*>(&model);
  return head ? head->head_parameters() : std::vector<std::string>{};
}

}  // namespace kiln::nn
