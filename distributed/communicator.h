// The collectives data-parallel training needs, over one group of processes (ranks). Backends:
// SingleCommunicator (a world of one: every collective is the identity), MpiCommunicator (Open MPI,
// CPU tensors) and NcclCommunicator (CUDA tensors; built with FATHOM_CUDA and NCCL). Every rank must
// call the same collectives in the same order with the same element counts.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace fathom {

struct RankInfo {
  int rank = 0;        // this process, 0-based
  int world = 1;       // how many processes train together
  int local_rank = 0;  // this process among those of its machine: the GPU it takes
};

// A collective started without waiting for it (Communicator::start_all_reduce_sum). Its tensor must
// be left alone until wait() returns; every rank starts the same collectives in the same order.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Returns once the result is in place: on the host, or (NCCL) ordered before any work issued to
  // the current stream from now on.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const RankInfo& info() const = 0;
  int rank() const { return info().rank; }
  int world() const { return info().world; }
  int local_rank() const { return info().local_rank; }
  virtual std::string backend_name() const = 0;

  // In place: every rank ends with the element-wise sum over ranks. F32 or BF16 tensors, contiguous.
  virtual void all_reduce_sum(Tensor& tensor) = 0;
  // all_reduce_sum without waiting: MPI's on a collective thread (no MPI call of the caller's until
  // every started one is waited for), NCCL's on a communication stream of its own ordered after the
  // work queued so far on the current stream. The same reduction as all_reduce_sum, bit for bit.
  // Backends that cannot overlap it reduce at once (this default).
  virtual std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& tensor);
  // Sums of host doubles (losses, norms), in place on every rank.
  virtual void all_reduce_sum(double* values, int64_t count) = 0;
  // `input` holds world() equal chunks; rank r's `output` (one chunk) gets the sum of chunk r over ranks.
  virtual void reduce_scatter_sum(const Tensor& input, Tensor& output) = 0;
  // Rank r's `input` (one chunk) lands at chunk r of every rank's `output` (world() chunks).
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;
  // `tensor` of rank `root` is copied to every rank.
  virtual void broadcast(Tensor& tensor, int root) = 0;
  virtual void broadcast_bytes(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank's process now (no collective may be pending elsewhere): for errors one rank hits.
  [[noreturn]] virtual void abort(const std::string& message) = 0;
};

// Checks shared by the backends: the collective's name and the tensors it was given.
void check_collective_tensor(const Tensor& tensor, const char* collective);
void check_chunked(const Tensor& whole, const Tensor& chunk, int world, const char* collective);

}  // namespace fathom
