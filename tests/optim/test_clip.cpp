// clip_grad_norm against torch::nn::utils::clip_grad_norm_: the same returned
// norm and the same clipped gradients, clipping or not, in one and two dtypes.
#include <torch/torch.h>

#include "optim/clip.h"
#include "support.h"

namespace {

std::vector<torch::Tensor> params_with_grads(double grad_scale, bool mixed) {
  std::vector<torch::Tensor> ps;
  int i = 0;
  for (const int64_t n : {5, 1000, 70000}) {
    auto p = torch::zeros({n}, torch::dtype(mixed && i++ == 1 ? torch::kDouble : torch::kFloat));
    p.mutable_grad() = torch::randn_like(p) * grad_scale;
    ps.push_back(p);
  }
  ps.push_back(torch::zeros({3}));  // no gradient: ignored
  return ps;
}

}  // namespace

TEST_CASE("clip_grad_norm matches torch::nn::utils::clip_grad_norm_ in the norm and the gradients",
          "[optim][clip]") {
  for (const bool mixed : {false, true}) {
    for (const double scale : {0.001, 1.0}) {  // below and above max_norm
      torch::manual_seed(8);
      auto ours = params_with_grads(scale, mixed);
      std::vector<torch::Tensor> ref;
      for (const auto& p : ours) {
        ref.push_back(p.clone());
        if (p.grad().defined()) ref.back().mutable_grad() = p.grad().clone();
      }
      const auto norm = kiln::optim::clip_grad_norm(ours, 1.0);
      const double ref_norm = torch::nn::utils::clip_grad_norm_(ref, 1.0);
      INFO("mixed dtypes " << mixed << ", gradient scale " << scale);
      CHECK(norm.item<double>() == Approx(ref_norm).epsilon(1e-6));
      for (size_t i = 0; i + 1 < ours.size(); ++i)
        KILN_REQUIRE_CLOSE(ours[i].grad(), ref[i].grad(), 1e-6, 1e-9);
    }
  }
}

TEST_CASE("clip_grad_norm without gradients returns 0 and rejects max_norm <= 0", "[optim][clip]") {
  CHECK(kiln::optim::clip_grad_norm({torch::zeros({3})}, 1.0).item<double>() == 0.0);
  REQUIRE_THROWS_WITH(kiln::optim::clip_grad_norm({torch::zeros({3})}, 0.0),
                      Catch::Contains("max_norm: expected > 0"));
}
