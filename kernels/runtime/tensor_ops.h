// The device kernels core's Tensor needs (registered through core/backend.h by init()).
#pragma once
#include "core/tensor.h"

namespace fathom::cuda {

// dst = src converted elementwise; same shape and device, any dtypes (integers saturate nowhere:
// conversions follow C++ casts through double, floats round to nearest even).
void cast(const Tensor& src, Tensor& dst);
// dst = value, converted to dst's dtype.
void fill(Tensor& dst, double value);

}  // namespace fathom::cuda
