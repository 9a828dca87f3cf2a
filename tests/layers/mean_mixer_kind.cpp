#include "tests/layers/mean_mixer_kind.h"

#include <cmath>

#include "autograd/ops.h"
#include "layers/linear.h"

namespace fathom::test {

namespace {

// Every earlier position's value projection, summed in f64 per sequence: what a decoding step reads.
struct MeanCache final : MixerCache {
  std::vector<double> sums;  // [B, d]
  int64_t held = 0;
  size_t bytes() const override { return sums.size() * sizeof(double); }
  size_t bytes_per_position() const override { return 0; }
};

class MeanMixer : public TokenMixer {
 public:
  explicit MeanMixer(const ModelConfig& c)
      : scale_(c.options.get<MeanOptions>().scale),
        d_(c.d_model),
        v_proj_(c.d_model, c.d_model, ParameterInit::normal(c.init_std, c.init_cutoff)),
        o_proj_(c.d_model, c.d_model, ParameterInit::normal(c.init_std, c.init_cutoff)),
        gate_(c.d_model, 1, ParameterInit::normal(c.init_std, c.init_cutoff)) {
    add_child("v_proj", v_proj_);
    add_child("o_proj", o_proj_);
    add_child("gate", gate_);
  }

  Variable forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const override {
    const int64_t B = x.dim(0), T = x.dim(1);
    const Variable v = v_proj_.forward(x);
    Variable mean;
    if (auto* cache = static_cast<MeanCache*>(inputs.cache)) {
      mean = Variable(decode_means(v.value(), *cache));
    } else {
      // All-zero queries and keys: a uniform causal softmax, the mean of v over s <= t.
      const Tensor zeros = Tensor::zeros({B, T, 1, d_}, v.dtype(), v.device());
      mean = reshape(attention(Variable(zeros), Variable(zeros), reshape(v, {B, T, 1, d_}), 1.0), {B, T, d_});
    }
    const Variable y = scale(o_proj_.forward(mean), scale_);
    if (report.keeps_losses()) {
      const Variable gate = reshape(gate_.forward(x), {B, T});
      report.add_loss(kMeanGateLoss, routing_bce(gate, Tensor::full({B, T}, 1.0, DType::f32, x.device())));
    }
    if (report.wants(kMeanOutputTap)) {
      double sum = 0;
      for (float value : y.value().to(Device::cpu()).to(DType::f32).to_vector<float>()) sum += std::abs(value);
      report.count("mean.abs_sum", sum);
      report.count("mean.values", double(y.value().numel()));
    }
    return y;
  }

  LayerCost cost(const CostQuery&) const override {
    LayerCost c;
    c.saved_elements = 3 * d_;  // x, v and the mean
    return c;
  }

  std::unique_ptr<MixerCache> make_cache(int64_t batch, int64_t, DType, Device) const override {
    auto cache = std::make_unique<MeanCache>();
    cache->sums.assign(size_t(batch * d_), 0.0);
    return cache;
  }

 private:
  Tensor decode_means(const Tensor& v, MeanCache& cache) const {
    const int64_t B = v.dim(0), T = v.dim(1);
    const std::vector<float> values = v.to(Device::cpu()).to(DType::f32).to_vector<float>();
    std::vector<float> means(values.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < d_; ++i) {
          double& sum = cache.sums[size_t(b * d_ + i)];
          sum += values[size_t((b * T + t) * d_ + i)];
          means[size_t((b * T + t) * d_ + i)] = float(sum / double(cache.held + t + 1));
        }
    cache.held += T;
    return Tensor::from_vector(means, {B, T, d_}).to(v.dtype()).to(v.device());
  }

  double scale_;
  int64_t d_;
  Linear v_proj_, o_proj_, gate_;
};

}  // namespace

LayerKind mean_layer_kind() {
  return {.name = kMeanKind,
          .make_mixer = [](const ModelConfig& c, int64_t) -> std::unique_ptr<TokenMixer> {
            return std::make_unique<MeanMixer>(c);
          },
          .options = {kind_option("mean.scale", &MeanOptions::scale,
                                  {.at_least = 0, .aliases = {"output_scale"}, .doc = "Scales the mixer's output."})},
          .loss_terms = {{.name = kMeanGateLoss}},
          .taps = {kMeanOutputTap},
          .metrics = {
              {.tap = kMeanOutputTap,
               .measures = {"mean.abs_sum", "mean.values"},
               .reported_by = [](const ModelConfig& c, int64_t layer) { return c.layer_kind(layer) == kMeanKind; },
               .metrics =
                   [](const LayerMeasures& m) {
                     const double values = m.contains("mean.values") ? m.at("mean.values") : 0.0;
                     const double sum = m.contains("mean.abs_sum") ? m.at("mean.abs_sum") : 0.0;
                     return std::vector<std::pair<std::string, double>>{{"mean_abs", values > 0 ? sum / values : 0.0}};
                   },
               .console_line =
                   [](int64_t layer, const LayerMeasures& m) {
                     return "  mean L" + std::to_string(layer) + " | " + std::to_string(m.at("mean.values")) +
                            " values";
                   }}}};
}

}  // namespace fathom::test
