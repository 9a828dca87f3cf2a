// Where a layer's forward reports: the auxiliary losses it adds to the objective, and the named
// measurements (taps) a caller asked of it. A layer reads what it needs from its inputs
// (layers/token_mixer.h, MixerInputs) and writes only here, so a new kind adds losses and measures
// without a field in any shared struct: it names them in its registration (layers/layer_kinds.h).
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/variable.h"

namespace fathom {

// A named scalar loss a layer adds to its forward (MoD's router and predictor losses).
struct NamedLoss {
  std::string name;
  Variable value;  // one element
};

// One layer's measurements in a forward, by name: a tap's value ("attention_entropy") or counts that
// add up over batches and ranks ("mod.tokens").
using LayerMeasures = std::map<std::string, double>;
// Tap names, looked up by string_view without building a string.
using TapSet = std::set<std::string, std::less<>>;

class LayerReport {
 public:
  // A report that asks for nothing and keeps nothing: recompute's re-runs, decoding, tests.
  LayerReport() = default;
  // losses: where add_loss appends (none: losses are dropped); taps: the names asked of this layer;
  // measures: where measure/count write (none when no tap is asked).
  LayerReport(std::vector<NamedLoss>* losses, const TapSet* taps, LayerMeasures* measures)
      : losses_(losses), taps_(taps), measures_(measures) {}

  // Whether the caller keeps losses (a layer may skip computing them when not).
  bool keeps_losses() const { return losses_ != nullptr; }
  void add_loss(std::string name, Variable value) const;
  // Whether the caller asked this layer for the named tap.
  bool wants(std::string_view tap) const;
  // Sets a measurement (a tap's value) or adds to a count.
  void measure(const std::string& name, double value) const;
  void count(const std::string& name, double value) const;

 private:
  std::vector<NamedLoss>* losses_ = nullptr;
  const TapSet* taps_ = nullptr;
  LayerMeasures* measures_ = nullptr;
};

}  // namespace fathom
