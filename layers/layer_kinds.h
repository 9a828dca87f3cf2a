// The layer kinds: token mixers a recipe names in model.layers (attention, dsla) and the block features
// a model's options switch on (MoDA's depth reads, MoD's routing). Each kind registers itself from its
// own files with a LayerKind: its mixer factory, the loss terms its layers report, the taps they answer
// and the evaluation metrics made from them. The table in layer_kinds.cpp lists the built-in kinds;
// register_layer_kind adds one at run time (a plug-in, or a test's kind). Nothing else names a kind.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "layers/decoder_layer.h"
#include "layers/model_config.h"
#include "layers/token_mixer.h"

namespace fathom {

// One recipe key of a kind's options, in the kind's section ("dsla.states"): a whole number, a number
// or one of `choices`, read and written through the kind's options struct (ModelConfig::options). The
// recipe checks type, bounds and choices with the same messages as every other key.
struct KindOption {
  enum class Type { integer, number, choice };
  std::string path{};
  Type type = Type::integer;
  std::optional<double> at_least{}, at_most{};  // inclusive bounds
  std::vector<std::string> choices{};           // a choice's names, in its enum's order
  std::vector<std::string> aliases{};           // what other stacks call it, for suggestions
  std::string doc{};                            // one line for the recipe reference
  bool resumable = false;  // --resume may change it: only an option that leaves the run's math alone
  std::function<double(const ModelConfig&)> get{};
  std::function<void(ModelConfig&, double)> set{};
};

// The option `path` that reads and writes member `member` of the kind's options struct `Options`;
// `spec` gives its bounds, choices, aliases and doc. An enum member is a choice.
template <typename Options, typename Value>
KindOption kind_option(std::string path, Value Options::*member, KindOption spec) {
  spec.path = std::move(path);
  spec.type = std::is_enum_v<Value>             ? KindOption::Type::choice
              : std::is_floating_point_v<Value> ? KindOption::Type::number
                                                : KindOption::Type::integer;
  spec.get = [member](const ModelConfig& c) { return double(c.options.get<Options>().*member); };
  spec.set = [member](ModelConfig& c, double value) { c.options.get<Options>().*member = Value(value); };
  return spec;
}

// A loss a kind's layers add to the model output (LayerReport::add_loss), by name. The objective
// weighs it by train.loss, or, where the kind sets its weight from its own option, by that option.
struct KindLossTerm {
  std::string name;  // "mod_router"
  // The weight the kind's option gives it in a model (none: the model does not report it), and that
  // option's recipe key for the message when train.loss names the term too. Unset: train.loss weighs it.
  std::function<std::optional<double>(const ModelConfig&)> weight_from_model{};
  std::string weight_key{};  // "mod.aux_loss_weight"
};

// What an evaluation reports for a kind: layers that answer `tap` count `measures` (summed over
// batches and ranks), which `metrics` turns into named figures, logged as <kind>.L<layer>.<name>/<domain>.
struct KindMetric {
  std::string tap;                                                     // asked of every layer in an evaluation
  std::vector<std::string> measures;                                   // the counts a layer reports for it
  std::function<bool(const ModelConfig&, int64_t layer)> reported_by;  // which layers answer it
  std::function<std::vector<std::pair<std::string, double>>(const LayerMeasures&)> metrics;
  std::function<std::string(int64_t layer, const LayerMeasures&)> console_line;  // fathom eval's line
};

struct LayerKind {
  std::string name;  // "dsla": its model.layers name (a mixer) and its options' recipe section
  // A mixer kind's factory for layer `layer` of a model; null for a block feature.
  std::function<std::unique_ptr<TokenMixer>(const ModelConfig&, int64_t layer)> make_mixer{};
  bool reads_depth = false;  // a mixer that joins MoDA's depth reads (MixerInputs::depth) in its softmax
  // A feature that builds some layers of the stack itself (MoD's routed blocks): the layer, or null
  // where a plain Block (layers/block.h) is built.
  std::function<std::unique_ptr<DecoderLayer>(const ModelConfig&, int64_t layer)> make_layer{};
  // Checks a model's use of the kind and its options (ModelConfig::validate calls it), throwing
  // fathom::Error that names the recipe key.
  std::function<void(const ModelConfig&)> validate{};
  std::vector<KindOption> options{};  // its recipe keys, in the order recipes write them
  std::vector<KindLossTerm> loss_terms{};
  std::vector<std::string> taps{};  // the taps its layers answer (ForwardOptions::taps)
  std::vector<KindMetric> metrics{};
};

// Every kind: the built-in ones in table order ("attention" first), then those registered at run time.
const std::vector<LayerKind>& layer_kinds();
// Adds a kind. Its name, its options', its loss terms' and its taps' names must be new (an error names
// the clash), and its options must lie in its section ("<name>.").
void register_layer_kind(LayerKind kind);
// Removes a kind registered at run time (a plug-in unloaded, a test's kind after the test); an unknown
// or built-in name is an error.
void unregister_layer_kind(const std::string& name);
// Changes with every registration and removal, so tables built from the kinds (the recipe schema)
// know when to rebuild.
uint64_t layer_kinds_version();
// The names of the mixer kinds model.layers may name, in registration order.
std::vector<std::string> layer_kind_names();
// The mixer of layer `layer` of `config` (its kind is config.layer_kind(layer)). An unknown kind is
// an error naming the kinds there are.
std::unique_ptr<TokenMixer> make_token_mixer(const ModelConfig& config, int64_t layer);

}  // namespace fathom
