// dv and dgamma's per-chunk parts of the tensor-core DSLA backward, both states from one load of the chunk,
// from the forward's kept scores (dsla_tensor_core.cu). One block per chunk of 64 tokens, 4 D threads
// (16 rows x 32 columns of dv per warp). Per state, on the tensor cores:
//   dv'[j] = sum_{t >= j} (scale A)[t][j] do[t] + (k_j e^{b_L - b_j}) dH,
// the key factors (at most 1) formed as the fragments are loaded. dv = sum_s w_s dv'_s, and the chunk's
// part of dgamma is sum v . (dv'_1 - dv'_2) (= sum do . (o_1 - o_2), o being linear in v from a zero
// state). Sums run in a fixed order: bit-identical runs.
#include "kernels/dsla/dsla_mma.cuh"

namespace fathom::cuda {

namespace {

using namespace dsla_mma;

// Shared memory: the chunk's k, v, do rows (swizzled bf16 [64][D]); per state its cumulative gates (fp32
// [64][D + 4]), kept scores (swizzled bf16 [64][64]) and state gradient dH (swizzled bf16 [D][D]); the
// scan's exchange, which then holds the warps' dgamma sums.
template <int D, int NS>
struct DvLayout {
  static constexpr int rows = kChunk * D * 2, scores = kChunk * kChunk * 2, state = D * D * 2;
  static constexpr int k = 0, v = k + rows, dO = v + rows, g = dO + rows, sc = g + NS * Shape<D>::gates_bytes,
                       dH = sc + NS * scores, scratch = dH + NS * state, bytes = scratch + NS * Shape<D>::threads * 4;
};

template <int D, bool TWO>
__global__ void __launch_bounds__(Shape<D>::threads) value_grads_kernel(DslaBackwardArgs a) {
  using Sh = Shape<D>;
  constexpr int NS = TWO ? 2 : 1, NT = Sh::threads, LG = Sh::ld_gates;
  using Ly = DvLayout<D, NS>;
  using Tile = flash::SwizzledTile<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int n = blockIdx.x, h = blockIdx.y, hk = h / (a.H / a.Hk);
  const int64_t b = blockIdx.z, t0 = int64_t(n) * kChunk;
  const int L = int(a.T_len - t0 < kChunk ? a.T_len - t0 : kChunk);
  const int I = warp / Sh::warps_per_row, c0 = (warp % Sh::warps_per_row) * 32;  // the warp's tile
  const uint32_t ks = flash::smem_addr(smem + Ly::k), dos = flash::smem_addr(smem + Ly::dO);
  float* gates = reinterpret_cast<float*>(smem + Ly::g);
  float* scratch = reinterpret_cast<float*>(smem + Ly::scratch);
  const int64_t q_row = (b * a.T_len + t0) * a.H + h, kv_row = (b * a.T_len + t0) * a.Hk + hk;
  auto slot_of = [&](int s) { return ((b * a.H + h) * NS + s) * a.N + n; };

  // k and the gates first (for the scan), then do, v and each state's scores and dH.
  flash::load_tile_async<D, kChunk, NT>(ks, a.k + kv_row * D, int64_t(a.Hk) * D, 0, L, D, tid);
  load_gates_async<D, NS>(gates, a.g1, a.g2, q_row, L, a.H);
  flash::cp_async_commit();
  flash::load_tile_async<D, kChunk, NT>(dos, a.grad_o + q_row * D, int64_t(a.H) * D, 0, L, D, tid);
  flash::load_tile_async<D, kChunk, NT>(flash::smem_addr(smem + Ly::v), a.v + kv_row * D, int64_t(a.Hk) * D, 0, L, D,
                                        tid);
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    flash::load_tile_async<kChunk, kChunk, NT, ScoreTile>(flash::smem_addr(smem + Ly::sc + s * Ly::scores),
                                                          a.scores + slot_of(s) * kChunk * kChunk, kChunk, 0, kChunk,
                                                          kChunk, tid);
    flash::load_tile_async<D, D, NT>(flash::smem_addr(smem + Ly::dH + s * Ly::state), a.dstates + slot_of(s) * D * D, D,
                                     0, D, D, tid);
  }
  flash::cp_async_commit();
  flash::cp_async_wait<1>();
  __syncthreads();
  cumulate_gates<D, NS>(gates, scratch);
  flash::cp_async_wait<0>();
  __syncthreads();

