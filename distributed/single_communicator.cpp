#include "distributed/single_communicator.h"

#include <cstdlib>
#include <iostream>

namespace fathom {

void SingleCommunicator::all_reduce_sum(Tensor& tensor) { check_collective_tensor(tensor, "all_reduce_sum"); }

void SingleCommunicator::reduce_scatter_sum(const Tensor& input, Tensor& output) {
  check_chunked(input, output, 1, "reduce_scatter_sum");
  if (!output.shares_storage_with(input) || output.storage_offset() != input.storage_offset()) {
    Tensor out = output.flat();
    out.copy_from(input.flat());
  }
}

void SingleCommunicator::all_gather(const Tensor& input, Tensor& output) {
  check_chunked(output, input, 1, "all_gather");
  if (!output.shares_storage_with(input) || output.storage_offset() != input.storage_offset()) {
    Tensor out = output.flat();
    out.copy_from(input.flat());
  }
}

void SingleCommunicator::broadcast(Tensor& tensor, int root) {
  FATHOM_CHECK(root == 0, "broadcast: root ", root, " is no rank of a world of 1");
}

void SingleCommunicator::abort(const std::string& message) {
  std::cerr << "fathom: error: " << message << "\n";
  std::exit(1);
}

}  // namespace fathom
