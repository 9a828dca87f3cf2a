// What a node keeps for its backward. Ordinarily the tensor itself; under selective recompute
// (train.recompute: selective) the outputs of cheap elementwise ops carry a Rebuild instead, which
// recomputes them bit for bit from tensors the graph keeps anyway (a norm's input, SwiGLU's gate and
// up), so the linear and attention nodes that consume them keep no copy through the forward.
#pragma once
#include <functional>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/variable.h"

namespace fathom {

// Whether differentiable ops attach rebuilds to their outputs. Thread-local, off by default;
// `RecomputeCheapOps` turns it on for a scope (a decoder forward).
class SelectiveRecompute {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

using RecomputeCheapOps = ScopedMode<SelectiveRecompute, true>;

// A recipe for one tensor. Every node holding it shares it: the first backward that needs the tensor
// builds it, the others reuse that copy, and it is freed with the last holder.
class Rebuild {
 public:
  explicit Rebuild(std::function<Tensor()> build) : build_(std::move(build)) {}
  // Built once, kept for the other holders.
  const Tensor& get();
  // The kept copy if there is one, else a fresh one that is not kept (a chained rebuild's input).
  Tensor get_transient() const;

 private:
  std::function<Tensor()> build_;
  Tensor built_;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(Tensor value) : value_(std::move(value)) {}
  // v's rebuild when it has one, else its value.
  static SavedTensor of(const Variable& v);

  // The tensor: kept, or built now (once per Rebuild).
  Tensor get() const;
  void release();

 private:
  Tensor value_;
  std::shared_ptr<Rebuild> rebuild_;
};

// Under selective recompute and only for a recorded output: `out` can be rebuilt by build(), which must
// reproduce its value bit for bit from tensors some node keeps anyway.
void set_rebuild(const Variable& out, std::function<Tensor()> build);
// out = f(in) for a cheap f: when `in` is rebuildable, so is `out`, through in's rebuild. An `in` that
// is a plain tensor passes nothing on: rebuilding from it would keep it alive, no smaller than `out`.
void chain_rebuild(const Variable& in, const Variable& out, std::function<Tensor(const Tensor&)> f);

}  // namespace fathom
