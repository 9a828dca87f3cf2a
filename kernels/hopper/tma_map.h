// Host side of the TMA copies (tma.cuh): tensor maps over [B, T, H, d] bf16 tensors.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace fathom::cuda::flash {

// Tensor maps of K and V (forward, dQ) or of Q and dO (dK/dV), passed to kernels as one
// __grid_constant__ parameter.
struct KvMaps {
  CUtensorMap k, v;
};
struct QdoMaps {
  CUtensorMap q, dout;
};

// A map whose box is `rows` x 64 columns of one head of one batch, 128-byte swizzled (the PanelTile
// layout); reads past T or d are zero-filled. d must be a multiple of 8 and `base` 16-byte aligned.
CUtensorMap head_rows_map(const void* base, int64_t B, int64_t T, int64_t H, int64_t d, int rows);

inline KvMaps kv_maps(const void* k, const void* v, int64_t B, int64_t T, int64_t Hk, int64_t d, int rows) {
  return {head_rows_map(k, B, T, Hk, d, rows), head_rows_map(v, B, T, Hk, d, rows)};
}

}  // namespace fathom::cuda::flash
