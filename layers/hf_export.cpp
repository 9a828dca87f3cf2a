#include "layers/hf_export.h"

#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "layers/attention.h"
#include "layers/decoder.h"
#include "layers/hf_import.h"
#include "layers/hf_remote_code.h"
#include "layers/layer_kinds.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

// The model's parameters from `weights`, in Decoder order and converted to `dtype`; every name and
// shape is checked first, so nothing is written for weights that do not fit the config.
TensorMap ordered_weights(const ModelConfig& config, const TensorMap& weights, DType dtype) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : weights) by_name[name] = &tensor;
  TensorMap out;
  for (const auto& [name, shape] : decoder_parameter_shapes(config)) {
    const auto it = by_name.find(name);
    FATHOM_CHECK(it != by_name.end(), "export: the weights lack '", name, "', which the model config needs");
    const Tensor& t = *it->second;
    FATHOM_CHECK(t.shape() == shape, "export: '", name, "' has shape ", t.shape().str(),
                 " but the model config implies ", shape.str());
    FATHOM_CHECK(is_floating(t.dtype()), "export: '", name, "' is ", dtype_name(t.dtype()), ", not a float tensor");
    out.emplace_back(name, t.to(Device::cpu()).to(dtype));
    by_name.erase(it);
  }
  FATHOM_CHECK(by_name.empty(), "export: unexpected tensor '", by_name.begin()->first,
               "' that the model config does not have (", by_name.size(), " unexpected in all)");
  return out;
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    default:
      FATHOM_FAIL("export: dtype ", dtype_name(dtype), " is not offered; choose F32 or BF16");
  }
}

bool folder_is_empty(const fs::path& dir) {
  return fs::is_directory(dir) && fs::directory_iterator(dir) == fs::directory_iterator();
}

}  // namespace

namespace {

// Why no transformers class computes `c` (empty when one does).
std::string why_no_native_class(const ModelConfig& c) {
  using detail::concat;
  if (c.options.get<MoDAConfig>().enabled())
    return concat("the model reads depth KV with MoDA (moda.variant ", name_of(c.options.get<MoDAConfig>().variant),
                  "), which Olmo2ForCausalLM and LlamaForCausalLM do not have; without the depth reads they would "
                  "compute another function");
  if (c.options.get<ModConfig>().enabled())
    return concat("the model routes blocks with MoD (mod.capacity ", c.options.get<ModConfig>().capacity,
                  "), which Olmo2ForCausalLM and LlamaForCausalLM do not have; a dense copy would compute another "
                  "function");
  for (int64_t i = 0; i < c.n_layers; ++i)
    if (c.layer_kind(i) != kAttentionKind)
      return concat("layer ", i, " is a '", c.layer_kind(i),
                    "' layer, which Olmo2ForCausalLM and LlamaForCausalLM do not have (they are attention only)");
  if ((c.norm == "post") != c.qk_norm)
    return concat("no transformers class has norm: ", c.norm, " with qk_norm: ", c.qk_norm ? "true" : "false",
                  " (Olmo2ForCausalLM is norm post with qk_norm, LlamaForCausalLM norm pre without)");
  return "";
}

constexpr const char* kRemoteCodeClass = "FathomForCausalLM";

// The standard size keys both kinds of config.json carry.
void write_sizes(JsonWriter& w, const ModelConfig& c, const HfExportOptions& options) {
  w.key("hidden_size").value(c.d_model);
  w.key("intermediate_size").value(c.ffn_hidden);
  w.key("num_hidden_layers").value(c.n_layers);
  w.key("num_attention_heads").value(c.n_heads);
  w.key("num_key_value_heads").value(c.n_kv_heads);
  w.key("vocab_size").value(c.vocab_size);
  w.key("rms_norm_eps").value(c.norm_eps);
  w.key("max_position_embeddings").value(options.max_position_embeddings);
}

void write_rope_scaling_fields(JsonWriter& w, const RopeScaling& s) {
  w.key("factor").value(s.factor);
  w.key("low_freq_factor").value(s.low_freq_factor);
  w.key("high_freq_factor").value(s.high_freq_factor);
}

// The token ids, cache use and dtype both kinds end with.
void write_tokens_and_dtype(JsonWriter& w, const HfExportOptions& options) {
  w.key("bos_token_id").null();
  if (options.eos_token_id)
    w.key("eos_token_id").value(*options.eos_token_id);
  else
    w.key("eos_token_id").null();
  w.key("pad_token_id").null();
  w.key("use_cache").value(true);
  w.key("dtype").value(torch_dtype_name(options.dtype));
}

// modeling_fathom.FathomConfig's fields: what fathom_core.FathomSpec reads.
// Every layer kind's options, one object per kind ("dsla": {"states": 2, "gamma": "layer"}), as the
// recipe spells them: what the remote code's fathom_core.py reads.
void write_kind_options(JsonWriter& w, const ModelConfig& c) {
  for (const LayerKind& kind : layer_kinds()) {
    if (kind.options.empty()) continue;
    w.key(kind.name).begin_object();
    for (const KindOption& option : kind.options) {
      const double value = option.get(c);
      w.key(option.path.substr(kind.name.size() + 1));
      if (option.type == KindOption::Type::choice)
        w.value(option.choices[size_t(value)]);
      else if (option.type == KindOption::Type::integer)
        w.value(int64_t(value));
      else
        w.value(value);
    }
    w.end_object();
  }
}

void write_remote_code_config(JsonWriter& w, const ModelConfig& c, const HfExportOptions& options) {
  w.key("architectures").begin_array().value(kRemoteCodeClass).end_array();
  w.key("model_type").value("fathom");
  w.key("auto_map").begin_object();
  w.key("AutoConfig").value("modeling_fathom.FathomConfig");
  w.key("AutoModelForCausalLM").value(std::string("modeling_fathom.") + kRemoteCodeClass);
  w.end_object();
  write_sizes(w, c, options);
  w.key("mod_routing").value("topk");
  w.key("fathom").begin_object();
  w.key("norm").value(c.norm);
  w.key("qk_norm").value(c.qk_norm);
  w.key("tie_embeddings").value(c.tie_embeddings);
  w.key("rope").begin_object();
  w.key("theta").value(c.rope_theta);
  w.key("scaling").begin_object().key("type").value(c.rope_scaling.type);
  if (c.rope_scaling.type == "llama3") {
    write_rope_scaling_fields(w, c.rope_scaling);
    w.key("original_max_position").value(c.rope_scaling.original_max_position);
  }
  w.end_object().end_object();
  w.key("layers").begin_array();
  for (int64_t i = 0; i < c.n_layers; ++i) w.value(c.layer_kind(i));
  w.end_array();
  write_kind_options(w, c);
  w.end_object();
  // The model ties its head itself (fathom_core); transformers must not tie or untie anything.
  w.key("tie_word_embeddings").value(false);
  w.key("initializer_range").value(c.init_std);
  write_tokens_and_dtype(w, options);
}

void write_native_config(JsonWriter& w, const ModelConfig& c, const HfExportOptions& options,
                         const std::string& architecture) {
  const bool llama = architecture == "LlamaForCausalLM";
  w.key("architectures").begin_array().value(architecture).end_array();
  w.key("model_type").value(llama ? "llama" : "olmo2");
  write_sizes(w, c, options);
  if (llama) w.key("head_dim").value(c.head_dim());
  w.key("hidden_act").value("silu");
  w.key("rope_parameters").begin_object();
  w.key("rope_theta").value(c.rope_theta);
  if (c.rope_scaling.type == "llama3") {
    w.key("rope_type").value("llama3");
    write_rope_scaling_fields(w, c.rope_scaling);
    w.key("original_max_position_embeddings").value(c.rope_scaling.original_max_position);
  } else {
    w.key("rope_type").value("default");
  }
  w.end_object();
  w.key("attention_bias").value(false);
  w.key("attention_dropout").value(0.0);
  if (llama) w.key("mlp_bias").value(false).key("pretraining_tp").value(1);
  w.key("tie_word_embeddings").value(c.tie_embeddings);
  w.key("initializer_range").value(c.init_std);
  write_tokens_and_dtype(w, options);
}

}  // namespace

