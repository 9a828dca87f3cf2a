// What data parallelism adds to a training step (train/train_step.cpp calls it): every rank computes
// the gradients of its part of the global batch (seeded with 1 / (grad_accum x world), so summing
// over ranks gives the global batch's mean gradient), then
//   - plain (train.zero: 0): the gradient arena is summed over ranks in buckets of bucket_elements,
//     each in train.grad_reduce's precision; every rank runs the same AdamW update;
//   - ZeRO-1 (train.zero: 1): the arena is reduce-scattered so that rank r holds the summed gradients
//     of its shard, AdamW keeps moments for that shard only and updates only its values, and the
//     updated values are all-gathered. The fp32 master values stay whole on every rank (the CPU model
//     reads them); the moments, 2/3 of AdamW's state, shrink to 1/world.
// The CPU (MPI) path reduces after the whole backward, bucket by bucket.
#pragma once
#include <cstdint>
#include <string>

#include "distributed/communicator.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"

namespace fathom {

struct DataParallelConfig {
  DType wire = DType::f32;          // train.grad_reduce
  int zero = 0;                     // train.zero
  int64_t bucket_elements = 1 << 22;  // 16 MiB of fp32 gradients per all-reduce
};

// The slice of the trainable arena [0, numel) that rank `rank` of `world` owns under ZeRO-1: equal
// chunks of ceil(numel / world), the last ones shorter (or empty).
OptimizerShard zero_shard(int64_t numel, int rank, int world);

class DataParallel {
 public:
  DataParallel(Communicator& communicator, ParameterArena& arena, DataParallelConfig config);

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.world(); }
  const DataParallelConfig& config() const { return config_; }
  // This rank's part of AdamW's state (the whole arena unless ZeRO-1).
  OptimizerShard optimizer_shard() const { return shard_; }
  // The factor each rank's loss is seeded with on top of 1 / grad_accum.
  double loss_scale() const { return 1.0 / double(comm_.world()); }
  // Means over ranks of per-rank means, in place (losses and objective terms).
  void average(double* values, int64_t count);
  // Sums the gradients over ranks (ZeRO-1: this rank's shard of them) and returns the global norm.
  double reduce_gradients();
  // The AdamW update from the reduced gradients; ZeRO-1 gathers every rank's updated values after.
  void update(AdamW& optimizer, double lr, double grad_scale);
  // Whole moments for a checkpoint (ZeRO-1 gathers the shards; a collective: every rank calls it).
  TensorMap optimizer_state(const AdamW& optimizer);
  // Bytes of optimizer state (moments) this rank holds.
  int64_t optimizer_bytes_per_rank() const { return 2 * shard_.length * int64_t(sizeof(float)); }

 private:
  void all_reduce_in_buckets(Tensor& grads);
  // The shard's chunks padded to world equal parts, for reduce-scatter and all-gather.
  Tensor padded(const Tensor& whole);

  Communicator& comm_;
  ParameterArena& arena_;
  DataParallelConfig config_;
  OptimizerShard shard_;
  int64_t chunk_ = 0;     // ZeRO-1: elements per rank's chunk (padded)
  Tensor staging_;        // ZeRO-1: world x chunk elements
  Tensor shard_grads_;    // ZeRO-1: this rank's summed gradients
};

}  // namespace fathom
