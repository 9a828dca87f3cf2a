// Reading a recipe: YAML text -> the given values of known keys (with their places) -> --set
// overrides over them -> a validated, fully resolved Recipe.
#include "train/recipe/recipe.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/suggest.h"
#include "core/yaml_documents.h"
#include "train/distill/distill_config.h"
#include "train/recipe/recipe_schema.h"
#include "train/run/model_source.h"
#include "train/run/objective.h"

namespace fathom {

namespace {

[[noreturn]] void fail_at(const std::string& where, const std::string& message) { FATHOM_FAIL(where, ": ", message); }

// How a value is named after "got" in messages.
std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

// ---- numbers as users write them: 8, +8, 2_000_000, 2e9 (an integer when it is whole) ----

std::string_view without_plus(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  return text;
}

std::optional<double> parse_number(std::string_view text) {
  text = without_plus(text);
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Digit groups as YAML 1.1 allows them: "2_000_000".
std::string without_digit_separators(std::string_view text) {
  std::string digits;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool separator = text[i] == '_' && i > 0 && i + 1 < text.size() && std::isdigit((unsigned char)text[i - 1]) &&
                           std::isdigit((unsigned char)text[i + 1]);
    if (!separator) digits += text[i];
  }
  return digits;
}

template <typename Integer>
std::optional<Integer> parse_whole(std::string_view written) {
  const std::string text = without_digit_separators(without_plus(written));
  Integer value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (!text.empty() && error == std::errc() && end == text.data() + text.size()) return value;
  // 2e9 or 1.0e6: a whole number in scientific notation.
  const std::optional<double> number = parse_number(text);
  const double limit = std::ldexp(1.0, std::numeric_limits<Integer>::digits);  // 2^63 or 2^64, exact
  if (!number || *number != std::trunc(*number) || *number >= limit ||
      *number < static_cast<double>(std::numeric_limits<Integer>::min())) {
    return std::nullopt;
  }
  return static_cast<Integer>(*number);
}

// A value as the recipe gave it, and the place to name in messages.
struct GivenValue {
  YAML::Node node;
  std::string where;  // "recipe.yaml:12:3" or "--set train.steps=100"
  bool from_override = false;
};

// The model that model.init_from stands for, and what gave it (for messages).
struct InitModel {
  ModelConfig model;
  std::string origin;  // "model.init_from hf:DIR" or "the checkpoint in 'DIR'"
};

std::string default_log_dir(const std::string& name) { return "runs/" + name; }

class RecipeReader {
 public:
  // follow_init_from: look up the model of model.init_from where `origin` says (false for saved
  // recipes, which spell the model out).
  RecipeReader(std::string source, bool follow_init_from, ModelOrigin origin = {})
      : source_(std::move(source)), follow_init_from_(follow_init_from), origin_(std::move(origin)) {}

  void read_document(const std::string& text);
  void apply_override(const std::string& assignment);
  Recipe resolve() const;

 private:
  std::string where(const YAML::Mark& mark) const;
  // The place of a node inside a given value: its own mark, or the --set that gave it.
  std::string where_inside(const GivenValue& given, const YAML::Node& node) const;
  // The place of a section, or of the nearest enclosing one the recipe wrote.
  std::string where_section(std::string_view section) const;
  const GivenValue* find(const std::string& path) const;

  void read_section(const YAML::Node& mapping, const std::string& section);
  void read_key(const RecipeKey& key, const GivenValue& given, Recipe& recipe) const;
  StringList read_paths(const GivenValue& given, const YAML::Node& node, const std::string& path,
                        const std::string& item = "path") const;
  void check_steps_or_tokens(Recipe& recipe) const;
  std::optional<InitModel> read_init_source(Recipe& recipe) const;
  std::optional<std::string> given_run_folder() const;
  void check_agrees_with_source(const Recipe& recipe, const InitModel& source) const;

  friend struct ValueReader;

