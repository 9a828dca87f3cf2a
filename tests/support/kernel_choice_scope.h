#pragma once

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_prologue.h"
#include "kernels/decode_step/persistent_decode.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/runtime/dependent_launch.h"
#include "layers/layer_stream.h"

namespace fathom::test {

// Sets a kernel choice (kernels/runtime/kernel_choice.h) for one test and puts the previous one back.
template <typename Choice, Choice (*get)(), void (*set)(Choice)>
class KernelChoiceScope {
 public:
  explicit KernelChoiceScope(Choice choice) : saved_(get()) { set(choice); }
  ~KernelChoiceScope() { set(saved_); }
  KernelChoiceScope(const KernelChoiceScope&) = delete;
  KernelChoiceScope& operator=(const KernelChoiceScope&) = delete;

 private:
  Choice saved_;
};

using SkinnyPolicyScope = KernelChoiceScope<SkinnyMatmulPolicy, skinny_matmul_policy, set_skinny_matmul_policy>;
using DecodePrologueScope = KernelChoiceScope<DecodePrologue, decode_prologue_choice, set_decode_prologue_choice>;
using PrologueInAttentionScope =
    KernelChoiceScope<Fusion, prologue_in_attention_choice, set_prologue_in_attention_choice>;
using MergeInSplitScope = KernelChoiceScope<Usage, merge_in_split_policy, set_merge_in_split_policy>;
using MergeInClusterScope = KernelChoiceScope<Toggle, merge_in_cluster_choice, set_merge_in_cluster_choice>;
using AddRmsNormScope = KernelChoiceScope<Fusion, add_rms_norm_choice, set_add_rms_norm_choice>;
using SwigluProjectionScope =
    KernelChoiceScope<SwigluProjection, swiglu_projection_choice, set_swiglu_projection_choice>;
using ResidualStepScope = KernelChoiceScope<Fusion, residual_step_in_gemm_choice, set_residual_step_in_gemm_choice>;
using ResidualStepAcrossLayersScope =
    KernelChoiceScope<Fusion, residual_step_across_layers_choice, set_residual_step_across_layers_choice>;
using DependentLaunchScope = KernelChoiceScope<Toggle, dependent_launch, set_dependent_launch>;
using SkinnySplitKCtasScope = KernelChoiceScope<int, skinny_split_k_ctas, set_skinny_split_k_ctas>;
using SkinnyL2PrefetchScope = KernelChoiceScope<Usage, skinny_l2_prefetch, set_skinny_l2_prefetch>;
using PersistentDecodeScope = KernelChoiceScope<Toggle, persistent_decode_choice, set_persistent_decode_choice>;
using PersistentOneSplitTilesScope = KernelChoiceScope<int, persistent_one_split_tiles, set_persistent_one_split_tiles>;

}  // namespace fathom::test
