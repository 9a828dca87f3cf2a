#include "core/fp8.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fathom {

namespace {

struct Fp8Layout {
  int mantissa_bits;
  int bias;
  float max;
  uint8_t max_code;
};

Fp8Layout layout_of(DType format) {
  if (format == DType::e4m3) return {3, 7, 448.0f, 0x7E};
  FATHOM_CHECK(format == DType::e5m2, "fp8: ", dtype_name(format), " is not an FP8 dtype (F8_E4M3 or F8_E5M2)");
  return {2, 15, 57344.0f, 0x7B};
}

constexpr uint8_t kNaNCode = 0x7F;  // the canonical NaN of both formats

}  // namespace

float fp8_max(DType format) { return layout_of(format).max; }

uint8_t float_to_fp8(float x, DType format) {
  const Fp8Layout f = layout_of(format);
  if (std::isnan(x)) return kNaNCode;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= f.max) return sign | f.max_code;  // saturate: finite overflow and infinity alike
  // The spacing of representable values around a: 2^(e - mantissa_bits) in the binade of a, the
  // smallest normal binade's spacing for subnormals. a / quantum is exact (a power-of-two divisor).
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e with m in [0.5, 1): a's binade is 2^(e - 1)
  const int exponent = std::max(e - 1, 1 - f.bias);
  const float quantum = std::ldexp(1.0f, exponent - f.mantissa_bits);
  const int steps = int(std::nearbyint(a / quantum));  // ties to even under the default rounding mode
  const int implicit = 1 << f.mantissa_bits;
  // Below `implicit` steps the value is subnormal (exponent field 0); rounding up to 2 * implicit
  // carries into the next exponent, which the sum below does by itself.
  const int code = steps < implicit ? steps : ((exponent + f.bias) << f.mantissa_bits) + steps - implicit;
  return uint8_t(sign | code);
}

float fp8_to_float(uint8_t code, DType format) {
  const Fp8Layout f = layout_of(format);
  const bool negative = code & 0x80;
  const int exponent_field = (code & 0x7F) >> f.mantissa_bits;
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int top_exponent = (1 << (7 - f.mantissa_bits)) - 1;
  float value;
  if (format == DType::e4m3 && (code & 0x7F) == kNaNCode) {
    value = NAN;  // e4m3 spends only 0x7F / 0xFF on NaN and has no infinity
  } else if (format == DType::e5m2 && exponent_field == top_exponent) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent_field == 0) {
    value = std::ldexp(float(mantissa), 1 - f.bias - f.mantissa_bits);
  } else {
    value = std::ldexp(float(mantissa + (1 << f.mantissa_bits)), exponent_field - f.bias - f.mantissa_bits);
  }
  return negative ? -value : value;
}

}  // namespace fathom