  std::string source_;
  bool follow_init_from_;
  ModelOrigin origin_;
  std::map<std::string, GivenValue> given_;                   // key path -> value
  std::map<std::string, std::string, std::less<>> sections_;  // section path -> where it was written
};

std::string RecipeReader::where(const YAML::Mark& mark) const {
  if (mark.is_null()) return source_;
  return source_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

std::string RecipeReader::where_inside(const GivenValue& given, const YAML::Node& node) const {
  return given.from_override ? given.where : where(node.Mark());
}

std::string RecipeReader::where_section(std::string_view section) const {
  for (; !section.empty(); section = parent_key_path(section)) {
    if (auto it = sections_.find(section); it != sections_.end()) return it->second;
  }
  return source_;
}

const GivenValue* RecipeReader::find(const std::string& path) const {
  auto it = given_.find(path);
  return it == given_.end() ? nullptr : &it->second;
}

void RecipeReader::read_document(const std::string& text) {
  std::vector<YAML::Node> documents;
  try {
    documents = load_yaml_documents(text);
  } catch (const YAML::Exception& e) {
    fail_at(where(e.mark), "YAML syntax error: " + e.msg);
  }
  if (documents.size() > 1) {
    fail_at(where(documents[1].Mark()), "a recipe is one YAML document, this file has " +
                                            std::to_string(documents.size()) + " (separated by '---')");
  }
  FATHOM_CHECK(!documents.empty() && !documents[0].IsNull(), source_, ": the recipe is empty");
  const YAML::Node& root = documents[0];
  if (!root.IsMap()) {
    fail_at(where(root.Mark()), "a recipe must be a mapping of sections (" + join_names(recipe_section_entries("")) +
                                    "), got " + describe_node(root));
  }
  read_section(root, "");
}

void RecipeReader::read_section(const YAML::Node& mapping, const std::string& section) {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : mapping) {
    const YAML::Node& key = entry.first;
    const YAML::Node& value = entry.second;
    if (!key.IsScalar() || key.Scalar().empty()) {
      fail_at(where(key.Mark()), "keys " + (section.empty() ? "at the top level" : "in '" + section + "'") +
                                     " must be names, got " + describe_node(key));
    }
    const std::string path = section.empty() ? key.Scalar() : section + "." + key.Scalar();
    if (auto [first, inserted] = seen.emplace(path, key.Mark()); !inserted) {
      fail_at(where(key.Mark()),
              "duplicate key '" + path + "' (first given at line " + std::to_string(first->second.line + 1) + ")");
    }
    if (!follow_init_from_ && path == "train.z_loss") {
      // A run saved before the objective had terms: its z-loss weight is train.loss.z_loss now.
      YAML::Node loss(YAML::NodeType::Map);
      loss["ce"] = 1;
      loss["z_loss"] = value;
      given_["train.loss"] = {loss, where(value.Mark())};
      continue;
    }
    if (find_recipe_key(path)) {
      // An empty value has no place of its own; its key's is the useful one.
      given_[path] = {value, where(value.IsNull() ? key.Mark() : value.Mark())};
      continue;
    }
    if (!is_recipe_section(path)) fail_at(where(key.Mark()), unknown_key_message(path));
    sections_[path] = where(key.Mark());
    if (value.IsNull()) continue;  // an empty section: its keys keep their defaults
    if (!value.IsMap()) {
      fail_at(where(value.Mark()), "'" + path + "' is a section, a mapping of its keys (" +
                                       join_names(recipe_section_entries(path)) + "), got " + describe_node(value));
    }
    read_section(value, path);
  }
}

std::string trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  return std::string(text.substr(first, text.find_last_not_of(" \t") - first + 1));
}

void RecipeReader::apply_override(const std::string& assignment) {
  const std::string where = "--set " + assignment;
  const auto equals = assignment.find('=');
  const std::string path = equals == std::string::npos ? "" : trimmed(assignment.substr(0, equals));
  if (path.empty()) fail_at(where, "expected key=value, e.g. --set train.optimizer.lr=3e-4");
  if (!find_recipe_key(path)) {
    if (is_recipe_section(path)) {
      fail_at(where, "'" + path + "' is a section; set one of its keys: " + join_names(recipe_section_entries(path)));
    }
    fail_at(where, unknown_key_message(path));
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(equals + 1));
  } catch (const YAML::Exception& e) {
    fail_at(where, "the value is not valid YAML: " + e.msg);
  }
  given_[path] = {value, where, true};
  // Steps and tokens are two spellings of one budget: setting one replaces the file's other.
  const std::string other = path == "train.steps" ? "train.tokens" : path == "train.tokens" ? "train.steps" : "";
  if (auto it = given_.find(other); it != given_.end() && !it->second.from_override) given_.erase(it);
}

