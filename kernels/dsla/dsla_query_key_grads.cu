// dq, dk and the gate gradients of the tensor-core DSLA backward, both states from one load of the chunk.
// One block per chunk of 64 tokens, 4 D threads (16 rows x 32 columns per warp).
//
// Per state, with D = do v^T, b the cumulative log2 gates (restarting each chunk), L the chunk's last row,
// and for row t of sub-block I (rows 16 I .. 16 I + 15) the reference rows r = 16 I (queries) and
// r' = 16 (I + 1), or row 63 for the last sub-block (keys; row 63 holds b_L, gates past L being zeros):
//   dq'[t] = scale (e^{b_t - b_r} P_q[t] + sum_{j in I, j <= t} D_tj k_j e^{b_t - b_j})
//   P_q[t] = e^{b_r} (do S^T)[t] + sum_{j < r} D_tj (k_j e^{b_r - b_j})
//   dk'[j] = scale (e^{b_r' - b_j} P_k[j] + sum_{t in I, t >= j} D_tj q_t e^{b_t - b_j})
//   P_k[j] = e^{b_L - b_r'} / scale (v dH^T)[j] + sum_{t >= r'} D_tj (q_t e^{b_t - b_r'})
// Every gate factor is at most 1, so none overflows. P_q and P_k are one chain of tensor-core products
// per warp, the accumulators scaled in registers between them; the bf16 operand factors are formed as
// their fragments are loaded. The pairs inside a sub-block (no reference row between them) are summed
// exactly on the CUDA cores, each e^{b_t - b_j} formed once for both dq and dk.
// The gate gradient: dg = w (suffix sums over the chunk of q dq' - k dk') + w later (the later chunks'
// share, from the reverse state pass). Sums run in a fixed order: bit-identical runs.
#include "kernels/dsla/dsla_mma.cuh"

