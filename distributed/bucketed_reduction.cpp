#include "distributed/bucketed_reduction.h"

#include <algorithm>

namespace fathom {

BucketedReduction::BucketedReduction(Communicator& communicator, ParameterArena& arena, int64_t bucket_elements,
                                     DType wire)
    : comm_(communicator), arena_(arena), bucket_elements_(bucket_elements), wire_(wire) {
  FATHOM_CHECK(bucket_elements_ >= 1, "data parallel: a gradient bucket holds at least 1 element, got ",
               bucket_elements_);
  FATHOM_CHECK(wire_ == DType::f32 || wire_ == DType::bf16, "data parallel: gradients travel in fp32 or bf16, not ",
               dtype_name(wire_));
  const int64_t n = arena_.trainable_numel();
  const int64_t buckets = (n + bucket_elements_ - 1) / bucket_elements_;
  parameters_of_bucket_.assign(size_t(buckets), 0);
  for (const ArenaEntry& e : arena_.entries()) {
    if (!e.trainable || e.numel() == 0) continue;
    std::vector<int64_t> overlapped;
    for (int64_t b = e.offset / bucket_elements_; b <= (e.offset + e.numel() - 1) / bucket_elements_; ++b) {
      overlapped.push_back(b);
      ++parameters_of_bucket_[size_t(b)];
    }
    entry_of_[e.var.impl().get()] = buckets_of_entry_.size();
    buckets_of_entry_.push_back(std::move(overlapped));
  }
  waiting_ = parameters_of_bucket_;
  final_.assign(buckets_of_entry_.size(), false);
}

std::pair<int64_t, int64_t> BucketedReduction::bucket_range(int64_t b) const {
  FATHOM_CHECK(b >= 0 && b < bucket_count(), "gradient bucket ", b, " of ", bucket_count());
  const int64_t begin = b * bucket_elements_;
  return {begin, std::min(arena_.trainable_numel(), begin + bucket_elements_)};
}

void BucketedReduction::arm() {
  FATHOM_CHECK(in_flight_.empty(), "data parallel: a new backward began before the last one's buckets were waited for");
  waiting_ = parameters_of_bucket_;
  std::fill(final_.begin(), final_.end(), false);
  next_ = bucket_count() - 1;
  started_early_ = 0;
  armed_ = true;
  start_ready();  // buckets no parameter overlaps (none today) need no gradient
}

void BucketedReduction::gradient_final(const VariableImpl& leaf) {
  const auto it = entry_of_.find(&leaf);
  if (!armed_ || it == entry_of_.end() || final_[it->second]) return;  // not a trainable parameter (an input)
  final_[it->second] = true;
  for (const int64_t b : buckets_of_entry_[it->second]) --waiting_[size_t(b)];
  start_ready();
}

void BucketedReduction::start_ready() {
  while (next_ >= 0 && waiting_[size_t(next_)] == 0) {
    start(next_--);
    ++started_early_;
  }
}

void BucketedReduction::start(int64_t b) {
  const auto [begin, end] = bucket_range(b);
  Tensor bucket = arena_.grads().narrow(begin, end - begin);
  InFlight f{b, Tensor(), nullptr};
  if (wire_ == DType::f32) {
    f.pending = comm_.start_all_reduce_sum(bucket);
  } else {
    // bf16 on the wire: half the bytes; each rank's gradients round once, the sums as they travel.
    f.wire = bucket.to(DType::bf16);
    f.pending = comm_.start_all_reduce_sum(f.wire);
  }
  in_flight_.push_back(std::move(f));
}

void BucketedReduction::finish() {
  if (!armed_) {  // reduced after backward only
    next_ = bucket_count() - 1;
    started_early_ = 0;
  }
  armed_ = false;
  while (next_ >= 0) start(next_--);
  for (InFlight& f : in_flight_) {
    f.pending->wait();
    if (f.wire.defined()) {
      const auto [begin, end] = bucket_range(f.bucket);
      arena_.grads().narrow(begin, end - begin).copy_from(f.wire.to(DType::f32));
    }
  }
  in_flight_.clear();
}

}  // namespace fathom
