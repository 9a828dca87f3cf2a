#include "train/measure/throughput.h"

#include <utility>

#include "layers/decoder.h"

namespace fathom {

double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const Decoder model(c);
  // Weights outside the layers (the final norm, the head) see every token; the lookup table does no
  // FLOPs; the layers count their own (a MoD routed block's weights see only its routed tokens).
  int64_t weights = -c.vocab_size * c.d_model;
  for (const Parameter& p : model.parameters()) weights += p.var.shape().numel();
  for (const auto& layer : model.blocks())
    for (const Parameter& p : layer->parameters()) weights -= p.var.shape().numel();
  double flops = 6.0 * double(weights);
  for (const LayerCost& cost : model.layer_costs(seq_len)) flops += cost.weight_flops + cost.extra_flops;
  return flops;
}

double dense_bf16_peak_flops(const std::string& device_name) {
  // Vendor datasheet figures for dense (not 2:4 sparse) bf16.
  static const std::pair<const char*, double> kPeaks[] = {
      {"NVIDIA H200", 989e12},           {"NVIDIA H100 80GB HBM3", 989e12}, {"NVIDIA H100 PCIe", 756e12},
      {"NVIDIA A100-SXM4-80GB", 312e12}, {"NVIDIA A100-SXM4-40GB", 312e12}, {"NVIDIA A100 80GB PCIe", 312e12},
  };
  for (const auto& [name, peak] : kPeaks)
    if (device_name == name) return peak;
  return 0.0;
}

}  // namespace fathom
