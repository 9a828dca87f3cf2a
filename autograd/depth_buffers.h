// The buffers a MoDA depth stream (autograd/depth_stream.h) shares with the nodes it records: the
// slots' K/V values, their gradient side buffers, and the readers that leave weights until the write
// nodes form their slots' gradients. Used by the stream and by MoDA attention's node
// (autograd/moda_attention.h) only.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "core/tensor.h"
#include "kernels/moda/moda_attention.h"

namespace fathom {

struct DepthBuffers {
  Tensor k, v;
  bool unwritten_keys_zeroed = false;  // reader keys normalise every slot, written or not
  // stats_dtype(k), allocated by the first reader's backward and not zeroed: a slot's gradients are
  // defined once a reader has put its own there (grad_defined).
  Tensor grad_k, grad_v;
  std::vector<bool> grad_defined;

  // Readers that return weights: per slot, how many were recorded and how many have run backward;
  // their records until every slot of their range has its gradients formed; and gradients formed
  // for slots whose write node has not run yet.
  struct WeightsReader {
    DepthReader reader;
    int64_t unformed;  // slots of the range without gradients yet
  };
  std::vector<int64_t> weights_recorded, weights_done;
  std::vector<bool> formed;
  std::vector<DType> slot_dtype;
  std::vector<WeightsReader> readers;
  std::map<int64_t, SlotGrads> pending;

  bool has_grad(int64_t slot) const { return grad_k.defined() && grad_defined[size_t(slot)]; }
  bool has_weights(int64_t slot) const { return weights_recorded[size_t(slot)] > 0; }

  void record_weights_reader(int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) ++weights_recorded[size_t(s)];
  }
  void add_weights(DepthReader reader) {
    for (int64_t s = reader.begin; s < reader.end; ++s) ++weights_done[size_t(s)];
    const int64_t unformed = reader.end - reader.begin;
    readers.push_back({std::move(reader), unformed});
  }
  bool weights_complete(int64_t s) const {
    return has_weights(s) && weights_done[size_t(s)] == weights_recorded[size_t(s)] && !formed[size_t(s)];
  }

  // The gradients the weights readers give `slot`. The first write node to ask forms them for the
  // run of earlier slots whose readers have all run too (a layer's writes share their readers), so
  // each reader's q and dO are read once per run; the others are kept for their write nodes.
  SlotGrads take_weighted(int64_t slot);

  // Readies slots [begin, end) of the gradient buffers for a reader and says how it puts its own
  // there: it stores them if no reader has reached any of these slots yet (and may_store); otherwise
  // it adds them, after the slots no reader has reached yet are zeroed.
  DepthGradMode prepare_grads(int64_t begin, int64_t end, bool may_store);
};

// The version chain orders nodes only; its values are never read, so a token holds no elements
// (nothing to fill, and the engine's sums of its gradients touch no memory).
Tensor version_token(Device device);

}  // namespace fathom
