// CUDA graphs (kernels/runtime/backend.h): capture on the thread's current stream in relaxed mode (the
// caching allocator may call cudaMalloc while capturing), with the allocator retaining what is freed.
#include <cuda_runtime_api.h>

#include <exception>
#include <utility>
#include <vector>

#include "kernels/runtime/backend.h"
#include "kernels/runtime/caching_allocator.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

struct Graph::State {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<CachingAllocator::Retained> retained;

  ~State() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    // Later work on the stream runs after every replay, so the blocks may be handed out again.
    caching_allocator().release_retained(device, retained);
  }
};

Graph::Graph() = default;
Graph::Graph(Graph&& other) noexcept = default;
Graph& Graph::operator=(Graph&& other) noexcept = default;
Graph::~Graph() = default;

Graph Graph::capture(int device, const std::function<void()>& body, std::string* reason) {
  auto state = std::make_unique<State>();
  state->device = device;
  state->stream = stream_for(Device::cuda(device));
  CachingAllocator& allocator = caching_allocator();
  CUDA_CHECK(cudaStreamBeginCapture(state->stream, cudaStreamCaptureModeRelaxed));
  allocator.begin_retaining(device);
  std::string failure;
  try {
    body();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(state->stream, &graph);
  state->retained = allocator.end_retaining(device);
  state->graph = graph;
  if (failure.empty() && ended != cudaSuccess)
    failure = std::string("the capture ended with ") + cudaGetErrorName(ended) + " (" + cudaGetErrorString(ended) + ")";
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&state->exec, graph, 0);
    if (made != cudaSuccess) {
      state->exec = nullptr;
      failure = std::string("instantiating the graph failed with ") + cudaGetErrorName(made);
    }
  }
  if (!failure.empty()) {
    (void)cudaGetLastError();  // capture errors are not sticky; leave none behind for the next launch
    if (reason) *reason = failure;
    return Graph();  // `state` returns the retained blocks
  }
  Graph g;
  g.state_ = std::move(state);
  return g;
}

void Graph::replay() const {
  FATHOM_CHECK(state_ != nullptr, "Graph::replay: the graph was not captured");
  CUDA_CHECK(cudaGraphLaunch(state_->exec, state_->stream));
  if (sync_after_launch()) {
    CUDA_CHECK(cudaStreamSynchronize(state_->stream));
    check_device_errors();
  }
}

}  // namespace fathom::cuda