namespace fathom::cuda {

namespace {

using namespace dsla_mma;

// Shared memory: the chunk's q, k, v, do rows (swizzled bf16 [64][D]); both states' cumulative gates
// (fp32 [64][D + 4]); the state S and state gradient dH (swizzled bf16 [D][D]), whose space holds P_q
// and P_k (fp32 [64][D], swizzled) once the products are done; D below the diagonal sub-blocks (bf16
// [64][64], swizzled) and exactly on them (fp32 [4][16][16]); the scans' exchange.
template <int D>
struct QkLayout {
  static constexpr int rows = kChunk * D * 2, gates = Shape<D>::gates_bytes;
  static constexpr int state = D * D * 2 > kChunk* D * 4 ? D* D * 2 : kChunk* D * 4;  // S, then P_q
  static constexpr int q = 0, k = q + rows, v = k + rows, dO = v + rows, g = dO + rows, S = g + 2 * gates,
                       dH = S + state, db = dH + state, dm = db + kChunk * kChunk * 2,
                       scratch = dm + 4 * kSub * kSub * 4, bytes = scratch + 2 * Shape<D>::threads * 4;
};

// Element (row, col) of P_q / P_k: fp32 rows of D, columns XOR-swizzled so that the accumulator stores of
// four rows and the column reads of a warp fall in distinct banks.
template <int D>
__device__ __forceinline__ int p_index(int row, int col) {
  return row * D + (col ^ ((row & 3) << 3));
}

template <int D, bool TWO>
__global__ void __launch_bounds__(Shape<D>::threads) query_key_grads_kernel(DslaBackwardArgs a) {
  using Sh = Shape<D>;
  using Ly = QkLayout<D>;
  using Tile = flash::SwizzledTile<D>;
  constexpr int NS = TWO ? 2 : 1, NT = Sh::threads, LG = Sh::ld_gates;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int n = blockIdx.x, h = blockIdx.y, hk = h / (a.H / a.Hk);
  const int64_t b = blockIdx.z, t0 = int64_t(n) * kChunk;
  const int L = int(a.T_len - t0 < kChunk ? a.T_len - t0 : kChunk);
  const float scale = rsqrtf(float(D));
  // The warp's tile: rows 16 I .., columns c0 ..; as a CUDA-core thread, column c of rows 16 I ...
  const int I = warp / Sh::warps_per_row, c0 = (warp % Sh::warps_per_row) * 32, c = c0 + lane;
  const uint32_t qs = flash::smem_addr(smem + Ly::q), ks = flash::smem_addr(smem + Ly::k),
                 vs = flash::smem_addr(smem + Ly::v), dos = flash::smem_addr(smem + Ly::dO),
                 Ss = flash::smem_addr(smem + Ly::S), dHs = flash::smem_addr(smem + Ly::dH),
                 dbs = flash::smem_addr(smem + Ly::db);
  float* gates = reinterpret_cast<float*>(smem + Ly::g);
  float* dm = reinterpret_cast<float*>(smem + Ly::dm);
  float* scratch = reinterpret_cast<float*>(smem + Ly::scratch);
  float *Pq = reinterpret_cast<float*>(smem + Ly::S), *Pk = reinterpret_cast<float*>(smem + Ly::dH);
  auto element = [&](int base, int row, int col) {
    return bf(*reinterpret_cast<const bf16_t*>(smem + base + Tile::element(row, col)));
  };
  auto slot_of = [&](int s) { return ((b * a.H + h) * NS + s) * a.N + n; };
  auto load_states = [&](int s) {
    const int64_t at = slot_of(s) * D * D;
    flash::load_tile_async<D, D, NT>(Ss, a.states + at, D, 0, D, D, tid);
    flash::load_tile_async<D, D, NT>(dHs, a.dstates + at, D, 0, D, D, tid);
  };

  // The chunk: do and v first (for D), then the raw gates, then q, k and the first state's S and dH.
  const int64_t q_row = (b * a.T_len + t0) * a.H + h, kv_row = (b * a.T_len + t0) * a.Hk + hk;
  flash::load_tile_async<D, kChunk, NT>(dos, a.grad_o + q_row * D, int64_t(a.H) * D, 0, L, D, tid);
  flash::load_tile_async<D, kChunk, NT>(vs, a.v + kv_row * D, int64_t(a.Hk) * D, 0, L, D, tid);
  flash::cp_async_commit();
  load_gates_async<D, NS>(gates, a.g1, a.g2, q_row, L, a.H);
  flash::cp_async_commit();
  flash::load_tile_async<D, kChunk, NT>(qs, a.q + q_row * D, int64_t(a.H) * D, 0, L, D, tid);
  flash::load_tile_async<D, kChunk, NT>(ks, a.k + kv_row * D, int64_t(a.Hk) * D, 0, L, D, tid);
  load_states(0);
  flash::cp_async_commit();

  // D = do v^T: warp tiles of 16 rows x 64 / warps_per_row columns; only the strictly lower sub-blocks
  // (bf16, for the tensor cores) and the diagonal ones (fp32, exact) are kept.
  flash::cp_async_wait<2>();
  __syncthreads();
  {
    constexpr int CW = kChunk / Sh::warps_per_row, NTD = CW / 8;
    const int j0 = (warp % Sh::warps_per_row) * CW;
    if (j0 < 16 * I + 16) {
      float acc[NTD][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < D; k0 += 16) {
        uint32_t af[4];
        Tile::load_a(af, dos, 16 * I, k0, lane);
#pragma unroll
        for (int np = 0; np < NTD / 2; ++np) {
          uint32_t bfr[4];
          Tile::load_b(bfr, vs, j0 + 16 * np, k0, lane);
          mma_pair(acc, np, af, bfr);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NTD; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int t = 16 * I + g + 8 * hf, j = j0 + 8 * nt + 2 * tq;
          const float x0 = acc[nt][2 * hf], x1 = acc[nt][2 * hf + 1];
          if (j / kSub < I) {
            *reinterpret_cast<uint32_t*>(smem + Ly::db + ScoreTile::element(t, j)) = flash::pack_bf16(x0, x1);
          } else if (j / kSub == I) {
            float* row = dm + I * kSub * kSub + (t % kSub) * kSub + j % kSub;
            row[0] = x0, row[1] = x1;
          }
        }
    }
  }
  // Both states' cumulative log2 gates, in place: thread (I, c) scans rows 16 I .. of column c.
  flash::cp_async_wait<1>();
  __syncthreads();
  cumulate_gates<D, NS>(gates, scratch);

  // The first state's w dq' and w dk' wait for the second's where no register is left for them: dq's in the
  // first state's gates (each thread's own elements, read by no other thread once the products are done),
  // dk's in dg2 (the block's own rows, written only at the end of the second state).
  float* total_q = gates;
  // Element (row, c) of out (dq or dk): value, plus the first state's where this is the second; kept in
  // `wait` where a second state follows, else stored (bf16, or fp32 per query head for grouped dk).
  auto sum_into = [&](bf16_t* out, int row, float value, float* wait, int s) {
    if (row >= L) return;
    const int64_t at = (q_row + int64_t(row) * a.H) * D + c;
    if (TWO && s == 0) {
      *wait = value;
      return;
    }
    if (TWO) value += *wait;
    if (out == a.dk && a.H != a.Hk)
      a.dk_heads[at] = value;
    else
      out[at] = __float2bfloat16_rn(value);
  };
  const int rq = 16 * I, rk = I < 3 ? 16 * (I + 1) : kChunk - 1;
#pragma unroll 1
  for (int s = 0; s < NS; ++s) {
    const float w = state_weight<TWO>(a.gamma, h, s);
    const float* bs = gates + s * kChunk * LG;
    flash::cp_async_wait<0>();
    __syncthreads();  // S, dH of state s, q, k and the scanned gates are in place

    // P_q and P_k of the warp's tile, in the mma accumulators (rows 16 I + g (+ 8), columns c0 + 8 nt +
    // 2 tq (+ 1)).
    float pq[4][4] = {}, pk[4][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t a_do[4], a_v[4];
      Tile::load_a(a_do, dos, 16 * I, k0, lane);
      Tile::load_a(a_v, vs, 16 * I, k0, lane);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bS[4], bH[4];
        Tile::load_b(bS, Ss, c0 + 16 * np, k0, lane);  // B[e][c] = S[c][e]
        Tile::load_b(bH, dHs, c0 + 16 * np, k0, lane);
        mma_pair(pq, np, a_do, bS);
        mma_pair(pk, np, a_v, bH);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = c0 + 8 * nt + 2 * tq + e;
        const float fq = flash::exp2_approx(bs[rq * LG + col]);
        const float fk = flash::exp2_approx(bs[(kChunk - 1) * LG + col] - bs[rk * LG + col]) / scale;
        pq[nt][e] *= fq, pq[nt][2 + e] *= fq, pk[nt][e] *= fk, pk[nt][2 + e] *= fk;
      }
    // The off-diagonal terms. KEYS: P_q += D[t][j < rq] (k_j e^{b_rq - b_j}); else P_k += D^T[j][t >= rk]
    // (q_t e^{b_t - b_rk}). The bf16 rows (K) are multiplied by their factors in the B fragments.
    auto factored_product = [&]<bool keys>(float(&acc)[4][4]) {
      const int ref = keys ? rq : rk;
      const uint32_t xs = keys ? ks : qs;
      for (int k0 = keys ? 0 : 16 * (I + 1); k0 < (keys ? rq : kChunk); k0 += 16) {
        uint32_t af[4];
        if constexpr (keys)
          ScoreTile::load_a(af, dbs, 16 * I, k0, lane);
        else
          ScoreTile::load_a_trans(af, dbs, 16 * I, k0, lane);  // A[j][t] = D[t][j]
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t bfr[4];
          const int n0 = c0 + 16 * np;
          Tile::load_b_trans(bfr, xs, k0, n0, lane);
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int col = n0 + 8 * half + g;
            const float bref = bs[ref * LG + col];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int row = k0 + 2 * tq + 8 * e;
              const float d0 = bs[row * LG + col] - bref, d1 = bs[(row + 1) * LG + col] - bref;
              bfr[2 * half + e] =
                  scaled(bfr[2 * half + e], flash::exp2_approx(keys ? -d0 : d0), flash::exp2_approx(keys ? -d1 : d1));
            }
          }
          mma_pair(acc, np, af, bfr);
        }
      }
    };
    factored_product.template operator()<true>(pq);
    factored_product.template operator()<false>(pk);
    // Read before the barrier: past it, state 0's gates become dq's sums, so no thread may read another's
    // rows of them after it (brk is sub-block I + 1's row).
    const float brk = bs[rk * LG + c];
    __syncthreads();  // every warp is done with S and dH: P_q and P_k take their place
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = 16 * I + g + 8 * hf, col = c0 + 8 * nt + 2 * tq;
        *reinterpret_cast<float2*>(Pq + p_index<D>(row, col)) = make_float2(pq[nt][2 * hf], pq[nt][2 * hf + 1]);
        *reinterpret_cast<float2*>(Pk + p_index<D>(row, col)) = make_float2(pk[nt][2 * hf], pk[nt][2 * hf + 1]);
      }
    __syncwarp();  // a thread's column of the tile was written by its own warp

