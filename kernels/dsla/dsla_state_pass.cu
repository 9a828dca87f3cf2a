// The chunk starting states of the tensor-core DSLA kernels, in one sequential pass over the chunks per
// (batch, query head, state, 64 key rows of the state). The block keeps its 64 x D part of the state in
// fp32 registers (the accumulators of mma.m16n8k16) and, chunk by chunk,
//   stores it as the chunk's bf16 starting value, then S <- diag(e^{b_L}) S + X^T Y,
// with X the chunk's factor rows (hi and lo bf16 parts of k e^{b_L - b}, or of scale q e^{b}) and Y its v
// (or do) rows. The chunks' inputs stream through a three-stage cp.async pipeline, so the state never
// leaves the multiprocessor and no per-chunk contribution is written and read back.
//   KEYS:  x = k, y = v (the KV head), forward order from the initial state: S_n, the state before chunk n;
//          the final state is the fp32 value after the last chunk.
//   !KEYS: x = q, y = do (the query head), reverse order from zero: dH_n, the gradient with respect to
//          S_{n+1}. It also gives the gate gradient's share of all later chunks at chunk n, without a pass
//          over them: scaling every (query, key) pair across the boundary after chunk n by e^eps is
//          scaling S_{n+1}, so sum_{t in later chunks} (q dq' - k dk')_c = sum_e S_{n+1}[c][e] dH_n[c][e]
//          (later[n][c]; zero for the last chunk).
#include "kernels/attention/attention_mma.cuh"
#include "kernels/dsla/dsla_launch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using flash::bf16_t;

constexpr int kRows = 64;  // tokens per chunk, and key rows of the state per block
constexpr int kStages = 3;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct PassShape {
  static constexpr int warps = 4 * (D / kRows), threads = 32 * warps;
  static constexpr int parts = threads / kRows, R = kRows / parts;  // the gate scan: R rows of one column each
  static constexpr int next_ld = D + 8;                             // padded rows of S_{n+1}: distinct banks
};

// One stage: x [64 t][64 c] and y [64 t][D] bf16 (swizzled), the gates [64 t][64 c] fp32, and (!KEYS) the
// block's rows of S_{n+1} [64][D + 8] bf16. Then the factor rows [128][64] (hi, lo), the scan's exchange,
// the chunk's b_L, and two buffers of the later-chunk sums [D / 64 warp columns][64].
template <int D, bool KEYS>
struct PassLayout {
  using Sh = PassShape<D>;
  static constexpr int x = 0, y = x + kRows * 64 * 2, g = y + kRows * D * 2, next = g + kRows * 64 * 4,
                       stage = next + (KEYS ? 0 : kRows * Sh::next_ld * 2);
  static constexpr int factors = kStages * stage, scratch = factors + 2 * kRows * 64 * 2,
                       decay = scratch + Sh::threads * 4, later = decay + kRows * 4,
                       bytes = later + 2 * (D / 64) * kRows * 4;
};

struct PassArgs {
  const bf16_t *x, *y;         // [B, T, heads, D]
  const float *g1, *g2;        // [B, T, H, D]
  const float *init1, *init2;  // [B, H, D, D] or null (zeros)
  float *fin1, *fin2;          // [B, H, D, D] or null
  bf16_t* starts;              // [B, H, NS, N, D, D]
  const bf16_t* states;        // !KEYS: the forward-order starts S_n
  float* later;                // !KEYS: [B, H, NS, N, D]
  int64_t T_len;
  int H, Hk, N;
};

