// The MoDA depth stream (DESIGN.md 4.2): per-forward K/V buffers [B, T, S, Hk, d] that writers fill
// slot by slot, in place, and that MoDA attention reads. Gradients travel the other way. Each slot's
// write node runs after all readers of that slot (they were recorded later) and hands the slot's
// gradient to the writer. Readers with few query heads per KV head (G <= 4, writer keys) leave
// weights, scalars per query row and slot, with their q and dO; the first write node of a layer
// forms its slots' gradients from all their readers at once (depth_slot_grads). Other readers put
// vector gradients in a side buffer: the first to run backward over a slot range stores them there
// (nothing is zeroed or read back), later readers add theirs. An empty "version" variable chains
// writes and reads so the engine orders them; no buffer is ever copied per reader.
//
// Precision: the value buffers have the stream's dtype (BF16 on the GPU, where the MoDA kernels
// compute in bf16; F32 or F64 on the CPU); weights and the gradient side buffers are kept in
// stats_dtype of it (F32 for BF16 values), and the sums over readers are formed in it. A writer
// gets its slot's gradient back in its own dtype.
#pragma once
#include <memory>

#include "autograd/variable.h"
#include "kernels/moda/moda_attention.h"

namespace fathom {

struct DepthBuffers;  // autograd/depth_buffers.h

// Reader depth keys (moda.depth_key: reader): the slots hold raw keys and the reader normalises
// them with its own RMSNorm weight [Hk * d] (over each token's full KV width, like the attention
// k-norm) before the softmax. An undefined weight reads the keys as stored.
struct DepthKeyNorm {
  Variable weight;
  double eps = 0;
};

// Whether a reader with G query heads per KV head leaves weights rather than vector gradients
// (writer keys only: reader keys take their gradient through the reader's norm as vectors).
bool depth_reader_leaves_weights(int64_t query_heads_per_kv_head, bool reader_keys);

class DepthStream {
 public:
  DepthStream(int64_t batch, int64_t seq_len, int64_t slots, int64_t kv_heads, int64_t head_dim, DType dtype,
              Device device);

  // Stores k, v [B, T, Hk, d] in `slot` (each slot is written once per forward), converted to the
  // stream's dtype where they differ (F32 activations into a BF16 stream).
  void write(int64_t slot, const Variable& k, const Variable& v);
  // MoDA attention of q [B, T, Hq, d] over its layer's causal k, v and the depth slots [begin, end).
  // q, k, v have the stream's dtype, or are F32 for a BF16 stream (cast for the kernels, o cast back).
  Variable attend(const Variable& q, const Variable& k, const Variable& v, int64_t begin, int64_t end, double scale,
                  const DepthKeyNorm& key_norm = {});

  // Decoding (no gradient): the slots [begin, end) as a reader sees them, for decode_attention: as
  // stored, or with reader keys every key through the reader's norm.
  DepthSlots read(int64_t begin, int64_t end, const DepthKeyNorm& key_norm = {});

  // train.recompute: block. A block re-run in backward first rewinds the stream to the slots
  // written before it (its reads see the same slots, its writes land in the same ones, with the
  // same values) and starts a fresh version chain; tie() then makes the block's output depend on the
  // writes it recorded since, so the re-run's own backward hands each of its slots' gradients
  // (complete by then: every reader is a later block, re-run and backpropagated before it) to the
  // writers.
  void rewind(int64_t written);
  Variable tie(const Variable& y) const;

  int64_t slots() const;
  int64_t slots_written() const { return written_; }
  DType dtype() const;
  // Bytes of the K and V buffers (the depth cache of one forward).
  size_t bytes() const;

 private:
  // Reader keys: the whole key buffer through the reader's norm (unwritten slots zeroed first).
  Variable normalised_keys(const Variable& raw, const DepthKeyNorm& key_norm);

  std::shared_ptr<DepthBuffers> buffers_;  // shared with the nodes the stream records
  Variable version_;
  int64_t written_ = 0;
};

}  // namespace fathom
