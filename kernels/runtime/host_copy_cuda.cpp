// HostCopy (backend.h): a copy to page-locked memory and an event after it, waited on only in wait().
#include <cstring>

#include "kernels/runtime/backend.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

struct HostCopy::State {
  void* host = nullptr;  // page-locked, `capacity` bytes
  size_t capacity = 0;
  cudaEvent_t done = nullptr;
  int event_device = -1;  // the device `done` was made on: an event records only on its own device's streams
  Shape shape;
  DType dtype = DType::u8;
  bool pending = false;
  ~State() {
    // Not thrown from a destructor: a pending copy is waited for, so its target outlives it.
    if (done) {
      cudaEventSynchronize(done);
      cudaEventDestroy(done);
    }
    if (host) cudaFreeHost(host);
  }
};

HostCopy::HostCopy() : state_(std::make_unique<State>()) {}

HostCopy::~HostCopy() = default;

void HostCopy::start(const Tensor& from) {
  FATHOM_CHECK(from.defined() && from.device().is_cuda(), "HostCopy: the tensor to copy must be on a CUDA device, got ",
               describe(from));
  FATHOM_CHECK(!state_->pending, "HostCopy: the last copy was never waited for");
  State& s = *state_;
  cudaStream_t stream = stream_for(from.device());
  if (s.capacity < from.nbytes()) {
    if (s.host) CUDA_CHECK(cudaFreeHost(s.host));
    s.host = nullptr;
    CUDA_CHECK(cudaMallocHost(&s.host, from.nbytes()));
    s.capacity = from.nbytes();
  }
  if (s.done && s.event_device != from.device().index) {
    CUDA_CHECK(cudaEventDestroy(s.done));
    s.done = nullptr;
  }
  if (!s.done) {  // stream_for made the tensor's device current, so the event is made there
    CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    s.event_device = from.device().index;
  }
  CUDA_CHECK(cudaMemcpyAsync(s.host, from.raw(), from.nbytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaEventRecord(s.done, stream));
  s.shape = from.shape();
  s.dtype = from.dtype();
  s.pending = true;
}

Tensor HostCopy::wait() {
  State& s = *state_;
  FATHOM_CHECK(s.pending, "HostCopy: wait() without a start()");
  s.pending = false;
  CUDA_CHECK(cudaEventSynchronize(s.done));
  check_device_errors();
  Tensor out = Tensor::empty(s.shape, s.dtype);
  if (out.nbytes() > 0) std::memcpy(out.raw(), s.host, out.nbytes());
  return out;
}

}  // namespace fathom::cuda
