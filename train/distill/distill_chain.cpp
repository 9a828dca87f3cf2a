#include "train/distill/distill_chain.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/allocator.h"
#include "core/error.h"
#include "core/file_io.h"
#include "distributed/world.h"
#include "layers/dsla.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/run_state.h"
#include "train/cli/device_select.h"
#include "train/distill/distill_config.h"
#include "train/distill/distill_init.h"
#include "train/distill/distill_objective.h"
#include "train/distill/distill_order.h"
#include "train/distill/distill_teacher.h"
#include "train/measure/memory_plan.h"
#include "train/measure/metrics_log.h"
#include "train/recipe/resume_check.h"
#include "train/run/run.h"
#include "train/run/run_loop.h"
#include "train/run/stop_signal.h"

namespace fathom {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

fs::path model_folder(const fs::path& chain, int64_t k) { return chain / ("M_" + std::to_string(k)); }

// Where a finished model's measures (and the teacher's, in the chain's folder) are recorded.
constexpr const char* kMeasuresFile = "measures.json";
constexpr const char* kTeacherMeasuresFile = "teacher_measures.json";

double weight_of(const Recipe::Distill& distill, const std::string& term) {
  const auto it = distill.loss.find(term);
  return it == distill.loss.end() ? 0.0 : it->second;
}

// The teacher as the memory plan counts it: loaded before each layer's run starts.
TeacherMemoryInput teacher_memory(const Teacher& teacher, const Recipe::Distill& distill) {
  TeacherMemoryInput t;
  t.model = teacher.decoder().config();
  t.bf16 = teacher.activation_dtype() == DType::bf16;
  t.logits = weight_of(distill, "logit_kl") > 0;
  t.layer_output = weight_of(distill, "layer_align") > 0;
  t.resident = true;
  return t;
}

// The step of a run folder's latest checkpoint; nullopt when it has none.
std::optional<int64_t> saved_step(const fs::path& folder) {
  const std::optional<fs::path> latest = latest_checkpoint(folder);
  if (!latest) return std::nullopt;
  const fs::path state = *latest / "state.json";
  return run_state_from_json(read_file(state), state.string()).step;
}

std::string term_line(const StepResult& step) {
  std::string line;
  for (const auto& [name, value] : step.terms) {
    if (name == "z_loss") continue;
    char text[64];
    std::snprintf(text, sizeof text, " | %s %.5f", name.c_str(), value);
    line += text;
  }
  return line;
}

// The chain's folder: new unless --resume, which needs the one a distillation started.
void open_chain_folder(const fs::path& folder, bool resume) {
  std::error_code error;
  const bool exists = fs::exists(folder, error);
  if (resume) {
    FATHOM_CHECK(exists && fs::exists(folder / "recipe.yaml"), "distill --resume: '", folder.string(),
                 "' holds no distillation to continue; run without --resume to start one");
    return;
  }
  FATHOM_CHECK(!exists || fs::is_empty(folder, error), "distill: the run folder '", folder.string(),
               "' exists; pass --resume to continue it, or set log.dir to a new folder");
  fs::create_directories(folder);
}

// An intermediate model (a k that distill.layers did not name) is needed only to start the next one:
// once that has finished, its checkpoints go (by rank 0, which owns the files). Its recipe, metrics
// and measures stay, so the table keeps its row and --resume reads it back instead of training it
// again. Called again on resume, so a release cut short by a crash completes.
void release_finished_intermediate(std::vector<DistilledModel>& models, bool writes) {
  if (models.size() < 2) return;
  DistilledModel& previous = models[models.size() - 2];
  if (previous.named || previous.checkpoint.empty()) return;
  if (writes) remove_checkpoints(previous.checkpoint);
  previous.checkpoint.clear();
}

// A chained distillation: the layers ranked, then one TrainingRun per layer through the run loop
// (train/run/run_loop.h), each measured when it finishes. Every rank of a data-parallel job runs
// the chain; rank 0 alone writes its files and console lines and measures decoding (only it
// reports), and the ranks meet at each layer's start, so that all decide about it from the same files.
class Chain {
 public:
  Chain(const Recipe& recipe, const DistillOptions& options)
      : recipe_(recipe),
        options_(options),
        plan_(distill_plan(recipe)),
        folder_(recipe.log.dir),
        S_(recipe.distill.steps_per_layer) {}

