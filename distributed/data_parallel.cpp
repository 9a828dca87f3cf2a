#include "distributed/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise/elementwise.h"
#include "optim/grad_clip.h"

namespace fathom {

OptimizerShard zero_shard(int64_t numel, int rank, int world) {
  const int64_t chunk = (numel + world - 1) / world;
  const int64_t begin = std::min(numel, chunk * rank);
  return {begin, std::min(numel, begin + chunk) - begin};
}

DataParallel::DataParallel(Communicator& communicator, ParameterArena& arena, DataParallelConfig config)
    : comm_(communicator), arena_(arena), config_(config) {
  FATHOM_CHECK(config_.zero == 0 || config_.zero == 1, "train.zero must be 0 or 1, got ", config_.zero);
  FATHOM_CHECK(config_.wire == DType::f32 || config_.wire == DType::bf16, "train.grad_reduce must be fp32 or bf16");
  FATHOM_CHECK(config_.bucket_elements >= 1, "data parallel: bucket size must be at least 1 element");
  const int64_t n = arena_.trainable_numel();
  if (config_.zero == 1) {
    shard_ = zero_shard(n, comm_.rank(), comm_.world());
    chunk_ = (n + comm_.world() - 1) / comm_.world();
    const Device device = arena_.values().device();
    staging_ = Tensor::zeros({chunk_ * comm_.world()}, DType::f32, device);
    shard_grads_ = Tensor::zeros({chunk_}, DType::f32, device);
  } else {
    shard_ = {0, n};
    if (comm_.world() > 1)
      buckets_ = std::make_unique<BucketedReduction>(comm_, arena_, config_.bucket_elements, config_.wire);
  }
}

GradientListener* DataParallel::listen_to_backward() {
  if (!buckets_) return nullptr;
  buckets_->arm();
  return buckets_.get();
}

void DataParallel::average(double* values, int64_t count) {
  if (comm_.world() == 1) return;
  comm_.all_reduce_sum(values, count);
  for (int64_t i = 0; i < count; ++i) values[i] /= double(comm_.world());
}

double DataParallel::reduce_gradients() {
  Tensor& grads = arena_.grads();
  if (config_.zero == 0) {
    if (buckets_) buckets_->finish();
    return grad_norm(grads);  // the single-process norm, bit for bit
  }
  // ZeRO-1: the arena, padded to world equal chunks, reduce-scattered into this rank's chunk.
  const int64_t n = grads.numel();
  staging_.narrow(0, n).copy_from(grads);
  if (config_.wire == DType::f32) {
    comm_.reduce_scatter_sum(staging_, shard_grads_);
  } else {
    Tensor wire = staging_.to(DType::bf16), shard_wire = Tensor::zeros({chunk_}, DType::bf16, staging_.device());
    comm_.reduce_scatter_sum(wire, shard_wire);
    shard_grads_.copy_from(shard_wire.to(DType::f32));
  }
  // The global norm from every shard's sum of squares (padding is zero).
  double squares = sum_squares(shard_grads_);
  comm_.all_reduce_sum(&squares, 1);
  return std::sqrt(squares);
}

void DataParallel::update(AdamW& optimizer, double lr, double grad_scale) {
  if (config_.zero == 0) {
    optimizer.step(lr, grad_scale);
    return;
  }
  optimizer.step_shard(lr, grad_scale, shard_grads_.narrow(0, shard_.length));
  // Every rank's updated chunk into every rank's values.
  const int64_t n = arena_.trainable_numel();
  Tensor values = arena_.values().narrow(0, n);
  if (shard_.length > 0)
    staging_.narrow(shard_.begin, shard_.length).copy_from(values.narrow(shard_.begin, shard_.length));
  Tensor mine = staging_.narrow(int64_t(comm_.rank()) * chunk_, chunk_);
  comm_.all_gather(mine, staging_);
  values.copy_from(staging_.narrow(0, n));
  if (arena_.has_compute_copy()) arena_.refresh_compute_copy();
}

TensorMap DataParallel::optimizer_state(const AdamW& optimizer) {
  if (config_.zero == 0) return optimizer.state();
  const int64_t n = arena_.trainable_numel();
  auto gather = [&](const Tensor& moment) {
    Tensor mine = staging_.narrow(int64_t(comm_.rank()) * chunk_, chunk_);
    mine.zero_();
    if (shard_.length > 0) mine.narrow(0, shard_.length).copy_from(moment);
    comm_.all_gather(mine, staging_);
    return staging_.narrow(0, n).clone();
  };
  const Tensor m = gather(optimizer.exp_avg()), v = gather(optimizer.exp_avg_sq());
  return optimizer.state_of(m, v);
}

}  // namespace fathom
