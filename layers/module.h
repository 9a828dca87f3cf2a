// Module: a named tree of parameters. Names are dotted paths (HF names for the OLMo2 parts), stable
// across runs, and the only way checkpoints and the flat arenas refer to a parameter.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace fathom {

// How a parameter is initialised: truncated normal (std, cutoff in sigmas), a constant, or the
// identity of a matrix [out, in] (ones where row == column, the rest zero, for any out and in).
struct ParameterInit {
  enum class Kind { truncated_normal, constant, identity } kind = Kind::truncated_normal;
  double std = 0.02;
  double cutoff = 3.0;
  double value = 0.0;
  // Embeddings are excluded from weight decay (OLMo2).
  bool weight_decay = true;

  static ParameterInit normal(double std, double cutoff) { return {Kind::truncated_normal, std, cutoff, 0.0, true}; }
  static ParameterInit ones() { return {Kind::constant, 0.0, 0.0, 1.0, true}; }
  static ParameterInit zeros() { return {Kind::constant, 0.0, 0.0, 0.0, true}; }
  static ParameterInit identity() { return {Kind::identity, 0.0, 0.0, 0.0, true}; }
};

struct Parameter {
  std::string name;  // full dotted name
  Variable var;      // a handle: the module's member shares the same value and gradient
  ParameterInit init;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // All parameters of this module and its children, depth first in registration order, full names.
  std::vector<Parameter> parameters() const;
  // The same parameters' handles, without names (what a checkpointed segment declares it reads).
  std::vector<Variable> parameter_variables() const;
  // Calls f(name, module) for every descendant, depth first in registration order, with its full dotted
  // name (a wrapper's unnamed child has the wrapper's name).
  void visit_modules(const std::function<void(const std::string& name, Module& module)>& f);
  // The same walk over a const model.
  void visit_modules(const std::function<void(const std::string& name, const Module& module)>& f) const;

 protected:
  // A new F32 CPU parameter (values are set when the model's arena is built).
  Variable add_parameter(const std::string& name, const Shape& shape, ParameterInit init);
  // An empty name adds the child's parameters under this module's own prefix (a wrapper that keeps
  // the names of what it wraps).
  void add_child(const std::string& name, Module& child);

 private:
  void collect(const std::string& prefix, std::vector<Parameter>& out) const;
  // The walk of both visit_modules, over M = Module or const Module: the const one hands on const children.
  template <typename M, typename Visit>
  static void visit_children(M& module, const std::string& prefix, const Visit& f);

  std::vector<Parameter> params_;
  std::vector<std::pair<std::string, Module*>> children_;
};

}  // namespace fathom
