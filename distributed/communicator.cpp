#include "distributed/communicator.h"

namespace fathom {

namespace {

// A collective that finished before its handle was made.
class Finished final : public PendingCollective {
 public:
  void wait() override {}
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::start_all_reduce_sum(Tensor& tensor) {
  all_reduce_sum(tensor);
  return std::make_unique<Finished>();
}

void check_collective_tensor(const Tensor& tensor, const char* collective) {
  FATHOM_CHECK(tensor.defined(), collective, ": the tensor is undefined");
  FATHOM_CHECK(tensor.dtype() == DType::f32 || tensor.dtype() == DType::bf16, collective,
               ": only F32 and BF16 tensors travel between ranks, got ", describe(tensor));
}

void check_chunked(const Tensor& whole, const Tensor& chunk, int world, const char* collective) {
  check_collective_tensor(whole, collective);
  check_collective_tensor(chunk, collective);
  FATHOM_CHECK(whole.dtype() == chunk.dtype() && whole.device() == chunk.device(), collective,
               ": the chunk and the whole tensor differ in dtype or device: ", describe(chunk), " and ",
               describe(whole));
  FATHOM_CHECK(whole.numel() == chunk.numel() * world, collective, ": ", describe(whole), " is not ", world,
               " chunks of ", describe(chunk));
}

}  // namespace fathom
