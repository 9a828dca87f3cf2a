// What the attention-like token mixers share: the q/k/v/o projections and the optional full-width
// QK-norm, registered under HF's names (q_proj, k_proj, v_proj, o_proj, q_norm, k_norm), so a
// teacher's attention weights load into any of them. GQA: k and v project to the KV heads.
#pragma once
#include <memory>

#include "layers/linear.h"
#include "layers/model_config.h"
#include "layers/rms_norm.h"
#include "layers/token_mixer.h"

namespace fathom {

class ProjectedMixer : public TokenMixer {
 protected:
  explicit ProjectedMixer(const ModelConfig& config);

  int64_t n_heads_, n_kv_heads_, head_dim_;
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  std::unique_ptr<RMSNorm> q_norm_, k_norm_;  // absent when qk_norm is off (Llama)
};

}  // namespace fathom
