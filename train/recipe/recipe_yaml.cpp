// Writing a resolved recipe back as YAML, in schema order, every key explicit.
#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "train/recipe/recipe.h"
#include "train/recipe/recipe_schema.h"

namespace fathom {

namespace {

// Strings that YAML readers (PyYAML in the reproduction scripts included) would take for a bool,
// a number or null get quotes; fathom reads them back as strings either way.
void write_string(YAML::Emitter& out, const std::string& text) {
  bool looks_typed = text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
  bool as_bool = false;
  looks_typed = looks_typed || YAML::convert<bool>::decode(YAML::Node(text), as_bool);
  // Anything that might be a number (1e-3, +5, .inf, 0x1f, 1_000) starts with one of these.
  looks_typed =
      looks_typed || (!text.empty() && std::string_view("0123456789+-.").find(text[0]) != std::string_view::npos);
  if (looks_typed) out << YAML::DoubleQuoted;
  out << text;
}

struct ValueWriter {
  YAML::Emitter& out;
  Recipe& recipe;
  const RecipeKey& key;

  void operator()(int64_t& (*field)(Recipe&)) const { out << std::to_string(field(recipe)); }
  void operator()(uint64_t& (*field)(Recipe&)) const { out << std::to_string(field(recipe)); }
  void operator()(double& (*field)(Recipe&)) const { out << format_number(field(recipe)); }
  void operator()(bool& (*field)(Recipe&)) const { out << (field(recipe) ? "true" : "false"); }
  void operator()(std::string& (*field)(Recipe&)) const { write_string(out, field(recipe)); }
  void operator()(StringList& (*field)(Recipe&)) const { write_paths(field(recipe)); }
  void operator()(PathsByDomain& (*field)(Recipe&)) const {
    if (field(recipe).empty()) out << YAML::Flow;  // "{}" on the key's line
    out << YAML::BeginMap;
    for (const auto& [domain, paths] : field(recipe)) {
      out << YAML::Key;
      write_string(out, domain);
      out << YAML::Value;
      write_paths(paths);
    }
    out << YAML::EndMap;
  }
  void operator()(WeightsByName& (*field)(Recipe&)) const {
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& [name, weight] : field(recipe)) out << YAML::Key << name << YAML::Value << format_number(weight);
    out << YAML::EndMap;
  }
  void operator()(const KindOption* option) const {
    const double value = option->get(recipe.model);
    switch (option->type) {
      case KindOption::Type::integer:
        out << std::to_string(int64_t(value));
        return;
      case KindOption::Type::number:
        out << format_number(value);
        return;
      case KindOption::Type::choice:
        write_string(out, key.choices[size_t(value)]);
        return;
    }
  }
  void write_paths(const StringList& paths) const {
    out << YAML::BeginSeq;
    for (const std::string& path : paths) write_string(out, path);
    out << YAML::EndSeq;
  }
};

// Keys that exist only in some recipes: model.size when the model came from a ladder rung,
// model.init_from when it started from existing weights, distill.* in a distillation recipe, and
// one of train.steps / train.tokens (both spell the training length; tokens if that was given).
bool is_written(const RecipeKey& key, const Recipe& recipe) {
  if (key.path == "model.size") return !recipe.model_size.empty();
  if (key.path == "model.init_from") return !recipe.model_init_from.empty();
  if (key.path == "train.steps") return recipe.train.tokens == 0;
  if (key.path == "train.tokens") return recipe.train.tokens != 0;
  // steps_per_layer is train.steps, written there.
  if (key.path == "distill.steps_per_layer") return false;
  if (key.path.starts_with("distill.")) return !recipe.distill.teacher.empty();
  return true;
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> names;
  while (!path.empty()) {
    const auto dot = path.find('.');
    names.emplace_back(path.substr(0, dot));
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return names;
}

}  // namespace

std::string recipe_to_yaml(const Recipe& recipe) {
  Recipe values = recipe;  // the schema's accessors take a mutable Recipe
  YAML::Emitter out;
  out << YAML::Comment("fathom recipe, fully resolved (every key explicit)") << YAML::Newline;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the sections being written, outermost first
  for (const RecipeKey& key : recipe_keys()) {
    if (!is_written(key, recipe)) continue;
    const std::vector<std::string> sections = split_path(parent_key_path(key.path));
    std::size_t shared = 0;
    while (shared < open.size() && shared < sections.size() && open[shared] == sections[shared]) ++shared;
    for (; open.size() > shared; open.pop_back()) out << YAML::EndMap;
    for (; open.size() < sections.size(); open.push_back(sections[open.size()])) {
      out << YAML::Key << sections[open.size()] << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << std::string(last_key_name(key.path)) << YAML::Value;
    std::visit(ValueWriter{out, values, key}, key.field);
    if (key.path == "train.tokens") {
      out << YAML::Comment(std::to_string(recipe.train.steps) + " steps of " +
                           std::to_string(recipe.train.tokens_per_step()) + " tokens");
    }
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  FATHOM_CHECK(out.good(), "cannot write the recipe as YAML: ", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace fathom
