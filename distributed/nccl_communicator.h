// Collectives over NCCL between the GPUs of a data-parallel job (built with FATHOM_CUDA and NCCL).
// The unique id travels over MPI, which also carries host values (broadcasts of bytes, barriers).
// Each collective is issued on the device's current stream, after the compute that produced its
// tensor, and waited for while NCCL's asynchronous error state is polled: a peer that failed or
// vanished makes this rank abort the communicator (ncclCommAbort) and end the job naming itself,
// as does a collective that takes longer than FATHOM_NCCL_TIMEOUT seconds (default 600).
// start_all_reduce_sum runs on a communication stream of the communicator's own: it waits (an event)
// for the compute stream's work queued so far, and its wait() makes the compute stream wait for it,
// so the reduction overlaps whatever the compute stream does in between (the rest of backward).
#pragma once
#include <memory>

#include "distributed/communicator.h"
#include "distributed/mpi_communicator.h"

namespace fathom {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RankInfo& info, Device device);
  ~NcclCommunicator() override;
  const RankInfo& info() const override { return info_; }
  std::string backend_name() const override { return "nccl"; }
  void all_reduce_sum(Tensor& tensor) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& tensor) override;
  void all_reduce_sum(double* values, int64_t count) override;
  void reduce_scatter_sum(const Tensor& input, Tensor& output) override;
  void all_gather(const Tensor& input, Tensor& output) override;
  void broadcast(Tensor& tensor, int root) override;
  void broadcast_bytes(void* data, int64_t bytes, int root) override { host_.broadcast_bytes(data, bytes, root); }
  void barrier() override;
  [[noreturn]] void abort(const std::string& message) override;

 private:
  // Waits for the stream's queued collective, polling NCCL's error state; aborts on error or timeout.
  void wait(const char* collective);
  // Polls `finished` (true once the work is done) with the same error and timeout handling.
  template <class Finished>
  void poll(const char* collective, Finished finished);
  class Pending;

  RankInfo info_;
  Device device_;
  MpiCommunicator host_;
  struct State;
  std::unique_ptr<State> state_;
  double timeout_seconds_ = 600;
};

}  // namespace fathom
