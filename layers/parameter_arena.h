// Flat parameter and gradient arenas: every parameter of a model is a view into one F32 buffer and
// its gradient a view into a second one, with a name -> (offset, shape) table. One optimizer pass,
// one norm, one all-reduce and one checkpoint write cover the whole model. Every entry starts at a
// multiple of kArenaAlignment elements (the gaps hold zeros), so each parameter's F32 values and BF16
// compute copy are as aligned as a tensor of its own: a [1]-shaped parameter (DSLA's gamma logit) would
// otherwise leave every later weight at an odd address, off the vectorised and tensor-core paths.
//
// Mixed precision adds a third arena: a BF16 compute copy of the values, which every parameter
// exposes as VariableImpl::compute (the ops read it; gradients still go to the F32 arena). It is
// written whenever the F32 values change: by initialise() and load(), and after each optimizer step
// by the fused AdamW kernel in the same pass (optim/adamw.cpp).
//
// Frozen parameters (train.frozen / train.trainable) keep their values but hold no gradient: they sit
// after the trainable ones in the value arena, the gradient arena (and the optimizer's moments) covers
// only the trainable ones, and the ops record no weight gradient for them. Without frozen parameters
// the layout is the model's order.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "layers/module.h"

namespace fathom {

inline constexpr int64_t kArenaAlignment = 64;  // elements: 128 bytes of BF16, 256 of F32

struct ArenaEntry {
  std::string name;
  int64_t offset = 0;       // in elements, into the values (and, when trainable, the gradients)
  int64_t init_offset = 0;  // where the entry sits in the model's order: its random init's counters
  Shape shape;
  ParameterInit init;
  Variable var;
  bool trainable = true;
  int64_t numel() const { return shape.numel(); }
};

class ParameterArena {
 public:
  // Moves every parameter of `model` into the arenas on `device` (values uninitialised until
  // initialise() or load()). Parameters named in `frozen` get no gradient; a name the model does not
  // have is an error.
  ParameterArena(const Module& model, Device device, const std::set<std::string>& frozen = {});

  // Deterministic init: each entry draws Philox counters [init_offset, init_offset + numel) of `seed`,
  // so a parameter's values depend neither on the order in which parameters are created nor on which
  // are frozen.
  void initialise(uint64_t seed);
  void zero_grad();

  // Adds the compute copy in `dtype` (BF16, or F16), filled from the current values. Once only.
  void enable_compute_copy(DType dtype);
  bool has_compute_copy() const { return compute_.defined(); }
  // The copy (undefined without one); refresh_compute_copy() rewrites it from the F32 values, for
  // code that changes the values other than through initialise, load or the optimizer.
  Tensor& compute_values() { return compute_; }
  void refresh_compute_copy();

  Tensor& values() { return values_; }
  // The trainable parameters' gradients: [trainable_numel()], the first trainable_numel() values' own.
  Tensor& grads() { return grads_; }
  const std::vector<ArenaEntry>& entries() const { return entries_; }
  // The arenas' lengths in elements, alignment gaps included.
  int64_t numel() const { return values_.numel(); }
  int64_t trainable_numel() const { return grads_.numel(); }
  // How many parameters there are (of them trainable): the entries' elements, without the gaps.
  int64_t parameter_count() const;
  int64_t trainable_parameter_count() const;
  // Contiguous [begin, end) element ranges of the trainable parameters that share a weight-decay
  // setting, in arena order; a range runs over the gaps after its entries (zeros, which AdamW leaves
  // zero), so neighbours with one setting make one range.
  struct Range {
    int64_t begin, end;
    bool weight_decay;
  };
  std::vector<Range> decay_ranges() const;

  // Views of the values by name (checkpoint / export).
  TensorMap named_values() const;
  // Copies named tensors into the arena. Every parameter must be present with its exact shape;
  // a missing, unexpected or mis-shaped tensor is an error naming it and `source`.
  void load(const TensorMap& tensors, const std::string& source);

 private:
  std::vector<ArenaEntry> entries_;
  Tensor values_, grads_;
  Tensor compute_;  // mixed precision only
};

}  // namespace fathom
