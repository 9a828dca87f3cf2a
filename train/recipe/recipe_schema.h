// The recipe schema: one row per key (path, the Recipe member it sets, required or not, range or
// choices, names other stacks use for it, whether `train --resume` may change it, what it means).
// Parsing, "did you mean" suggestions, recipe_to_yaml, the --resume check and the recipe reference
// (`fathom recipe reference`, the README's table) all read this table; defaults are Recipe's member
// initializers.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "layers/layer_kinds.h"
#include "train/recipe/recipe.h"

namespace fathom {

using StringList = std::vector<std::string>;
using PathsByDomain = std::map<std::string, StringList>;
using WeightsByName = std::map<std::string, double>;

// Where a key's value lives in a Recipe; the alternative held gives the key's value type. An enum
// key's choices are its names in the enum's order.
// A layer kind's option (layers/layer_kinds.h) lives in model.options and is read and written
// through its KindOption.
using RecipeField = std::variant<int64_t& (*)(Recipe&), uint64_t& (*)(Recipe&), double& (*)(Recipe&),
                                 bool& (*)(Recipe&), std::string& (*)(Recipe&), StringList& (*)(Recipe&),
                                 PathsByDomain& (*)(Recipe&), WeightsByName& (*)(Recipe&), const KindOption*>;

enum class Presence {
  optional,               // absent: the Recipe member keeps its initializer
  required,               // absent: an error (a required list must also be non-empty)
  required_without_size,  // model shape: required unless model.size gives it
  derived,                // absent: computed from other keys (n_kv_heads = n_heads, log.dir = runs/<name>)
  steps_or_tokens,        // train.steps / train.tokens: exactly one of the two
};

struct Bound {
  double value;
  bool inclusive;
};

// Numeric range; an absent bound is unbounded.
struct Range {
  std::optional<Bound> low, high;
  bool contains(double value) const;
  std::string describe() const;  // "in [0, 1)", ">= 1", "> 0"; "" when unbounded
};

struct RecipeKey {
  std::string path;  // "train.optimizer.lr"
  RecipeField field;
  Presence presence = Presence::optional;
  Range range{};
  // Non-empty: a string (or each entry of a list, or each name of a mapping) must be one of these.
  std::vector<std::string> choices{};
  std::vector<std::string> aliases{};  // what other stacks call it ("learning_rate"), for suggestions
  std::string item = "path";           // what a list's entries are, for its messages
  // May differ from the run's saved recipe on `train --resume` (train/recipe/resume_check.h): the run's
  // length, its reporting and checkpointing, and where and how fast it runs. Never what the model, the
  // data order (seed, batch_size, seq_len), the tokenizer or the optimizer are.
  bool resumable = false;
  // One short Markdown sentence for the recipe reference: what the key means (the default, type, range
  // and choices are shown from the fields above, not repeated here).
  std::string doc{};

  std::string describe_type() const;  // "an integer", "a number", "one of post, pre", ...
};

// Every key, grouped by section in the order recipe_to_yaml writes them: the model's, then each layer
// kind's options in registration order (layers/layer_kinds.h), then data, train and the rest.
const std::vector<RecipeKey>& recipe_keys();
const RecipeKey* find_recipe_key(std::string_view path);

// Sections are the proper prefixes of key paths ("train", "train.optimizer"); "" is the top level.
bool is_recipe_section(std::string_view path);
// The names directly inside a section (keys and sub-sections), in schema order.
std::vector<std::string> recipe_section_entries(std::string_view section);

// "unknown key 'train.lerning_rate'; did you mean 'train.optimizer.lr'?" -- the closest valid key
// (by edit distance to its name, its aliases or its full path; the same section wins ties), or the
// list of the keys valid where the unknown one was written.
std::string unknown_key_message(std::string_view path);

// "train.optimizer" and "lr" for "train.optimizer.lr"; "" and "name" for "name".
std::string_view parent_key_path(std::string_view path);
std::string_view last_key_name(std::string_view path);

// A key's value in `recipe` as messages show it: 8, 0.0003, true, 'bytes', ['a.txt', 'b.txt'],
// {moby: ['m.txt']}.
std::string describe_value(const RecipeKey& key, const Recipe& recipe);

// True when the key's value is the same in both recipes.
bool same_value(const RecipeKey& key, const Recipe& a, const Recipe& b);

// The shortest text that reads back as exactly `value` ("0.1", "1e-05", "500000").
std::string format_number(double value);

}  // namespace fathom
