// Host-side helpers of the DSLA kernels: the compile-time shape dispatch and optional pointers.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace fathom::cuda {

// Runs f.template operator()<D, TWO>() for head dimension d (64 or 128) and the number of states.
template <typename F>
void dispatch_dsla_shape(int64_t d, bool two, F&& f) {
  auto with_d = [&]<int D>() {
    if (two) f.template operator()<D, true>();
    else f.template operator()<D, false>();
  };
  if (d == 64) return with_d.template operator()<64>();
  if (d == 128) return with_d.template operator()<128>();
  FATHOM_FAIL("dsla: the CUDA kernels take head dimension 64 or 128, got ", d);
}

// An F32 tensor's data, or null where it is undefined.
inline float* optional_data(const Tensor& t) {
  return t.defined() ? static_cast<float*>(const_cast<Tensor&>(t).raw()) : nullptr;
}

}  // namespace fathom::cuda
