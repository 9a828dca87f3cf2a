// `fathom distill` under `mpirun --oversubscribe -np 2` on the CPU. Two ranks distil as one process
// reading the same global batch (batch_size x grad_accum x world), bit for bit. A stop signal to ONE rank stops
// the distillation step on EVERY rank after the same step, with that step's checkpoint, and the job
// exits 0; `--resume` continues the step where it stopped, bit for bit as a chain that was never
// stopped. Every step is an all-reduce of both ranks' gradients and the checkpoint is a collective:
// had the signalled rank stopped alone (or at another step), the other would wait in a collective
// for ever (the job is killed after 30 s: a failure) or end with an error, not exit 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <string>
#include <thread>

#include "core/file_io.h"
#include "distill_test_helpers.h"
#include "mpi_test_helpers.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/run_state.h"

using namespace fathom;
namespace fs = std::filesystem;
using fathom::testing::distill_yaml;
using fathom::testing::find_rank;
using fathom::testing::kMpiexec;
using fathom::testing::ScratchFolder;
using fathom::testing::text_of_file;
using fathom::testing::weights_of;

namespace {

// `fathom distill recipe.yaml <args>` in `folder` under mpirun with two ranks, its output in
// folder/out.txt and folder/err.txt; the shell's status.
int distill_two_ranks(const fs::path& folder, const std::string& args) {
  const std::string command = "cd '" + folder.string() + "' && " + fathom::testing::mpirun_prefix(2) + FATHOM_BINARY +
                              " distill recipe.yaml " + args + " > out.txt 2> err.txt";
  return std::system(command.c_str());
}

// The step that `distill stopped at layer 1 step N` names in `out`; -1 when there is none.
int64_t stopped_step(const std::string& out) {
  std::smatch m;
  const std::regex line("distill stopped at layer 1 step ([0-9]+); --resume continues here");
  return std::regex_search(out, m, line) ? std::stoll(m[1]) : -1;
}

int64_t latest_step(const fs::path& run) {
  const fs::path state = *latest_checkpoint(run) / "state.json";
  return run_state_from_json(read_file(state), state.string()).step;
}

int distill_one_process(const fs::path& folder, const std::string& args) {
  const std::string command =
      "cd '" + folder.string() + "' && " + FATHOM_BINARY + " distill recipe.yaml " + args + " > out.txt 2> err.txt";
  return std::system(command.c_str());
}

struct Signalled {
  int rank;
  int signal;
};
void PrintTo(const Signalled& s, std::ostream* out) {
  *out << "rank " << s.rank << ", " << (s.signal == SIGTERM ? "SIGTERM" : "SIGINT");
}

class DistillDataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kMpiexec == nullptr) GTEST_SKIP() << "built without MPI or no mpirun found";
  }
  // A chain folder `name` whose recipe distils into `name`/chain with `steps` steps per layer, one
  // thread per rank.
  fs::path chain_folder(const std::string& name, int steps) {
    const fs::path folder = dir_ / name;
    fs::create_directories(folder);
    std::ofstream(folder / "recipe.yaml") << distill_yaml(
        folder / "chain", "order: [1, 0], loss: {ce: 1, logit_kl: 1, layer_align: 1, gate_cos: 0.1}", steps);
    return folder;
  }
  ScratchFolder dir_;
};

// Which rank is signalled, and with which signal.
class DistillStopSignal : public DistillDataParallel, public ::testing::WithParamInterface<Signalled> {};

}  // namespace

TEST_F(DistillDataParallel, TwoRanksDistilBitForBitAsOneProcessWithTheSameGlobalBatch) {
  const fs::path one = chain_folder("one", 6), two = chain_folder("two", 6);
  ASSERT_EQ(distill_one_process(one, "--set train.threads=1 --set train.grad_accum=2"), 0)
      << text_of_file(one / "err.txt");
  ASSERT_EQ(distill_two_ranks(two, "--set train.threads=1"), 0) << text_of_file(two / "err.txt");
  for (const char* model : {"M_1", "M_2"})
    EXPECT_EQ(weights_of(one / "chain" / model), weights_of(two / "chain" / model)) << model;
  // Only rank 0 speaks: one closing line.
  const std::string out = text_of_file(two / "out.txt");
  EXPECT_NE(out.find("distill: table in"), std::string::npos) << out;
  EXPECT_EQ(out.find("distill: table in"), out.rfind("distill: table in")) << out;
}

TEST_P(DistillStopSignal, ASignalToOneRankStopsEveryRankAtTheSameStepAndResumeContinues) {
  const auto [rank, signal] = GetParam();
  const fs::path folder = chain_folder("stopped", 100000);
  // Long enough never to end by itself: it runs until the signal.
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    setpgid(0, 0);
    const int status = distill_two_ranks(folder, "--set train.threads=1");
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
  }
  // Once the first layer's step is under way (its first checkpoint is written), the one rank is signalled.
  pid_t target = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(folder / "chain" / "M_1" / "checkpoints" / "latest") || (target = find_rank(folder, rank)) == 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (target > 0) ::kill(target, signal);
  bool hung = false;
  const int status = fathom::testing::wait_or_kill(launcher, std::chrono::seconds(target > 0 ? 30 : 0), hung);
  ASSERT_FALSE(hung) << (target > 0 ? "the job hung after the signal: " : "the rank never started: ")
                     << text_of_file(folder / "err.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text_of_file(folder / "err.txt");

  // Rank 0 speaks for both: one stop line, naming the step whose checkpoint is the latest.
  const std::string out = text_of_file(folder / "out.txt");
  const int64_t stopped = stopped_step(out);
  ASSERT_GE(stopped, 4) << out;  // after the first checkpoint (checkpoint.every 4)
  EXPECT_EQ(out.find("distill stopped at layer 1"), out.rfind("distill stopped at layer 1")) << out;
  EXPECT_EQ(latest_step(folder / "chain" / "M_1"), stopped);
  EXPECT_FALSE(fs::exists(folder / "chain" / "M_2"));

  // --resume continues where the step stopped: three more steps, then a stop by the step budget.
  ASSERT_EQ(distill_two_ranks(folder, "--set train.threads=1 --resume --max-steps 3"), 0)
      << text_of_file(folder / "err.txt");
  const std::string resumed = text_of_file(folder / "out.txt");
  EXPECT_NE(resumed.find("resumed at step " + std::to_string(stopped)), std::string::npos) << resumed;
  EXPECT_EQ(stopped_step(resumed), stopped + 3) << resumed;
  EXPECT_EQ(latest_step(folder / "chain" / "M_1"), stopped + 3);

  // The same chain never signalled, stopped by the budget at the same step: the same weights.
  const fs::path straight = chain_folder("straight", 100000);
  ASSERT_EQ(distill_two_ranks(straight, "--set train.threads=1 --max-steps " + std::to_string(stopped + 3)), 0)
      << text_of_file(straight / "err.txt");
  EXPECT_EQ(weights_of(folder / "chain" / "M_1"), weights_of(straight / "chain" / "M_1"));
}

// The writer (rank 0) and a rank that writes nothing (rank 1), each with one of the two stop signals.
INSTANTIATE_TEST_SUITE_P(OneRank, DistillStopSignal, ::testing::Values(Signalled{1, SIGTERM}, Signalled{0, SIGINT}),
                         [](const ::testing::TestParamInfo<Signalled>& info) {
                           return "Rank" + std::to_string(info.param.rank) +
                                  (info.param.signal == SIGTERM ? "Sigterm" : "Sigint");
                         });