std::string hf_architecture_for(const ModelConfig& c) {
  const std::string why = why_no_native_class(c);
  FATHOM_CHECK(why.empty(), "export: ", why);
  return c.norm == "post" ? "Olmo2ForCausalLM" : "LlamaForCausalLM";
}

bool hf_needs_remote_code(const ModelConfig& c) { return !why_no_native_class(c).empty(); }

std::string hf_export_class(const ModelConfig& c) {
  if (!hf_needs_remote_code(c)) return hf_architecture_for(c);
  FATHOM_CHECK(!(c.options.get<ModConfig>().enabled() && c.options.get<ModConfig>().router == ModRouter::random),
               "export: mod.router: random routes by a fresh random draw each forward, which no exported model "
               "can repeat (it is a control for experiments); export a model with the learned router");
  return kRemoteCodeClass;
}

std::string hf_config_json(const ModelConfig& c, const HfExportOptions& options) {
  c.validate();
  const std::string architecture = hf_export_class(c);
  FATHOM_CHECK(options.max_position_embeddings >= 1, "export: max_position_embeddings must be positive, got ",
               options.max_position_embeddings);
  JsonWriter w;
  w.begin_object();
  if (architecture == kRemoteCodeClass)
    write_remote_code_config(w, c, options);
  else
    write_native_config(w, c, options, architecture);
  w.end_object();
  return w.str() + "\n";
}

void export_hf_model(const ModelConfig& config, const TensorMap& weights, const std::string& out_dir,
                     const HfExportOptions& options) {
  FATHOM_CHECK(!out_dir.empty(), "export: the output folder is empty");
  const fs::path target = fs::absolute(out_dir).lexically_normal();
  const fs::path folder = target.has_filename() ? target : target.parent_path();
  FATHOM_CHECK(!fs::exists(folder) || fs::is_directory(folder), "export: '", out_dir, "' exists and is not a folder");
  FATHOM_CHECK(!fs::exists(folder) || folder_is_empty(folder) || options.overwrite, "export: '", out_dir,
               "' already exists and is not empty; choose another folder or pass --overwrite");
  FATHOM_CHECK(fs::is_directory(folder.parent_path()), "export: the parent folder of '", out_dir, "' does not exist");

  // Everything that can fail on bad input fails here, before anything is written.
  const std::string config_json = hf_config_json(config, options);
  const TensorMap ordered = ordered_weights(config, weights, options.dtype);

  const fs::path temp = folder.parent_path() / temp_name_for(folder.filename().string());
  remove_all_or_fail(temp, "a leftover of an earlier export");
  std::error_code error;
  FATHOM_CHECK(fs::create_directory(temp, error), "export: cannot create ", temp, ": ",
               error ? error.message() : "it already exists");
  TempFolderGuard guard(temp);
  write_file_atomically(temp / kHfConfigFile, config_json);
  write_safetensors((temp / kHfWeightsFile).string(), ordered, {{"format", "pt"}});
  if (hf_needs_remote_code(config))
    for (const HfRemoteFile& file : hf_remote_code_files()) write_file_atomically(temp / file.name, file.contents);
  fsync_directory(temp);
  move_folder_into_place(temp, folder);
  guard.release();
  fsync_directory(folder.parent_path());
}

}  // namespace fathom