  DistillResult run() {
    open();
    measure_teacher();
    std::string order_text;
    for (int64_t layer : result_.order) order_text += (order_text.empty() ? "" : ", ") + std::to_string(layer);
    log("fathom distill '" + recipe_.name + "': " + std::to_string(plan_.count) + " of " +
        std::to_string(recipe_.model.n_layers) + " layers to dsla, in order [" + order_text + "], " +
        std::to_string(S_) + " steps each, on " + device_.str());
    start_ = Clock::now();
    for (int64_t k = 1; k <= plan_.count; ++k)
      if (!run_layer(k)) return std::move(result_);
    log("distill: table in " + (folder_ / "distill.md").string());
    return std::move(result_);
  }

 private:
  bool writes() const { return comm_->rank() == 0; }
  void log(const std::string& line) const {
    if (!options_.quiet && writes()) std::printf("%s\n", line.c_str()), std::fflush(stdout);
  }
  int64_t layer_of(int64_t k) const { return result_.order[size_t(k - 1)]; }
  std::string layer_name(int64_t k) const {
    return "layer " + std::to_string(k) + " of " + std::to_string(plan_.count) + ": model.layers." +
           std::to_string(layer_of(k));
  }

  // Device and communicator (a rank keeps its own GPU before CUDA starts), the chain's folder and
  // recipe, the teacher, the data and the order of the layers.
  void open() {
    restrict_gpus_to_local_rank(launch_environment());
    device_ = resolve_device(recipe_.train.device);
    comm_ = &join_job(device_);
    if (writes()) {
      open_chain_folder(folder_, options_.resume);
      if (options_.resume) {
        // The chain continues only as it started: same teacher, order, loss, data and model.
        const fs::path saved = folder_ / "recipe.yaml";
        check_resume_compatible(parse_saved_recipe(read_file(saved), saved.string()), recipe_, saved.string());
      }
      write_file_atomically(folder_ / "recipe.yaml", recipe_to_yaml(recipe_));
    }
    comm_->barrier();  // the folder is there (an error on rank 0 has ended every rank)
    teacher_ = std::make_unique<Teacher>(recipe_.distill.teacher, device_,
                                         uses_mixed_precision(recipe_.train.precision, device_));
    data_ = open_run_data(recipe_, DataUse::training);
    const DistillRanking ranking = rank_layers(recipe_, plan_, *teacher_, data_);
    if (writes()) write_ranking(ranking, folder_);
    result_.folder = folder_;
    for (int64_t k = 0; k < plan_.count; ++k) result_.order.push_back(ranking.ranked[size_t(k)].layer);
    for (const auto& [domain, source] : data_.validation) domains_.push_back(domain);
  }

  // Measured once per chain: a resumed chain reads the teacher's results back.
  void measure_teacher() {
    if (!writes()) return;
    ModelMeasures& measures = result_.teacher;
    if (const auto recorded = read_measures(folder_ / kTeacherMeasuresFile, recipe_.eval.batches, domains_)) {
      measures = *recorded;
      return;
    }
    for (const auto& [domain, source] : data_.validation)
      measures.validation[domain] = evaluate(teacher_->decoder(), source, recipe_.train.batch_size,
                                             recipe_.train.seq_len, recipe_.eval.batches, device_);
    const ModelMeasures decoding = measure_decoding(teacher_->decoder(), teacher_->activation_dtype(), device_);
    measures.kv_bytes_per_1k_tokens = decoding.kv_bytes_per_1k_tokens;
    measures.decode_tokens_per_second = decoding.decode_tokens_per_second;
    write_measures(folder_ / kTeacherMeasuresFile, measures, recipe_.eval.batches);
    result_.teacher_measured = true;
  }

  // M_k before its training: the layers it converts and whether distill.layers names it.
  DistilledModel model_entry(int64_t k) const {
    DistilledModel model;
    model.k = k;
    model.layers.assign(result_.order.begin(), result_.order.begin() + k);
    model.fraction = double(k) / double(recipe_.model.n_layers);
    model.named = std::find(plan_.named_models.begin(), plan_.named_models.end(), k) != plan_.named_models.end();
    model.checkpoint = model_folder(folder_, k);
    return model;
  }

