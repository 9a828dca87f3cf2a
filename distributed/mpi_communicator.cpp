#include "distributed/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <iostream>

namespace fathom {

namespace {

// MPI has no bfloat16: BF16 tensors travel as 16-bit words and this operation sums them in fp32,
// rounding each partial sum back to bf16 as a bf16 all-reduce does.
void sum_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

struct MpiSession {
  bool started = false;
  int thread_level = MPI_THREAD_SINGLE;  // what MPI_Init_thread provided
  MPI_Op bf16_sum = MPI_OP_NULL;
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (started && !finalized) {
      if (bf16_sum != MPI_OP_NULL) MPI_Op_free(&bf16_sum);
      MPI_Finalize();
    }
  }
};

MpiSession& session() {
  static MpiSession s;
  return s;
}

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  FATHOM_FAIL("MPI ", what, " failed: ", std::string(text, size_t(length)));
}

MPI_Datatype mpi_type(const Tensor& t) { return t.dtype() == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }
MPI_Op sum_op(const Tensor& t) { return t.dtype() == DType::f32 ? MPI_SUM : session().bf16_sum; }

int mpi_count(int64_t n, const char* collective) {
  FATHOM_CHECK(n <= INT_MAX, collective, ": ", n, " elements exceed one MPI call's count; use smaller buckets");
  return int(n);
}

void check_host(const Tensor& t, const char* collective) {
  FATHOM_CHECK(t.is_cpu(), collective, ": the MPI backend moves host tensors only, got ", describe(t),
               " (GPU runs use the NCCL backend)");
}

}  // namespace

RankInfo start_mpi(int local_rank) {
  MpiSession& s = session();
  if (!s.started) {
    int provided = 0;
    // SERIALIZED: the overlapped all-reduce runs on a thread of its own while the main thread makes no
    // MPI call (distributed/collective_thread.h).
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    s.started = true;
    s.thread_level = provided;
    // Errors come back as codes, so that fathom reports them with the collective's name.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check_mpi(MPI_Op_create(&sum_bf16, 1, &s.bf16_sum), "MPI_Op_create");
  }
  RankInfo info;
  MPI_Comm_rank(MPI_COMM_WORLD, &info.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &info.world);
  info.local_rank = local_rank;
  return info;
}

bool mpi_running() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return session().started && !finalized;
}

void mpi_abort_world(const std::string& message) {
  int rank = 0, world = 1;
  if (mpi_running()) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
  }
  std::cerr << "fathom: error on rank " << rank << " of " << world << ": " << message << "\nfathom: rank " << rank
            << " ends the job (every rank stops)" << std::endl;
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

MpiCommunicator::MpiCommunicator(const RankInfo& info) : info_(info) {
  FATHOM_CHECK(mpi_running(), "the MPI communicator needs MPI started first (start_mpi)");
}

void MpiCommunicator::all_reduce_sum(Tensor& tensor) {
  check_collective_tensor(tensor, "all_reduce_sum");
  check_host(tensor, "all_reduce_sum");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, tensor.raw(), mpi_count(tensor.numel(), "all_reduce_sum"), mpi_type(tensor),
                          sum_op(tensor), MPI_COMM_WORLD),
            "all_reduce_sum");
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_all_reduce_sum(Tensor& tensor) {
  check_collective_tensor(tensor, "all_reduce_sum");
  check_host(tensor, "all_reduce_sum");
  // Without MPI_THREAD_SERIALIZED no other thread may call MPI: the reduction runs now.
  if (session().thread_level < MPI_THREAD_SERIALIZED) return Communicator::start_all_reduce_sum(tensor);
  if (!thread_) thread_ = std::make_unique<CollectiveThread>();
  // The very MPI_Allreduce all_reduce_sum makes (the same algorithm, so the same sums bit for bit),
  // on the collective thread. The copied handle keeps the memory until the job has run.
  return thread_->submit([t = tensor]() mutable {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.raw(), mpi_count(t.numel(), "all_reduce_sum"), mpi_type(t), sum_op(t),
                            MPI_COMM_WORLD),
              "all_reduce_sum (overlapped)");
  });
}

void MpiCommunicator::all_reduce_sum(double* values, int64_t count) {
  check_mpi(
      MPI_Allreduce(MPI_IN_PLACE, values, mpi_count(count, "all_reduce_sum"), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
      "all_reduce_sum");
}

void MpiCommunicator::reduce_scatter_sum(const Tensor& input, Tensor& output) {
  check_chunked(input, output, info_.world, "reduce_scatter_sum");
  check_host(input, "reduce_scatter_sum");
  check_mpi(MPI_Reduce_scatter_block(input.raw(), output.raw(), mpi_count(output.numel(), "reduce_scatter_sum"),
                                     mpi_type(input), sum_op(input), MPI_COMM_WORLD),
            "reduce_scatter_sum");
}

void MpiCommunicator::all_gather(const Tensor& input, Tensor& output) {
  check_chunked(output, input, info_.world, "all_gather");
  check_host(input, "all_gather");
  const int count = mpi_count(input.numel(), "all_gather");
  // In place when the input already is this rank's chunk of the output.
  const bool in_place = input.shares_storage_with(output) &&
                        input.storage_offset() == output.storage_offset() + size_t(info_.rank) * input.nbytes();
  check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : input.raw(), count, mpi_type(input), output.raw(), count,
                          mpi_type(output), MPI_COMM_WORLD),
            "all_gather");
}

void MpiCommunicator::broadcast(Tensor& tensor, int root) {
  check_collective_tensor(tensor, "broadcast");
  check_host(tensor, "broadcast");
  check_mpi(MPI_Bcast(tensor.raw(), mpi_count(tensor.numel(), "broadcast"), mpi_type(tensor), root, MPI_COMM_WORLD),
            "broadcast");
}

void MpiCommunicator::broadcast_bytes(void* data, int64_t bytes, int root) {
  check_mpi(MPI_Bcast(data, mpi_count(bytes, "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
}

void MpiCommunicator::barrier() { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }

}  // namespace fathom
