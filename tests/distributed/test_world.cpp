// Launch discovery (distributed/world.h), ZeRO-1's shards, the loader's rank split and the checks the
// communicators share.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data/loader.h"
#include "distributed/data_parallel.h"
#include "distributed/single_communicator.h"
#include "distributed/world.h"
#include "tests/support/test_support.h"

using namespace fathom;
using fathom::testing::error_of;

namespace {

LaunchEnvironment launch_with(const std::map<std::string, std::string>& env) {
  return read_launch_environment([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// A token source of `n` tokens 0, 1, 2, ...
class CountingSource final : public TokenSource {
 public:
  explicit CountingSource(size_t n) : n_(n) {}
  size_t size() const override { return n_; }
  uint32_t vocab_size() const override { return 1u << 30; }
  void read(size_t start, std::span<uint32_t> out) const override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint32_t(start + i);
  }
  std::string describe() const override { return "counting"; }

 private:
  size_t n_;
};

}  // namespace

TEST(LaunchEnvironment, NoLauncherIsAWorldOfOne) {
  const LaunchEnvironment launch = launch_with({});
  EXPECT_FALSE(launch.launched);
  EXPECT_EQ(launch.ranks.world, 1);
  EXPECT_EQ(launch.ranks.rank, 0);
}

TEST(LaunchEnvironment, OpenMpiVariablesGiveRankWorldAndLocalRank) {
  const LaunchEnvironment launch =
      launch_with({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_TRUE(launch.launched && launch.by_mpi);
  EXPECT_EQ(launch.ranks.rank, 5);
  EXPECT_EQ(launch.ranks.world, 8);
  EXPECT_EQ(launch.ranks.local_rank, 1);
}

TEST(LaunchEnvironment, GenericVariablesAreReadAndMustAgreeWithMpirun) {
  const LaunchEnvironment generic = launch_with({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}});
  EXPECT_TRUE(generic.launched);
  EXPECT_FALSE(generic.by_mpi);
  EXPECT_EQ(generic.ranks.rank, 2);
  EXPECT_EQ(generic.ranks.local_rank, 0);
  EXPECT_NO_THROW(
      launch_with({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  EXPECT_NE(
      error_of([] {
        launch_with({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}});
      }).find("RANK=0 and WORLD_SIZE=2 disagree with the launcher's rank 1 of 2"),
      std::string::npos);
}

TEST(LaunchEnvironment, MalformedVariablesAreErrorsNamingThem) {
  EXPECT_NE(error_of([] {
              launch_with({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
            }).find("RANK='x' is not a whole number"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              launch_with({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
            }).find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              launch_with({{"WORLD_SIZE", "2"}});
            }).find("RANK is missing while WORLD_SIZE is set"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              launch_with({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
            }).find("WORLD_SIZE='0'"),
            std::string::npos);
}

TEST(ZeroShard, ChunksCoverTheArenaOnceInRankOrder) {
  for (int world : {1, 2, 3, 7}) {
    int64_t next = 0;
    for (int rank = 0; rank < world; ++rank) {
      const OptimizerShard s = zero_shard(100, rank, world);
      EXPECT_EQ(s.begin, next) << world;
      EXPECT_LE(s.length, (100 + world - 1) / world);
      next = s.begin + s.length;
    }
    EXPECT_EQ(next, 100) << world;
  }
  EXPECT_EQ(zero_shard(2, 2, 3).length, 0);  // more ranks than elements: the last shards are empty
}

TEST(LoaderShard, RanksTakeDisjointPartsOfTheOneProcessBatch) {
  const auto source = std::make_shared<CountingSource>(8 * 100 + 1);
  TokenLoader whole(source, 6, 8, 3);
  std::vector<TokenLoader> ranks;
  for (int r = 0; r < 3; ++r) ranks.emplace_back(source, 2, 8, 3, LoaderShard{r, 3});
  for (int step = 0; step < 20; ++step) {  // crosses an epoch boundary (100 windows)
    const std::vector<int32_t> expected = whole.next_batch().inputs.to_vector<int32_t>();
    std::vector<int32_t> joined;
    for (TokenLoader& rank : ranks) {
      const std::vector<int32_t> part = rank.next_batch().inputs.to_vector<int32_t>();
      joined.insert(joined.end(), part.begin(), part.end());
    }
    ASSERT_EQ(joined, expected) << "step " << step;
    for (TokenLoader& rank : ranks) EXPECT_EQ(rank.state(), whole.state());
  }
  EXPECT_NE(error_of([&] {
              TokenLoader(source, 2, 8, 3, LoaderShard{3, 3});
            }).find("rank 3 is no rank of a world of 3"),
            std::string::npos);
}

TEST(Communicator, CollectivesCheckTheirTensors) {
  SingleCommunicator single;
  Tensor ints = Tensor::zeros({4}, DType::i32);
  EXPECT_NE(error_of([&] { single.all_reduce_sum(ints); }).find("only F32 and BF16 tensors travel"), std::string::npos);
  Tensor whole = Tensor::zeros({4}, DType::f32), chunk = Tensor::zeros({3}, DType::f32);
  EXPECT_NE(error_of([&] { single.reduce_scatter_sum(whole, chunk); }).find("is not 1 chunks of"), std::string::npos);
  Tensor values = Tensor::from_vector<float>({1, 2, 3, 4}, {4}), out = Tensor::zeros({2, 2}, DType::f32);
  single.reduce_scatter_sum(values, out);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}
