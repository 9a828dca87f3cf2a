// Element types and the 16-bit float conversions the CPU backend needs (the 8-bit float ones are in
// core/fp8.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fathom {

// e4m3 and e5m2 are the two 8-bit float formats of FP8 training (core/fp8.h): storage only, made and
// read by the scaled casts and GEMMs of kernels/fp8 and kernels/matmul; no other op computes in them.
enum class DType : uint8_t { f32, bf16, f16, f64, i32, i64, u8, e4m3, e5m2 };

size_t dtype_size(DType t);
// Names as safetensors spells them: F32, BF16, F16, F64, I32, I64, U8, F8_E4M3, F8_E5M2.
const char* dtype_name(DType t);
// Parses a safetensors name; throws on anything else.
DType dtype_from_name(std::string_view name);
// The types ops compute in: F32, BF16, F16, F64 (not the FP8 storage types).
bool is_floating(DType t);
bool is_fp8(DType t);

// bfloat16 and IEEE half as plain 16-bit values; arithmetic happens in float.
struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}
float f16_to_float(f16 v);
f16 float_to_f16(float f);

// Maps a C++ element type to its DType.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

}  // namespace fathom
