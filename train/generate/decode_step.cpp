#include "train/generate/decode_step.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/argmax/argmax.h"
#include "train/generate/persistent_step.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/runtime/backend.h"
#endif

namespace fathom {

Tensor last_logits(const Decoder& model, const Variable& hidden) {
  const int64_t B = hidden.dim(0), T = hidden.dim(1), d = hidden.dim(2);
  if (T == 1) return linear(reshape(hidden, {B, d}), model.head_weight()).value();
  std::vector<int32_t> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) rows[size_t(b)] = int32_t(b * T + T - 1);
  const Variable last =
      embedding(Tensor::from_vector(rows, {B}).to(hidden.value().device()), reshape(hidden, {B * T, d}));
  return linear(last, model.head_weight()).value();
}

#ifdef FATHOM_WITH_CUDA
struct DecodeStep::Graphed {
  cuda::Graph graph;
  cuda::HostCopy ids;  // the last step's ids on their way to the host
};
#else
struct DecodeStep::Graphed {};
#endif

DecodeStep::DecodeStep(const Decoder& model, DecodeState& state, bool greedy, bool graphs)
    : model_(model), state_(state), greedy_(greedy) {
  const Device device = state.device_lengths.device();
  if (!graphs)
    eager_reason_ = "CUDA graphs were turned off";
  else if (!device.is_cuda())
    eager_reason_ = "CUDA graphs are for GPU decoding";
#ifndef FATHOM_WITH_CUDA
  else
    eager_reason_ = "this build has no CUDA backend";
#endif
  if (device.is_cuda()) input_ = Tensor::empty({state.batch, 1}, DType::i32, device);
  persistent_ = PersistentStep::make(model, state, &persistent_reason_);
}

DecodeStep::~DecodeStep() = default;

bool DecodeStep::graphed() const {
#ifdef FATHOM_WITH_CUDA
  return graph_ && graph_->graph.captured();
#else
  return false;
#endif
}

DecodeStep::Output DecodeStep::compute(const Tensor& input) const {
  NoGrad no_grad;
  Output out;
  out.logits = persistent_ ? persistent_->logits(input) : last_logits(model_, model_.decode(input, state_));
  if (greedy_ && input_.defined()) {
    // Into the input buffer, which the embedding has read already: a replay can follow from it.
    out.ids = input_.view({state_.batch});
    argmax_rows_into(out.logits, out.ids);
  } else if (greedy_) {
    out.ids = argmax_rows(out.logits);
  }
  return out;
}

void DecodeStep::try_capture() {
#ifdef FATHOM_WITH_CUDA
  const std::vector<int64_t> before = state_.lengths;
  const int device = input_.device().index;
  std::string reason;
  cuda::Graph graph = cuda::Graph::capture(
      device, [&] { output_ = compute(input_); }, &reason);
  if (!graph.captured()) {
    // Nothing captured ran: the host's counts go back, the device's never moved.
    state_.set_lengths(before);
    output_ = {};
    eager_reason_ = "the step could not be captured as a CUDA graph: " + reason;
    return;
  }
  graph_ = std::make_unique<Graphed>();
  graph_->graph = std::move(graph);
#endif
}

DecodeStep::Output DecodeStep::run(const std::vector<int32_t>& ids) {
  FATHOM_CHECK(int64_t(ids.size()) == state_.batch, "decode step: ", ids.size(), " ids for a batch of ", state_.batch);
  FATHOM_CHECK(state_.shortest() >= 1, "decode step: a sequence of the decoding state has read no prompt");
  state_.check_room_for(1);
  const Tensor host = Tensor::from_vector(ids, {state_.batch, 1});
  ++steps_;
  if (!input_.defined()) return compute(host);
  input_.copy_from(host);
#ifdef FATHOM_WITH_CUDA
  if (graphed()) {
    replay_and_advance();
    return output_;
  }
  if (eager_reason_.empty() && steps_ >= 2 && !state_.replayable())
    eager_reason_ = "a layer's decoding state cannot be replayed (MoD's routed blocks)";
  if (eager_reason_.empty() && steps_ >= 2) {
    try_capture();
    if (graphed()) {
      // The capture ran the step's host side (the counts moved on); the replay runs its device side.
      graph_->graph.replay();
      return output_;
    }
  }
#endif
  return compute(input_);
}

void DecodeStep::replay_and_advance() {
#ifdef FATHOM_WITH_CUDA
  graph_->graph.replay();
  state_.count_one_more_position();
#endif
}

std::vector<int32_t> DecodeStep::ids_then_launch_next(bool launch_next) {
  FATHOM_CHECK(chains(), "decode step: steps chain on the device only when greedy and replaying a graph");
#ifdef FATHOM_WITH_CUDA
  if (launch_next) state_.check_room_for(1);
  graph_->ids.start(output_.ids);  // before the next step overwrites them (on the graph's stream: the current one)
  if (launch_next) {
    ++steps_;
    replay_and_advance();
  }
  return graph_->ids.wait().to_vector<int32_t>();
#else
  (void)launch_next;
  return {};
#endif
}

}  // namespace fathom