  float total[4][4] = {}, gam = 0.0f;
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    const float* bs = gates + s * kChunk * LG;
    const uint32_t sc = flash::smem_addr(smem + Ly::sc + s * Ly::scores),
                   dH = flash::smem_addr(smem + Ly::dH + s * Ly::state);
    float acc[4][4] = {};
    for (int k0 = kSub * I; k0 < kChunk; k0 += kSub) {  // the queries at or after the warp's keys
      uint32_t af[4];
      ScoreTile::load_a_trans(af, sc, kSub * I, k0, lane);  // A[j][t] = (scale A)[t][j]
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bfr[4];
        Tile::load_b_trans(bfr, dos, k0, c0 + 16 * np, lane);
        mma_pair(acc, np, af, bfr);
      }
    }
#pragma unroll
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t af[4];
      Tile::load_a(af, ks, kSub * I, k0,
                   lane);  // then times e^{b_L - b_j}: a_r is row j + 8 (r & 1), column c + 8 (r >> 1)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = kSub * I + g + 8 * (r & 1), c = k0 + 2 * tq + 8 * (r >> 1);
        af[r] = scaled(af[r], flash::exp2_approx(bs[(kChunk - 1) * LG + c] - bs[j * LG + c]),
                       flash::exp2_approx(bs[(kChunk - 1) * LG + c + 1] - bs[j * LG + c + 1]));
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bfr[4];
        Tile::load_b_trans(bfr, dH, k0, c0 + 16 * np, lane);  // B[c][e] = dH[c][e]
        mma_pair(acc, np, af, bfr);
      }
    }
    const float w = state_weight<TWO>(a.gamma, h, s);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        total[nt][e] += w * acc[nt][e];
        if (TWO) {
          const int j = kSub * I + g + 8 * (e >> 1), col = c0 + 8 * nt + 2 * tq + (e & 1);
          const float v = bf(*reinterpret_cast<const bf16_t*>(smem + Ly::v + Tile::element(j, col)));
          gam += (s == 0 ? v : -v) * acc[nt][e];
        }
      }
  }

#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int j = kSub * I + g + 8 * hf, col = c0 + 8 * nt + 2 * tq;
      if (j >= L) continue;
      const int64_t at = (q_row + int64_t(j) * a.H) * D + col;
      const float x0 = total[nt][2 * hf], x1 = total[nt][2 * hf + 1];
      if (a.H == a.Hk)
        *reinterpret_cast<uint32_t*>(a.dv + at) = flash::pack_bf16(x0, x1);
      else
        *reinterpret_cast<float2*>(a.dv_heads + at) = make_float2(x0, x1);
    }
  if (TWO) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) gam += __shfl_xor_sync(0xffffffffu, gam, m);
    if (lane == 0) scratch[warp] = gam;  // the scan's exchange is done with: a barrier has passed since
    __syncthreads();
    if (tid == 0) {
      float sum = 0.0f;
      for (int w = 0; w < Sh::warps; ++w) sum += scratch[w];
      a.dgamma_parts[(b * a.H + h) * a.N + n] = sum;
    }
  }
}

}  // namespace

void dsla_value_grads(const DslaBackwardArgs& a, cudaStream_t stream) {
  FATHOM_CHECK(a.scores != nullptr, "dsla_value_grads: the kernel reads the forward's kept scores");
  dispatch_dsla_shape(a.D, a.g2 != nullptr, [&]<int D, bool TWO>() {
    dsla_mma::launch_per_chunk<D>(value_grads_kernel<D, TWO>, DvLayout < D, TWO ? 2 : 1 > ::bytes, a, stream);
  });
}

}  // namespace fathom::cuda