  // Layer k, read back or trained and measured; false when the chain stopped in it.
  bool run_layer(int64_t k) {
    comm_->barrier();
    const fs::path dir = model_folder(folder_, k);
    const std::optional<int64_t> saved = saved_step(dir);
    DistilledModel model = model_entry(k);
    if (read_back(model, saved)) {
      keep(std::move(model));
      return true;
    }
    // A run that saved nothing holds nothing to keep (it stopped before its first checkpoint).
    if (!saved && writes() && fs::exists(dir)) fs::remove_all(dir);
    // Layer k starts from M_{k-1} (the teacher for k = 1) with the new layer's gates initialised.
    std::string source_name = "distill.teacher";
    TensorMap source = saved ? TensorMap{} : starting_weights(k, source_name);
    const Clock::time_point layer_start = Clock::now();
    if (device_.is_cuda()) allocator_for(device_).reset_peak(device_);
    TrainingRun run(converted_layer_recipe(recipe_, model.layers, dir),
                    layer_run_options(k, saved.has_value(), source, source_name));
    source.clear();
    log(layer_name(k) + " -> dsla, " + std::to_string(run.parameters().trainable_parameter_count()) + " of " +
        std::to_string(run.parameters().parameter_count()) + " parameters train" +
        (saved ? ", resumed at step " + std::to_string(*saved) : ""));
    const LoopOutcome outcome = train_layer(run, k);
    result_.steps_done += outcome.steps_taken;
    if (outcome.end != LoopEnd::finished) {
      // The step budget may have run out at the end of the previous layer: this one saved nothing.
      stop(outcome.steps_taken == 0
               ? "distill stopped before layer " + std::to_string(k)
               : "distill stopped at layer " + std::to_string(k) + " step " + std::to_string(run.state().step));
      return false;
    }
    // Its training's cost, before the measuring adds to either.
    measure_layer(run, model, std::chrono::duration<double>(Clock::now() - layer_start).count());
    keep(std::move(model));
    return true;
  }

  // A model finished and measured before (its measures are written only after its last step): its
  // recorded results, without building its run again. An intermediate one may have no checkpoint left.
  bool read_back(DistilledModel& model, const std::optional<int64_t>& saved) const {
    if (!(saved == S_ || (!saved && !model.named))) return false;
    const fs::path file = model_folder(folder_, model.k) / kMeasuresFile;
    const auto recorded = read_measures(file, recipe_.eval.batches, domains_);
    if (!recorded) return false;
    model.measures = *recorded;
    if (!saved) model.checkpoint.clear();
    log(layer_name(model.k) + " finished before; its measures are read from " + file.string());
    return true;
  }

  TensorMap starting_weights(int64_t k, std::string& source_name) const {
    if (k == 1) return teacher_->files().weights;
    const fs::path previous = model_folder(folder_, k - 1);
    source_name = previous.string();
    return load_checkpoint(previous, CheckpointUse::model_only).model;
  }

  // Layer k's run: resumed or started from `source`, with the teacher's terms in its objective.
  RunOptions layer_run_options(int64_t k, bool resume, const TensorMap& source, const std::string& source_name) const {
    RunOptions run_options;
    run_options.resume = resume;
    run_options.quiet = options_.quiet;
    run_options.recipe_file = options_.recipe_file;
    run_options.start_weights = [&source, &source_name](TensorMap& weights) {
      overlay_weights(weights, source, source_name);
    };
    run_options.forward = distill_forward_options(recipe_.distill, layer_of(k));
    run_options.extra_losses = distill_teacher_losses(*teacher_, recipe_.distill, layer_of(k));
    run_options.teacher_memory = teacher_memory(*teacher_, recipe_.distill);
    return run_options;
  }

  // The run loop over layer k's run: the chain's progress line, checkpoints, the stop signal and
  // --max-steps over the whole invocation. No evaluation in the loop: the chain measures the finished
  // model (measure_layer), outside its training time.
  LoopOutcome train_layer(TrainingRun& run, int64_t k) {
    const int64_t steps_before = result_.steps_done;
    RunLoopConfig config;
    config.report = [this, &run, k, steps_before](const LoopStep& step) {
      report_step(run, k, steps_before + step.taken, step);
    };
    if (options_.max_steps > 0) config.step_budget = options_.max_steps - steps_before;
    return RunLoop(run, std::move(config)).run();
  }