// Reads one given value into the member its key names, checking type, range and choices.
struct ValueReader {
  const RecipeReader& reader;
  const RecipeKey& key;
  const GivenValue& given;
  Recipe& recipe;

  [[noreturn]] void wrong_type() const {
    fail_at(given.where, key.path + " must be " + key.describe_type() + ", got " + describe_node(given.node));
  }
  const std::string& scalar() const {
    if (!given.node.IsScalar()) wrong_type();
    return given.node.Scalar();
  }
  void check_range(double value) const {
    if (!key.range.contains(value)) {
      fail_at(given.where, key.path + " must be " + key.range.describe() + ", got " + given.node.Scalar());
    }
  }

  template <typename Integer>
  Integer whole_number() const {
    const std::optional<Integer> value = parse_whole<Integer>(scalar());
    if (value) return *value;
    const std::optional<double> number = parse_number(without_digit_separators(scalar()));
    if (number && *number == std::trunc(*number) && *number > 0) {
      fail_at(given.where, key.path + " must be at most " + std::to_string(std::numeric_limits<Integer>::max()) +
                               ", got " + scalar());
    }
    wrong_type();
  }
  void operator()(int64_t& (*field)(Recipe&)) const {
    const int64_t value = whole_number<int64_t>();
    check_range(static_cast<double>(value));
    field(recipe) = value;
  }
  void operator()(uint64_t& (*field)(Recipe&)) const { field(recipe) = whole_number<uint64_t>(); }
  void operator()(double& (*field)(Recipe&)) const {
    const std::optional<double> value = parse_number(scalar());
    if (!value) wrong_type();
    check_range(*value);
    field(recipe) = *value;
  }
  void operator()(bool& (*field)(Recipe&)) const {
    scalar();
    if (!YAML::convert<bool>::decode(given.node, field(recipe))) wrong_type();
  }
  // The index of `text` in the key's choices (-1 when it has none).
  int64_t choice(const std::string& text, const std::string& path, const std::string& place) const {
    if (key.choices.empty()) return -1;
    const auto it = std::find(key.choices.begin(), key.choices.end(), text);
    if (it == key.choices.end()) {
      const auto closest = closest_name(text, key.choices);
      fail_at(place, path + " must be one of " + join_names(key.choices) + "; got '" + text + "'" +
                         (closest ? " (did you mean '" + *closest + "'?)" : ""));
    }
    return it - key.choices.begin();
  }
  void operator()(std::string& (*field)(Recipe&)) const {
    const std::string& text = scalar();
    if (text.empty()) fail_at(given.where, key.path + " must not be empty");
    choice(text, key.path, given.where);
    field(recipe) = text;
  }
  void operator()(const KindOption* option) const {
    switch (option->type) {
      case KindOption::Type::integer: {
        const int64_t value = whole_number<int64_t>();
        check_range(static_cast<double>(value));
        return option->set(recipe.model, double(value));
      }
      case KindOption::Type::number: {
        const std::optional<double> value = parse_number(scalar());
        if (!value) wrong_type();
        check_range(*value);
        return option->set(recipe.model, *value);
      }
      case KindOption::Type::choice:
        return option->set(recipe.model, double(choice(scalar(), key.path, given.where)));
    }
  }
  void operator()(StringList& (*field)(Recipe&)) const {
    field(recipe) = reader.read_paths(given, given.node, key.path, key.item);
    if (field(recipe).empty() && key.presence == Presence::required) {
      fail_at(given.where, key.path + " must list at least one " + key.item);
    }
    for (size_t i = 0; i < field(recipe).size(); ++i)
      choice(field(recipe)[i], key.path + "[" + std::to_string(i) + "]", given.where);
  }
  void operator()(WeightsByName& (*field)(Recipe&)) const {
    if (!given.node.IsMap()) wrong_type();
    WeightsByName weights;
    for (const auto& entry : given.node) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const std::string path = key.path + "." + name;
      const std::string place = reader.where_inside(given, entry.first);
      choice(name, key.path, place);
      const std::optional<double> value = entry.second.IsScalar() ? parse_number(entry.second.Scalar()) : std::nullopt;
      if (!value)
        fail_at(reader.where_inside(given, entry.second),
                path + " must be a number, got " + describe_node(entry.second));
      if (!key.range.contains(*value)) {
        fail_at(reader.where_inside(given, entry.second),
                path + " must be " + key.range.describe() + ", got " + entry.second.Scalar());
      }
      if (!weights.emplace(name, *value).second) fail_at(place, "duplicate name '" + path + "'");
    }
    field(recipe) = std::move(weights);
  }
  void operator()(PathsByDomain& (*field)(Recipe&)) const {
    if (!given.node.IsMap()) wrong_type();
    PathsByDomain domains;
    for (const auto& entry : given.node) {
      const std::string domain = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const std::string place = reader.where_inside(given, entry.first);
      if (domain.empty()) {
        fail_at(place, key.path + " domain names must be non-empty names, got " + describe_node(entry.first));
      }
      const std::string path = key.path + "." + domain;
      StringList paths = reader.read_paths(given, entry.second, path);
      if (paths.empty()) fail_at(reader.where_inside(given, entry.second), path + " must list at least one path");
      if (!domains.emplace(domain, std::move(paths)).second) fail_at(place, "duplicate domain '" + path + "'");
    }
    field(recipe) = std::move(domains);
  }
};

