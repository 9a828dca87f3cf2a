#include "kernels/decode_step/persistent_decode.h"

#include <tuple>
#include <utility>

#include "core/error.h"
#include "kernels/decode_step/persistent_decode_limits.h"
#include "kernels/runtime/argument_checks.h"

namespace fathom {

namespace {
constinit KernelChoice<Toggle> choice_in_force("FATHOM_PERSISTENT_DECODE", Toggle::off, parse_toggle);
constinit KernelChoice<int> one_split_tiles_in_force("FATHOM_PERSISTENT_ONE_SPLIT_TILES", 4, parse_count);

// "" when t is a BF16 tensor of `shape` on `device` whose data starts on 16 bytes (the kernel's bulk copies and
// vector loads need it), else what it is instead.
std::string tensor_unfit(const char* name, const Tensor& t, const Shape& shape, Device device) {
  if (!t.defined()) return std::string(name) + " is undefined";
  if (t.dtype() != DType::bf16 || t.device() != device || t.shape() != shape)
    return std::string(name) + " " + describe(t) + " is not a BF16 " + shape.str() + " on " + device.str();
  if (!cuda::aligned_to(16, t))
    return std::string(name) + " " + describe(t) + " does not start on a 16-byte boundary (a view at an offset)";
  return "";
}
}  // namespace

Toggle persistent_decode_choice() { return choice_in_force.get(); }

void set_persistent_decode_choice(Toggle choice) { choice_in_force.set(choice); }

int persistent_one_split_tiles() { return one_split_tiles_in_force.get(); }

void set_persistent_one_split_tiles(int tiles) {
  FATHOM_CHECK(tiles >= 1, "persistent decode: one split a KV head for up to ", tiles, " tiles (at least 1)");
  one_split_tiles_in_force.set(tiles);
}

std::string persistent_decode_unfit(const PersistentDecodeModel& m) {
  using namespace persistent_decode;
  if (m.layers.empty()) return "the model has no layers";
  if (int64_t(m.layers.size()) > kMaxLayers)
    return std::to_string(m.layers.size()) + " layers (at most " + std::to_string(kMaxLayers) + ")";
  const int64_t d = m.head_dim, Hq = m.heads, Hk = m.kv_heads;
  if (d != 64 && d != 128) return "head dim " + std::to_string(d) + " (the kernel takes 64 and 128)";
  if (Hk < 1 || Hq % Hk != 0 || Hq / Hk > kMaxGroup)
    return std::to_string(Hq) + " query heads over " + std::to_string(Hk) + " KV heads (at most " +
           std::to_string(kMaxGroup) + " a KV head)";
  const Tensor& q0 = m.layers[0].q;
  if (!q0.defined() || q0.rank() != 2) return "layer 0's q weight is not a matrix";
  const Device device = q0.device();
  const int64_t D = q0.dim(1), F = m.layers[0].gate.defined() ? m.layers[0].gate.dim(0) : 0;
  for (const auto& [what, width] : {std::pair{"d_model", D}, {"the query width", Hq * d}, {"ffn_hidden", F}})
    if (width % kWidthMultiple != 0 || width < kMinWidth || width > kMaxWidth)
      return std::string(what) + " " + std::to_string(width) + " (the kernel takes multiples of " +
             std::to_string(kWidthMultiple) + " from " + std::to_string(kMinWidth) + " to " +
             std::to_string(kMaxWidth) + ")";
  const bool qk_norm = m.layers[0].q_norm.defined();
  // Every layer's cache holds as many positions as layer 0's, which the kernel indexes them by.
  const Tensor& cache0 = m.layers[0].cache_k;
  const int64_t capacity = cache0.defined() && cache0.rank() == 4 ? cache0.dim(2) : 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const PersistentDecodeLayer& y = m.layers[i];
    const std::string at = "layer " + std::to_string(i) + "'s ";
    const std::pair<const char*, std::pair<const Tensor*, Shape>> expected[] = {
        {"q", {&y.q, Shape{Hq * d, D}}},
        {"k", {&y.k, Shape{Hk * d, D}}},
        {"v", {&y.v, Shape{Hk * d, D}}},
        {"o", {&y.o, Shape{D, Hq * d}}},
        {"gate", {&y.gate, Shape{F, D}}},
        {"up", {&y.up, Shape{F, D}}},
        {"down", {&y.down, Shape{D, F}}},
        {"attn_norm", {&y.attn_norm, Shape{D}}},
        {"ffn_norm", {&y.ffn_norm, Shape{D}}},
        {"cache_k", {&y.cache_k, Shape{1, Hk, capacity, d}}},
        {"cache_v", {&y.cache_v, Shape{1, Hk, capacity, d}}}};
    for (const auto& [name, tensor_shape] : expected)
      if (std::string why = tensor_unfit(name, *tensor_shape.first, tensor_shape.second, device); !why.empty())
        return at + why;
    if (capacity < 1) return at + "cache holds no position";
    if (y.q_norm.defined() != qk_norm || y.k_norm.defined() != qk_norm) return at + "QK-norm differs from layer 0's";
    if (qk_norm)
      for (const auto& [name, t, n] : {std::tuple{"q_norm", &y.q_norm, Hq * d}, {"k_norm", &y.k_norm, Hk * d}})
        if (std::string why = tensor_unfit(name, *t, Shape{n}, device); !why.empty()) return at + why;
  }
  if (std::string why = tensor_unfit("final_norm", m.final_norm, Shape{D}, device); !why.empty()) return why;
  if (!m.head.defined() || m.head.rank() != 2) return "the head is not a matrix";
  if (std::string why = tensor_unfit("head", m.head, Shape{m.head.dim(0), D}, device); !why.empty()) return why;
  if (!(m.scale > 0) || !(m.norm_eps > 0)) return "the softmax scale and the norms' eps must be positive";
  if (!device.is_cuda()) return "the weights are on " + device.str() + ", not a GPU";
#ifdef FATHOM_WITH_CUDA
  return cuda::persistent_decode_device_unfit(device, F);
#else
  return "this build has no CUDA backend";
#endif
}

#ifndef FATHOM_WITH_CUDA
struct PersistentDecode::Workspace {};

PersistentDecode::PersistentDecode(PersistentDecodeModel model) : model_(std::move(model)) {
  FATHOM_FAIL("persistent decode: ", persistent_decode_unfit(model_));
}

PersistentDecode::~PersistentDecode() = default;

Tensor PersistentDecode::step(const Tensor&, const Tensor&, const Tensor&) {
  FATHOM_FAIL("persistent decode: this build has no CUDA backend");
}
#endif

}  // namespace fathom
