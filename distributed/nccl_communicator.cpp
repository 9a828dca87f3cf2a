#include "distributed/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/runtime/backend.h"

namespace fathom {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  bool aborted = false;
  std::optional<cuda::Stream> comm_stream;  // start_all_reduce_sum's, made on first use
};

namespace {

ncclDataType_t nccl_type(const Tensor& t) { return t.dtype() == DType::f32 ? ncclFloat32 : ncclBfloat16; }

void check_device(const Tensor& t, Device device, const char* collective) {
  FATHOM_CHECK(t.device() == device, collective, ": the NCCL backend moves tensors on ", device.str(), ", got ",
               describe(t));
}

cudaStream_t stream_of(Device device) { return reinterpret_cast<cudaStream_t>(cuda::current_stream(device.index)); }

}  // namespace

NcclCommunicator::NcclCommunicator(const RankInfo& info, Device device)
    : info_(info), device_(device), host_(info), state_(std::make_unique<State>()) {
  if (const char* timeout = std::getenv("FATHOM_NCCL_TIMEOUT")) {
    char* end = nullptr;
    timeout_seconds_ = std::strtod(timeout, &end);
    FATHOM_CHECK(*end == '\0' && timeout_seconds_ > 0, "FATHOM_NCCL_TIMEOUT='", timeout,
                 "' is not a positive number of seconds");
  }
  ncclUniqueId id{};
  if (info_.rank == 0) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    FATHOM_CHECK(made == ncclSuccess, "ncclGetUniqueId failed: ", ncclGetErrorString(made));
  }
  host_.broadcast_bytes(&id, sizeof id, 0);
  cudaSetDevice(device_.index);
  const ncclResult_t joined = ncclCommInitRank(&state_->comm, info_.world, id, info_.rank);
  FATHOM_CHECK(joined == ncclSuccess, "rank ", info_.rank, ": ncclCommInitRank over ", info_.world,
               " ranks failed: ", ncclGetErrorString(joined), " (NCCL_DEBUG=INFO says more)");
}

NcclCommunicator::~NcclCommunicator() {
  if (state_->comm != nullptr && !state_->aborted) ncclCommDestroy(state_->comm);
}

void NcclCommunicator::wait(const char* collective) {
  const cudaStream_t stream = stream_of(device_);
  poll(collective, [stream] { return cudaStreamQuery(stream); });
}

template <class Finished>
void NcclCommunicator::poll(const char* collective, Finished finished) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t done = finished();
    if (done == cudaSuccess) return;
    if (done != cudaErrorNotReady) abort(std::string(collective) + ": CUDA reports " + cudaGetErrorString(done));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(state_->comm, &async);
    if (async != ncclSuccess)
      abort(std::string(collective) + ": NCCL reports " + ncclGetErrorString(async) + " (a peer failed or left)");
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_seconds_)
      abort(std::string(collective) + " did not finish within " + std::to_string(int(timeout_seconds_)) +
            " s (FATHOM_NCCL_TIMEOUT): another rank stopped or hangs");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::all_reduce_sum(Tensor& tensor) {
  check_collective_tensor(tensor, "all_reduce_sum");
  check_device(tensor, device_, "all_reduce_sum");
  const ncclResult_t r = ncclAllReduce(tensor.raw(), tensor.raw(), size_t(tensor.numel()), nccl_type(tensor), ncclSum,
                                       state_->comm, stream_of(device_));
  if (r != ncclSuccess) abort(std::string("ncclAllReduce: ") + ncclGetErrorString(r));
  wait("all_reduce_sum");
}

// One all-reduce on the communication stream: `done` is recorded after it there.
class NcclCommunicator::Pending final : public PendingCollective {
 public:
  Pending(NcclCommunicator& owner, Tensor tensor) : owner_(owner), tensor_(std::move(tensor)) {
    cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
  }
  ~Pending() override {
    if (!waited_) cudaEventSynchronize(done_);  // an error unwinds: the buffer outlives the reduction
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    owner_.poll("all_reduce_sum (overlapped)", [this] { return cudaEventQuery(done_); });
    cudaStreamWaitEvent(stream_of(owner_.device_), done_, 0);
    waited_ = true;
  }

