// Evaluation batches: every full window of a validation source in order (see data/windows.h),
// optionally capped at a number of batches, so every evaluation sees the same tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "data/token_source.h"
#include "data/windows.h"

namespace fathom {

class EvalIterator {
 public:
  // max_batches, when given, must be >= 1.
  EvalIterator(std::shared_ptr<const TokenSource> source, int64_t batch_size, int64_t seq_len,
               std::optional<int64_t> max_batches = std::nullopt);

  // The next batch, or nullopt when done. Batches have batch_size rows except the last, which holds
  // the remaining windows.
  std::optional<TokenBatch> next();
  // Passes over the next batch without reading it (a rank skipping the batches another rank
  // evaluates); false when done.
  bool skip();
  // Starts again from the first window.
  void reset() { next_window_ = 0; }

  uint64_t num_windows() const { return num_windows_; }  // after the cap
  int64_t num_batches() const;

 private:
  std::shared_ptr<const TokenSource> source_;
  int64_t batch_size_;
  int64_t seq_len_;
  uint64_t num_windows_ = 0;
  uint64_t next_window_ = 0;
};

}  // namespace fathom
