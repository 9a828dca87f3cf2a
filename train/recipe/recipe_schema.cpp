#include "train/recipe/recipe_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/suggest.h"
#include "core/thread_pool.h"
#include "layers/layer_kinds.h"
#include "layers/recompute.h"
#include "train/run/objective.h"

namespace fathom {

namespace {

// One visitor from several lambdas.
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};

// The accessor of a key is the member it sets: FIELD(train.optimizer.lr) -> r.train.optimizer.lr.
#define FIELD(member)        \
  +[](Recipe & r) -> auto& { \
    return r.member;         \
  }

Range at_least(double low) { return {Bound{low, true}, std::nullopt}; }
Range above(double low) { return {Bound{low, false}, std::nullopt}; }
Range closed(double low, double high) { return {Bound{low, true}, Bound{high, true}}; }
Range half_open(double low, double high) { return {Bound{low, true}, Bound{high, false}}; }

std::vector<RecipeKey> build_schema() {
  using P = Presence;
  return {
      {.path = "name",
       .field = FIELD(name),
       .aliases = {"run_name", "experiment"},
       .resumable = true,
       .doc = "Run name (letters, digits and `._-+`); the run folder defaults to `runs/<name>`."},

      {.path = "model.size",
       .field = FIELD(model_size),
       .choices = model_size_names(),
       .aliases = {"model_size", "preset"},
       .doc = "A named OLMo2 size of OLMo-core's ladder; explicit model keys override its fields."},
      {.path = "model.init_from",
       .field = FIELD(model_init_from),
       .aliases = {"init_from", "pretrained", "from_pretrained", "load_path", "model_name_or_path"},
       .doc = "Start from existing weights, `hf:DIR` (an `Olmo2ForCausalLM` or `LlamaForCausalLM` folder) or "
              "`checkpoint:DIR` (a fathom checkpoint or run folder); the model keys come from it and explicit ones "
              "must agree."},
      {.path = "model.d_model",
       .field = FIELD(model.d_model),
       .presence = P::required_without_size,
       .range = at_least(1),
       .aliases = {"hidden_size", "dim", "n_embd", "d_embed"},
       .doc = "Residual width."},
      {.path = "model.n_layers",
       .field = FIELD(model.n_layers),
       .presence = P::required_without_size,
       .range = at_least(1),
       .aliases = {"num_hidden_layers", "num_layers", "n_layer", "depth"},
       .doc = "Decoder blocks."},
      {.path = "model.n_heads",
       .field = FIELD(model.n_heads),
       .presence = P::required_without_size,
       .range = at_least(1),
       .aliases = {"num_attention_heads", "num_heads", "n_head"},
       .doc = "Query heads; `d_model / n_heads` is the head dim, which must be even."},
      {.path = "model.n_kv_heads",
       .field = FIELD(model.n_kv_heads),
       .presence = P::derived,
       .range = at_least(1),
       .aliases = {"num_key_value_heads", "num_kv_heads", "n_kv_head"},
       .doc = "KV heads, by default `model.n_heads`, which must be a multiple of it (GQA)."},
      {.path = "model.ffn_hidden",
       .field = FIELD(model.ffn_hidden),
       .presence = P::required_without_size,
       .range = at_least(1),
       .aliases = {"intermediate_size", "hidden_dim", "d_ff", "ffn_dim", "mlp_hidden"},
       .doc = "SwiGLU hidden width."},
      {.path = "model.vocab_size",
       .field = FIELD(model.vocab_size),
       .presence = P::required_without_size,
       .range = at_least(1),
       .aliases = {"vocab", "n_vocab", "padded_vocab_size"},
       .doc = "Embedding rows, covering the tokenizer's ids; the named sizes have 100352."},
      {.path = "model.norm",
       .field = FIELD(model.norm),
       .choices = {"post", "pre"},
       .aliases = {"norm_type", "norm_position", "layer_norm_position"},
       .doc = "`post`: OLMo2's reordered norm on the sublayer outputs; `pre`: the classic pre-norm."},
      {.path = "model.qk_norm",
       .field = FIELD(model.qk_norm),
       .aliases = {"use_qk_norm"},
       .doc = "RMSNorm on q and k over the full projected width."},
      {.path = "model.rope_theta",
       .field = FIELD(model.rope_theta),
       .range = above(0),
       .aliases = {"rope_base", "theta"},
       .doc = "RoPE base."},
      {.path = "model.tie_embeddings",
       .field = FIELD(model.tie_embeddings),
       .aliases = {"tie_word_embeddings", "weight_tying", "tied_embeddings"},
       .doc = "The output head reuses `model.embed_tokens.weight` (one parameter, no weight decay)."},
      {.path = "model.norm_eps",
       .field = FIELD(model.norm_eps),
       .range = above(0),
       .aliases = {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"},
       .doc = "RMSNorm epsilon."},
      {.path = "model.init_std",
       .field = FIELD(model.init_std),
       .range = above(0),
       .aliases = {"initializer_range", "std"},
       .doc = "Std of the truncated-normal init of every Linear and Embedding."},
      {.path = "model.init_cutoff",
       .field = FIELD(model.init_cutoff),
       .range = above(0),
       .aliases = {"init_cutoff_factor", "truncation"},
       .doc = "Where that init is truncated, in standard deviations."},
      {.path = "model.layers",
       .field = FIELD(model.layers),
       .choices = layer_kind_names(),
       .aliases = {"layer_types", "block_pattern", "layer_pattern", "hybrid_pattern"},
       .item = "layer kind",
       .doc = "The token mixer of each layer by kind: `n_layers` kinds, or a shorter pattern repeated over the "
              "layers (its length divides `n_layers`); empty: attention everywhere."},
      {.path = "model.rope_scaling.type",
       .field = FIELD(model.rope_scaling.type),
       .choices = {"none", "llama3"},
       .aliases = {"rope_type"},
       .doc = "RoPE frequency scaling: `none`, or `llama3` (Llama 3.1's rule for long contexts)."},
      {.path = "model.rope_scaling.factor",
       .field = FIELD(model.rope_scaling.factor),
       .range = above(0),
       .aliases = {"scaling_factor"},
       .doc = "llama3: low frequencies are divided by this."},
      {.path = "model.rope_scaling.low_freq_factor",
       .field = FIELD(model.rope_scaling.low_freq_factor),
       .range = above(0),
       .doc = "llama3: wavelengths above `original_max_position / low_freq_factor` are fully scaled."},
      {.path = "model.rope_scaling.high_freq_factor",
       .field = FIELD(model.rope_scaling.high_freq_factor),
       .range = above(0),
       .doc = "llama3: wavelengths below `original_max_position / high_freq_factor` are kept."},
      {.path = "model.rope_scaling.original_max_position",
       .field = FIELD(model.rope_scaling.original_max_position),
       .range = at_least(1),
       .aliases = {"original_max_position_embeddings"},
       .doc = "llama3: the context the base model was trained for."},

      // Each layer kind's options come here (kind_option_keys).

      {.path = "data.tokenizer",
       .field = FIELD(data.tokenizer),
       .aliases = {"tokenizer_path", "tokenizer_file"},
       .doc = "Tokenizer name or path (see Tokenizers)."},
      {.path = "data.train",
       .field = FIELD(data.train),
       .presence = P::required,
       .aliases = {"train_files", "train_paths", "paths", "files"},
       .doc = "Text files, token shards (`.bin`) or folders of them."},
      {.path = "data.validation",
       .field = FIELD(data.validation),
       .aliases = {"val", "valid", "eval", "validation_files", "eval_paths"},
       .resumable = true,
       .doc = "Validation domains, each a name and its files; each is evaluated and reported "
              "separately."},
      {.path = "data.documents",
       .field = FIELD(data.documents),
       .choices = {"lines", "files"},
       .aliases = {"split", "document_split"},
       .doc = "How a text file splits into documents: `lines` (one per line) or `files`."},
      {.path = "data.verify",
       .field = FIELD(data.verify),
       .choices = {"auto", "always", "never"},
       .aliases = {"verify_shards", "checksum", "check_sha256"},
       .resumable = true,
       .doc = "Token shards against the SHA-256 of their `data prep` manifest: `auto` (once per "
              "file state), `always` (every start) or `never`."},

      {.path = "train.device",
       .field = FIELD(train.device),
       .choices = {"auto", "cpu", "cuda"},
       .resumable = true,
       .doc = "`auto` (a GPU when present), `cpu` or `cuda`."},
      {.path = "train.seed",
       .field = FIELD(train.seed),
       .aliases = {"random_seed"},
       .doc = "Seeds the init and the data order."},
      {.path = "train.batch_size",
       .field = FIELD(train.batch_size),
       .presence = P::required,
       .range = at_least(1),
       .aliases = {"micro_batch_size", "per_device_batch_size", "micro_batch", "batch"},
       .doc = "Sequences per micro-batch."},
      {.path = "train.grad_accum",
       .field = FIELD(train.grad_accum),
       .range = at_least(1),
       .aliases = {"gradient_accumulation_steps", "grad_accumulation", "accumulation_steps"},
       .resumable = true,
       .doc = "Micro-batches per optimizer step."},
      {.path = "train.seq_len",
       .field = FIELD(train.seq_len),
       .presence = P::required,
       .range = at_least(2),
       .aliases = {"sequence_length", "max_seq_len", "context_length", "block_size", "seqlen", "max_sequence_length"},
       .doc = "Tokens per sequence."},
      {.path = "train.steps",
       .field = FIELD(train.steps),
       .presence = P::steps_or_tokens,
       .range = at_least(1),
       .aliases = {"max_steps", "num_steps", "total_steps", "iterations", "max_iters"},
       .resumable = true,
       .doc = "Optimizer steps."},
      {.path = "train.tokens",
       .field = FIELD(train.tokens),
       .presence = P::steps_or_tokens,
       .range = at_least(1),
       .aliases = {"max_tokens", "total_tokens", "token_budget"},
       .resumable = true,
       .doc = "Token budget, converted to steps."},
      {.path = "train.precision",
       .field = FIELD(train.precision),
       .choices = {"fp32", "bf16", "fp8"},
       .aliases = {"dtype", "mixed_precision", "amp"},
       .doc = "GPU compute precision: `bf16` (fp32 master weights and AdamW state, bf16 compute), `fp8` (bf16 plus "
              "the blocks' linears as FP8 GEMMs; compute capability 8.9+; the CPU emulates it) or `fp32`; the CPU "
              "computes in fp32."},
      {.path = "train.threads",
       .field = FIELD(train.threads),
       .range = closed(0, kMaxThreads),
       .aliases = {"num_threads", "omp_threads"},
       .resumable = true,
       .doc = "CPU threads (0: every core); results are bit-reproducible for a fixed thread "
              "count."},
      {.path = "train.loss",
       .field = FIELD(train.loss),
       .range = at_least(0),
       .choices = objective_term_names(),
       .aliases = {"z_loss", "z_loss_weight", "z_loss_multiplier", "loss_weights", "objective"},
       .doc = "The objective: weights of named terms, `ce` (next-token cross-entropy) and `z_loss` (`logsumexp^2`); "
              "a given map replaces the default whole."},
      {.path = "train.trainable",
       .field = FIELD(train.trainable),
       .aliases = {"trainable_parameters", "train_only", "unfrozen"},
       .item = "parameter-name glob",
       .doc = "Parameter-name globs: train only the parameters they match and freeze the rest (empty: train all)."},
      {.path = "train.frozen",
       .field = FIELD(train.frozen),
       .aliases = {"freeze", "frozen_parameters", "frozen_params"},
       .item = "parameter-name glob",
       .doc = "Parameter-name globs to freeze (no gradient, no AdamW state); a glob that matches nothing is an "
              "error."},
      {.path = "train.recompute",
       .field = FIELD(train.recompute),
       .choices = recompute_names(),
       .aliases = {"activation_checkpointing", "gradient_checkpointing"},
       .resumable = true,
       .doc = "Activation recompute: `none`, `selective` (norm, RoPE and SwiGLU outputs rebuilt "
              "in backward) or `block` (each block re-run in backward); the same gradients bit for bit."},
      {.path = "train.grad_reduce",
       .field = FIELD(train.grad_reduce),
       .choices = {"fp32", "bf16"},
       .aliases = {"reduce_dtype", "allreduce_dtype", "grad_reduce_dtype"},
       .resumable = true,
       .doc = "Data parallel: the precision gradients travel in between ranks, `fp32` or `bf16` "
              "(half the bytes)."},
      {.path = "train.grad_bucket_kib",
       .field = FIELD(train.grad_bucket_kib),
       .range = closed(1, 1 << 21),
       .aliases = {"bucket_size", "bucket_cap_mb", "grad_bucket_mb", "bucket_kib"},
       .resumable = true,
       .doc = "Data parallel: KiB of fp32 gradients per all-reduce bucket (16384: 16 MiB)."},
      {.path = "train.zero",
       .field = FIELD(train.zero),
       .range = closed(0, 1),
       .aliases = {"zero_stage", "zero_optimization"},
       .resumable = true,
       .doc = "Data parallel: `1` shards AdamW's moments over the ranks (ZeRO-1); checkpoints "
              "stay whole."},
      {.path = "train.optimizer.lr",
       .field = FIELD(train.optimizer.lr),
       .presence = P::required,
       .range = above(0),
       .aliases = {"learning_rate", "max_lr", "peak_lr"},
       .doc = "Peak learning rate."},
      {.path = "train.optimizer.beta1",
       .field = FIELD(train.optimizer.beta1),
       .range = half_open(0, 1),
       .doc = "AdamW beta1."},
      {.path = "train.optimizer.beta2",
       .field = FIELD(train.optimizer.beta2),
       .range = half_open(0, 1),
       .doc = "AdamW beta2."},
      {.path = "train.optimizer.eps",
       .field = FIELD(train.optimizer.eps),
       .range = above(0),
       .aliases = {"adam_eps", "epsilon"},
       .doc = "AdamW epsilon."},
      {.path = "train.optimizer.weight_decay",
       .field = FIELD(train.optimizer.weight_decay),
       .range = at_least(0),
       .aliases = {"wd"},
       .doc = "Decoupled weight decay (never on embeddings)."},
      {.path = "train.optimizer.clip",
       .field = FIELD(train.optimizer.clip),
       .range = at_least(0),
       .aliases = {"grad_clip", "max_grad_norm", "clip_grad_norm", "gradient_clipping"},
       .doc = "Global gradient-norm clip (0 disables it)."},
      {.path = "train.schedule.type",
       .field = FIELD(train.schedule.type),
       .choices = {"cosine", "linear", "constant"},
       .aliases = {"scheduler", "lr_schedule", "lr_scheduler_type"},
       .doc = "The learning rate after warmup: `cosine`, `linear` or `constant`."},
      {.path = "train.schedule.warmup_steps",
       .field = FIELD(train.schedule.warmup_steps),
       .range = at_least(0),
       .aliases = {"warmup", "warmup_iters", "num_warmup_steps"},
       .doc = "Linear warmup steps."},
      {.path = "train.schedule.final_lr_fraction",
       .field = FIELD(train.schedule.final_lr_fraction),
       .range = closed(0, 1),
       .aliases = {"alpha_f", "min_lr_ratio", "final_lr_ratio"},
       .doc = "The final learning rate as a fraction of the peak."},

      {.path = "eval.every",
       .field = FIELD(eval.every),
       .range = at_least(0),
       .aliases = {"eval_interval", "eval_every", "eval_steps"},
       .resumable = true,
       .doc = "Steps between evaluations (0: only at the end)."},
      {.path = "eval.batches",
       .field = FIELD(eval.batches),
       .range = at_least(1),
       .aliases = {"eval_iters", "eval_batches"},
       .resumable = true,
       .doc = "Batches per validation domain."},

      {.path = "checkpoint.every",
       .field = FIELD(checkpoint.every),
       .range = at_least(0),
       .aliases = {"save_interval", "save_every", "save_steps", "checkpoint_every"},
       .resumable = true,
       .doc = "Steps between checkpoints (0: only at the end)."},
      {.path = "checkpoint.keep_last",
       .field = FIELD(checkpoint.keep_last),
       .range = closed(0, 2147483647),
       .aliases = {"save_total_limit", "keep"},
       .resumable = true,
       .doc = "Checkpoints kept in the run folder (0: all)."},

      {.path = "distill.teacher",
       .field = FIELD(distill.teacher),
       .aliases = {"teacher_model", "teacher_checkpoint", "teacher_path", "teacher_name_or_path"},
       .doc = "The teacher of `fathom distill`, which requires it: `checkpoint:DIR` or `hf:DIR`, whose model the "
              "recipe takes."},
      {.path = "distill.order",
       .field = FIELD(distill.order),
       .aliases = {"layer_order", "ranking", "conversion_order"},
       .item = "order (entropy, sensitivity or a layer index)",
       .doc = "The conversion order: `entropy`, `sensitivity` or a list of layer indices (no repeats), first "
              "converted first."},
      {.path = "distill.layers",
       .field = FIELD(distill.layers),
       .aliases = {"convert", "fractions", "conversion_ratios", "layers_to_convert"},
       .item = "count or fraction",
       .doc = "A count of layers to convert, or fractions in (0, 1] naming the models M_k to keep; required unless "
              "`distill.order` is a list (its length)."},
      {.path = "distill.steps_per_layer",
       .field = FIELD(distill.steps_per_layer),
       .presence = P::derived,
       .range = at_least(1),
       .aliases = {"layer_steps", "iters_per_layer"},
       .doc = "Steps each converted layer trains; by default `train.steps` (or what `train.tokens` gives)."},
      {.path = "distill.loss",
       .field = FIELD(distill.loss),
       .range = at_least(0),
       .choices = {"ce", "logit_kl", "layer_align", "gate_cos"},
       .aliases = {"distill_loss", "loss_weights"},
       .doc = "Weights of `ce`, `logit_kl`, `layer_align` and `gate_cos`; a given map replaces the default whole."},
      {.path = "distill.temperature",
       .field = FIELD(distill.temperature),
       .range = above(0),
       .aliases = {"kd_temperature", "distill_temperature"},
       .doc = "The softmax temperature of `logit_kl` (the term is scaled by T^2)."},
      {.path = "distill.align",
       .field = FIELD(distill.align),
       .choices = {"mse", "kl"},
       .aliases = {"layer_align", "align_loss", "alignment"},
       .doc = "`layer_align` as `mse` or `kl` over the hidden dimension."},
      {.path = "distill.calibration_batches",
       .field = FIELD(distill.calibration_batches),
       .range = at_least(1),
       .aliases = {"calibration", "calib_batches"},
       .doc = "Training batches that `order: entropy` averages over."},

      {.path = "log.every",
       .field = FIELD(log.every),
       .range = at_least(1),
       .aliases = {"log_interval", "logging_steps", "log_every"},
       .resumable = true,
       .doc = "Steps between progress lines and `metrics.jsonl` records."},
      {.path = "log.dir",
       .field = FIELD(log.dir),
       .presence = P::derived,
       .aliases = {"output_dir", "run_dir", "save_folder", "out_dir"},
       .resumable = true,
       .doc = "The run folder; by default `runs/<name>`."},
  };
}

#undef FIELD

// Every valid path, keys and sections, with the names a user might type for it.
struct Candidate {
  std::string path;
  std::vector<std::string> names;
};

std::vector<Candidate> suggestion_candidates() {
  std::vector<Candidate> candidates;
  for (const RecipeKey& key : recipe_keys()) {
    for (std::string_view section = parent_key_path(key.path); !section.empty(); section = parent_key_path(section)) {
      const bool seen =
          std::any_of(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.path == section; });
      if (!seen) candidates.push_back({std::string(section), {std::string(last_key_name(section))}});
    }
    Candidate candidate{key.path, {std::string(last_key_name(key.path))}};
    candidate.names.insert(candidate.names.end(), key.aliases.begin(), key.aliases.end());
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

}  // namespace

std::string_view parent_key_path(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::string_view last_key_name(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

bool Range::contains(double value) const {
  if (low && (low->inclusive ? value < low->value : value <= low->value)) return false;
  if (high && (high->inclusive ? value > high->value : value >= high->value)) return false;
  return true;
}

std::string Range::describe() const {
  if (low && high) {
    return "in " + std::string(low->inclusive ? "[" : "(") + format_number(low->value) + ", " +
           format_number(high->value) + (high->inclusive ? "]" : ")");
  }
  if (low) return (low->inclusive ? ">= " : "> ") + format_number(low->value);
  if (high) return (high->inclusive ? "<= " : "< ") + format_number(high->value);
  return "";
}

namespace {
// "paths", "counts or fractions", "orders (entropy, sensitivity or a layer index)": each alternative of
// the name takes an s, a parenthesised note after it none.
std::string plural(const std::string& item) {
  const std::size_t note = item.find(" (");
  const std::string name = item.substr(0, note);
  std::string out;
  std::size_t start = 0;
  for (std::size_t or_at; (or_at = name.find(" or ", start)) != std::string::npos; start = or_at + 4) {
    out += name.substr(start, or_at - start) + "s or ";
  }
  out += name.substr(start) + "s";
  return note == std::string::npos ? out : out + item.substr(note);
}
}  // namespace

std::string RecipeKey::describe_type() const {
  const bool names_values =
      std::visit(Overloaded{[]<typename Value>(Value& (*)(Recipe&)) { return std::is_same_v<Value, std::string>; },
                            [](const KindOption* option) { return option->type == KindOption::Type::choice; }},
                 field);
  if (names_values && !choices.empty()) return "one of " + join_names(choices);
  struct Describe {
    std::string operator()(int64_t& (*)(Recipe&)) const { return "an integer"; }
    std::string operator()(uint64_t& (*)(Recipe&)) const { return "a non-negative integer"; }
    std::string operator()(double& (*)(Recipe&)) const { return "a number"; }
    std::string operator()(bool& (*)(Recipe&)) const { return "true or false"; }
    std::string operator()(std::string& (*)(Recipe&)) const { return "a string"; }
    std::string operator()(StringList& (*)(Recipe&)) const { return "a list of " + plural(item); }
    std::string operator()(PathsByDomain& (*)(Recipe&)) const { return "a mapping of domain name -> list of paths"; }
    std::string operator()(WeightsByName& (*)(Recipe&)) const { return "a mapping of name -> number"; }
    std::string operator()(const KindOption* option) const {
      return option->type == KindOption::Type::integer ? "an integer" : "a number";  // a choice has choices
    }
    const std::string& item;
  };
  return std::visit(Describe{item}, field);
}

namespace {

RecipeKey option_key(const KindOption& option) {
  RecipeKey key{.path = option.path, .field = &option, .choices = option.choices, .aliases = option.aliases};
  if (option.at_least) key.range.low = Bound{*option.at_least, true};
  if (option.at_most) key.range.high = Bound{*option.at_most, true};
  key.doc = option.doc;
  key.resumable = option.resumable;
  return key;
}

// The schema with every layer kind's options before the data section.
std::vector<RecipeKey> schema_with_kind_options() {
  std::vector<RecipeKey> keys = build_schema();
  std::vector<RecipeKey> options;
  for (const LayerKind& kind : layer_kinds())
    for (const KindOption& option : kind.options) options.push_back(option_key(option));
  const auto data =
      std::find_if(keys.begin(), keys.end(), [](const RecipeKey& key) { return key.path.starts_with("data."); });
  keys.insert(data, options.begin(), options.end());
  return keys;
}

}  // namespace

const std::vector<RecipeKey>& recipe_keys() {
  // Rebuilt when the layer kinds change after the first use (a kind's options, loss terms and name
  // join or leave).
  static std::vector<RecipeKey> keys;
  static uint64_t kinds_version = 0;
  if (keys.empty() || kinds_version != layer_kinds_version()) {
    keys = schema_with_kind_options();
    kinds_version = layer_kinds_version();
  }
  return keys;
}

const RecipeKey* find_recipe_key(std::string_view path) {
  for (const RecipeKey& key : recipe_keys()) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

bool is_recipe_section(std::string_view path) {
  if (path.empty()) return true;
  for (const RecipeKey& key : recipe_keys()) {
    if (key.path.size() > path.size() && key.path.starts_with(path) && key.path[path.size()] == '.') return true;
  }
  return false;
}

std::vector<std::string> recipe_section_entries(std::string_view section) {
  std::vector<std::string> entries;
  for (const RecipeKey& key : recipe_keys()) {
    std::string_view rest = key.path;
    if (!section.empty()) {
      if (!(rest.size() > section.size() && rest.starts_with(section) && rest[section.size()] == '.')) continue;
      rest.remove_prefix(section.size() + 1);
    }
    std::string entry(rest.substr(0, rest.find('.')));
    if (std::find(entries.begin(), entries.end(), entry) == entries.end()) entries.push_back(entry);
  }
  return entries;
}

std::string unknown_key_message(std::string_view path) {
  // The deepest valid section the unknown key was written in.
  std::string_view section = parent_key_path(path);
  while (!is_recipe_section(section)) section = parent_key_path(section);
  const std::string_view typed_name = last_key_name(path);

  // Rebuilt with the schema when the layer kinds change (their options are candidates too).
  static std::vector<Candidate> candidates;
  static uint64_t kinds_version = 0;
  if (candidates.empty() || kinds_version != layer_kinds_version()) {
    candidates = suggestion_candidates();
    kinds_version = layer_kinds_version();
  }
  const Candidate* best = nullptr;
  std::size_t best_distance = 0;
  bool best_in_section = false;
  for (const Candidate& candidate : candidates) {
    // The section the key was written in, and those around it, are no suggestion for a key inside it.
    const bool encloses = candidate.path.size() <= section.size() && section.starts_with(candidate.path) &&
                          (section.size() == candidate.path.size() || section[candidate.path.size()] == '.');
    if (encloses) continue;
    std::size_t distance = edit_distance(path, candidate.path);
    for (const std::string& name : candidate.names) distance = std::min(distance, edit_distance(typed_name, name));
    if (distance > suggestion_threshold(typed_name)) continue;
    const bool in_section = parent_key_path(candidate.path) == section;
    if (!best || distance < best_distance || (distance == best_distance && in_section && !best_in_section)) {
      best = &candidate;
      best_distance = distance;
      best_in_section = in_section;
    }
  }
  std::string message = "unknown key '" + std::string(path) + "'";
  if (best) return message + "; did you mean '" + best->path + "'?";
  const std::string where = section.empty() ? "at the top level" : "in '" + std::string(section) + "'";
  return message + "; valid keys " + where + ": " + join_names(recipe_section_entries(section));
}

namespace {
std::string quoted(const std::string& text) { return "'" + text + "'"; }
std::string quoted_list(const StringList& list) {
  std::string out = "[";
  for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + quoted(list[i]);
  return out + "]";
}
}  // namespace

std::string describe_value(const RecipeKey& key, const Recipe& recipe) {
  Recipe values = recipe;  // the accessors take a mutable Recipe
  struct Describe {
    Recipe& r;
    std::string operator()(int64_t& (*f)(Recipe&)) const { return std::to_string(f(r)); }
    std::string operator()(uint64_t& (*f)(Recipe&)) const { return std::to_string(f(r)); }
    std::string operator()(double& (*f)(Recipe&)) const { return format_number(f(r)); }
    std::string operator()(bool& (*f)(Recipe&)) const { return f(r) ? "true" : "false"; }
    std::string operator()(std::string& (*f)(Recipe&)) const { return quoted(f(r)); }
    std::string operator()(StringList& (*f)(Recipe&)) const { return quoted_list(f(r)); }
    std::string operator()(PathsByDomain& (*f)(Recipe&)) const {
      std::string out = "{";
      for (const auto& [domain, paths] : f(r)) out += (out.size() > 1 ? ", " : "") + domain + ": " + quoted_list(paths);
      return out + "}";
    }
    std::string operator()(WeightsByName& (*f)(Recipe&)) const {
      std::string out = "{";
      for (const auto& [name, weight] : f(r)) out += (out.size() > 1 ? ", " : "") + name + ": " + format_number(weight);
      return out + "}";
    }
    std::string operator()(const KindOption* option) const {
      const double value = option->get(r.model);
      switch (option->type) {
        case KindOption::Type::integer:
          return std::to_string(int64_t(value));
        case KindOption::Type::number:
          return format_number(value);
        case KindOption::Type::choice:
          return choice(size_t(value));
      }
      return "";
    }
    std::string choice(size_t index) const { return quoted(key.choices[index]); }
    const RecipeKey& key;
  };
  return std::visit(Describe{values, key}, key.field);
}

bool same_value(const RecipeKey& key, const Recipe& a, const Recipe& b) {
  Recipe x = a, y = b;  // the accessors take a mutable Recipe
  return std::visit(Overloaded{[&]<typename Value>(Value& (*field)(Recipe&)) { return field(x) == field(y); },
                               [&](const KindOption* option) { return option->get(x.model) == option->get(y.model); }},
                    key.field);
}

std::string format_number(double value) {
  // Plain digits where people write them so ("500000", "0.0003"), exponents for the very small
  // or large ("1e-05"); either way the shortest digits that read back exactly.
  const double magnitude = std::abs(value);
  const bool plain = magnitude == 0 || (magnitude >= 1e-4 && magnitude < 1e16);
  char buffer[400];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value,
                                    plain ? std::chars_format::fixed : std::chars_format::scientific);
  FATHOM_CHECK(result.ec == std::errc(), "cannot format number ", value);
  return std::string(buffer, result.ptr);
}

}  // namespace fathom
