// Data parallelism's overlapped all-reduce (distributed/bucketed_reduction.h), seen through a
// communicator of a pretend world of 2 that records every collective and, at each bucket's start,
// the whole gradient arena (its sums are the identity: the other rank contributes nothing). Each
// bucket starts once per step, last bucket first, only when its gradients are final, and the first
// starts while backward has still to write the embedding's gradient: the reductions overlap
// backward. Also with frozen parameters and block recompute; ZeRO-1 reduce-scatters after backward.
// The sums themselves are tested against one process under mpirun (tests/integration/test_data_parallel.cpp).
#include <gtest/gtest.h>

#include <cstring>

#include "distributed/data_parallel.h"
#include "kernels/elementwise/elementwise.h"
#include "tests/support/op_test_util.h"
#include "train/run/train_step.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct Collective {
  std::string name;
  int64_t begin = 0, length = 0;  // the bucket, in elements of the gradient arena (all-reduce starts)
  Tensor grads_then;              // the whole gradient arena at that moment
};

class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(ParameterArena& arena) : arena_(arena) { info_.world = 2; }
  const RankInfo& info() const override { return info_; }
  std::string backend_name() const override { return "recording"; }
  std::unique_ptr<PendingCollective> start_all_reduce_sum(Tensor& tensor) override {
    const int64_t begin = int64_t((tensor.storage_offset() - arena_.grads().storage_offset()) / sizeof(float));
    log.push_back({"start_all_reduce", begin, tensor.numel(), arena_.grads().clone()});
    return Communicator::start_all_reduce_sum(tensor);  // reduces at once: the identity
  }
  void all_reduce_sum(Tensor&) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void reduce_scatter_sum(const Tensor& input, Tensor& output) override {
    log.push_back({"reduce_scatter", 0, input.numel(), arena_.grads().clone()});
    output.copy_from(input.narrow(0, output.numel()));
  }
  void all_gather(const Tensor& input, Tensor& output) override { log.push_back({"all_gather", 0, 0, Tensor()}); }
  void broadcast(Tensor&, int) override {}
  void broadcast_bytes(void*, int64_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message) override { FATHOM_FAIL(message); }

  std::vector<Collective> log;

 private:
  RankInfo info_;
  ParameterArena& arena_;
};

ModelConfig tiny() {
  return {.d_model = 16, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 24, .vocab_size = 40};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct Setup {
  std::set<std::string> frozen = {};
  Recompute recompute = Recompute::none;
  int zero = 0;
  bool parallel = true;  // false: one process, no DataParallel at all
};

// One step of two micro-batches; the communicator's log and the final gradients.
struct Stepped {
  std::vector<Collective> log;
  Tensor grads;
  int64_t buckets = 0, started_early = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;
};

Stepped step_once(const Setup& setup) {
  Decoder model(tiny());
  model.set_recompute(setup.recompute);
  ParameterArena arena(model, Device::cpu(), setup.frozen);
  arena.initialise(3);
  RecordingCommunicator comm(arena);
  DataParallel parallel(comm, arena, DataParallelConfig{.zero = setup.zero, .bucket_elements = 700});
  AdamW optimizer(arena, AdamWConfig{}, parallel.optimizer_shard());
  uint64_t seed = 20;
  const StepSettings settings{
      .step = 1, .lr = 1e-2, .clip = 1.0, .grad_accum = 2, .data_parallel = setup.parallel ? &parallel : nullptr};
  train_step(
      model, arena, optimizer,
      [&] {
        seed += 2;
        return TokenBatch{random_ints({2, 8}, 40, seed, DType::i32), random_ints({2, 8}, 40, seed + 1, DType::i32)};
      },
      Device::cpu(), settings);
  Stepped out{comm.log, arena.grads().clone(), parallel.bucket_count(), parallel.buckets_started_early(), {}};
  return out;
}

void expect_overlapped(const Stepped& s, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_GT(s.buckets, 3);
  ASSERT_EQ(int64_t(s.log.size()), s.buckets) << "one reduction per bucket and step, none for the first micro-batch";
  EXPECT_EQ(s.started_early, s.buckets) << "every bucket started inside backward";
  const int64_t n = s.grads.numel();
  for (size_t i = 0; i < s.log.size(); ++i) {
    const Collective& c = s.log[i];
    ASSERT_EQ(c.name, "start_all_reduce");
    // Last bucket first, each once: bucket b covers [700 b, 700 (b + 1)).
    const int64_t b = s.buckets - 1 - int64_t(i);
    EXPECT_EQ(c.begin, 700 * b) << "start " << i;
    EXPECT_EQ(c.length, std::min<int64_t>(700, n - 700 * b)) << "start " << i;
    // Its gradients were final when it started (the step's last micro-batch had written them).
    EXPECT_TRUE(same_bits(c.grads_then.narrow(c.begin, c.length), s.grads.narrow(c.begin, c.length)))
        << "bucket " << b << " started before its gradients were final";
  }
  // When the first bucket started, backward still had the first bucket's gradients to finish.
  const Collective& first = s.log.front();
  EXPECT_FALSE(same_bits(first.grads_then.narrow(0, 700), s.grads.narrow(0, 700)))
      << "the first reduction started only after backward had ended";
}

}  // namespace

TEST(OverlappedReduction, BucketsStartInBackwardAsTheirGradientsBecomeFinal) {
  expect_overlapped(step_once({}), "plain");
}

TEST(OverlappedReduction, FrozenParametersAndBlockRecomputeOverlapToo) {
  // The embedding frozen: the trainable arena starts with the first block's weights.
  expect_overlapped(step_once({.frozen = {"model.embed_tokens.weight"}}), "frozen embedding");
  // Blocks re-run in backward: their parameters are final once the checkpoint's re-run has ended.
  expect_overlapped(step_once({.recompute = Recompute::block}), "block recompute");
}

TEST(OverlappedReduction, BackwardComputesTheSameGradientsWhileReducing) {
  // Overlap changes when the reductions run, not what backward computes: a rank of 2 seeds its loss
  // with half of one process's seed, an exact scale, so its gradients are exactly half.
  const Stepped alone = step_once({.parallel = false}), rank = step_once({}),
                recomputed = step_once({.recompute = Recompute::block});
  ASSERT_TRUE(alone.log.empty());
  Tensor doubled = rank.grads.clone();
  scale_inplace(doubled, 2.0);
  EXPECT_TRUE(same_bits(doubled, alone.grads));
  EXPECT_TRUE(same_bits(recomputed.grads, rank.grads));
}

TEST(OverlappedReduction, ZeroOneReduceScattersOnceAfterBackward) {
  const Stepped s = step_once({.zero = 1});
  ASSERT_FALSE(s.log.empty());
  EXPECT_EQ(s.log.front().name, "reduce_scatter");
  EXPECT_TRUE(same_bits(s.log.front().grads_then, s.grads)) << "reduce-scattered before backward had ended";
  EXPECT_EQ(s.started_early, 0);
  for (const Collective& c : s.log) EXPECT_NE(c.name, "start_all_reduce");
}

TEST(OverlappedReduction, BadBucketSizeIsAnError) {
  Decoder model(tiny());
  ParameterArena arena(model, Device::cpu());
  RecordingCommunicator comm(arena);
  EXPECT_THROW(BucketedReduction(comm, arena, 0, DType::f32), Error);
  EXPECT_THROW(BucketedReduction(comm, arena, 100, DType::f16), Error);
}
