// Launching fathom under mpirun on the CPU, shared by the data-parallel tests of `fathom train`
// (test_data_parallel.cpp) and `fathom distill` (test_distill_data_parallel.cpp): the launcher's
// command prefix, finding one rank's process (to signal or kill it alone) and waiting for a job that
// must not hang. Built without MPI (or without mpirun), kMpiexec is null and the tests skip.
#pragma once
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

namespace fathom::testing {

#ifdef FATHOM_MPIEXEC
inline const char* const kMpiexec = FATHOM_MPIEXEC;
#else
inline const char* const kMpiexec = nullptr;
#endif

// `mpirun ... -np ranks ` (as root too, more ranks than cores allowed), ready for the program's command.
inline std::string mpirun_prefix(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + std::string(kMpiexec) +
         " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " ";
}

inline std::string text_of_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The fathom process of rank `rank` whose working folder is `folder`; 0 when none runs (yet).
inline pid_t find_rank(const std::filesystem::path& folder, int rank) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = text_of_file(entry.path() / "cmdline"),
                      environ = text_of_file(entry.path() / "environ");
    std::error_code error;
    if (cmdline.find(FATHOM_BINARY) == 0 && fs::equivalent(entry.path() / "cwd", folder, error) &&
        environ.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return pid_t(std::stoi(name));
  }
  return 0;
}

// Waits for the launcher `launcher` (the leader of its own process group) at most `limit`; a job
// still running then is killed, group and all, and `hung` says so. Returns its wait status.
inline int wait_or_kill(pid_t launcher, std::chrono::seconds limit, bool& hung) {
  int status = 0;
  pid_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while ((done = waitpid(launcher, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  hung = done == 0;
  if (hung) {
    ::kill(-launcher, SIGKILL);
    waitpid(launcher, &status, 0);
  }
  return status;
}

}  // namespace fathom::testing
