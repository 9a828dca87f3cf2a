// Data parallelism's gradient all-reduce, in buckets that start while backward still runs. The
// trainable gradient arena is cut into buckets of bucket_elements from its start (the last one
// shorter); each bucket is one all-reduce in the wire precision (train.grad_reduce). Backward
// finishes the gradients roughly in reverse arena order (the head's first, the embedding's last), so
// the buckets start from the last one down: bucket b once every trainable parameter overlapping it
// has its final gradient (autograd/gradient_ready.h reports each) and bucket b + 1 has started.
// Every rank thus starts the same reductions, with the same contents, in the same order, whatever
// its own timing, and each element is summed exactly as a reduction after the whole backward sums it.
//
// Only the micro-batch that ends a step listens (train/run/train_step.cpp): the earlier ones' gradients
// are partial sums. On the CPU each bucket is the same MPI_Allreduce as before, run by the MPI
// backend's collective thread while backward goes on; with NCCL they run on the communicator's own
// stream, ordered after the gradient writes by an event and before the optimizer by another.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/gradient_ready.h"
#include "distributed/communicator.h"
#include "layers/parameter_arena.h"

namespace fathom {

class BucketedReduction final : public GradientListener {
 public:
  BucketedReduction(Communicator& communicator, ParameterArena& arena, int64_t bucket_elements, DType wire);

  int64_t bucket_count() const { return int64_t(waiting_.size()); }
  // Elements [begin, end) of the gradient arena in bucket b.
  std::pair<int64_t, int64_t> bucket_range(int64_t b) const;
  // Starts listening for one backward: every bucket waits for all of its parameters again.
  void arm();
  void gradient_final(const VariableImpl& leaf) override;
  // Starts the buckets that have not started (backward has returned: every gradient is final), in
  // the same descending order, then waits for all; the arena holds the sums over ranks after.
  void finish();
  // Buckets started before finish() in the last step: those that overlapped backward.
  int64_t started_early() const { return started_early_; }

 private:
  void start_ready();  // every bucket whose turn it is and whose gradients are final
  void start(int64_t bucket);

  Communicator& comm_;
  ParameterArena& arena_;
  int64_t bucket_elements_;
  DType wire_;
  std::unordered_map<const VariableImpl*, size_t> entry_of_;  // trainable parameters by their leaf
  std::vector<std::vector<int64_t>> buckets_of_entry_;        // the buckets each entry overlaps
  std::vector<int64_t> parameters_of_bucket_;                 // how many entries overlap each bucket
  std::vector<int64_t> waiting_;                              // of those, the ones not final yet
  std::vector<bool> final_;                                   // per entry, in this backward
  bool armed_ = false;                                        // listening to a backward
  int64_t next_ = -1;                                         // the highest bucket not started
  int64_t started_early_ = 0;
  struct InFlight {
    int64_t bucket;
    Tensor wire;  // the bucket in bf16 when the wire is bf16
    std::unique_ptr<PendingCollective> pending;
  };
  std::vector<InFlight> in_flight_;
};

}  // namespace fathom
