#include "layers/hf_import.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "core/suggest.h"
#include "layers/decoder.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

// config.json and index files are small; anything near this is not one.
constexpr uint64_t kMaxJsonBytes = 64ull << 20;

std::string describe_value(const YAML::Node& node) {
  if (node.IsScalar()) return node.Tag() == "!" ? "\"" + node.Scalar() + "\"" : node.Scalar();
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "an object";
  return "null";
}

// Typed reads of one config.json field; `key` is the dotted path named in messages.
class ConfigReader {
 public:
  ConfigReader(const YAML::Node& object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return object_[key] && !object_[key].IsNull(); }

  int64_t integer(const char* key) const {
    const YAML::Node node = require(key);
    int64_t value = 0;
    if (!json_integer(node, value)) wrong(key, node, "an integer");
    return value;
  }
  int64_t integer_or(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

  double number(const char* key) const {
    const YAML::Node node = require(key);
    double value = 0;
    const std::string& text = node.Scalar();
    const bool plain = node.IsScalar() && node.Tag() != "!" && !text.empty();
    const auto [end, ec] = plain ? std::from_chars(text.data(), text.data() + text.size(), value)
                                 : std::from_chars_result{text.data(), std::errc::invalid_argument};
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) wrong(key, node, "a number");
    return value;
  }
  double number_or(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }

  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const YAML::Node node = object_[key];
    if (node.IsScalar() && node.Tag() != "!" && (node.Scalar() == "true" || node.Scalar() == "false"))
      return node.Scalar() == "true";
    wrong(key, node, "true or false");
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const YAML::Node node = object_[key];
    if (!node.IsScalar() || node.Tag() != "!") wrong(key, node, "a string");
    return node.Scalar();
  }

  // The object at `key`, or a null node when the key is absent or null.
  YAML::Node object_or_null(const char* key) const {
    if (!has(key)) return YAML::Node(YAML::NodeType::Null);
    const YAML::Node node = object_[key];
    if (!node.IsMap()) wrong(key, node, "an object");
    return node;
  }

  const std::string& source() const { return source_; }
  std::string path(const char* key) const { return prefix_ + key; }

 private:
  YAML::Node require(const char* key) const {
    FATHOM_CHECK(has(key), source_, ": missing '", path(key), "'");
    return object_[key];
  }
  [[noreturn]] void wrong(const char* key, const YAML::Node& node, const char* what) const {
    FATHOM_FAIL(source_, ": '", path(key), "' must be ", what, ", got ", describe_value(node));
  }

  YAML::Node object_;
  std::string source_;
  std::string prefix_;
};

// The architecture config.json names in `architectures` (or implies by model_type).
std::string read_architecture(const YAML::Node& root, const ConfigReader& r) {
  const std::map<std::string, std::string> by_model_type = {{"olmo2", "Olmo2ForCausalLM"},
                                                            {"llama", "LlamaForCausalLM"}};
  std::string architecture;
  if (r.has("architectures")) {
    const YAML::Node list = root["architectures"];
    FATHOM_CHECK(list.IsSequence() && list.size() == 1 && list[0].IsScalar(), r.source(),
                 ": 'architectures' must be a list of one architecture name, got ", describe_value(list),
                 list.IsSequence() ? " of " + std::to_string(list.size()) : std::string());
    architecture = list[0].Scalar();
  } else {
    const std::string model_type = r.string_or("model_type", "");
    FATHOM_CHECK(!model_type.empty(), r.source(), ": neither 'architectures' nor 'model_type' says what model this is");
    const auto it = by_model_type.find(model_type);
    FATHOM_CHECK(it != by_model_type.end(), r.source(), ": model_type '", model_type,
                 "' is not supported; fathom imports ", join_names(hf_supported_architectures()));
    architecture = it->second;
  }
  const auto& supported = hf_supported_architectures();
  FATHOM_CHECK(std::find(supported.begin(), supported.end(), architecture) != supported.end(), r.source(),
               ": architecture '", architecture, "' is not supported; fathom imports ", join_names(supported));
  return architecture;
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (earlier); HF's default theta is 10000.
void read_rope(const ConfigReader& r, ModelConfig& c) {
  const YAML::Node parameters = r.object_or_null("rope_parameters");
  const YAML::Node legacy_scaling = r.object_or_null("rope_scaling");
  const bool modern = parameters.IsMap();
  const YAML::Node spec = modern ? parameters : legacy_scaling;
  const ConfigReader s(spec, r.source(), modern ? "rope_parameters." : "rope_scaling.");
  c.rope_theta = modern && s.has("rope_theta") ? s.number("rope_theta") : r.number_or("rope_theta", 10000.0);
  FATHOM_CHECK(c.rope_theta > 0, r.source(), ": the RoPE theta must be positive, got ", c.rope_theta);

  // Older configs spell the type "type".
  const std::string type = !spec.IsMap()        ? "default"
                           : s.has("rope_type") ? s.string_or("rope_type", "")
                                                : s.string_or("type", "default");
  if (type == "default") return;
  FATHOM_CHECK(type == "llama3", r.source(), ": rope type '", type,
               "' is not supported; fathom reads default and llama3 RoPE");
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = s.number("factor");
  c.rope_scaling.low_freq_factor = s.number("low_freq_factor");
  c.rope_scaling.high_freq_factor = s.number("high_freq_factor");
  c.rope_scaling.original_max_position = s.integer("original_max_position_embeddings");
  try {
    validate_rope_scaling(c.rope_scaling);
  } catch (const Error& e) {
    FATHOM_FAIL(r.source(), ": ", e.message());
  }
}

}  // namespace

