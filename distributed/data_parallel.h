// What data parallelism adds to a training step (train/run/train_step.cpp calls it): every rank computes
// the gradients of its part of the global batch (seeded with 1 / (grad_accum x world), so summing
// over ranks gives the global batch's mean gradient), then
//   - plain (train.zero: 0): the gradient arena is summed over ranks in buckets of bucket_elements,
//     each in train.grad_reduce's precision, started while the step's last backward still runs
//     (distributed/bucketed_reduction.h); every rank runs the same AdamW update;
//   - ZeRO-1 (train.zero: 1): the arena is reduce-scattered so that rank r holds the summed gradients
//     of its shard, AdamW keeps moments for that shard only and updates only its values, and the
//     updated values are all-gathered. The fp32 master values stay whole on every rank (the CPU model
//     reads them); the moments, 2/3 of AdamW's state, shrink to 1/world.
// ZeRO-1's reduce-scatter covers the whole arena in one collective, after backward.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "distributed/bucketed_reduction.h"
#include "distributed/communicator.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"

namespace fathom {

struct DataParallelConfig {
  DType wire = DType::f32;            // train.grad_reduce
  int zero = 0;                       // train.zero
  int64_t bucket_elements = 1 << 22;  // 16 MiB of fp32 gradients per all-reduce (train.grad_bucket_kib)
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
  // The listener the step's last backward runs under, so that buckets start as their gradients are
  // final; null when nothing overlaps (a world of 1, ZeRO-1). Call reduce_gradients after it.
  GradientListener* listen_to_backward();
  // Sums the gradients over ranks (ZeRO-1: this rank's shard of them) and returns the global norm.
  // The buckets started during backward are waited for; the others start now.
  double reduce_gradients();
  // Buckets that started while the last step's backward still ran (plain data parallel).
  int64_t buckets_started_early() const { return buckets_ ? buckets_->started_early() : 0; }
  int64_t bucket_count() const { return buckets_ ? buckets_->bucket_count() : 0; }
  // The AdamW update from the reduced gradients; ZeRO-1 gathers every rank's updated values after.
  void update(AdamW& optimizer, double lr, double grad_scale);
  // Whole moments for a checkpoint (ZeRO-1 gathers the shards; a collective: every rank calls it).
  TensorMap optimizer_state(const AdamW& optimizer);
  // Bytes of optimizer state (moments) this rank holds.
  int64_t optimizer_bytes_per_rank() const { return 2 * shard_.length * int64_t(sizeof(float)); }

 private:
  // The shard's chunks padded to world equal parts, for reduce-scatter and all-gather.
  Tensor padded(const Tensor& whole);

  Communicator& comm_;
  ParameterArena& arena_;
  DataParallelConfig config_;
  OptimizerShard shard_;
  std::unique_ptr<BucketedReduction> buckets_;  // plain data parallel over more than one rank
  int64_t chunk_ = 0;                           // ZeRO-1: elements per rank's chunk (padded)
  Tensor staging_;                              // ZeRO-1: world x chunk elements
  Tensor shard_grads_;                          // ZeRO-1: this rank's summed gradients
};

}  // namespace fathom
