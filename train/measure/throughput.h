// Model FLOPs utilisation: training FLOPs per token over the device's dense bf16 peak.
#pragma once
#include <cstdint>
#include <string>

#include "layers/model_config.h"

namespace fathom {

// 6 N (forward and backward through every weight but the embedding lookup) plus what each layer
// reports beyond its weights (attention's scores and values: 6 d T), per training token, as OLMo-core
// and the PaLM paper count them.
double training_flops_per_token(const ModelConfig& config, int64_t seq_len);

// Dense bf16 tensor-core peak in FLOP/s for a device name as the driver reports it; 0 when unknown
// (then no MFU is shown).
double dense_bf16_peak_flops(const std::string& device_name);

}  // namespace fathom
