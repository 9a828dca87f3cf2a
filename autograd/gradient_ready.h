// When a leaf's gradient is final during backward, for work that may start on it before the whole
// backward ends (data parallelism's overlapped all-reduce, distributed/bucketed_reduction.h).
//
// A GradientListener made current on a thread by ListenToGradients hears, inside the outermost
// backward() that thread runs, each leaf of the graph once: the moment no node left to run can add
// to its gradient. A leaf is counted once for every node with an edge to it, and once for every
// node that declares it (Node::nested_leaves: a checkpoint's segment reaches its parameters only in
// a backward of its own); each node that runs, or is skipped because no gradient reached it, takes
// its counts off, and a leaf whose count reaches zero is reported. A node that would write a leaf
// already reported (a checkpoint segment reading a parameter it did not declare) is an error, never
// a silently stale gradient. Without a listener backward does none of this.
#pragma once
#include <memory>
#include <vector>

#include "autograd/variable.h"

namespace fathom {

class GradientListener {
 public:
  virtual ~GradientListener() = default;
  // `leaf`'s gradient (VariableImpl::grad, or an arena view written in place) holds its final sum
  // for this backward; device work writing it may still be queued on the current stream.
  virtual void gradient_final(const VariableImpl& leaf) = 0;
};

// Makes `listener` current on this thread for a scope (nests; restores the previous one).
class ListenToGradients {
 public:
  explicit ListenToGradients(GradientListener& listener);
  ~ListenToGradients();
  ListenToGradients(const ListenToGradients&) = delete;
  ListenToGradients& operator=(const ListenToGradients&) = delete;

 private:
  GradientListener* previous_;
};

// The listener current on this thread, or null.
GradientListener* current_gradient_listener();

}  // namespace fathom
