#include "train/distill/distill_chain.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/allocator.h"
#include "core/error.h"
#include "core/file_io.h"
#include "train/checkpoint/checkpoint.h"
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
#include "train/checkpoint/run_state.h"
#include "train/run/stop_signal.h"
#include "layers/dsla.h"

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
// once that has finished, its checkpoints go. Its recipe, metrics and measures stay, so the table
// keeps its row and --resume reads it back instead of training it again. Called again on resume, so
// a release cut short by a crash completes.
void release_finished_intermediate(std::vector<DistilledModel>& models) {
  if (models.size() < 2) return;
  DistilledModel& previous = models[models.size() - 2];
  if (previous.named || previous.checkpoint.empty()) return;
  remove_checkpoints(previous.checkpoint);
  previous.checkpoint.clear();
}

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
  const DistillPlan plan = distill_plan(recipe);
  const fs::path folder = recipe.log.dir;
  open_chain_folder(folder, options.resume);
  auto log = [&](const std::string& line) {
    if (!options.quiet) std::printf("%s\n", line.c_str()), std::fflush(stdout);
  };
  if (options.resume) {
    // The chain continues only as it started: same teacher, order, loss, data and model.
    const fs::path saved = folder / "recipe.yaml";
    check_resume_compatible(parse_saved_recipe(read_file(saved), saved.string()), recipe, saved.string());
  }
  write_file_atomically(folder / "recipe.yaml", recipe_to_yaml(recipe));

  const Device device = resolve_device(recipe.train.device);
  const Teacher teacher(recipe.distill.teacher, device, uses_mixed_precision(recipe.train.precision, device));
  const RunData data = open_run_data(recipe, DataUse::training);
  const DistillRanking ranking = rank_layers(recipe, plan, teacher, data);
  write_ranking(ranking, folder);

  DistillResult result;
  result.folder = folder;
  for (int64_t k = 0; k < plan.count; ++k) result.order.push_back(ranking.ranked[size_t(k)].layer);
  std::vector<std::string> domains;
  for (const auto& [domain, source] : data.validation) domains.push_back(domain);
  ModelMeasures& teacher_measures = result.teacher;
  // Measured once per chain: a resumed chain reads the teacher's results back.
  if (const auto recorded = read_measures(folder / kTeacherMeasuresFile, recipe.eval.batches, domains)) {
    teacher_measures = *recorded;
  } else {
    for (const auto& [domain, source] : data.validation)
      teacher_measures.validation[domain] = evaluate(teacher.decoder(), source, recipe.train.batch_size,
                                                     recipe.train.seq_len, recipe.eval.batches, device);
    const ModelMeasures decoding = measure_decoding(teacher.decoder(), teacher.activation_dtype(), device);
    teacher_measures.kv_bytes_per_1k_tokens = decoding.kv_bytes_per_1k_tokens;
    teacher_measures.decode_tokens_per_second = decoding.decode_tokens_per_second;
    write_measures(folder / kTeacherMeasuresFile, teacher_measures, recipe.eval.batches);
    result.teacher_measured = true;
  }
  std::string order_text;
  for (int64_t layer : result.order) order_text += (order_text.empty() ? "" : ", ") + std::to_string(layer);
  log("fathom distill '" + recipe.name + "': " + std::to_string(plan.count) + " of " +
      std::to_string(recipe.model.n_layers) + " layers to dsla, in order [" + order_text + "], " +
      std::to_string(recipe.distill.steps_per_layer) + " steps each, on " + device.str());

  const int64_t K = plan.count, S = recipe.distill.steps_per_layer;
  const Clock::time_point start = Clock::now();
  for (int64_t k = 1; k <= K; ++k) {
    const int64_t layer = result.order[size_t(k - 1)];
    const std::vector<int64_t> converted(result.order.begin(), result.order.begin() + k);
    const fs::path dir = model_folder(folder, k);
    const Recipe layer_recipe = converted_layer_recipe(recipe, converted, dir);
    const std::optional<int64_t> saved = saved_step(dir);
    DistilledModel model;
    model.k = k;
    model.layers = converted;
    model.fraction = double(k) / double(recipe.model.n_layers);
    model.named = std::find(plan.named_models.begin(), plan.named_models.end(), k) != plan.named_models.end();
    model.checkpoint = dir;
    // A model finished and measured before (its measures are written only after its last step): its
    // recorded results, without building its run again. An intermediate one may have no checkpoint left.
    if (saved == S || (!saved && !model.named)) {
      if (const auto recorded = read_measures(dir / kMeasuresFile, recipe.eval.batches, domains)) {
        model.measures = *recorded;
        if (!saved) model.checkpoint.clear();
        log("layer " + std::to_string(k) + " of " + std::to_string(K) + ": model.layers." + std::to_string(layer) +
            " finished before; its measures are read from " + (dir / kMeasuresFile).string());
        result.models.push_back(std::move(model));
        release_finished_intermediate(result.models);
        write_distill_report(folder, teacher_measures, result.models);
        continue;
      }
    }
    // A run that saved nothing holds nothing to keep (it stopped before its first checkpoint).
    if (!saved && fs::exists(dir)) fs::remove_all(dir);

    // Layer k starts from M_{k-1} (the teacher for k = 1) with the new layer's gates initialised.
    TensorMap source;
    std::string source_name = "distill.teacher";
    if (!saved) {
      if (k == 1) {
        source = teacher.files().weights;
      } else {
        const fs::path previous = model_folder(folder, k - 1);
        source = load_checkpoint(previous, CheckpointUse::model_only).model;
        source_name = previous.string();
      }
    }
    RunOptions run_options;
    run_options.resume = saved.has_value();
    run_options.quiet = options.quiet;
    run_options.recipe_file = options.recipe_file;
    run_options.start_weights = [&source, &source_name](TensorMap& weights) {
      overlay_weights(weights, source, source_name);
    };
    run_options.forward = distill_forward_options(recipe.distill, layer);
    run_options.extra_losses = distill_teacher_losses(teacher, recipe.distill, layer);
    run_options.teacher_memory = teacher_memory(teacher, recipe.distill);
    const Clock::time_point layer_start = Clock::now();
    if (device.is_cuda()) allocator_for(device).reset_peak(device);
    TrainingRun run(layer_recipe, run_options);
    source.clear();
    log("layer " + std::to_string(k) + " of " + std::to_string(K) + ": model.layers." + std::to_string(layer) +
        " -> dsla, " + std::to_string(run.parameters().trainable_parameter_count()) + " of " +
        std::to_string(run.parameters().parameter_count()) + " parameters train" +
        (saved ? ", resumed at step " + std::to_string(*saved) : ""));
    while (!run.finished()) {
      // The step budget ran out at the end of the previous layer: this one has nothing to save yet.
      if (options.max_steps > 0 && result.steps_done >= options.max_steps) {
        log("distill stopped before layer " + std::to_string(k) + "; --resume continues here");
        result.stopped = true;
        write_distill_report(folder, teacher_measures, result.models);
        return result;
      }
      const StepResult step = run.step();
      ++result.steps_done;
      const int64_t done = run.state().step;
      const bool last = done == S;
      if (done % recipe.log.every == 0 || last) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        const int64_t chain_done = (k - 1) * S + done;
        const double eta = elapsed / double(result.steps_done) * double(K * S - chain_done);
        log("distill layer " + std::to_string(k) + "/" + std::to_string(K) + " (model.layers." +
            std::to_string(layer) + ") step " + std::to_string(done) + "/" + std::to_string(S) + term_line(step) +
            " | ETA " + format_duration(eta));
        std::vector<std::pair<std::string, double>> fields{{"layer", double(layer)}, {"k", double(k)}};
        for (const auto& [name, value] : step.terms) fields.emplace_back("loss/" + name, value);
        run.metrics().write("train", done, fields);
      }
      const bool stopping =
          !last && (stop_requested() || (options.max_steps > 0 && result.steps_done >= options.max_steps));
      if ((recipe.checkpoint.every > 0 && done % recipe.checkpoint.every == 0) || last || stopping) run.save();
      if (stopping) {
        log("distill stopped at layer " + std::to_string(k) + " step " + std::to_string(done) +
            "; --resume continues here");
        result.stopped = true;
        write_distill_report(folder, teacher_measures, result.models);
        return result;
      }
    }
    // Its training's cost, before the measuring below adds to either.
    const double train_seconds = std::chrono::duration<double>(Clock::now() - layer_start).count();
    const double peak = device.is_cuda() ? double(allocator_for(device).stats(device).peak) : 0.0;
    model.measures = measure_decoding(run.model(), run.parameters().has_compute_copy() ? DType::bf16 : DType::f32,
                                      device);
    model.measures.validation = run.evaluate();
    model.measures.train_seconds = train_seconds;
    model.measures.peak_memory_bytes = peak;
    model.measures.planned_memory_bytes = device.is_cuda() ? double(run.memory_plan().total()) : 0.0;
    char cost[160];
    std::snprintf(cost, sizeof cost, "layer %lld of %lld trained in %.1f s", (long long)k, (long long)K, train_seconds);
    log(std::string(cost) + (device.is_cuda() ? ", peak memory " + gib(size_t(peak)) + " (plan " +
                                                    gib(run.memory_plan().total()) + ")"
                                              : std::string()));
    write_measures(dir / kMeasuresFile, model.measures, recipe.eval.batches);
    ++result.models_measured;
    result.models.push_back(std::move(model));
    release_finished_intermediate(result.models);
    write_distill_report(folder, teacher_measures, result.models);
  }
  log("distill: table in " + (folder / "distill.md").string());
  return result;
}

}  // namespace fathom
