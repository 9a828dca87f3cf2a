// fathom generate: text from a fathom checkpoint or a HuggingFace folder, streamed as it is produced.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "core/file_io.h"
#include "core/suggest.h"
#include "data/tokenizer.h"
#include "train/cli/commands.h"
#include "train/cli/device_select.h"
#include "train/cli/model_text_input.h"
#include "train/generate/generator.h"
#include "train/generate/inference_model.h"

namespace fathom {

namespace {

std::string gib_or_mib(size_t bytes) {
  const int shift = bytes >= (size_t(1) << 30) ? 30 : bytes >= (size_t(1) << 20) ? 20 : 10;
  char text[32];
  std::snprintf(text, sizeof text,
                shift == 30   ? "%.2f GiB"
                : shift == 20 ? "%.1f MiB"
                              : "%.1f KiB",
                double(bytes) / double(size_t(1) << shift));
  return text;
}

// Bounds of the decoding flags. With them no product of batch, positions and bytes per position can
// overflow; the memory check refuses what the device cannot hold long before.
constexpr int64_t kMaxBatch = int64_t(1) << 16;
constexpr int64_t kMaxNewTokens = int64_t(1) << 24;

// CLI11 would read "-1" into an unsigned option as 2^64-1: a sign is refused before the conversion.
const CLI::Validator kNonNegativeWholeNumber(
    [](std::string& value) {
      return value.find_first_not_of("0123456789") == std::string::npos && !value.empty()
                 ? std::string()
                 : "Value " + value + " is not a whole number of 0 or more";
    },
    "UINT");

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Args {
    ModelTextInput input;
    std::string stop, device = "auto", precision = "bf16";
    GenerationOptions options;
    int64_t threads = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a checkpoint, streaming it as it is produced");
  args->input.add_options(cmd, "prompt");
  cmd->add_option("--max-new-tokens", args->options.max_new_tokens, "Tokens to generate per sequence")
      ->check(CLI::Range(int64_t(1), kMaxNewTokens))
      ->capture_default_str();
  cmd->add_option("--temperature", args->options.sampling.temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", args->options.sampling.top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->options.sampling.top_p, "Nucleus: the smallest set of tokens with this mass")
      ->capture_default_str();
  cmd->add_option("--seed", args->options.sampling.seed, "Sampling seed (0 or more)")
      ->check(kNonNegativeWholeNumber)
      ->capture_default_str();
  cmd->add_option("--batch", args->options.batch, "Samples of the prompt generated together")
      ->check(CLI::Range(int64_t(1), kMaxBatch))
      ->capture_default_str();
  cmd->add_option("--stop", args->options.stop, "Stop a sequence where its text first holds this");
  cmd->add_flag("--ignore-eos", args->options.ignore_eos, "Go on past the end-of-text token (fixed-length runs)");
  cmd->add_option("--device", args->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--precision", args->precision, "GPU compute precision: bf16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
  add_threads_option(cmd, args->threads, "CPU threads");
  cmd->callback([args] {
    const std::string text = args->input.text();
    const ModelFiles loaded = read_model_files(args->input.checkpoint);
    const std::unique_ptr<Tokenizer> tokenizer = args->input.tokenizer_for(loaded);
    const Device device = resolve_device(args->device, "--device");
    configure_threads(args->threads, "--threads");
    const InferenceModel inference(loaded.config, loaded.weights, loaded.origin, device,
                                   uses_mixed_precision(args->precision, device));
    const Decoder& model = inference.decoder();
    const std::vector<uint32_t> prompt_ids = tokenizer->encode(text);
    const int64_t positions = int64_t(prompt_ids.size()) + args->options.max_new_tokens;
    // The caches are allocated whole before the prompt is read: one that cannot fit fails now.
    const DType dtype = inference.activation_dtype();
    // A one-position state on the host says what a position costs, before the device is touched.
    const DecodeMemory memory = decode_memory(model, dtype);
    const size_t per_position = memory.bytes_per_position;
    const size_t cache_bytes =
        check_decoding_caches_fit(memory, args->options.batch, positions, available_memory(device), device.str());
    std::cerr << "fathom generate: " << loaded.origin << " on " << device.str() << ", " << prompt_ids.size()
              << " prompt tokens, caches " << gib_or_mib(cache_bytes) << " (" << per_position
              << " bytes per position and sequence)\n";
    if (memory.state_layers > 0)
      std::cerr << "  " << memory.state_layers << " " << join_names(memory.state_kinds, "/")
                << (memory.state_layers == 1 ? " layer keeps " : " layers keep ") << gib_or_mib(memory.state_bytes)
                << " of constant state per sequence instead of a KV cache of "
                << gib_or_mib(memory.kv_bytes_saved_per_position * 1000) << " per 1,000 tokens\n";
    std::cout << text << std::flush;
    const GenerationResult result = generate(model, *tokenizer, prompt_ids, args->options, dtype, device,
                                             [](const std::string& piece) { std::cout << piece << std::flush; });
    std::cout << std::endl;
    for (size_t b = 1; b < result.texts.size(); ++b)
      std::cout << "--- sample " << b << "\n" << text << result.texts[b] << std::endl;
    const double decode_tokens = double(result.decode_steps * args->options.batch);
    std::fprintf(stderr,
                 "prefill %lld tokens in %.1f ms (%.0f tok/s); decode %lld steps x %lld in %.1f ms (%.0f tok/s)\n",
                 (long long)result.prompt_tokens * (long long)args->options.batch, 1e3 * result.prefill_seconds,
                 double(result.prompt_tokens * args->options.batch) / std::max(result.prefill_seconds, 1e-9),
                 (long long)result.decode_steps, (long long)args->options.batch, 1e3 * result.decode_seconds,
                 decode_tokens / std::max(result.decode_seconds, 1e-9));
  });
}

}  // namespace fathom
