// fathom's training step, timed: the trainer's own step (train/run/train_step.h: forward, loss with z-loss,
// backward, clipping, AdamW) on a model of one of OLMo-core's named sizes, fed fresh random tokens each
// step, at the shapes bench/hf_train_reference.py times for HF transformers + torch.compile.
// Prints one markdown row per config in that script's columns: median step time -> tokens/s, MFU
// (train/measure/throughput.h: 6 N + 6 L d T FLOPs per token over the device's dense bf16 peak; none on the
// CPU) and the allocator's peak of live tensor bytes over the whole run of a config (weights,
// gradients, AdamW moments, activations), the counterpart of torch.cuda.max_memory_allocated, then
// the peak of what it held from the driver (live and cached blocks), torch.cuda.max_memory_reserved's.
//
// Usage: bench_train_step [--device cuda|cpu|auto] [--precision bf16|fp8|fp32] [--recompute none|selective|block]
//                         [--warmup N] [--steps N] [--threads N] [--mod CAPACITY]
//                         [--layers KIND,KIND,...] [--dsla-states 1|2]
//                         [CONFIG...]      CONFIG = SIZE or SIZE:BATCHxSEQ (e.g. olmo2_14M:2x64)
// --mod C routes every other block (block 0 dense) at capacity C with the causal predictor (MoD,
// layers/routed_block.h); the last column is the counted training FLOPs per token, so a MoD row and
// the dense one give both the FLOP ratio and the step-time ratio.
// --layers sets model.layers (a pattern repeated over the layers: attention,dsla is the hybrid with every
// other layer DSLA), --dsla-states its dsla.states.
// Without CONFIG: olmo2_190M:16x2048 and olmo2_1B:4x4096. scripts/bench_train_device.sh runs this and
// the HF reference side by side.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/suggest.h"
#include "kernels/fp8/fp8.h"
#include "layers/decoder.h"
#include "layers/dsla_config.h"
#include "layers/linear.h"
#include "layers/mod_config.h"
#include "layers/model_config.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "train/cli/device_select.h"
#include "train/measure/throughput.h"
#include "train/recipe/recipe.h"
#include "train/recipe/recipe_schema.h"
#include "train/run/train_step.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/runtime/backend.h"
#endif

using namespace fathom;

namespace {

struct BenchConfig {
  std::string size;
  int64_t batch = 0, seq = 0;
};

constexpr double kLearningRate = 3e-4;  // bench/hf_train_reference.py's default

const std::vector<BenchConfig> kDefaultConfigs = {{"olmo2_190M", 16, 2048}, {"olmo2_1B", 4, 4096}};

struct Options {
  std::string device = "cuda";
  std::string precision = "bf16";         // train.precision
  Recompute recompute = Recompute::none;  // train.recompute
  int warmup = 5;
  int steps = 20;
  int64_t threads = 0;
  double mod_capacity = 0;          // 0: dense
  std::vector<std::string> layers;  // model.layers; empty: attention everywhere
  int64_t dsla_states = 2;
  std::vector<BenchConfig> configs;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1)
    items.push_back(text.substr(start, comma - start));
  items.push_back(text.substr(start));
  return items;
}

int64_t positive_int(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  FATHOM_CHECK(!text.empty() && *end == '\0' && v > 0, what, " must be a positive integer, got '", text, "'");
  return v;
}

// "SIZE" (the default shape of that size, if it has one) or "SIZE:BATCHxSEQ".
BenchConfig parse_config(const std::string& text) {
  const size_t colon = text.find(':');
  BenchConfig c{text.substr(0, colon)};
  named_model_size(c.size);  // an unknown size fails here, listing the known ones
  if (colon == std::string::npos) {
    for (const BenchConfig& d : kDefaultConfigs)
      if (d.size == c.size) return d;
    FATHOM_FAIL("config '", text, "' needs a shape: write ", c.size, ":BATCHxSEQ (e.g. ", c.size, ":8x1024)");
  }
  const std::string shape = text.substr(colon + 1);
  const size_t x = shape.find('x');
  FATHOM_CHECK(x != std::string::npos, "config '", text, "': the shape must be BATCHxSEQ, got '", shape, "'");
  c.batch = positive_int(shape.substr(0, x), "batch size in '" + text + "'");
  c.seq = positive_int(shape.substr(x + 1), "sequence length in '" + text + "'");
  return c;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      FATHOM_CHECK(i + 1 < argc, arg, " needs a value");
      return argv[++i];
    };
    if (arg == "--device")
      o.device = value();
    else if (arg == "--precision")
      o.precision = value();
    else if (arg == "--recompute")
      o.recompute = parse_recompute(value());
    else if (arg == "--warmup")
      o.warmup = int(positive_int(value(), "--warmup"));
    else if (arg == "--steps")
      o.steps = int(positive_int(value(), "--steps"));
    else if (arg == "--threads")
      o.threads = positive_int(value(), "--threads");
    else if (arg == "--mod")
      o.mod_capacity = std::strtod(value().c_str(), nullptr);
    else if (arg == "--layers")
      o.layers = split_list(value());
    else if (arg == "--dsla-states")
      o.dsla_states = positive_int(value(), "--dsla-states");
    else if (arg.rfind("--", 0) == 0)
      FATHOM_FAIL("unknown option '", arg, "'; see the usage at the top of bench/bench_train_step.cpp");
    else
      o.configs.push_back(parse_config(arg));
  }
  FATHOM_CHECK(o.precision == "bf16" || o.precision == "fp8" || o.precision == "fp32",
               "--precision must be bf16, fp8 or fp32, got '", o.precision, "'");
  if (o.configs.empty()) o.configs = kDefaultConfigs;
  return o;
}

