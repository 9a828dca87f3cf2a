#include "data/loader.h"

#include "core/error.h"
#include "data/permutation.h"

namespace fathom {

TokenLoader::TokenLoader(std::shared_ptr<const TokenSource> source, int64_t batch_size, int64_t seq_len, uint64_t seed,
                         LoaderShard shard)
    : source_(std::move(source)), batch_size_(batch_size), seq_len_(seq_len), seed_(seed), shard_(shard) {
  FATHOM_CHECK(source_ != nullptr, "token loader: no token source given");
  FATHOM_CHECK(batch_size_ >= 1, "token loader: batch size must be at least 1, got ", batch_size_);
  FATHOM_CHECK(shard_.world >= 1 && shard_.rank >= 0 && shard_.rank < shard_.world, "token loader: rank ", shard_.rank,
               " is no rank of a world of ", shard_.world);
  samples_per_epoch_ = count_windows(*source_, seq_len_, "token loader");
  order_ = shuffled_indices(samples_per_epoch_, seed_, state_.epoch);
}

TokenBatch TokenLoader::next_batch() {
  std::vector<uint64_t> windows;
  windows.reserve(static_cast<size_t>(batch_size_));
  // Every rank walks the whole global batch (the same state everywhere) and keeps its own part.
  const int64_t global = batch_size_ * shard_.world, first = batch_size_ * shard_.rank;
  for (int64_t i = 0; i < global; ++i) {
    if (state_.position == samples_per_epoch_) {
      state_ = LoaderState{state_.epoch + 1, 0};
      order_ = shuffled_indices(samples_per_epoch_, seed_, state_.epoch);
    }
    const uint64_t w = order_[state_.position++];
    if (i >= first && i < first + batch_size_) windows.push_back(w);
  }
  return gather_windows(*source_, windows, seq_len_);
}

void TokenLoader::restore(const LoaderState& state) {
  FATHOM_CHECK(state.position <= samples_per_epoch_, "token loader: cannot restore position ", state.position,
               " of epoch ", state.epoch, ": an epoch has only ", samples_per_epoch_,
               " samples (was the state saved for other data or another sequence length?)");
  if (state.epoch != state_.epoch) order_ = shuffled_indices(samples_per_epoch_, seed_, state.epoch);
  state_ = state;
}

}  // namespace fathom
