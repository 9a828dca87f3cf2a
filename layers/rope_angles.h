// RoPE's angle tables for one forward's positions (kernels/rope/rope.h rope_angles), made by the first
// layer that rotates by a (head dim, theta, scaling) and reused by every later one. All attention layers
// of a model rotate q and k by the same angles, so a forward makes one table instead of two per layer
// (and a decoding step's graph holds one table kernel instead of one per rotation).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/rope/rope.h"

namespace fathom {

class RopeAngleCache {
 public:
  // The angles of `positions`, which must be the tensor every earlier call of this cache named.
  const Tensor& angles(const Tensor& positions, int64_t head_dim, double theta, const RopeScaling& scaling);

 private:
  struct Entry {
    int64_t head_dim;
    double theta;
    RopeScaling scaling;
    Tensor table;
  };
  Tensor positions_;
  std::vector<Entry> entries_;
};

}  // namespace fathom
