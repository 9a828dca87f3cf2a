// Bias-free Linear layer (OLMo2 has no biases anywhere).
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "layers/module.h"
#include "layers/rms_norm.h"

namespace fathom {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, ParameterInit init);
  Variable forward(const Variable& x) const;  // [..., in] -> [..., out]
  const Variable& weight() const { return weight_; }
  int64_t in_features() const { return weight_.dim(1); }
  int64_t out_features() const { return weight_.dim(0); }

  // train.precision fp8: forward, input gradient and weight gradient as FP8 GEMMs (autograd/ops.h
  // linear_fp8). Off by default; use_fp8_linears switches a model's eligible linears on.
  void set_fp8(bool fp8) { fp8_ = fp8; }
  bool fp8() const { return fp8_; }
  // For a projection its owner keeps in bf16 whatever the precision (MoD's router and predictor).
  void keep_out_of_fp8() { fp8_allowed_ = false; }
  bool fp8_allowed() const { return fp8_allowed_; }

 private:
  Variable weight_;  // [out, in], HF layout
  bool fp8_ = false;
  bool fp8_allowed_ = true;
};

// {l.forward(x) for l in linears}: the projections of one input (q/k/v, up/gate). In FP8 they share x's
// casts (linear_fp8_each); in bf16, where nothing records a gradient, they run as one matmul_each (a
// decoding step's few rows on CUDA: one launch); otherwise (or with some in FP8, some not) each linear's
// forward.
std::vector<Variable> project_each(const Variable& x, std::initializer_list<const Linear*> linears);

// A block's residual step (`norm` joining a sublayer's output to `residual`), then project_each of what it gives the
// next sublayer, in one launch where a decoding step allows (autograd/ops.h project_after_residual_step; bf16
// linears only): {the stream after the step, the projections}; otherwise nothing, and the caller runs both.
std::optional<ResidualProjections> project_each_after_residual_step(ResidualStep kind, const Variable& residual,
                                                                    const Variable& sublayer_out, const RMSNorm& norm,
                                                                    std::initializer_list<const Linear*> linears);

// Which linears of a model run in FP8, by full name.
struct Fp8Linears {
  std::vector<std::string> fp8;
  std::vector<std::string> kept;  // eligible by role, left in bf16: a width not a multiple of 16
};

// train.precision fp8 (docs/DESIGN.md, "FP8 linears"): every Linear of the model runs in FP8 except
// those their owner keeps out (MoD's router and predictor) and those with a width that is not a multiple
// of 16 (cuBLASLt's FP8 alignment). The LM head never does: it is no Linear::forward but the fused
// cross-entropy head. Returns the names of both groups.
Fp8Linears use_fp8_linears(Module& model);
// Whether any Linear of the model runs in FP8.
bool any_fp8_linear(const Module& model);

}  // namespace fathom