  NcclCommunicator& owner_;
  Tensor tensor_;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool waited_ = false;
};

std::unique_ptr<PendingCollective> NcclCommunicator::start_all_reduce_sum(Tensor& tensor) {
  check_collective_tensor(tensor, "all_reduce_sum");
  check_device(tensor, device_, "all_reduce_sum");
  if (!state_->comm_stream) state_->comm_stream.emplace(cuda::Stream::create(device_.index));
  const cudaStream_t comm_stream = reinterpret_cast<cudaStream_t>(state_->comm_stream->handle());
  auto pending = std::make_unique<Pending>(*this, tensor);
  // After the gradient writes queued on the compute stream. The handle keeps the memory until wait()
  // has ordered the compute stream (whose allocator reuses freed blocks) after the reduction.
  cudaEventRecord(pending->ready_, stream_of(device_));
  cudaStreamWaitEvent(comm_stream, pending->ready_, 0);
  const ncclResult_t r = ncclAllReduce(tensor.raw(), tensor.raw(), size_t(tensor.numel()), nccl_type(tensor), ncclSum,
                                       state_->comm, comm_stream);
  if (r != ncclSuccess) abort(std::string("ncclAllReduce: ") + ncclGetErrorString(r));
  cudaEventRecord(pending->done_, comm_stream);
  return pending;
}

void NcclCommunicator::all_reduce_sum(double* values, int64_t count) {
  Tensor host = Tensor::from_vector(std::vector<double>(values, values + count), {count});
  Tensor device = host.to(device_);
  const ncclResult_t r =
      ncclAllReduce(device.raw(), device.raw(), size_t(count), ncclFloat64, ncclSum, state_->comm, stream_of(device_));
  if (r != ncclSuccess) abort(std::string("ncclAllReduce: ") + ncclGetErrorString(r));
  wait("all_reduce_sum");
  const std::vector<double> summed = device.to(Device::cpu()).to_vector<double>();
  std::copy(summed.begin(), summed.end(), values);
}

void NcclCommunicator::reduce_scatter_sum(const Tensor& input, Tensor& output) {
  check_chunked(input, output, info_.world, "reduce_scatter_sum");
  check_device(input, device_, "reduce_scatter_sum");
  const ncclResult_t r = ncclReduceScatter(input.raw(), output.raw(), size_t(output.numel()), nccl_type(input), ncclSum,
                                           state_->comm, stream_of(device_));
  if (r != ncclSuccess) abort(std::string("ncclReduceScatter: ") + ncclGetErrorString(r));
  wait("reduce_scatter_sum");
}

void NcclCommunicator::all_gather(const Tensor& input, Tensor& output) {
  check_chunked(output, input, info_.world, "all_gather");
  check_device(input, device_, "all_gather");
  const ncclResult_t r = ncclAllGather(input.raw(), output.raw(), size_t(input.numel()), nccl_type(input), state_->comm,
                                       stream_of(device_));
  if (r != ncclSuccess) abort(std::string("ncclAllGather: ") + ncclGetErrorString(r));
  wait("all_gather");
}

void NcclCommunicator::broadcast(Tensor& tensor, int root) {
  check_collective_tensor(tensor, "broadcast");
  check_device(tensor, device_, "broadcast");
  const ncclResult_t r = ncclBroadcast(tensor.raw(), tensor.raw(), size_t(tensor.numel()), nccl_type(tensor), root,
                                       state_->comm, stream_of(device_));
  if (r != ncclSuccess) abort(std::string("ncclBroadcast: ") + ncclGetErrorString(r));
  wait("broadcast");
}

void NcclCommunicator::barrier() {
  wait("barrier");  // this rank's queued GPU work first
  host_.barrier();
}

void NcclCommunicator::abort(const std::string& message) {
  if (state_->comm != nullptr && !state_->aborted) {
    state_->aborted = true;
    ncclCommAbort(state_->comm);
  }
  mpi_abort_world(message);
}

}  // namespace fathom