template <int D, bool TWO, bool KEYS>
__global__ void __launch_bounds__(PassShape<D>::threads) chunk_state_pass_kernel(PassArgs a) {
  using Sh = PassShape<D>;
  using Ly = PassLayout<D, KEYS>;
  using XTile = flash::SwizzledTile<64>;
  using YTile = flash::SwizzledTile<D>;
  constexpr int NS = TWO ? 2 : 1, NT = Sh::threads;
  extern __shared__ __align__(128) unsigned char smem[];
  const int c0 = blockIdx.x * 64, s = blockIdx.y;
  const int64_t bh = blockIdx.z, b = bh / a.H;
  const int h = int(bh % a.H), hk = h / (a.H / a.Hk), heads = KEYS ? a.Hk : a.H, head = KEYS ? hk : h;
  const float* g = s == 0 ? a.g1 : a.g2;
  const int64_t slot0 = (bh * NS + s) * a.N, DD = int64_t(D) * D;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, tq = lane & 3;
  const int m0 = (warp % 4) * 16, n0 = (warp / 4) * 64;  // the warp's 16 x 64 part of the block's 64 x D
  const float scale = KEYS ? 1.0f : rsqrtf(float(D));
  const int N = a.N;
  auto chunk_of = [&](int step) { return KEYS ? step : N - 1 - step; };

  auto issue = [&](int step) {
    unsigned char* st = smem + (step % kStages) * Ly::stage;
    const int n = chunk_of(step);
    const int64_t t0 = int64_t(n) * kRows, row_stride = int64_t(heads) * D;
    const int L = int(a.T_len - t0 < kRows ? a.T_len - t0 : kRows);
    const int64_t first = (b * a.T_len + t0) * heads + head;
    flash::load_tile_async<64, kRows, NT, XTile>(flash::smem_addr(st + Ly::x), a.x + first * D + c0, row_stride, 0, L,
                                                 64, tid);
    flash::load_tile_async<D, kRows, NT, YTile>(flash::smem_addr(st + Ly::y), a.y + first * D, row_stride, 0, L, D,
                                                tid);
    const float* gsrc = g + ((b * a.T_len + t0) * a.H + h) * int64_t(D) + c0;
    const uint32_t gs = flash::smem_addr(st + Ly::g);
    for (int i = tid; i < kRows * 16; i += NT) {
      const int r = i / 16, ch = i % 16;
      flash::cp_async_16(gs + (r * 64 + ch * 4) * 4, r < L ? gsrc + int64_t(r) * a.H * D + ch * 4 : gsrc, r < L);
    }
    if constexpr (!KEYS) {
      if (n + 1 < N) {
        const bf16_t* src = a.states + (slot0 + n + 1) * DD + int64_t(c0) * D;
        const uint32_t ns = flash::smem_addr(st + Ly::next);
        for (int i = tid; i < kRows * (D / 8); i += NT) {
          const int r = i / (D / 8), ch = i % (D / 8);
          flash::cp_async_16(ns + (r * Sh::next_ld + ch * 8) * 2, src + int64_t(r) * D + ch * 8, true);
        }
      }
    }
  };

  // The state's rows m0 + gr (+ 8), columns n0 + 8 nt + 2 tq (+ 1).
  float acc[8][4];
  const float* init = s == 0 ? a.init1 : a.init2;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = c0 + m0 + gr + 8 * (e >> 1), col = n0 + 8 * nt + 2 * tq + (e & 1);
      acc[nt][e] = init != nullptr ? init[bh * DD + int64_t(row) * D + col] : 0.0f;
    }

  bf16_t* factors = reinterpret_cast<bf16_t*>(smem + Ly::factors);
  float *scratch = reinterpret_cast<float*>(smem + Ly::scratch), *decay = reinterpret_cast<float*>(smem + Ly::decay);
  float* later = reinterpret_cast<float*>(smem + Ly::later);
  const uint32_t factors_addr = flash::smem_addr(factors);
  // The later-chunk sums of the previous step: both warp columns' halves added, into a.later.
  auto flush_later = [&](int step) {
    if (!KEYS && tid < kRows) {
      const float* buf = later + (step & 1) * (D / 64) * kRows;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < D / 64; ++w) sum += buf[w * kRows + tid];
      a.later[(slot0 + chunk_of(step)) * D + c0 + tid] = sum;
    }
  };

#pragma unroll 1
  for (int step = 0; step < kStages - 1; ++step) {
    if (step < N) issue(step);
    flash::cp_async_commit();
  }
#pragma unroll 1
  for (int step = 0; step < N; ++step) {
    const int n = chunk_of(step);
    flash::cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk n has landed; every warp is done with the previous step's buffers
    if (step + kStages - 1 < N) issue(step + kStages - 1);
    flash::cp_async_commit();
    if (step > 0) flush_later(step - 1);
    unsigned char* st = smem + (step % kStages) * Ly::stage;

    // Cumulative log2 gates of column c over the chunk, R rows per thread, then the factor rows.
    const int c = tid % kRows, part = tid / kRows, r0 = part * Sh::R;
    const float* gs = reinterpret_cast<const float*>(st + Ly::g);
    float bx[Sh::R];
#pragma unroll
    for (int r = 0; r < Sh::R; ++r) bx[r] = gs[(r0 + r) * 64 + c] * kLog2e + (r > 0 ? bx[r - 1] : 0.0f);
    scratch[part * kRows + c] = bx[Sh::R - 1];
    __syncthreads();
    float before = 0.0f, total = 0.0f;
#pragma unroll
    for (int p = 0; p < Sh::parts; ++p) {
      const float x = scratch[p * kRows + c];
      before += p < part ? x : 0.0f;
      total += x;
    }
    const unsigned char* xs = st + Ly::x;
#pragma unroll
    for (int r = 0; r < Sh::R; ++r) {
      const int t = r0 + r;
      const float bt = bx[r] + before;
      const float f = KEYS ? exp2f(total - bt) : scale * exp2f(bt);
      const float val = __bfloat162float(*reinterpret_cast<const bf16_t*>(xs + XTile::element(t, c))) * f;
      const bf16_t hi = __float2bfloat16_rn(val);
      *reinterpret_cast<bf16_t*>(reinterpret_cast<unsigned char*>(factors) + XTile::element(t, c)) = hi;
      *reinterpret_cast<bf16_t*>(reinterpret_cast<unsigned char*>(factors) + XTile::element(t + kRows, c)) =
          __float2bfloat16_rn(val - __bfloat162float(hi));
    }
    if (part == 0) decay[c] = total;

    // The chunk's starting value, before this chunk's update.
    bf16_t* out = a.starts + (slot0 + n) * DD + int64_t(c0) * D;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = m0 + gr + 8 * hf, col = n0 + 8 * nt + 2 * tq;
        *reinterpret_cast<uint32_t*>(out + int64_t(row) * D + col) =
            flash::pack_bf16(acc[nt][2 * hf], acc[nt][2 * hf + 1]);
      }
    if constexpr (!KEYS) {
      float part_sum[2] = {0.0f, 0.0f};
      if (n + 1 < N) {
        const bf16_t* next = reinterpret_cast<const bf16_t*>(st + Ly::next);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int row = m0 + gr + 8 * hf, col = n0 + 8 * nt + 2 * tq;
            const float2 sv =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(next + row * Sh::next_ld + col));
            part_sum[hf] += sv.x * acc[nt][2 * hf] + sv.y * acc[nt][2 * hf + 1];
          }
      }
      float* buf = later + (step & 1) * (D / 64) * kRows + (warp / 4) * kRows;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float v = flash::quad_sum(part_sum[hf]);
        if (tq == 0) buf[m0 + gr + 8 * hf] = v;
      }
    }
    __syncthreads();  // the factor rows and b_L are in place

    const float d0 = exp2f(decay[m0 + gr]), d1 = exp2f(decay[m0 + gr + 8]);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      acc[nt][0] *= d0, acc[nt][1] *= d0, acc[nt][2] *= d1, acc[nt][3] *= d1;
    }
    const uint32_t ys = flash::smem_addr(st + Ly::y);
