#include "autograd/engine.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/gradient_ready.h"
#include "autograd/node.h"
#include "kernels/elementwise/elementwise.h"

namespace fathom {

namespace {

// All nodes reachable from root, by an explicit stack (deep graphs must not overflow the C++ stack).
// Owning pointers: edges are cleared as nodes run, and this list keeps the rest alive until then.
std::vector<std::shared_ptr<Node>> reachable_nodes(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> seen{root.get()};
  std::vector<std::shared_ptr<Node>> stack{root};
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    for (const Edge& e : n->edges())
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node);
    order.push_back(std::move(n));
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a->sequence() > b->sequence(); });
  return order;
}

// Adds g into the gradient slot. The first gradient is kept by reference; later ones are added in
// place when the slot owns its storage alone, else into a copy (a node may hand the same tensor to
// several inputs).
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
    return;
  }
  if (!slot.sole_owner_of_storage()) slot = slot.clone();
  add_inplace(slot, g);
}

// The gradient sums a node may add its own into (Node::backward_into): its inputs' slots that
// already hold a gradient nobody else refers to.
std::vector<Tensor*> partial_sums(const Node& node, std::unordered_map<Node*, Tensor>& pending) {
  std::vector<Tensor*> partial(node.edges().size(), nullptr);
  for (size_t i = 0; i < partial.size(); ++i) {
    const Edge& e = node.edges()[i];
    if (!e.node) continue;
    auto it = pending.find(e.node.get());
    if (it != pending.end() && it->second.sole_owner_of_storage()) partial[i] = &it->second;
  }
  return partial;
}

// The leaves a node may write: those of its edges (once per edge) and those it declares.
template <class F>
void for_each_leaf(const Node& node, F&& f) {
  for (const Edge& e : node.edges())
    if (e.leaf) f(e.leaf.get());
  for (VariableImpl* leaf : node.nested_leaves()) f(leaf);
}

// The outermost backward's count of the nodes left that may write each leaf (autograd/gradient_ready.h).
struct FinalGradients {
  GradientListener* listener = nullptr;
  std::unordered_map<VariableImpl*, int64_t> writers;
  std::unordered_set<VariableImpl*> reported;

  void count(const std::vector<std::shared_ptr<Node>>& nodes) {
    for (const auto& n : nodes) for_each_leaf(*n, [&](VariableImpl* leaf) { ++writers[leaf]; });
  }
  // Before `node` runs, at any depth: none of its leaves may have been reported final.
  void check_unreported(const Node& node) const {
    for (const Edge& e : node.edges())
      FATHOM_CHECK(!e.leaf || !reported.contains(e.leaf.get()), node.name(), " writes the gradient of a leaf ",
                   describe(e.leaf->value),
                   " after backward reported it final: a checkpoint segment must declare every parameter it reads");
  }
  // After `node` ran (or was skipped) in the outermost backward.
  void done(const Node& node) {
    for_each_leaf(node, [&](VariableImpl* leaf) {
      if (--writers[leaf] == 0 && reported.insert(leaf).second) listener->gradient_final(*leaf);
    });
  }
};

thread_local FinalGradients* tracking = nullptr;  // set while the outermost backward reports

// Installs the tracking for the outermost backward when a listener is current.
class TrackingScope {
 public:
  explicit TrackingScope(const std::vector<std::shared_ptr<Node>>& nodes) {
    if (tracking != nullptr || current_gradient_listener() == nullptr) return;
    state_.listener = current_gradient_listener();
    state_.count(nodes);
    tracking = &state_;
    owner_ = true;
  }
  ~TrackingScope() {
    if (owner_) tracking = nullptr;
  }
  TrackingScope(const TrackingScope&) = delete;
  TrackingScope& operator=(const TrackingScope&) = delete;
  bool outermost() const { return owner_; }

 private:
  FinalGradients state_;
  bool owner_ = false;
};

}  // namespace

void backward(const Variable& root, const Tensor& seed) {
  FATHOM_CHECK(root.defined() && root.requires_grad(), "backward() on a value that does not require grad");
  Tensor root_grad = seed;
  if (!root_grad.defined()) {
    FATHOM_CHECK(root.value().numel() == 1, "backward() without a seed needs a one-element root, got ",
                 describe(root.value()));
    root_grad = Tensor::full(root.shape(), 1.0, root.dtype()).to(root.device());
  }
  FATHOM_CHECK(root_grad.shape() == root.shape(), "backward seed ", describe(root_grad), " does not match root ",
               describe(root.value()));

  NoGrad no_grad;  // backward kernels never record
  if (root.is_leaf()) {
    Tensor& g = root.impl()->grad;
    if (tracking != nullptr)
      FATHOM_CHECK(!tracking->reported.contains(root.impl().get()),
                   "backward writes the gradient of a leaf after backward reported it final");
    if (g.defined())
      add_inplace(g, root_grad);
    else
      g = root_grad.clone();
    if (tracking == nullptr && current_gradient_listener() != nullptr)
      current_gradient_listener()->gradient_final(*root.impl());
    return;
  }
  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn().get()] = root_grad;
  const std::vector<std::shared_ptr<Node>> nodes = reachable_nodes(root.grad_fn());
  const TrackingScope scope(nodes);
  for (const std::shared_ptr<Node>& owned : nodes) {
    Node* node = owned.get();
    auto it = pending.find(node);
    if (it == pending.end()) {  // no gradient flowed here
      if (scope.outermost()) tracking->done(*node);
      continue;
    }
    if (tracking != nullptr) tracking->check_unreported(*node);
    Tensor grad_output = std::move(it->second);
    pending.erase(it);
    std::vector<Tensor> grads = node->backward_into(grad_output, partial_sums(*node, pending));
    const auto& edges = node->edges();
    FATHOM_CHECK(grads.size() == edges.size(), node->name(), " returned ", grads.size(), " gradients for ",
                 edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].needs_grad() || !grads[i].defined()) continue;
      if (edges[i].node) {
        accumulate(pending[edges[i].node.get()], grads[i]);
      } else {
        Tensor& slot = edges[i].leaf->grad;
        FATHOM_CHECK(grads[i].shape() == edges[i].leaf->value.shape(), node->name(), " produced gradient ",
                     describe(grads[i]), " for input ", describe(edges[i].leaf->value));
        if (slot.defined())
          add_inplace(slot, grads[i]);
        else
          slot = grads[i].clone();
      }
    }
    if (scope.outermost()) tracking->done(*node);
    node->release_saved();
    node->clear_edges();
  }
}

}  // namespace fathom
