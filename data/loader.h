// The training loader: random batches of non-overlapping windows (see data/windows.h). Each epoch
// visits every window once in a permutation fixed by (seed, epoch); epochs continue forever. Its
// state is two integers, so a resumed loader yields exactly the batches an uninterrupted one would.
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

class TokenLoader {
 public:
  TokenLoader(std::shared_ptr<const TokenSource> source, int64_t batch_size, int64_t seq_len,
              uint64_t seed);

  // Inputs and targets as i32 [B, T]. A batch that reaches the end of an epoch continues with the
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
  uint64_t samples_per_epoch_;
  LoaderState state_;
  std::vector<uint64_t> order_;  // the permutation of state_.epoch
};

}  // namespace fathom
