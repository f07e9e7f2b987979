// parameter_names_of: a submodule's parameters named as the whole model names them.
#include "nn/head.h"

#include <unordered_set>

namespace kiln::nn {

std::vector<std::string> parameter_names_of(const torch::nn::Module& model,
                                            const torch::nn::Module& part) {
  std::unordered_set<const void*> wanted;
  for (const auto& p : part.parameters()) wanted.insert(p.unsafeGetTensorImpl());
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters())
    if (wanted.count(item.value().unsafeGetTensorImpl())) names.push_back(item.key());
  TORCH_CHECK(names.size() == wanted.size(), "parameter_names_of: expected ", wanted.size(),
              " parameters of the part in the model, found ", names.size());
  return names;
}

}  // namespace kiln::nn
