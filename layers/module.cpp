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

void Module::visit_modules(const std::function<void(const std::string& name, Module& module)>& f) {
  visit_children("", f);
}

void Module::visit_modules(const std::function<void(const std::string& name, const Module& module)>& f) const {
  visit_children("", [&](const std::string& name, const Module& module) { f(name, module); });
}

void Module::visit_children(const std::string& prefix,
                            const std::function<void(const std::string&, Module&)>& f) const {
  for (const auto& [name, child] : children_) {
    const std::string full = name.empty() ? prefix : (prefix.empty() ? name : prefix + "." + name);
    f(full, *child);
    child->visit_children(full, f);
  }
}

}  // namespace fathom