#pragma unroll
    for (int ks = 0; ks < 2 * kRows / 16; ++ks) {
      uint32_t af[4];
      XTile::load_a_trans(af, factors_addr, m0, 16 * ks, lane);  // A[c][t'] = factors[t'][c]
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bfr[4];
        YTile::load_b_trans(bfr, ys, (16 * ks) % kRows, n0 + 16 * np, lane);  // row t' of y for hi and lo
        flash::mma_16816(acc[2 * np], af, bfr[0], bfr[1]);
        flash::mma_16816(acc[2 * np + 1], af, bfr[2], bfr[3]);
      }
    }
  }
  flash::cp_async_wait<0>();
  __syncthreads();
  flush_later(N - 1);
  if constexpr (KEYS) {
    float* fin = s == 0 ? a.fin1 : a.fin2;
    if (fin != nullptr) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = c0 + m0 + gr + 8 * (e >> 1), col = n0 + 8 * nt + 2 * tq + (e & 1);
          fin[bh * DD + int64_t(row) * D + col] = acc[nt][e];
        }
    }
  }
}

}  // namespace

void dsla_chunk_states(const DslaStatePass& p) {
  const int64_t B = p.x.dim(0), T_len = p.x.dim(1), D = p.x.dim(3);
  const int H = int(p.g1.dim(2)), N = int((T_len + kRows - 1) / kRows);
  const bool two = p.g2.defined();
  FATHOM_CHECK(N <= int(p.starts.dim(3)), "dsla_chunk_states: the starts hold ", p.starts.dim(3), " chunks, need ", N);
  PassArgs a{bf16_data(p.x),
             bf16_data(p.y),
             static_cast<const float*>(p.g1.raw()),
             two ? static_cast<const float*>(p.g2.raw()) : nullptr,
             p.initial ? f32_data(p.initial->s1) : nullptr,
             p.initial && two ? f32_data(p.initial->s2) : nullptr,
             p.final_state ? optional_data(p.final_state->s1) : nullptr,
             p.final_state && two ? optional_data(p.final_state->s2) : nullptr,
             static_cast<bf16_t*>(p.starts.raw()),
             p.states ? bf16_data(*p.states) : nullptr,
             p.later ? static_cast<float*>(p.later->raw()) : nullptr,
             T_len,
             H,
             int(p.keys ? p.x.dim(2) : H),  // the heads of x: KV heads for k, query heads for q
             N};
  FATHOM_CHECK(p.keys || (p.states && p.later), "dsla_chunk_states: the reverse pass needs the states and `later`");
  FATHOM_CHECK(B * H <= 65535, "dsla: the CUDA training kernels take at most 65535 sequence-heads ",
               "(batch x query heads), got ", B, " x ", H);  // the grid's z extent
  cudaStream_t stream = stream_for(p.x.device());
  dispatch_dsla_shape(D, two, [&]<int DD, bool TWO>() {
    auto run = [&]<bool KEYS>() {
      auto kernel = chunk_state_pass_kernel<DD, TWO, KEYS>;
      const int bytes = PassLayout<DD, KEYS>::bytes;
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      const dim3 grid{unsigned(DD / 64), unsigned(TWO ? 2 : 1), unsigned(B * H)};
      kernel<<<grid, PassShape<DD>::threads, bytes, stream>>>(a);
      CUDA_CHECK_LAUNCH();
    };
    if (p.keys)
      run.template operator()<true>();
    else
      run.template operator()<false>();
  });
}

}  // namespace fathom::cuda