// One path (or other item) or a list of them.
StringList RecipeReader::read_paths(const GivenValue& given, const YAML::Node& node, const std::string& path,
                                    const std::string& item) const {
  if (node.IsScalar()) {
    if (node.Scalar().empty()) fail_at(where_inside(given, node), path + " must not be an empty " + item);
    return {node.Scalar()};
  }
  if (!node.IsSequence()) {
    fail_at(where_inside(given, node),
            path + " must be a " + item + " or a list of " + item + "s, got " + describe_node(node));
  }
  StringList paths;
  for (const YAML::Node& element : node) {
    if (!element.IsScalar() || element.Scalar().empty()) {
      fail_at(where_inside(given, element),
              path + "[" + std::to_string(paths.size()) + "] must be a " + item + ", got " + describe_node(element));
    }
    paths.push_back(element.Scalar());
  }
  return paths;
}

void RecipeReader::read_key(const RecipeKey& key, const GivenValue& given, Recipe& recipe) const {
  std::visit(ValueReader{*this, key, given, recipe}, key.field);
}

void RecipeReader::check_steps_or_tokens(Recipe& recipe) const {
  const GivenValue* steps = find("train.steps");
  const GivenValue* tokens = find("train.tokens");
  if (steps && tokens) {
    fail_at(tokens->where, "train.steps (at " + steps->where + ") and train.tokens are both given; give exactly one");
  }
  // Distillation: steps_per_layer may give each converted layer's length instead.
  if (const GivenValue* per_layer = find("distill.steps_per_layer")) {
    if (steps || tokens)
      fail_at(per_layer->where, "distill.steps_per_layer and train." + std::string(steps ? "steps" : "tokens") +
                                    " (at " + (steps ? steps : tokens)->where +
                                    ") both give each layer's training length; give only one");
    recipe.train.steps = recipe.distill.steps_per_layer;
    return;
  }
  if (!steps && !tokens) {
    fail_at(where_section("train"), "missing required key: give train.steps or train.tokens (the training length)");
  }
  Recipe::Train& train = recipe.train;
  int64_t tokens_per_step = 0;
  if (__builtin_mul_overflow(train.batch_size, train.grad_accum, &tokens_per_step) ||
      __builtin_mul_overflow(tokens_per_step, train.seq_len, &tokens_per_step)) {
    fail_at(where_section("train"), "train.batch_size * train.grad_accum * train.seq_len overflows a 64-bit count");
  }
  if (tokens) train.steps = train.tokens / tokens_per_step + (train.tokens % tokens_per_step != 0);
}

