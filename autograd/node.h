// Node: one recorded differentiable op. Its backward maps the gradient of its single output to the
// gradients of its inputs; saved tensors are released as soon as it has run.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "autograd/variable.h"

namespace fathom {

// Where an input's gradient goes: the node that produced it, or the leaf that accumulates it.
// Both are null for inputs that need no gradient. Non-leaf values are not kept alive by an edge.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<VariableImpl> leaf;
  bool needs_grad() const { return node || leaf; }
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // One gradient per input, in the order of the inputs given to `record`; an undefined Tensor
  // where the input needs none. Must not modify grad_output, which other nodes may share.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // backward, given the gradients some inputs already received from other consumers: partial[i] is
  // that sum for input i (with the input's shape, owned by nobody else, so it may be written in
  // place) or null. A node may add input i's gradient straight into *partial[i] and return an
  // undefined tensor for it; nodes whose gradient ends in a product fold the sum into it
  // (C = A B + C) and so skip a separate add over the whole tensor.
  virtual std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor*>& partial) {
    (void)partial;
    return backward(grad_output);
  }
  // Leaves whose gradients this node's backward writes other than through its edges (a checkpoint's
  // segment reaches its parameters in a backward of its own), for autograd/gradient_ready.h.
  virtual std::vector<VariableImpl*> nested_leaves() const { return {}; }
  // Frees the tensors saved for backward.
  virtual void release_saved() = 0;
  virtual const char* name() const = 0;

  const std::vector<Edge>& edges() const { return edges_; }
  bool needs_input_grad(size_t i) const { return i < edges_.size() && edges_[i].needs_grad(); }
  // Creation order; backward runs in decreasing order, which is a deterministic topological order.
  uint64_t sequence() const { return sequence_; }
  void clear_edges() { edges_.clear(); }

 private:
  friend Variable record(Tensor output, std::shared_ptr<Node> node, std::initializer_list<Variable> inputs);
  std::vector<Edge> edges_;
  uint64_t sequence_;
};

// True when grad mode is on and any input requires a gradient: then the op records a node.
bool any_requires_grad(std::initializer_list<Variable> inputs);
// Wraps `output` as the result of `node` with edges to `inputs`.
Variable record(Tensor output, std::shared_ptr<Node> node, std::initializer_list<Variable> inputs);

}  // namespace fathom
