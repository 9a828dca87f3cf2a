#include "core/dtype.h"

#include "core/error.h"

namespace fathom {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
    case DType::e4m3:
    case DType::e5m2:
      return 1;
  }
  FATHOM_FAIL("unknown dtype ", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::f64:
      return "F64";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::e4m3:
      return "F8_E4M3";
    case DType::e5m2:
      return "F8_E5M2";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType t :
       {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8, DType::e4m3, DType::e5m2})
    if (name == dtype_name(t)) return t;
  FATHOM_FAIL("unsupported dtype '", name, "' (expected one of F32, BF16, F16, F64, I32, I64, U8, F8_E4M3, F8_E5M2)");
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f64; }

bool is_fp8(DType t) { return t == DType::e4m3 || t == DType::e5m2; }

float f16_to_float(f16 v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t mant = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};
  if (abs >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {                                       // subnormal or zero in half
    if (abs < 0x33000000u) return f16{sign};
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 + ... aligns to half subnormal
    uint32_t half = mant >> (shift - 0);
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return f16{uint16_t(sign | half)};
  }
  uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return f16{uint16_t(sign | half)};
}

}  // namespace fathom
