// A world of one process: every collective leaves its tensors as they are, so a single-process run
// computes exactly what it computed before data parallelism existed.
#pragma once
#include "distributed/communicator.h"

namespace fathom {

class SingleCommunicator final : public Communicator {
 public:
  const RankInfo& info() const override { return info_; }
  std::string backend_name() const override { return "single"; }
  void all_reduce_sum(Tensor& tensor) override;
  void all_reduce_sum(double* values, int64_t count) override {}
  void reduce_scatter_sum(const Tensor& input, Tensor& output) override;
  void all_gather(const Tensor& input, Tensor& output) override;
  void broadcast(Tensor& tensor, int root) override;
  void broadcast_bytes(void* data, int64_t bytes, int root) override {}
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message) override;

 private:
  RankInfo info_;
};

}  // namespace fathom