// The run folder that resolve() will set: log.dir, or runs/<name>; nullopt if neither is given
// (resolve() then reports the missing name).
std::optional<std::string> RecipeReader::given_run_folder() const {
  Recipe scratch;
  if (const GivenValue* dir = find("log.dir")) {
    read_key(*find_recipe_key("log.dir"), *dir, scratch);
    return scratch.log.dir;
  }
  const GivenValue* name = find("name");
  if (!name) return std::nullopt;
  read_key(*find_recipe_key("name"), *name, scratch);
  return default_log_dir(scratch.name);
}

// The model config that model.init_from stands for, which the recipe's model starts from; nullopt
// when the recipe has no init_from or is a saved one (whose model keys are all explicit).
std::optional<InitModel> RecipeReader::read_init_source(Recipe& recipe) const {
  // A distillation recipe's model is its teacher's.
  std::string key = "model.init_from";
  const GivenValue* init_from = find(key);
  if (!init_from && (init_from = find("distill.teacher"))) key = "distill.teacher";
  if (!init_from) return std::nullopt;
  read_key(*find_recipe_key(key), *init_from, recipe);
  const std::string& spec = key == "model.init_from" ? recipe.model_init_from : recipe.distill.teacher;
  if (const GivenValue* size = find("model.size")) {
    fail_at(init_from->where,
            key + " and model.size (at " + size->where + ") both give the model; give only one of them");
  }
  try {
    const ModelSource source = parse_model_source(spec);
    if (!follow_init_from_) return std::nullopt;
    if (origin_.kind == ModelOrigin::Kind::init_source) {
      return InitModel{read_model_source_config(source), key + " " + spec};
    }
  } catch (const Error& e) {
    fail_at(init_from->where, key + ": " + e.message() +
                                  (key == "distill.teacher" ? " (the teacher must be a decoder fathom can load)" : ""));
  }
  // The run already has weights: its checkpoint says what model they belong to.
  std::string folder = origin_.checkpoint;
  if (origin_.kind == ModelOrigin::Kind::own_run) {
    const std::optional<std::string> run_folder = given_run_folder();
    if (!run_folder) return std::nullopt;
    folder = *run_folder;
  }
  try {
    return InitModel{read_model_source_config({ModelSource::Kind::checkpoint, folder}),
                     "the checkpoint in '" + folder + "'"};
  } catch (const Error& e) {
    const char* which = origin_.kind == ModelOrigin::Kind::own_run ? "the run's latest checkpoint" : "the checkpoint";
    fail_at(init_from->where, key + ": the model comes from " + which + ", not from " + spec + ": " + e.message());
  }
}

// Explicit model keys may restate the source's values, never change them.
void RecipeReader::check_agrees_with_source(const Recipe& recipe, const InitModel& source) const {
  Recipe given = recipe, from_source = recipe;
  from_source.model = source.model;
  for (const RecipeKey& key : recipe_keys()) {
    const bool describes_network = key.path.starts_with("model.") && key.path != "model.size" &&
                                   key.path != "model.init_from" && key.path != "model.init_std" &&
                                   key.path != "model.init_cutoff";
    const GivenValue* value = find(key.path);
    if (!describes_network || !value) continue;
    if (same_value(key, given, from_source)) continue;
    fail_at(value->where, key.path + " is " + describe_value(key, given) + ", but " + source.origin + " gives " +
                              describe_value(key, from_source) + "; drop the key or make it agree");
  }
}

