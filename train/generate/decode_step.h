// One decoding step of a batch: Decoder::decode of one new token per sequence, the head's logits for
// them and, when decoding greedily, each row's argmax. On a GPU the step is captured once as a CUDA
// graph (kernels/runtime/backend.h) and replayed at every later position: the step's kernels read the
// positions from the decoding state's device-held lengths and write to the same buffers each time, so
// a replay is one launch instead of every layer's kernels and the host work around them. Each sequence's
// position is its own (DecodeState::lengths), so a ragged batch of prompts replays as well. The first
// step runs eagerly (it warms the GEMM plans and kernels), the second is captured and replayed, the
// rest replay. Where a graph cannot be used the steps stay eager, with the same results: on the CPU,
// when asked, when a layer's state is not replayable (MixerCache::replayable: MoD's routed blocks),
// and when the capture fails (a kernel that needs the host, such as decode attention's host
// reference for head dims without a kernel); eager_reason() says which. Where FATHOM_PERSISTENT_DECODE is on and
// the model fits, a step of one sequence runs as the persistent kernel (train/generate/persistent_step.h),
// graphed or not; persistent_reason() says why not otherwise.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/decoder.h"

namespace fathom {

class PersistentStep;

// The logits [B, vocab] of each sequence's last position of hidden [B, T, d]; for T > 1 the last rows
// are gathered first, so only B rows meet the head.
Tensor last_logits(const Decoder& model, const Variable& hidden);

class DecodeStep {
 public:
  struct Output {
    Tensor logits;  // [B, vocab] on the device, in the activations' dtype
    Tensor ids;     // I32 [B] on the device: each row's argmax (greedy only; else undefined)
  };
  // `state` must outlive the step object; once its prompt is read, it is advanced only through run().
  // graphs: use CUDA graphs where they can be used.
  DecodeStep(const Decoder& model, DecodeState& state, bool greedy, bool graphs);
  ~DecodeStep();
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;

  // Reads one token per sequence (ids.size() == batch), sequence b's at position state.lengths[b], and extends the
  // caches by it. The output's tensors are overwritten by the next run: read them before.
  Output run(const std::vector<int32_t>& ids);
  // Whether the steps are replaying a captured graph.
  bool graphed() const;
  // Whether a step can follow the last one on the device alone: greedy, replaying a graph (the graph's
  // argmax writes the ids where its embedding reads them).
  bool chains() const { return greedy_ && graphed(); }
  // The ids the last step chose (chains() must hold), on the host, after launching the next step from
  // them on the device when `launch_next`: the device then runs that step while the host reads these, and
  // waits for the host between steps only where the host's work on a step outlasts the next step. The
  // copy is issued on the current stream, which must be the one the graph was captured on. The next
  // step's outputs are read through the next call.
  std::vector<int32_t> ids_then_launch_next(bool launch_next);
  // Why the steps run eagerly ("" while graphed, or before a capture was tried).
  const std::string& eager_reason() const { return eager_reason_; }
  // Whether the steps run as the persistent kernel, and else why not.
  bool persistent() const { return persistent_ != nullptr; }
  const std::string& persistent_reason() const { return persistent_reason_; }

 private:
  Output compute(const Tensor& input) const;
  void try_capture();

  const Decoder& model_;
  DecodeState& state_;
  bool greedy_;
  int64_t steps_ = 0;
  Tensor input_;  // I32 [B, 1] on the device: the graph's input, and where a greedy step writes its ids
  Output output_;
  std::string eager_reason_;
  std::unique_ptr<PersistentStep> persistent_;
  std::string persistent_reason_;
  void replay_and_advance();  // the graph, then the host-side lengths one position on
  struct Graphed;
  std::unique_ptr<Graphed> graph_;
};

}  // namespace fathom
