// Which rank this process is and how it talks to the others. The launcher says: Open MPI's mpirun
// sets OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}; torchrun-style launchers RANK, WORLD_SIZE and
// LOCAL_RANK (honoured when set, and checked against MPI's view). No launcher: a world of one, which
// trains exactly as a plain single-process run.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "distributed/communicator.h"

namespace fathom {

struct LaunchEnvironment {
  RankInfo ranks;
  bool launched = false;  // some launcher set the variables (world may still be 1)
  bool by_mpi = false;    // Open MPI's (or PMI's) variables: the ranks can reach each other through MPI
};

// Reads the launcher's variables through `get` (std::getenv by default); inconsistent or malformed
// ones are errors naming the variable.
LaunchEnvironment read_launch_environment(const std::function<const char*(const char*)>& get = [](const char* name) {
  return std::getenv(name);
});

// Before CUDA starts: a rank of a world of several keeps only its GPU visible (CUDA_VISIBLE_DEVICES
// becomes the local_rank-th of the visible ones, or local_rank itself when none were named), so it
// trains on cuda:0 like a single process. Nothing in a world of one.
void restrict_gpus_to_local_rank(const LaunchEnvironment& launch);

// The communicator for a run on `device`: single without a launcher; MPI for CPU tensors; NCCL for
// CUDA ones where fathom was built with NCCL. A launch MPI cannot join (WORLD_SIZE > 1 without
// mpirun) is an error saying how to launch.
std::unique_ptr<Communicator> open_communicator(const LaunchEnvironment& launch, Device device);

// This process's communicator for training on `device`, opened from the launch environment on the
// first call and kept for the process's life (the one errors end the job through). A later call
// for another device kind reopens it (tests run many single-process runs in one process).
Communicator& join_job(Device device);
// The launch environment as read when the process started fathom: what join_job will use.
const LaunchEnvironment& launch_environment();
// Called by main on an error: in a world of several ranks it prints the message naming the rank and
// aborts every rank (MPI_Abort / ncclCommAbort); otherwise it returns and main reports as usual.
void end_job_after_error(const std::string& message);

}  // namespace fathom
