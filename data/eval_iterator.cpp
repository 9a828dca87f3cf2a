#include "data/eval_iterator.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace fathom {

EvalIterator::EvalIterator(std::shared_ptr<const TokenSource> source, int64_t batch_size, int64_t seq_len,
                           std::optional<int64_t> max_batches)
    : source_(std::move(source)), batch_size_(batch_size), seq_len_(seq_len) {
  FATHOM_CHECK(source_ != nullptr, "evaluation iterator: no token source given");
  FATHOM_CHECK(batch_size_ >= 1, "evaluation iterator: batch size must be at least 1, got ", batch_size_);
  FATHOM_CHECK(!max_batches || *max_batches >= 1, "evaluation iterator: max batches must be at least 1, got ",
               max_batches.value_or(0));
  num_windows_ = count_windows(*source_, seq_len_, "evaluation iterator");
  if (max_batches) num_windows_ = std::min(num_windows_, uint64_t(*max_batches) * uint64_t(batch_size_));
}

int64_t EvalIterator::num_batches() const {
  return int64_t((num_windows_ + uint64_t(batch_size_) - 1) / uint64_t(batch_size_));
}

std::optional<TokenBatch> EvalIterator::next() {
  if (next_window_ >= num_windows_) return std::nullopt;
  const uint64_t rows = std::min(uint64_t(batch_size_), num_windows_ - next_window_);
  std::vector<uint64_t> windows(rows);
  std::iota(windows.begin(), windows.end(), next_window_);
  next_window_ += rows;
  return gather_windows(*source_, windows, seq_len_);
}

bool EvalIterator::skip() {
  if (next_window_ >= num_windows_) return false;
  next_window_ += std::min(uint64_t(batch_size_), num_windows_ - next_window_);
  return true;
}

}  // namespace fathom
