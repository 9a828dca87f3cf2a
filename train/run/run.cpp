#include "train/run/run.h"

#include <cstdio>
#include <iostream>

#include "autograd/grad_mode.h"
#include "core/file_io.h"
#include "core/sha256.h"
#include "distributed/world.h"
#include "kernels/fp8/fp8.h"
#include "train/checkpoint/checkpoint.h"
#include "train/cli/device_select.h"
#include "train/recipe/resume_check.h"
#include "train/run/model_source.h"
#include "train/run/parameter_selection.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/runtime/backend.h"
#endif

namespace fathom {

namespace fs = std::filesystem;

namespace {

// What the run reads, which --overwrite must never remove with the old run.
std::vector<fs::path> run_sources(const Recipe& r, const RunOptions& options) {
  std::vector<fs::path> sources{options.recipe_file, r.data.tokenizer};
  sources.insert(sources.end(), r.data.train.begin(), r.data.train.end());
  for (const auto& [domain, paths] : r.data.validation) sources.insert(sources.end(), paths.begin(), paths.end());
  if (!r.model_init_from.empty()) sources.push_back(parse_model_source(r.model_init_from).path);
  std::erase_if(sources, [](const fs::path& p) {
    std::error_code error;
    return p.empty() || !fs::exists(p, error);  // tokenizer names ("bytes") are no paths
  });
  return sources;
}

// Every rank must train the same recipe (a launcher given different arguments per rank would
// otherwise mix two runs): rank 0's digest of the resolved recipe against each rank's own.
void check_same_recipe(Communicator& comm, const std::string& recipe_yaml) {
  if (comm.world() == 1) return;
  const std::string mine = sha256_hex(recipe_yaml);
  std::string rank0 = mine;
  comm.broadcast_bytes(rank0.data(), int64_t(rank0.size()), 0);
  FATHOM_CHECK(rank0 == mine, "rank ", comm.rank(), "'s recipe differs from rank 0's (sha256 ", mine.substr(0, 12),
               " against ", rank0.substr(0, 12), "); start every rank with the same recipe file and --set values");
}

}  // namespace

TrainingRun::TrainingRun(const Recipe& recipe, const RunOptions& options)
    : recipe_(recipe), options_(options), objective_(Objective::for_model(recipe.train.loss, recipe.model)) {
  join_world();
  plan_memory();
  check_run_folder();
  data_ = open_run_data(recipe_, DataUse::training);
  loader_ = std::make_unique<TokenLoader>(data_.train, recipe_.train.batch_size, recipe_.train.seq_len,
                                          recipe_.train.seed, LoaderShard{comm_->rank(), comm_->world()});
  build_model();
  build_optimizer();
  state_.seed = recipe_.train.seed;
  if (options_.resume) restore_checkpoint();
  recipe_yaml_ = recipe_to_yaml(recipe_);
  if (writes()) {
    folder_->open();
    write_file_atomically(run_dir_ / "recipe.yaml", recipe_yaml_);
    metrics_ = std::make_unique<MetricsLog>(run_dir_, state_.step);
  }
}

void TrainingRun::join_world() {
  const Recipe& r = recipe_;
  restrict_gpus_to_local_rank(launch_environment());
  device_ = resolve_device(r.train.device);
  comm_ = &join_job(device_);
  check_same_recipe(*comm_, recipe_to_yaml(r));
  threads_ = configure_threads(r.train.threads);
  tokens_per_step_ = r.train.batch_size * r.train.seq_len * r.train.grad_accum * comm_->world();
  // A token budget counts every rank's tokens: the recipe derived its steps for one process.
  if (r.train.tokens > 0)
    recipe_.train.steps = r.train.tokens / tokens_per_step_ + (r.train.tokens % tokens_per_step_ != 0);
}

void TrainingRun::plan_memory() {
  const Recipe& r = recipe_;
  mixed_ = uses_mixed_precision(r.train.precision, device_);
  // Before anything is written: FP8 GEMMs need FP8 tensor cores (the CPU emulates them anywhere).
  if (uses_fp8_linears(r.train.precision)) check_fp8_device(device_);
  // Which parameters train, from the layers' own report of their names (no model is built yet).
  const std::vector<std::pair<std::string, Shape>> shapes = decoder_parameter_shapes(r.model);
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  frozen_ = frozen_parameters(names, r.train.trainable, r.train.frozen);
  int64_t frozen_elements = 0;
  for (const auto& [name, shape] : shapes)
    if (frozen_.count(name)) frozen_elements += shape.numel();
  // One rank's plan: ZeRO-1 shards the moments, and the reduction keeps buffers of its own.
  const MemoryPlanInput plan_input{r.model,
                                   r.train.batch_size,
                                   r.train.seq_len,
                                   mixed_,
                                   parse_recompute(r.train.recompute),
                                   frozen_elements,
                                   comm_->world(),
                                   r.train.zero,
                                   r.train.grad_reduce == "bf16",
                                   options_.teacher_memory};
  memory_plan_ = plan_training_memory(plan_input);
#ifdef FATHOM_WITH_CUDA
  // Before anything is written or allocated: a run that cannot fit fails now, not mid-step.
  if (device_.is_cuda())
    check_memory_plan_fits(memory_plan_, cuda::device_memory(device_.index).free, plan_input, device_.str());
#endif
}

void TrainingRun::check_run_folder() {
  const Recipe& r = recipe_;
  run_dir_ = r.log.dir;
  // Checks only: the folder is made (or an old run replaced) once everything below is valid. Rank 0
  // alone owns it; the others read a resumed run's checkpoint from it (a shared file system).
  if (writes())
    folder_ = std::make_unique<RunFolder>(
        run_dir_, RunFolderRequest{options_.resume, options_.overwrite, run_sources(r, options_)});
  else if (options_.resume)
    FATHOM_CHECK(latest_checkpoint(run_dir_), "--resume: rank ", comm_->rank(), " finds no checkpoint in ",
                 run_dir_.string(), "; every machine must see the run folder (a shared file system)");
  if (options_.resume) {
    // Before the data is read: a changed run is the first thing to report.
    const fs::path saved = *latest_checkpoint(run_dir_) / kCheckpointRecipeFile;
    check_resume_compatible(parse_saved_recipe(read_file(saved), saved.string()), r, saved.string());
  }
}

void TrainingRun::build_model() {
  const Recipe& r = recipe_;
  model_ = std::make_unique<Decoder>(r.model);
  model_->set_recompute(parse_recompute(r.train.recompute));
  if (uses_fp8_linears(r.train.precision)) fp8_linears_ = use_fp8_linears(*model_);
  arena_ = std::make_unique<ParameterArena>(*model_, device_, frozen_);
  // The bf16 weights the layers read; initialise/load below fill it, the optimizer keeps it current.
  if (mixed_) arena_->enable_compute_copy(DType::bf16);
  if (!r.model_init_from.empty() && !options_.resume) {
    // Existing weights instead of a random init; a resumed run gets its own from the checkpoint.
    const ModelSource source = parse_model_source(r.model_init_from);
    arena_->load(read_model_source_weights(source, r.model), "model.init_from " + r.model_init_from);
  } else {
    arena_->initialise(r.train.seed);
    if (options_.start_weights && !options_.resume) {
      TensorMap weights;
      for (const auto& [name, value] : arena_->named_values()) weights.emplace_back(name, value.clone());
      options_.start_weights(weights);
      arena_->load(weights, "the run's starting weights");
    }
  }
}

void TrainingRun::build_optimizer() {
  const Recipe& r = recipe_;
  // Every rank initialises (or loads) the same weights from the same seed and files.
  data_parallel_ = std::make_unique<DataParallel>(
      *comm_, *arena_,
      DataParallelConfig{.wire = r.train.grad_reduce == "bf16" ? DType::bf16 : DType::f32,
                         .zero = int(r.train.zero),
                         .bucket_elements = r.train.grad_bucket_kib * 1024 / int64_t(sizeof(float))});
  optimizer_ = std::make_unique<AdamW>(*arena_,
                                       AdamWConfig{r.train.optimizer.beta1, r.train.optimizer.beta2,
                                                   r.train.optimizer.eps, r.train.optimizer.weight_decay},
                                       data_parallel_->optimizer_shard());
  schedule_ = Schedule{r.train.schedule.type, r.train.optimizer.lr, r.train.schedule.warmup_steps, r.train.steps,
                       r.train.schedule.final_lr_fraction};
}

void TrainingRun::restore_checkpoint() {
  const fs::path ckpt_dir = *latest_checkpoint(run_dir_);
  const CheckpointData ckpt = load_checkpoint(ckpt_dir);
  arena_->load(ckpt.model, (ckpt_dir / "model.safetensors").string());
  optimizer_->load_state(ckpt.optimizer, (ckpt_dir / "optimizer.safetensors").string());
  state_ = run_state_from_json(ckpt.state_json, (ckpt_dir / "state.json").string());
  loader_->restore(state_.loader);
}

StepResult TrainingRun::step() {
  StepSettings settings{.step = state_.step + 1,
                        .lr = lr(),
                        .clip = recipe_.train.optimizer.clip,
                        .objective = objective_,
                        .grad_accum = recipe_.train.grad_accum,
                        .forward = options_.forward,
                        .extra_losses = options_.extra_losses,
                        .data_parallel = data_parallel_.get()};
  settings.failure_note = [this] {
    const auto last = latest_checkpoint(folder());
    return "Last checkpoint: " + (last ? last->string() : std::string("none"));
  };
  const StepResult result = train_step(
      *model_, *arena_, *optimizer_, [this] { return loader_->next_batch(); }, device_, settings);
  ++state_.step;
  state_.tokens_seen += tokens_per_step_;
  return result;
}

fs::path TrainingRun::save() {
  state_.loader = loader_->state();
  // ZeRO-1 gathers the moments: a collective every rank joins. The file is the single-process one.
  TensorMap optimizer_state = data_parallel_->optimizer_state(*optimizer_);
  if (!writes()) {
    comm_->barrier();  // rank 0 has committed the checkpoint (or ended the job)
    return folder() / "checkpoints" / checkpoint_folder_name(state_.step);
  }
  fs::path dir;
  try {
    dir = save_checkpoint(
        folder(), state_.step,
        CheckpointData{arena_->named_values(), std::move(optimizer_state), run_state_to_json(state_), recipe_yaml_},
        int(recipe_.checkpoint.keep_last));
  } catch (const Error& e) {
    const auto previous = latest_checkpoint(folder());
    FATHOM_FAIL("saving the checkpoint of step ", state_.step, " failed: ", e.message(), "; ",
                previous ? "the latest checkpoint on disk, " + previous->string() +
                               ", is intact (train --resume continues from it)"
                         : std::string("no earlier checkpoint exists"),
                "; free disk space or fix the folder's permissions");
  }
  folder_->commit();  // the new run has a checkpoint: a run it replaced can go
  comm_->barrier();
  log("checkpoint " + dir.string());
  return dir;
}

std::map<std::string, EvalResult> TrainingRun::evaluate() { return evaluate_domains(nullptr); }

bool TrainingRun::evaluation_due(int64_t step) const {
  return step > 0 && ((recipe_.eval.every > 0 && step % recipe_.eval.every == 0) || step == recipe_.train.steps);
}

std::map<std::string, EvalResult> TrainingRun::evaluate_missing() {
  if (!evaluation_due(state_.step)) return {};
  // Rank 0 reads the log; every rank learns its answer, since each evaluates a share of the batches.
  std::set<std::string> missing;
  for (const auto& [domain, source] : data_.validation)
    if (any_rank(writes() && !metrics_->holds("eval", state_.step, "loss/" + domain))) missing.insert(domain);
  if (missing.empty()) return {};
  log("the evaluation of step " + std::to_string(state_.step) +
      " is missing from metrics.jsonl (the run stopped between its checkpoint and its evaluation): evaluating now");
  return evaluate_domains(&missing);
}

std::map<std::string, EvalResult> TrainingRun::evaluate_domains(const std::set<std::string>* domains) {
  NoGrad no_grad;
  std::map<std::string, EvalResult> results;
  // Every rank holds the same weights: each evaluates its share of the batches, and each gets the
  // whole result; rank 0 records it.
  for (const auto& [domain, source] : data_.validation) {
    if (domains && !domains->count(domain)) continue;
    const EvalResult e = fathom::evaluate(*model_, source, recipe_.train.batch_size, recipe_.train.seq_len,
                                          recipe_.eval.batches, device_, /*as_decoded=*/false, comm_);
    results[domain] = e;
    if (!writes()) continue;
    std::vector<std::pair<std::string, double>> fields{{"loss/" + domain, e.loss}, {"ppl/" + domain, e.perplexity}};
    for (auto& field : layer_metrics(e, domain)) fields.push_back(std::move(field));
    metrics_->write("eval", state_.step, fields);
    log("eval " + domain + " @ step " + std::to_string(state_.step) + " | " + format_eval(e));
    for (const std::string& line : layer_metric_lines(e)) log(line);
  }
  return results;
}

bool TrainingRun::any_rank(bool flag) {
  if (comm_->world() == 1) return flag;
  double count = flag ? 1.0 : 0.0;
  comm_->all_reduce_sum(&count, 1);
  return count > 0;
}

void TrainingRun::log(const std::string& line) const {
  if (!options_.quiet && writes()) std::cout << line << std::endl;
}

std::string TrainingRun::describe() const {
  const Recipe& r = recipe_;
  std::string text =
      "fathom train '" + r.name + "': " + std::to_string(arena_->parameter_count()) + " parameters" +
      (frozen_.empty() ? "" : " (" + std::to_string(arena_->trainable_parameter_count()) + " trainable)") + " on " +
      device_.str() + " (" + std::to_string(threads_) + " threads), " + std::to_string(r.train.steps) + " steps of " +
      std::to_string(tokens_per_step_) + " tokens" +
      (options_.resume ? ", resumed at step " + std::to_string(state_.step) : "");
  std::string precision = mixed_ ? "bf16 (fp32 master weights, gradients and optimizer state)" : "fp32";
  if (device_.is_cpu() && r.train.precision == "bf16") precision += " (train.precision bf16 applies to GPUs)";
  if (uses_fp8_linears(r.train.precision)) {
    precision +=
        std::string(device_.is_cpu() ? ", FP8 emulation (e4m3/e5m2 rounding, f32 GEMMs) of " : ", FP8 GEMMs in ") +
        std::to_string(fp8_linears_.fp8.size()) + " linears (e4m3 weights and activations, e5m2 gradients, " +
        "current per-tensor scaling; the LM head and MoD's routers in bf16)";
    if (!fp8_linears_.kept.empty())
      precision += "; " + std::to_string(fp8_linears_.kept.size()) + " linears with a width not a multiple of 16 in " +
                   (mixed_ ? "bf16" : "fp32") + ", e.g. " + fp8_linears_.kept.front();
  }
  if (!mixed_ && device_.is_cuda() && r.model.options.get<MoDAConfig>().enabled())
    precision += ", except MoDA's attention (bf16 q, k, v and depth stream, fp32 accumulation)";
  std::string plan_text = memory_plan_.describe();
  plan_text.pop_back();  // the caller ends the line
  if (comm_->world() > 1) {
    text += "\ndata parallel over " + std::to_string(comm_->world()) + " ranks (" + comm_->backend_name() +
            "): global batch " + std::to_string(r.train.batch_size * r.train.grad_accum * comm_->world()) +
            " sequences, gradients reduced in " + r.train.grad_reduce + ", ZeRO stage " + std::to_string(r.train.zero) +
            ": optimizer moments " + std::to_string(data_parallel_->optimizer_bytes_per_rank() >> 10) + " KiB per rank";
    if (r.train.zero == 0)
      text += "; " + std::to_string(data_parallel_->bucket_count()) + " buckets of " +
              std::to_string(r.train.grad_bucket_kib) + " KiB, each as soon as backward has finished it";
  }
  text += "\nprecision " + precision + ", recompute " + r.train.recompute + "; memory plan (estimate):\n" + plan_text;
  if (r.model.options.get<MoDAConfig>().enabled())
    text += "\nMoDA " + name_of(r.model.options.get<MoDAConfig>().variant) + ": depth KV cache " +
            std::to_string(model_->depth_cache_bytes(r.train.batch_size, r.train.seq_len, device_) >> 10) +
            " KiB per micro-batch";
  return text;
}

}  // namespace fathom
