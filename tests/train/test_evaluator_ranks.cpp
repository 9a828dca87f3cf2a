// Evaluation shared among data-parallel ranks, in one process: each rank's evaluate() is run in
// turn over a communicator that plays the other ranks' part of the sums.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <stdexcept>
#include <vector>

#include "distributed/communicator.h"
#include "layers/parameter_arena.h"
#include "tests/support/data_test_helpers.h"
#include "train/measure/evaluator.h"

using namespace fathom;

namespace {

// Rank `rank` of `world`. The double sums it is asked for are recorded (what this rank sent) and
// the queued contributions of the ranks evaluated before it are added (what the others sent).
class PretendRank final : public Communicator {
 public:
  PretendRank(int rank, int world, std::deque<std::vector<double>> others = {})
      : info_{rank, world, 0}, others_(std::move(others)) {}
  const RankInfo& info() const override { return info_; }
  std::string backend_name() const override { return "pretend"; }
  void all_reduce_sum(double* values, int64_t count) override {
    sent.emplace_back(values, values + count);
    if (others_.empty()) return;
    const std::vector<double> other = others_.front();
    others_.pop_front();
    ASSERT_EQ(int64_t(other.size()), count);
    for (int64_t i = 0; i < count; ++i) values[i] += other[i];
  }
  void all_reduce_sum(Tensor&) override { FAIL() << "not used by evaluate"; }
  void reduce_scatter_sum(const Tensor&, Tensor&) override { FAIL() << "not used by evaluate"; }
  void all_gather(const Tensor&, Tensor&) override { FAIL() << "not used by evaluate"; }
  void broadcast(Tensor&, int) override { FAIL() << "not used by evaluate"; }
  void broadcast_bytes(void*, int64_t, int) override { FAIL() << "not used by evaluate"; }
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message) override { throw std::runtime_error(message); }

  std::deque<std::vector<double>> sent;

 private:
  RankInfo info_;
  std::deque<std::vector<double>> others_;
};

}  // namespace

TEST(EvaluateOverRanks, EachRankTakesItsBatchesAndTheSumIsOneProcessBitForBit) {
  const ModelConfig config{
      .d_model = 24, .n_layers = 2, .n_heads = 6, .n_kv_heads = 2, .ffn_hidden = 40, .vocab_size = 37};
  Decoder model(config);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(11);
  // 5 batches of 3 windows of 8 tokens, the last one short (2 windows).
  auto source = std::make_shared<VectorTokenSource>(fathom::testing::random_tokens(14 * 8 + 1, 37, 5), 37);
  const auto run = [&](Communicator* ranks) {
    return evaluate(model, source, 3, 8, 100, Device::cpu(), /*as_decoded=*/false, ranks);
  };
  const EvalResult whole = run(nullptr);
  ASSERT_EQ(whole.tokens, 14 * 8);

  PretendRank second(1, 2);
  const EvalResult alone = run(&second);  // rank 1 without rank 0's sums: batches 1 and 3 only
  EXPECT_EQ(alone.tokens, 2 * 3 * 8);
  ASSERT_EQ(second.sent.size(), 2u);  // per-batch loss sums, then per-batch token counts
  const std::vector<double> sums = second.sent[0];
  ASSERT_EQ(sums.size(), 5u);
  for (size_t b = 0; b < 5; ++b) EXPECT_EQ(sums[b] != 0.0, b % 2 == 1) << "batch " << b;

  PretendRank first(0, 2, second.sent);
  const EvalResult combined = run(&first);
  EXPECT_EQ(combined.tokens, whole.tokens);
  EXPECT_EQ(combined.loss, whole.loss);  // bit for bit: each slot holds one rank's value
  EXPECT_EQ(combined.perplexity, whole.perplexity);
}