Recipe RecipeReader::resolve() const {
  Recipe recipe;
  const bool distills =
      std::any_of(given_.begin(), given_.end(), [](const auto& entry) { return entry.first.starts_with("distill."); });
  // Before the model keys: a distillation recipe's model is its teacher's.
  if (distills && !find("distill.teacher"))
    fail_at(where_section("distill"), "distill.teacher: missing: give the teacher as checkpoint:DIR or hf:DIR");
  // The ladder rung is the base that explicit model keys override, wherever they are written.
  if (const GivenValue* size = find("model.size")) {
    read_key(*find_recipe_key("model.size"), *size, recipe);
    recipe.model = named_model_size(recipe.model_size);
  }
  // Or the model of existing weights, which explicit keys may only restate.
  const std::optional<InitModel> source_model = read_init_source(recipe);
  if (source_model) recipe.model = source_model->model;
  const bool model_given = !recipe.model_size.empty() || source_model;

  std::vector<std::string> missing;
  for (const RecipeKey& key : recipe_keys()) {
    if (const GivenValue* given = find(key.path)) {
      read_key(key, *given, recipe);
    } else if (key.presence == Presence::required ||
               (key.presence == Presence::required_without_size && !model_given)) {
      missing.push_back(key.path);
    }
  }
  if (!missing.empty()) {
    const std::string& first = missing.front();
    std::string message = "missing required key '" + first + "'";
    if (find_recipe_key(first)->presence == Presence::required_without_size) {
      message += " (or give model.size, one of " + join_names(model_size_names()) + ", or model.init_from)";
    }
    if (missing.size() > 1) message += "; also missing: " + join_names({missing.begin() + 1, missing.end()});
    fail_at(where_section(parent_key_path(first)), message);
  }

  // Defaults that follow other keys.
  if (!find("model.n_kv_heads") && !source_model) recipe.model.n_kv_heads = recipe.model.n_heads;
  if (source_model) check_agrees_with_source(recipe, *source_model);
  if (!find("log.dir")) recipe.log.dir = default_log_dir(recipe.name);

  check_steps_or_tokens(recipe);
  const bool plain_name = recipe.name != "." && recipe.name != ".." &&
                          recipe.name.find_first_not_of(
                              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              "0123456789._-+") == std::string::npos;
  if (!plain_name) {
    fail_at(find("name")->where, "name '" + recipe.name + "' may hold only letters, digits, '.', '_', '-' and '+'" +
                                     " (it names the run folder)");
  }
  try {
    recipe.model.validate();
  } catch (const Error& e) {
    fail_at(where_section("model"), "inconsistent model: " + e.message());
  }
  try {
    (void)Objective::for_model(recipe.train.loss, recipe.model);
  } catch (const Error& e) {
    const GivenValue* loss = find("train.loss");
    fail_at(loss ? loss->where : where_section("train"), e.message());
  }
  if (distills) {
    if (recipe.distill.steps_per_layer == 0) recipe.distill.steps_per_layer = recipe.train.steps;
    if (const std::optional<DistillProblem> problem = distill_problem(recipe)) {
      const GivenValue* at = find(problem->key);
      fail_at(at ? at->where : where_section("distill"), problem->message);
    }
  }
  // The default kind everywhere (attention) is spelt one way, so equal models compare equal.
  std::vector<std::string>& layers = recipe.model.layers;
  const std::string default_kind = ModelConfig{}.layer_kind(0);  // a copy: the config is a temporary
  if (std::all_of(layers.begin(), layers.end(), [&](const std::string& kind) { return kind == default_kind; }))
    layers.clear();
  return recipe;
}

}  // namespace

Recipe parse_recipe(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides, const ModelOrigin& origin) {
  RecipeReader reader(source_name, /*follow_init_from=*/true, origin);
  reader.read_document(yaml_text);
  for (const std::string& assignment : overrides) reader.apply_override(assignment);
  return reader.resolve();
}

Recipe parse_saved_recipe(const std::string& yaml_text, const std::string& source_name) {
  RecipeReader reader(source_name, /*follow_init_from=*/false);
  reader.read_document(yaml_text);
  return reader.resolve();
}

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides, const ModelOrigin& origin) {
  std::error_code error;
  FATHOM_CHECK(std::filesystem::exists(path, error), "recipe file '", path, "' does not exist");
  FATHOM_CHECK(std::filesystem::is_regular_file(path, error), "recipe '", path, "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  FATHOM_CHECK(in.is_open(), "cannot open recipe '", path, "': ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  FATHOM_CHECK(!in.bad(), "cannot read recipe '", path, "'");
  return parse_recipe(text.str(), path, overrides, origin);
}

}  // namespace fathom
