// A whole decoding step of a plain attention decoder (OLMo2 or Llama blocks, no MoDA, MoD or DSLA) at batch 1
// as one persistent kernel: one CTA per SM runs every layer's q/k/v, attention, o_proj, residual steps,
// gate/up with SwiGLU and down_proj, then the final norm and the LM head, with a grid-wide barrier between
// the phases instead of a kernel boundary. At batch 1 a step is a stream over the weights: each CTA owns a
// fixed slice of every weight and one producer warp copies the slices, one after another, through a ring of
// shared-memory stages with bulk copies. Weights depend on nothing, so the producer runs ahead across the
// barriers and the next phase's weights are already arriving while the CTAs wait for each other; the memory
// system never drains at a launch boundary (persistent_decode.cu says how).
//
// The arithmetic is the layer-by-layer step's: the same bf16 roundings at the same places (every GEMM output,
// norm, RoPE, SwiGLU and the attention output), fp32 accumulation. The sums run in other orders, so the
// logits are close to the layer-by-layer step's, not bit-identical. The CPU reference is the decoder's own
// layer-by-layer step (the tests compare against it on the CPU and the GPU).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

// One block's weights (BF16, on the device) and its KV cache. Norms: post-norm (OLMo2) applies attn_norm and
// ffn_norm to the sublayers' outputs, pre-norm (Llama) to their inputs.
struct PersistentDecodeLayer {
  Tensor q, k, v, o;           // [Hq d, D], [Hk d, D], [Hk d, D], [D, Hq d]
  Tensor gate, up, down;       // [F, D], [F, D], [D, F]
  Tensor q_norm, k_norm;       // [Hq d], [Hk d]: QK-norm over the full width; both undefined without it
  Tensor attn_norm, ffn_norm;  // [D]
  Tensor cache_k, cache_v;     // [1, Hk, capacity, d]
};

struct PersistentDecodeModel {
  std::vector<PersistentDecodeLayer> layers;
  Tensor final_norm;  // [D]
  Tensor head;        // [vocab, D]
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool pre_norm = false;
  double norm_eps = 1e-6;  // every RMSNorm's, QK-norm's too
  double scale = 0;        // the softmax's scale, 1 / sqrt(d)
};

// Whether decoding steps run as the persistent kernel where a model fits it: FATHOM_PERSISTENT_DECODE=on|off,
// read at the first use, unless set replaced it. Unset: off: its GPU tests pass, but it measured no faster than the
// layer-by-layer step (docs/DESIGN.md, "A whole step in one persistent kernel"). FATHOM_PERSISTENT_TRACE=FILE, read
// when a kernel is made, serves its measurement: each CTA's clock at the end of every phase of the last step run,
// written when the kernel is freed (bench/timeline/persistent_trace.py reads it).
Toggle persistent_decode_choice();
void set_persistent_decode_choice(Toggle choice);

// A cache of at most this many 64-key tiles is attended as one split a KV head: FATHOM_PERSISTENT_ONE_SPLIT_TILES=N
// (a whole number, at least 1), read at the first use, unless set replaced it; a kernel takes it when it is made.
// Unset: 4 (one split a tile measured 1.5-2% slower at context 128; 2.5% before the weights' evict-first policy).
int persistent_one_split_tiles();
void set_persistent_one_split_tiles(int tiles);

// "" when the persistent kernel can decode `model` on its device, else why not (shapes, dtypes, the device).
std::string persistent_decode_unfit(const PersistentDecodeModel& model);

class PersistentDecode {
 public:
  // The model must fit (persistent_decode_unfit): checked, an error naming the problem otherwise.
  explicit PersistentDecode(PersistentDecodeModel model);
  ~PersistentDecode();
  PersistentDecode(const PersistentDecode&) = delete;
  PersistentDecode& operator=(const PersistentDecode&) = delete;

  // One token: x [1, D] BF16 (its embedding), angles [1, d/2, 2] F32 (rope_angles of its position), past I32 [1]
  // (the positions every cache holds before it, < capacity). Writes the token's key and value into every
  // layer's cache at `past` and returns the logits [1, vocab] BF16. Capturable in a CUDA graph.
  Tensor step(const Tensor& x, const Tensor& angles, const Tensor& past);

 private:
  struct Workspace;  // the device's copy of the layer table, the scratch buffers and the barrier's counters
  PersistentDecodeModel model_;
  std::unique_ptr<Workspace> workspace_;
};

}  // namespace fathom
