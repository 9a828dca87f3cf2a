#include "layers/layer_report.h"

#include <utility>

namespace fathom {

void LayerReport::add_loss(std::string name, Variable value) const {
  if (losses_) losses_->push_back({std::move(name), std::move(value)});
}

bool LayerReport::wants(std::string_view tap) const { return taps_ && taps_->contains(tap); }

void LayerReport::measure(const std::string& name, double value) const {
  if (measures_) (*measures_)[name] = value;
}

void LayerReport::count(const std::string& name, double value) const {
  if (measures_) (*measures_)[name] += value;
}

}  // namespace fathom