  // A logged step: the layer, its step, each loss term and the chain's ETA; its metrics record.
  void report_step(TrainingRun& run, int64_t k, int64_t steps_done, const LoopStep& step) const {
    const int64_t K = plan_.count, layer = layer_of(k);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const int64_t chain_done = (k - 1) * S_ + step.step;
    const double eta = elapsed / double(steps_done) * double(K * S_ - chain_done);
    log("distill layer " + std::to_string(k) + "/" + std::to_string(K) + " (model.layers." + std::to_string(layer) +
        ") step " + std::to_string(step.step) + "/" + std::to_string(S_) + term_line(step.result) + " | ETA " +
        format_duration(eta));
    if (!run.writes()) return;
    std::vector<std::pair<std::string, double>> fields{{"layer", double(layer)}, {"k", double(k)}};
    for (const auto& [name, value] : step.result.terms) fields.emplace_back("loss/" + name, value);
    run.metrics().write("train", step.step, fields);
  }

  // The finished model's measures: decoding (rank 0's), validation (every rank evaluates its share),
  // its training time and memory; recorded beside its checkpoint.
  void measure_layer(TrainingRun& run, DistilledModel& model, double train_seconds) {
    const double peak = device_.is_cuda() ? double(allocator_for(device_).stats(device_).peak) : 0.0;
    if (writes())
      model.measures =
          measure_decoding(run.model(), run.parameters().has_compute_copy() ? DType::bf16 : DType::f32, device_);
    model.measures.validation = run.evaluate();
    model.measures.train_seconds = train_seconds;
    model.measures.peak_memory_bytes = peak;
    model.measures.planned_memory_bytes = device_.is_cuda() ? double(run.memory_plan().total()) : 0.0;
    char cost[160];
    std::snprintf(cost, sizeof cost, "layer %lld of %lld trained in %.1f s", (long long)model.k, (long long)plan_.count,
                  train_seconds);
    log(std::string(cost) +
        (device_.is_cuda() ? ", peak memory " + gib(size_t(peak)) + " (plan " + gib(run.memory_plan().total()) + ")"
                           : std::string()));
    if (writes()) write_measures(model_folder(folder_, model.k) / kMeasuresFile, model.measures, recipe_.eval.batches);
    ++result_.models_measured;
  }

  // A finished model joins the table (and an intermediate one before it is released).
  void keep(DistilledModel model) {
    result_.models.push_back(std::move(model));
    release_finished_intermediate(result_.models, writes());
    if (writes()) write_distill_report(folder_, result_.teacher, result_.models);
  }

  void stop(const std::string& line) {
    log(line + "; --resume continues here");
    result_.stopped = true;
    if (writes()) write_distill_report(folder_, result_.teacher, result_.models);
  }

  const Recipe& recipe_;
  const DistillOptions& options_;
  const DistillPlan plan_;
  const fs::path folder_;
  const int64_t S_;  // steps per layer
  Device device_;
  Communicator* comm_ = nullptr;
  std::unique_ptr<Teacher> teacher_;
  RunData data_;
  std::vector<std::string> domains_;
  DistillResult result_;
  Clock::time_point start_;
};

}  // namespace

Recipe converted_layer_recipe(const Recipe& recipe, const std::vector<int64_t>& converted, const fs::path& folder) {
  FATHOM_CHECK(!converted.empty(), "converted_layer_recipe: no layer to convert");
  Recipe r = recipe;
  std::vector<std::string> kinds;
  for (int64_t i = 0; i < r.model.n_layers; ++i) kinds.push_back(recipe.model.layer_kind(i));
  for (int64_t layer : converted) kinds[size_t(layer)] = kDslaKind;
  r.model.layers = kinds;
  r.model_init_from.clear();  // the chain gives the starting weights
  r.name = recipe.name + "-M" + std::to_string(converted.size());
  r.train.steps = recipe.distill.steps_per_layer;
  r.train.tokens = 0;
  r.train.loss = distill_objective_weights(recipe.distill);
  r.train.trainable = {"model.layers." + std::to_string(converted.back()) + ".self_attn.*"};
  r.train.frozen.clear();
  r.log.dir = folder.string();
  r.distill = Recipe::Distill{};
  r.model.validate();
  return r;
}

DistillResult run_distillation(const Recipe& recipe, const DistillOptions& options) {
  const StopSignalScope stop_signals;
  return Chain(recipe, options).run();
}

}  // namespace fathom
