// Collectives over Open MPI's MPI_COMM_WORLD on host memory (the CPU training path), and the MPI
// process session itself: initialised once per process (MPI_THREAD_SERIALIZED), finalised at exit.
// MPI's reductions over F32 run in the library's fixed order for a given world size, so a run
// repeats bit for bit. start_all_reduce_sum runs the same MPI_Allreduce on a collective thread
// (distributed/collective_thread.h) while the caller goes on: the caller's next MPI call must come
// after it has waited for every one it started.
#pragma once
#include "distributed/collective_thread.h"
#include "distributed/communicator.h"

namespace fathom {

// Initialises MPI (once; thread level SERIALIZED) and returns the rank and size it reports.
RankInfo start_mpi(int local_rank);
// True once start_mpi ran and MPI is not yet finalised.
bool mpi_running();
// MPI_Abort over MPI_COMM_WORLD with `message` printed first, naming this rank.
[[noreturn]] void mpi_abort_world(const std::string& message);

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const RankInfo& info);
  const RankInfo& info() const override { return info_; }
  std::string backend_name() const override { return "mpi"; }
  void all_reduce_sum(Tensor& tensor) override;
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& tensor) override;
  void all_reduce_sum(double* values, int64_t count) override;
  void reduce_scatter_sum(const Tensor& input, Tensor& output) override;
  void all_gather(const Tensor& input, Tensor& output) override;
  void broadcast(Tensor& tensor, int root) override;
  void broadcast_bytes(void* data, int64_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(const std::string& message) override { mpi_abort_world(message); }

 private:
  RankInfo info_;
  std::unique_ptr<CollectiveThread> thread_;  // made on the first start_all_reduce_sum
};

}  // namespace fathom