const std::vector<std::string>& hf_supported_architectures() {
  static const std::vector<std::string> names = {"Olmo2ForCausalLM", "LlamaForCausalLM"};
  return names;
}

HfConfig hf_config_from_json(const YAML::Node& root, const std::string& source) {
  FATHOM_CHECK(root.IsMap(), source, ": config.json must be a JSON object, got ", describe_value(root));
  const ConfigReader r(root, source);
  HfConfig out;
  out.architecture = read_architecture(root, r);
  ModelConfig& c = out.config;
  const bool olmo2 = out.architecture == "Olmo2ForCausalLM";
  c.norm = olmo2 ? "post" : "pre";
  c.qk_norm = olmo2;
  c.d_model = r.integer("hidden_size");
  c.n_layers = r.integer("num_hidden_layers");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer_or("num_key_value_heads", c.n_heads);  // HF: absent means no GQA
  c.ffn_hidden = r.integer("intermediate_size");
  c.vocab_size = r.integer("vocab_size");
  c.norm_eps = r.number("rms_norm_eps");
  c.tie_embeddings = r.boolean_or("tie_word_embeddings", false);
  read_rope(r, c);

  const std::string activation = r.string_or("hidden_act", "silu");
  FATHOM_CHECK(activation == "silu", source, ": hidden_act '", activation,
               "' is not supported; fathom's MLP is SwiGLU (silu)");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    FATHOM_CHECK(!r.boolean_or(bias, false), source, ": '", bias, "' is true; fathom's layers have no biases");
  try {
    c.validate();
  } catch (const Error& e) {
    FATHOM_FAIL(source, ": unsupported model shape: ", e.message());
  }
  if (r.has("head_dim")) {
    const int64_t head_dim = r.integer("head_dim");
    FATHOM_CHECK(head_dim == c.head_dim(), source, ": head_dim ", head_dim,
                 " differs from hidden_size / num_attention_heads = ", c.d_model, " / ", c.n_heads, " = ", c.head_dim(),
                 "; fathom needs them equal");
  }
  return out;
}

HfConfig read_hf_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / kHfConfigFile;
  FATHOM_CHECK(fs::is_directory(dir), "HF checkpoint folder '", dir, "' does not exist");
  FATHOM_CHECK(fs::is_regular_file(path), "HF checkpoint folder '", dir, "' has no ", kHfConfigFile);
  return hf_config_from_json(parse_json(read_file(path, kMaxJsonBytes), path.string()), path.string());
}

