#include "layers/module.h"

namespace fathom {

std::vector<Parameter> Module::parameters() const {
  std::vector<Parameter> out;
  collect("", out);
  return out;
}

std::vector<Variable> Module::parameter_variables() const {
  std::vector<Variable> out;
  for (const Parameter& p : parameters()) out.push_back(p.var);
  return out;
}

Variable Module::add_parameter(const std::string& name, const Shape& shape, ParameterInit init) {
  for (const Parameter& p : params_) FATHOM_CHECK(p.name != name, "parameter '", name, "' registered twice");
  params_.push_back({name, Variable(Tensor::empty(shape, DType::f32), true), init});
  return params_.back().var;
}

void Module::add_child(const std::string& name, Module& child) { children_.emplace_back(name, &child); }

void Module::collect(const std::string& prefix, std::vector<Parameter>& out) const {
  for (const Parameter& p : params_) out.push_back({prefix + p.name, p.var, p.init});
  for (const auto& [name, child] : children_) child->collect(name.empty() ? prefix : prefix + name + ".", out);
}

template <typename M, typename Visit>
void Module::visit_children(M& module, const std::string& prefix, const Visit& f) {
  for (const auto& [name, child] : module.children_) {
    const std::string full = name.empty() ? prefix : (prefix.empty() ? name : prefix + "." + name);
    M& each = *child;
    f(full, each);
    visit_children(each, full, f);
  }
}

void Module::visit_modules(const std::function<void(const std::string& name, Module& module)>& f) {
  visit_children(*this, "", f);
}

void Module::visit_modules(const std::function<void(const std::string& name, const Module& module)>& f) const {
  visit_children(*this, "", f);
}

}  // namespace fathom
