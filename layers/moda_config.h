// MoDA's options (DESIGN.md 4.2), the recipe's `moda` section: which depth KV the blocks write, which
// key a depth slot holds, and how many recent slots a reader sees.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fathom {

// The paper's Table 3 rows.
enum class MoDAVariant {
  none,                  // plain OLMo2: no depth stream
  attn_kv,               // each attention writes its own K/V
  attn_kv_ffn_kv,        // plus a K/V projection of each FFN input (the paper's default)
  extra_attn_kv_ffn_kv,  // a separate attention-side projection instead of reusing the attention's K/V
};

// Which key a depth slot holds: the K its writer used (after the writer's k-norm and RoPE at the
// slot's token), or the raw projected K, which every reader normalises with its own k-norm and no RoPE
// (the MoDA authors' LM code).
enum class DepthKey { writer, reader };

// The names, in the enums' order ("attn_kv+ffn_kv" for attn_kv_ffn_kv): the recipe's choices.
const std::vector<std::string>& moda_variant_names();
const std::vector<std::string>& depth_key_names();
const std::string& name_of(MoDAVariant variant);
const std::string& name_of(DepthKey key);
// One of the names; anything else is an error naming the choices.
MoDAVariant parse_moda_variant(const std::string& name);
DepthKey parse_depth_key(const std::string& name);

struct MoDAConfig {
  MoDAVariant variant = MoDAVariant::none;
  int64_t max_slots = 0;  // 0: every earlier slot; S > 0: only the S most recent (bounded span)
  DepthKey depth_key = DepthKey::writer;

  bool enabled() const { return variant != MoDAVariant::none; }
  // The attention side writes through a projection of its own rather than its K/V.
  bool extra_attention_writer() const { return variant == MoDAVariant::extra_attn_kv_ffn_kv; }
  bool ffn_writer() const {
    return variant == MoDAVariant::attn_kv_ffn_kv || variant == MoDAVariant::extra_attn_kv_ffn_kv;
  }
  // Depth slots one block writes: 1 (attn_kv) or 2 (with an FFN writer); 0 without MoDA.
  int64_t slots_per_block() const { return enabled() ? (ffn_writer() ? 2 : 1) : 0; }
  // Throws fathom::Error unless max_slots >= 0.
  void validate() const;

  bool operator==(const MoDAConfig&) const = default;
};

struct LayerKind;
// MoDA's registration (layers/layer_kinds.h): its options and checks.
LayerKind moda_layer_kind();

// The first depth slot a reader sees when `written` slots exist: 0, or with moda.max_slots = S > 0
// the start of the window of the S most recent ones.
int64_t moda_first_read_slot(int64_t written, int64_t max_slots);

}  // namespace fathom
