#include "autograd/node.h"

#include <atomic>

#include "autograd/grad_mode.h"

namespace fathom {

namespace {
std::atomic<uint64_t> next_sequence{0};
thread_local bool grad_enabled = true;
}  // namespace

bool GradMode::enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

Node::Node() : sequence_(next_sequence.fetch_add(1)) {}

bool any_requires_grad(std::initializer_list<Variable> inputs) {
  if (!GradMode::enabled()) return false;
  for (const Variable& v : inputs)
    if (v.requires_grad()) return true;
  return false;
}

Variable record(Tensor output, std::shared_ptr<Node> node, std::initializer_list<Variable> inputs) {
  node->edges_.reserve(inputs.size());
  for (const Variable& v : inputs) {
    Edge e;
    if (v.requires_grad()) {
      if (v.grad_fn())
        e.node = v.grad_fn();
      else
        e.leaf = v.impl();
    }
    node->edges_.push_back(std::move(e));
  }
  Variable out(std::move(output), true);
  out.impl()->grad_fn = std::move(node);
  return out;
}

}  // namespace fathom
