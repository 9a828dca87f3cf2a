// The training loader: random batches of non-overlapping windows (see data/windows.h). Each epoch
// visits every window once in a permutation fixed by (seed, epoch); epochs continue forever. Its
// state is two integers, so a resumed loader yields exactly the batches an uninterrupted one would.
//
// Data parallel: each of `world` ranks holds a loader over the same permutation. A micro-batch step
// takes batch_size x world windows of the one global stream and rank r keeps windows
// [r x batch_size, (r + 1) x batch_size) of them, so the ranks' parts are disjoint, together they are
// what one process with batch_size x world would read, and the state (the global position) is the same
// on every rank: a run resumed over another world size continues on the next unseen windows.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/token_source.h"
#include "data/windows.h"

namespace fathom {

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t position = 0;  // windows of this epoch already handed out
  bool operator==(const LoaderState&) const = default;
};

// This process's part of every global batch.
struct LoaderShard {
  int rank = 0;
  int world = 1;
};

class TokenLoader {
 public:
  TokenLoader(std::shared_ptr<const TokenSource> source, int64_t batch_size, int64_t seq_len, uint64_t seed,
              LoaderShard shard = {});

  // This rank's inputs and targets as i32 [B, T]. A batch that reaches the end of an epoch continues with the
  // next epoch's order.
  TokenBatch next_batch();

  LoaderState state() const { return state_; }
  // Continues from a saved state; a position beyond the epoch's window count is an error.
  void restore(const LoaderState& state);

  uint64_t samples_per_epoch() const { return samples_per_epoch_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  int64_t batch_size_;
  int64_t seq_len_;
  uint64_t seed_;
  LoaderShard shard_;
  uint64_t samples_per_epoch_;
  LoaderState state_;
  std::vector<uint64_t> order_;  // the permutation of state_.epoch
};

}  // namespace fathom
