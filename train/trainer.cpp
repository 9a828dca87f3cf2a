#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>

#include "autograd/grad_mode.h"
#include "core/file_io.h"
#include "data/loader.h"
#include "data/open_tokens.h"
#include "data/tokenizer.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/device_select.h"
#include "train/evaluator.h"
#include "train/memory_plan.h"
#include "train/metrics_log.h"
#include "train/model_source.h"
#include "train/objective.h"
#include "train/parameter_selection.h"
#include "train/resume_check.h"
#include "train/run_dir.h"
#include "train/run_state.h"
#include "train/stop_signal.h"
#include "train/throughput.h"
#include "train/train_step.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/cuda/backend.h"
#endif

namespace fathom {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What the run reads, which --overwrite must never remove with the old run.
std::vector<fs::path> run_sources(const Recipe& r, const TrainOptions& options) {
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

std::string join_paths(const std::vector<std::string>& paths) {
  std::string out;
  for (const std::string& p : paths) out += (out.empty() ? "'" : ", '") + p + "'";
  return out;
}

struct DataSet {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TokenSource> train;
  std::vector<std::pair<std::string, std::shared_ptr<const TokenSource>>> validation;
};

DataSet load_data(const Recipe& r) {
  DataSet d;
  d.tokenizer = make_tokenizer(r.data.tokenizer);
  FATHOM_CHECK(int64_t(d.tokenizer->vocab_size()) <= r.model.vocab_size, "tokenizer '", r.data.tokenizer, "' has ",
               d.tokenizer->vocab_size(), " token ids but model.vocab_size is ", r.model.vocab_size,
               "; raise model.vocab_size to at least ", d.tokenizer->vocab_size());
  const DocumentSplit split = parse_document_split(r.data.documents);
  const ShardVerify verify = parse_shard_verify(r.data.verify);
  d.train = open_tokens(r.data.train, *d.tokenizer, split, r.model.vocab_size, verify);
  for (const auto& [domain, paths] : r.data.validation) {
    auto source = open_tokens(paths, *d.tokenizer, split, r.model.vocab_size, verify);
    // Checked now: the evaluation after the last step must not be the first to find out.
    FATHOM_CHECK(source->size() >= size_t(r.train.seq_len) + 1, "validation domain '", domain, "' (",
                 join_paths(paths), ") has ", source->size(), " tokens, too few for one sequence of train.seq_len ",
                 r.train.seq_len, " (needs ", r.train.seq_len + 1, "); give it more text or drop the domain");
    d.validation.emplace_back(domain, std::move(source));
  }
  return d;
}

}  // namespace

TrainResult run_training(const Recipe& recipe, const TrainOptions& options) {
  // First: a signal during start-up stops the run after its first step too, with a checkpoint.
  const StopSignalScope stop_signals;
  const Device device = resolve_device(recipe.train.device);
  const int threads = configure_threads(recipe.train.threads);
  const int64_t B = recipe.train.batch_size, T = recipe.train.seq_len, accum = recipe.train.grad_accum;
  const bool mixed = uses_mixed_precision(recipe.train.precision, device);
  const Recompute recompute = parse_recompute(recipe.train.recompute);
  // Which parameters train, from the layers' own report of their names (no model is built yet).
  const std::vector<std::pair<std::string, Shape>> shapes = decoder_parameter_shapes(recipe.model);
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  const std::set<std::string> frozen = frozen_parameters(names, recipe.train.trainable, recipe.train.frozen);
  int64_t frozen_elements = 0;
  for (const auto& [name, shape] : shapes)
    if (frozen.count(name)) frozen_elements += shape.numel();
  const Objective objective = Objective::for_model(recipe.train.loss, recipe.model);
  const MemoryPlanInput plan_input{recipe.model, B, T, mixed, recompute, frozen_elements};
  const MemoryPlan memory_plan = plan_training_memory(plan_input);
#ifdef FATHOM_WITH_CUDA
  // Before anything is written or allocated: a run that cannot fit fails now, not mid-step.
  if (device.is_cuda())
    check_memory_plan_fits(memory_plan, cuda::device_memory(device.index).free, plan_input, device.str());
#endif
  const fs::path run_dir = recipe.log.dir;
  // Checks only: the folder is made (or an old run replaced) once everything below is valid.
  RunFolder folder(run_dir, {options.resume, options.overwrite, run_sources(recipe, options)});
  if (options.resume) {
    // Before the data is read: a changed run is the first thing to report.
    const fs::path saved = *latest_checkpoint(run_dir) / kCheckpointRecipeFile;
    check_resume_compatible(parse_saved_recipe(read_file(saved), saved.string()), recipe, saved.string());
  }

  DataSet data = load_data(recipe);
  TokenLoader loader(data.train, B, T, recipe.train.seed);

  Decoder model(recipe.model);
  model.set_recompute(recompute);
  ParameterArena arena(model, device, frozen);
  // The bf16 weights the layers read; initialise/load below fill it, the optimizer keeps it current.
  if (mixed) arena.enable_compute_copy(DType::bf16);
  if (!recipe.model_init_from.empty() && !options.resume) {
    // Existing weights instead of a random init; a resumed run gets its own from the checkpoint.
    const ModelSource source = parse_model_source(recipe.model_init_from);
    arena.load(read_model_source_weights(source, recipe.model), "model.init_from " + recipe.model_init_from);
  } else {
    arena.initialise(recipe.train.seed);
  }
  AdamW optimizer(arena, AdamWConfig{recipe.train.optimizer.beta1, recipe.train.optimizer.beta2,
                                     recipe.train.optimizer.eps, recipe.train.optimizer.weight_decay});
  const int64_t total_steps = recipe.train.steps;
  const Schedule schedule{recipe.train.schedule.type, recipe.train.optimizer.lr, recipe.train.schedule.warmup_steps,
                          total_steps, recipe.train.schedule.final_lr_fraction};

  RunState state;
  state.seed = recipe.train.seed;
  if (options.resume) {
    const fs::path ckpt_dir = *latest_checkpoint(run_dir);
    const CheckpointData ckpt = load_checkpoint(ckpt_dir);
    arena.load(ckpt.model, (ckpt_dir / "model.safetensors").string());
    optimizer.load_state(ckpt.optimizer, (ckpt_dir / "optimizer.safetensors").string());
    state = run_state_from_json(ckpt.state_json, (ckpt_dir / "state.json").string());
    loader.restore(state.loader);
  }
  const std::string recipe_yaml = recipe_to_yaml(recipe);
  folder.open();
  write_file_atomically(run_dir / "recipe.yaml", recipe_yaml);
  MetricsLog metrics(run_dir, state.step);

  auto log_line = [&](const std::string& line) {
    if (!options.quiet) std::cout << line << std::endl;
  };
  auto save = [&]() {
    state.loader = loader.state();
    fs::path dir;
    try {
      dir = save_checkpoint(run_dir, state.step,
                            CheckpointData{arena.named_values(), optimizer.state(), run_state_to_json(state), recipe_yaml},
                            int(recipe.checkpoint.keep_last));
    } catch (const Error& e) {
      const auto previous = latest_checkpoint(run_dir);
      FATHOM_FAIL("saving the checkpoint of step ", state.step, " failed: ", e.message(), "; ",
                  previous ? "the latest checkpoint on disk, " + previous->string() + ", is intact (train --resume continues from it)"
                           : std::string("no earlier checkpoint exists"),
                  "; free disk space or fix the folder's permissions");
    }
    folder.commit();  // the new run has a checkpoint: a run it replaced can go
    log_line("checkpoint " + dir.string());
  };
  TrainResult result;
  result.run_dir = run_dir;
  auto run_eval = [&]() {
    NoGrad no_grad;
    for (const auto& [domain, source] : data.validation) {
      const EvalResult e = evaluate(model, source, B, T, recipe.eval.batches, device);
      result.validation_loss[domain] = e.loss;
      std::vector<std::pair<std::string, double>> fields{{"loss/" + domain, e.loss}, {"ppl/" + domain, e.perplexity}};
      for (auto& field : routing_metrics(e, domain)) fields.push_back(std::move(field));
      metrics.write("eval", state.step, fields);
      char line[256];
      std::snprintf(line, sizeof line, "eval %s @ step %lld | loss %.4f | ppl %.2f | %lld tokens", domain.c_str(),
                    (long long)state.step, e.loss, e.perplexity, (long long)e.tokens);
      log_line(line);
      for (const std::string& routing_line : routing_report(e)) log_line(routing_line);
    }
  };

  log_line("fathom train '" + recipe.name + "': " + std::to_string(arena.numel()) + " parameters" +
           (frozen.empty() ? "" : " (" + std::to_string(arena.trainable_numel()) + " trainable)") + " on " + device.str() + " (" + std::to_string(threads) + " threads), " +
           std::to_string(total_steps) + " steps of " + std::to_string(B * T * accum) + " tokens" +
           (options.resume ? ", resumed at step " + std::to_string(state.step) : ""));
  std::string precision = mixed ? "bf16 (fp32 master weights, gradients and optimizer state)" : "fp32";
  if (device.is_cpu() && recipe.train.precision == "bf16") precision += " (train.precision bf16 applies to GPUs)";
  std::string plan_text = memory_plan.describe();
  plan_text.pop_back();  // log_line ends the line
  log_line("precision " + precision + ", recompute " + recipe.train.recompute + "; memory plan (estimate):\n" +
           plan_text);
  if (recipe.model.moda.enabled())
    log_line("MoDA " + name_of(recipe.model.moda.variant) + ": depth KV cache " +
             std::to_string(model.depth_cache_bytes(B, T, device) >> 10) + " KiB per micro-batch");

  // MFU needs the device's peak; the CPU has no entry and shows none.
  double peak_flops = 0;
#ifdef FATHOM_WITH_CUDA
  if (device.is_cuda()) peak_flops = dense_bf16_peak_flops(cuda::device_name(device.index));
#endif
  const double flops_per_token = training_flops_per_token(recipe.model, T);

  auto interval_start = Clock::now();
  const auto run_start = Clock::now();
  const int64_t first_step = state.step;
  int64_t interval_tokens = 0;
  while (state.step < total_steps) {
    const double lr = schedule.lr(state.step);
    StepSettings settings{.step = state.step + 1, .lr = lr, .clip = recipe.train.optimizer.clip,
                          .objective = objective, .grad_accum = accum};
    settings.failure_note = [&] {
      const auto last = latest_checkpoint(run_dir);
      return "Last checkpoint: " + (last ? last->string() : std::string("none"));
    };
    const StepResult step = train_step(model, arena, optimizer, [&] { return loader.next_batch(); }, device, settings);
    const double grad_norm = step.grad_norm;
    ++state.step;
    state.tokens_seen += B * T * accum;
    interval_tokens += B * T * accum;
    result.last_loss = step.loss;

    const bool last = state.step == total_steps;
    if (state.step % recipe.log.every == 0 || last) {
      const double elapsed = seconds_since(interval_start);
      Progress p;
      p.step = state.step;
      p.total_steps = total_steps;
      p.loss = result.last_loss;
      p.lr = lr;
      p.grad_norm = grad_norm;
      p.tokens_per_second = double(interval_tokens) / std::max(elapsed, 1e-9);
      p.eta_seconds = seconds_since(run_start) / double(state.step - first_step) * double(total_steps - state.step);
      std::vector<std::pair<std::string, double>> fields{
          {"loss", p.loss}, {"z_loss", step.z_loss}, {"lr", lr}, {"grad_norm", grad_norm},
          {"tokens_per_second", p.tokens_per_second}, {"tokens_seen", double(state.tokens_seen)}};
      // Layer terms of the objective (ce and z_loss are logged above).
      for (const auto& [name, term] : step.terms)
        if (name != "ce" && name != "z_loss") fields.emplace_back("loss/" + name, term);
      if (peak_flops > 0) {
        p.mfu = p.tokens_per_second * flops_per_token / peak_flops;
        fields.emplace_back("mfu", p.mfu);
      }
      if (device.is_cuda()) {
        const MemoryStats memory = allocator_for(device).stats(device);
        p.memory_gib = double(memory.current) / double(1 << 30);
        p.peak_memory_gib = double(memory.peak) / double(1 << 30);
        fields.emplace_back("memory_peak_bytes", double(memory.peak));
      }
      log_line(format_progress(p));
      metrics.write("train", state.step, fields);
      interval_start = Clock::now();
      interval_tokens = 0;
    }
    const bool stopping = stop_requested() && !last;
    if (stopping) log_line("stop requested: saving a checkpoint at step " + std::to_string(state.step));
    // The checkpoint comes before the evaluation: nothing after the step can lose it.
    if ((recipe.checkpoint.every > 0 && state.step % recipe.checkpoint.every == 0) || last || stopping) save();
    if ((recipe.eval.every > 0 && state.step % recipe.eval.every == 0) || last) run_eval();
    if (stopping) {
      result.stopped_by_signal = true;
      break;
    }
  }
  if (device.is_cuda())
    log_line("device memory: peak " + gib(allocator_for(device).stats(device).peak) + " allocated, " +
             gib(memory_plan.total()) + " planned");
  result.steps_done = state.step;
  return result;
}

}  // namespace fathom
