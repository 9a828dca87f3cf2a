#include "train/checkpoint/run_state.h"

#include "core/error.h"
#include "core/json.h"

namespace fathom {

std::string run_state_to_json(const RunState& s) {
  JsonWriter w;
  w.begin_object()
      .key("step")
      .value(s.step)
      .key("tokens_seen")
      .value(s.tokens_seen)
      .key("seed")
      .value(s.seed)
      .key("loader")
      .begin_object()
      .key("epoch")
      .value(s.loader.epoch)
      .key("position")
      .value(s.loader.position)
      .end_object()
      .end_object();
  return w.str() + "\n";
}

namespace {
int64_t required_integer(const YAML::Node& parent, const char* key, const std::string& source) {
  int64_t value = 0;
  FATHOM_CHECK(parent[key] && json_integer(parent[key], value) && value >= 0, source, ": '", key,
               "' must be a non-negative integer");
  return value;
}
}  // namespace

RunState run_state_from_json(const std::string& json, const std::string& source) {
  const YAML::Node root = parse_json(json, source);
  FATHOM_CHECK(root.IsMap(), source, ": expected a JSON object");
  FATHOM_CHECK(root["loader"] && root["loader"].IsMap(), source, ": 'loader' must be an object");
  RunState s;
  s.step = required_integer(root, "step", source);
  s.tokens_seen = required_integer(root, "tokens_seen", source);
  s.seed = uint64_t(required_integer(root, "seed", source));
  s.loader.epoch = uint64_t(required_integer(root["loader"], "epoch", source));
  s.loader.position = uint64_t(required_integer(root["loader"], "position", source));
  return s;
}

}  // namespace fathom