namespace {

// Where each stored tensor is: the safetensors files of the folder, opened and validated.
struct StoredTensors {
  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t> file_of;  // tensor name -> index into files
};

StoredTensors open_single(const fs::path& path) {
  StoredTensors stored;
  stored.files.push_back(read_safetensors(path.string()));
  for (const std::string& name : stored.files[0].names()) stored.file_of[name] = 0;
  return stored;
}

// model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor name: shard file name}}.
StoredTensors open_sharded(const fs::path& dir, const fs::path& index_path) {
  const std::string source = index_path.string();
  const YAML::Node index = parse_json(read_file(index_path, kMaxJsonBytes), source);
  FATHOM_CHECK(index.IsMap() && index["weight_map"] && index["weight_map"].IsMap(), source,
               ": an index must be a JSON object with a 'weight_map' object of tensor name -> shard file");
  StoredTensors stored;
  std::map<std::string, size_t> shard_index;
  for (const auto& entry : index["weight_map"]) {
    const std::string name = entry.first.Scalar();
    FATHOM_CHECK(entry.second.IsScalar() && !entry.second.Scalar().empty(), source, ": weight_map['", name,
                 "'] must be a shard file name, got ", describe_value(entry.second));
    const std::string shard = entry.second.Scalar();
    FATHOM_CHECK(fs::path(shard).filename() == shard, source, ": weight_map['", name, "'] names '", shard,
                 "', which is not a file name inside the folder");
    auto [it, added] = shard_index.emplace(shard, stored.files.size());
    if (added) {
      const fs::path shard_path = dir / shard;
      FATHOM_CHECK(fs::is_regular_file(shard_path), source, ": shard '", shard, "' (named for tensor '", name,
                   "') does not exist in ", dir.string());
      stored.files.push_back(read_safetensors(shard_path.string()));
    }
    const SafetensorsFile& file = stored.files[it->second];
    FATHOM_CHECK(file.contains(name), source, ": names shard '", shard, "' for tensor '", name, "', but ", file.path(),
                 " has no such tensor");
    stored.file_of[name] = it->second;
  }
  return stored;
}

// Tensors HF stores that are no model weights: rotary tables some older checkpoints saved.
bool is_ignorable_buffer(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

}  // namespace

HfModel load_hf_model(const std::string& dir) {
  HfConfig hf = read_hf_config(dir);
  const fs::path folder(dir);
  const fs::path single = folder / kHfWeightsFile, index = folder / kHfWeightsIndexFile;
  StoredTensors stored;
  if (fs::exists(single))
    stored = open_single(single);
  else if (fs::exists(index))
    stored = open_sharded(folder, index);
  else
    FATHOM_FAIL("HF checkpoint folder '", dir, "' has neither ", kHfWeightsFile, " nor ", kHfWeightsIndexFile,
                " (fathom reads safetensors checkpoints, not pytorch_model.bin)");
  const std::string weights_source = fs::exists(single) ? single.string() : index.string();

  HfModel model{hf.config, {}, hf.architecture};
  std::set<std::string> expected;
  std::vector<std::string> missing;
  for (const auto& [name, shape] : decoder_parameter_shapes(hf.config)) {
    expected.insert(name);
    const auto it = stored.file_of.find(name);
    if (it == stored.file_of.end()) {
      missing.push_back(name);
      continue;
    }
    const SafetensorsFile& file = stored.files[it->second];
    const SafetensorsEntry& entry = file.entry(name);
    FATHOM_CHECK(entry.shape == shape, file.path(), ": tensor '", name, "' has shape ", entry.shape.str(),
                 " but config.json (", hf.architecture, ") implies ", shape.str());
    FATHOM_CHECK(entry.dtype == DType::f32 || entry.dtype == DType::bf16 || entry.dtype == DType::f16, file.path(),
                 ": tensor '", name, "' is ", dtype_name(entry.dtype), "; fathom imports F32, BF16 or F16 weights");
    if (missing.empty()) model.weights.emplace_back(name, file.load(name).to(DType::f32));
  }
  if (!missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 8);
    FATHOM_FAIL(weights_source, ": missing ", missing.size(), " tensor(s) that a ", hf.architecture,
                " with this config.json needs: ", join_names({missing.begin(), missing.begin() + shown}),
                missing.size() > shown ? ", ..." : "");
  }
  for (const auto& [name, file_index] : stored.file_of) {
    if (expected.count(name) || is_ignorable_buffer(name)) continue;
    // Tied checkpoints may still carry the (identical) head; fathom keeps one parameter.
    if (name == "lm_head.weight" && hf.config.tie_embeddings) continue;
    FATHOM_FAIL(stored.files[file_index].path(), ": unexpected tensor '", name, "' that a ", hf.architecture,
                " with this config.json does not have");
  }
  return model;
}

}  // namespace fathom
