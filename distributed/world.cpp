#include "distributed/world.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/single_communicator.h"
#ifdef FATHOM_WITH_MPI
#include "distributed/mpi_communicator.h"
#endif
#ifdef FATHOM_WITH_NCCL
#include "distributed/nccl_communicator.h"
#endif

namespace fathom {

namespace {

std::optional<int> read_int(const std::function<const char*(const char*)>& get, const char* name, int minimum) {
  const char* text = get(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  FATHOM_CHECK(*end == '\0' && value >= minimum && value <= 1 << 20, "environment variable ", name, "='", text,
               "' is not a whole number of at least ", minimum);
  return int(value);
}

struct Job {
  std::unique_ptr<Communicator> communicator;
  Device device;
};
Job& job() {
  static Job j;
  return j;
}

}  // namespace

LaunchEnvironment read_launch_environment(const std::function<const char*(const char*)>& get) {
  LaunchEnvironment launch;
  // Open MPI first, then PMI (MPICH, Slurm), then the generic variables.
  const char* sets[][3] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                           {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
                           {"RANK", "WORLD_SIZE", "LOCAL_RANK"}};
  for (int s = 0; s < 3; ++s) {
    const std::optional<int> rank = read_int(get, sets[s][0], 0), world = read_int(get, sets[s][1], 1);
    if (!rank && !world) continue;
    FATHOM_CHECK(rank && world, "environment: ", rank ? sets[s][1] : sets[s][0], " is missing while ",
                 rank ? sets[s][0] : sets[s][1], " is set; a launcher sets both");
    FATHOM_CHECK(*rank < *world, "environment: ", sets[s][0], "=", *rank, " is not below ", sets[s][1], "=", *world);
    if (launch.launched) {
      // A second set (RANK/WORLD_SIZE next to mpirun's) must agree with the first.
      FATHOM_CHECK(*rank == launch.ranks.rank && *world == launch.ranks.world, "environment: ", sets[s][0], "=", *rank,
                   " and ", sets[s][1], "=", *world, " disagree with the launcher's rank ", launch.ranks.rank, " of ",
                   launch.ranks.world, "; unset them or make them match");
      continue;
    }
    launch.launched = true;
    launch.by_mpi = s < 2;
    launch.ranks.rank = *rank;
    launch.ranks.world = *world;
    launch.ranks.local_rank = read_int(get, sets[s][2], 0).value_or(*world == 1 ? 0 : *rank);
  }
  return launch;
}

std::unique_ptr<Communicator> open_communicator(const LaunchEnvironment& launch, Device device) {
  if (!launch.launched) return std::make_unique<SingleCommunicator>();
  if (!launch.by_mpi && launch.ranks.world == 1) return std::make_unique<SingleCommunicator>();
#ifdef FATHOM_WITH_MPI
  // MPI joins the ranks: a launcher other than mpirun gives each process a world of 1 here.
  const RankInfo mpi = start_mpi(launch.ranks.local_rank);
  FATHOM_CHECK(mpi.world == launch.ranks.world && mpi.rank == launch.ranks.rank, "the launcher says rank ",
               launch.ranks.rank, " of ", launch.ranks.world, " but MPI sees rank ", mpi.rank, " of ", mpi.world,
               "; fathom's ranks find each other through MPI: launch with `mpirun -np ", launch.ranks.world,
               " fathom train ...`");
  if (device.is_cuda()) {
#ifdef FATHOM_WITH_NCCL
    return std::make_unique<NcclCommunicator>(mpi, device);
#else
    FATHOM_CHECK(mpi.world == 1, "training on ", device.str(), " over ", mpi.world,
                 " ranks needs NCCL: rebuild fathom with NCCL (libnccl-dev) found, or train on the CPU");
#endif
  }
  return std::make_unique<MpiCommunicator>(mpi);
#else
  FATHOM_CHECK(launch.ranks.world == 1, "this fathom was built without MPI, so it cannot train over ",
               launch.ranks.world, " ranks; install Open MPI (libopenmpi-dev) and rebuild");
  return std::make_unique<SingleCommunicator>();
#endif
}

void restrict_gpus_to_local_rank(const LaunchEnvironment& launch) {
  if (launch.ranks.world == 1) return;
  const int local = launch.ranks.local_rank;
  std::string chosen = std::to_string(local);
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr && *visible != '\0') {
    std::vector<std::string> ids;
    std::string id;
    for (const char* c = visible;; ++c) {
      if (*c == ',' || *c == '\0') {
        if (!id.empty()) ids.push_back(id);
        id.clear();
        if (*c == '\0') break;
      } else {
        id += *c;
      }
    }
    // One id: the launcher (or the user) already gave this rank its GPU.
    if (ids.size() == 1) return;
    FATHOM_CHECK(size_t(local) < ids.size(), "rank ", launch.ranks.rank, " has local rank ", local,
                 " but CUDA_VISIBLE_DEVICES='", visible, "' names only ", ids.size(),
                 " GPU(s); start at most one rank per visible GPU on each machine");
    chosen = ids[size_t(local)];
  }
  setenv("CUDA_VISIBLE_DEVICES", chosen.c_str(), 1);
}

const LaunchEnvironment& launch_environment() {
  static const LaunchEnvironment launch = read_launch_environment();
  return launch;
}

Communicator& join_job(Device device) {
  Job& j = job();
  if (!j.communicator || !(j.device == device)) {
    j.communicator.reset();
    j.communicator = open_communicator(launch_environment(), device);
    j.device = device;
  }
  return *j.communicator;
}

void end_job_after_error(const std::string& message) {
  Communicator* communicator = job().communicator.get();
  if (communicator != nullptr && communicator->world() > 1) communicator->abort(message);
}

}  // namespace fathom