    // Thread (I, c): the exact pairs of sub-block I in column c, then dq', dk' and the gate terms.
    float x[kSub], kc[kSub], bc[kSub], dkd[kSub] = {};
#pragma unroll
    for (int r = 0; r < kSub; ++r) {
      x[r] = element(Ly::q, rq + r, c), kc[r] = element(Ly::k, rq + r, c), bc[r] = bs[(rq + r) * LG + c];
    }
    const float* dmI = dm + I * kSub * kSub;
#pragma unroll
    for (int t = 0; t < kSub; ++t) {
      float dqd = 0.0f;
#pragma unroll
      for (int j = 0; j <= t; ++j) {
        const float p = dmI[t * kSub + j] * flash::exp2_approx(bc[t] - bc[j]);
        dqd += p * kc[j];
        dkd[j] += p * x[t];
      }
      const float dq = scale * (flash::exp2_approx(bc[t] - bc[0]) * Pq[p_index<D>(rq + t, c)] + dqd);
      sum_into(a.dq, rq + t, w * dq, total_q + (rq + t) * LG + c, s);
      x[t] *= w * dq;  // q dq', weighted: x[t]'s query value is not needed past row t
    }
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      const float dk = scale * (flash::exp2_approx(brk - bc[j]) * Pk[p_index<D>(rq + j, c)] + dkd[j]);
      sum_into(a.dk, rq + j, w * dk, TWO ? a.dg2 + (q_row + int64_t(rq + j) * a.H) * D + c : nullptr, s);
      x[j] -= w * kc[j] * dk;
    }