// Fresh uniform token ids in [0, vocab) for step `step`, as the loader hands them out (I32 on the host).
TokenBatch random_batch(int64_t batch, int64_t seq, int64_t vocab, uint64_t step) {
  std::vector<int32_t> inputs(size_t(batch * seq)), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const philox::U32x4 r = philox::draw(step, i, 0);
    inputs[i] = int32_t(r.v[0] % uint32_t(vocab));
    targets[i] = int32_t(r.v[1] % uint32_t(vocab));
  }
  return {Tensor::from_vector(inputs, {batch, seq}), Tensor::from_vector(targets, {batch, seq})};
}

double peak_flops_of(Device device) {
#ifdef FATHOM_WITH_CUDA
  if (device.is_cuda()) return dense_bf16_peak_flops(cuda::device_name(device.index));
#endif
  return 0.0;
}

void run_config(const BenchConfig& c, const Options& o, Device device) {
  ModelConfig config = named_model_size(c.size);
  config.options.get<ModConfig>().capacity = o.mod_capacity;
  config.layers = o.layers;
  config.options.get<DslaConfig>().states = o.dsla_states;
  config.validate();      // a --mod outside (0, 1] or an unknown layer kind fails here, naming the field
  const Recipe defaults;  // the trainer's default clip, z-loss and AdamW betas, eps and weight decay
  Allocator& allocator = allocator_for(device);
  allocator.reset_peak(device);
  {
    Decoder model(config);
    model.set_recompute(o.recompute);
    if (uses_fp8_linears(o.precision)) {
      check_fp8_device(device);
      use_fp8_linears(model);
    }
    ParameterArena arena(model, device);
    if (uses_mixed_precision(o.precision, device)) arena.enable_compute_copy(DType::bf16);
    arena.initialise(1);
    const auto& opt = defaults.train.optimizer;
    AdamW optimizer(arena, AdamWConfig{opt.beta1, opt.beta2, opt.eps, opt.weight_decay});
    std::vector<double> step_ms;
    uint64_t step = 0;
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      const TokenBatch batch = random_batch(c.batch, c.seq, config.vocab_size, ++step);
      const StepSettings settings{.step = int64_t(step),
                                  .lr = kLearningRate,
                                  .clip = opt.clip,
                                  .objective = Objective::for_model(defaults.train.loss, config)};
      synchronize(device);
      const auto start = std::chrono::steady_clock::now();
      train_step(
          model, arena, optimizer, [&] { return batch; }, device, settings);
      synchronize(device);
      if (i >= o.warmup)
        step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(step_ms.begin(), step_ms.end());
    const double median_ms = step_ms[step_ms.size() / 2];
    const double tokens_per_s = double(c.batch * c.seq) / (median_ms / 1e3);
    const double peak = peak_flops_of(device);
    char mfu[32] = "-";
    if (peak > 0)
      std::snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * tokens_per_s * training_flops_per_token(config, c.seq) / peak);
    const MemoryStats memory = allocator.stats(device);
    const double peak_gib = double(memory.peak) / double(1 << 30),
                 held_gib = double(memory.held_peak) / double(1 << 30);
    std::string routing = o.mod_capacity > 0 ? ", MoD c " + format_number(o.mod_capacity) : std::string();
    if (config.has_layer_kind("dsla"))
      routing += ", layers " + join_names(o.layers, "+") + ", dsla states " + std::to_string(o.dsla_states);
    std::printf("| fathom (%s, %s, recompute %s%s) | %s | %lld x %lld | %.1f | %.0f | %s | %.1f | %.1f | %.3f |\n",
                device.str().c_str(), o.precision.c_str(), recompute_name(o.recompute), routing.c_str(), c.size.c_str(),
                (long long)c.batch, (long long)c.seq, median_ms, tokens_per_s, mfu, peak_gib, held_gib,
                training_flops_per_token(config, c.seq) / 1e9);
    std::fflush(stdout);
  }
#ifdef FATHOM_WITH_CUDA
  if (device.is_cuda()) cuda::empty_cache(device.index);  // the next config starts from a clean device
#endif
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    const Device device = resolve_device(o.device);
    configure_threads(o.threads);
    std::printf(
        "| system | model | batch x seq | step ms (median) | tokens/s | MFU | peak GiB | held GiB | train GFLOP/token "
        "|\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const BenchConfig& c : o.configs) run_config(c, o, device);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 2;
  }
}
