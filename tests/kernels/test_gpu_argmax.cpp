// The CUDA argmax against the CPU's on awkward rows: widths of 1 to a Llama vocabulary and odd ones
// (so rows are cut into many chunks, one, or end mid-vector), 1 to 40 rows, BF16 and F32, unaligned
// views (the element loads), the maximum at the first and last element and tied across chunks (the
// lower index wins), NaNs and rows of NaN only; repeated calls (the row counts go back to zero); and
// coarse random values, tied everywhere.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/argmax/argmax.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// Rows of distinct random values with planted maxima: row r's maximum at a place that moves with r
// (first, last, middle), tied with a second copy further on in every third row, NaNs sprinkled in
// every fifth row, and a row of NaN only when `nan_row` is set.
std::vector<float> planted_rows(int64_t rows, int64_t n, uint64_t seed, bool nan_row) {
  const std::vector<float> noise = random_input({rows * n}, DType::f32, seed).cpu.to_vector<float>();
  std::vector<float> v(noise);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = v.data() + r * n;
    const int64_t at = r % 3 == 0 ? 0 : r % 3 == 1 ? n - 1 : n / 2;
    row[at] = 4.0f;
    if (r % 3 == 2 && at + n / 3 < n) row[at + n / 3] = 4.0f;  // a tie, in a later chunk for wide rows
    if (r % 5 == 4)
      for (int64_t i = 1; i < n; i += 97) row[i] = nan;
  }
  if (nan_row && rows > 1)
    for (int64_t i = 0; i < n; ++i) v[size_t((rows - 1) * n + i)] = nan;
  return v;
}

}  // namespace

TEST(GpuArgmax, MatchesTheCpuOnAwkwardRows) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const int64_t n : {1, 7, 1000, 8191, 100352, 128256, 100353})
    for (const int64_t rows : {1, 3, 32, 40})
      for (const DType dt : {DType::bf16, DType::f32})
        for (const bool unaligned : {false, true}) {
          const std::string what =
              std::to_string(rows) + " x " + std::to_string(n) + " " + dtype_name(dt) + (unaligned ? " unaligned" : "");
          const Tensor cpu = Tensor::from_vector(planted_rows(rows, n, seed++, rows > 3), {rows, n}).to(dt);
          // An unaligned view: the same values one element into a wider buffer.
          Tensor gpu = cpu.to(kGpu);
          if (unaligned) {
            Tensor wide = Tensor::zeros({rows * n + 1}, dt, kGpu);
            wide.narrow(1, rows * n).copy_from(gpu.view({rows * n}));
            gpu = wide.narrow(1, rows * n).view({rows, n});
          }
          const std::vector<int32_t> want = argmax_rows(cpu).to_vector<int32_t>();
          for (int call = 0; call < 2; ++call)
            EXPECT_EQ(argmax_rows(gpu).to(Device::cpu()).to_vector<int32_t>(), want) << what << ", call " << call;
        }
}

// Coarse random values: ties everywhere, across and within chunks; the lowest index must win on both.
TEST(GpuArgmax, TheLowestIndexWinsAmongManyTies) {
  FATHOM_REQUIRE_GPU();
  for (const int64_t n : {1, 7, 1000, 100352}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const GpuInput x = random_input({5, n}, dtype, uint64_t(n), -3, 3);
      const Tensor rounded = Tensor::from_vector(
          [&] {
            std::vector<float> v = x.cpu.to_vector<float>();
            for (float& e : v) e = std::round(e * 2) / 2;
            return v;
          }(),
          x.cpu.shape());
      EXPECT_EQ(argmax_rows(rounded.to(dtype).to(kGpu)).to(Device::cpu()).to_vector<int32_t>(),
                argmax_rows(rounded).to_vector<int32_t>())
          << n << " " << dtype_name(dtype);
    }
  }
}