#pragma unroll
    for (int r = kSub - 2; r >= 0; --r) x[r] += x[r + 1];
    scratch[I * D + c] = x[0];
    __syncthreads();  // the sub-blocks' totals are exchanged; every warp is done with P_q and P_k
    if (s + 1 < NS) load_states(s + 1);
    flash::cp_async_commit();
    float after = w * a.later[slot_of(s) * D + c];
#pragma unroll
    for (int p = 1; p < 4; ++p) after += p > I ? scratch[p * D + c] : 0.0f;
    float* dg = (s == 0 ? a.dg1 : a.dg2) + q_row * D + c;
#pragma unroll
    for (int r = 0; r < kSub; ++r)
      if (rq + r < L) dg[int64_t(rq + r) * a.H * D] = x[r] + after;
  }
}

}  // namespace

void dsla_query_key_grads(const DslaBackwardArgs& a, cudaStream_t stream) {
  FATHOM_CHECK(a.g2 == nullptr || a.dg2 != nullptr,
               "dsla_query_key_grads: two states need dg2 (it holds dk's first-state sums)");
  dispatch_dsla_shape(a.D, a.g2 != nullptr, [&]<int D, bool TWO>() {
    dsla_mma::launch_per_chunk<D>(query_key_grads_kernel<D, TWO>, QkLayout<D>::bytes, a, stream);
  });
}

}  // namespace fathom::cuda
