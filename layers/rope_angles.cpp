#include "layers/rope_angles.h"

namespace fathom {

const Tensor& RopeAngleCache::angles(const Tensor& positions, int64_t head_dim, double theta,
                                     const RopeScaling& scaling) {
  if (!positions_.defined()) positions_ = positions;
  // One cache serves one forward's positions: a table kept for other positions would rotate wrongly.
  FATHOM_CHECK(positions.shares_storage_with(positions_) && positions.storage_offset() == positions_.storage_offset() &&
                   positions.shape() == positions_.shape() && positions.dtype() == positions_.dtype(),
               "rope angles: positions ", describe(positions), " are not the ", describe(positions_),
               " this forward's tables were made for");
  for (const Entry& e : entries_)
    if (e.head_dim == head_dim && e.theta == theta && e.scaling == scaling) return e.table;
  entries_.push_back({head_dim, theta, scaling, rope_angles(positions, head_dim, theta, scaling)});
  return entries_.back().table;
}

}  // namespace fathom
