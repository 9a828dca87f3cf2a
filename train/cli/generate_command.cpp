// fathom generate: text from a fathom checkpoint or a HuggingFace folder, streamed as it is produced; or
// the continuations of a file of prompts (--prompts, one per line) decoded as one batch, printed in
// order once all are done.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "core/error.h"
#include "core/file_io.h"
#include "core/suggest.h"
#include "data/tokenizer.h"
#include "train/cli/commands.h"
#include "train/cli/device_select.h"
#include "train/cli/model_text_input.h"
#include "train/generate/generator.h"
#include "train/generate/inference_model.h"
#include "train/generate/prompt_lines.h"

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

// The continuations of a --prompts batch, in prompt order: a header line per sequence, then the prompt
// and its continuation.
void print_batch(const std::vector<PromptLine>& lines, const GenerationResult& result, int64_t samples) {
  for (size_t r = 0; r < result.texts.size(); ++r) {
    const PromptLine& line = lines[r / size_t(samples)];
    std::cout << "=== prompt " << line.line;
    if (samples > 1) std::cout << ", sample " << r % size_t(samples) + 1;
    std::cout << " ===\n" << line.text << result.texts[r] << "\n";
  }
  std::cout << std::flush;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Args {
    ModelTextInput input;
    std::string stop, device = "auto", precision = "bf16";
    GenerationOptions options;
    int64_t threads = 0;
    std::string prompts;  // --prompts FILE: one prompt per line, one batch
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a checkpoint, streaming it as it is produced");
  args->input.add_options(cmd, "prompt");
  cmd->add_option("--prompts", args->prompts,
                  "A file of prompts, one per line (no blank lines), decoded together as one batch; each "
                  "continuation is printed under a '=== prompt LINE ===' header")
      ->check(CLI::ExistingFile)
      ->excludes(cmd->get_option("--prompt"))
      ->excludes(cmd->get_option("--prompt-file"));
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
  cmd->add_option("--batch", args->options.batch, "Samples of each prompt generated together")
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
    // --prompts: a batch of prompts, each named by its line; else one prompt, --batch samples of it.
    const bool batch_file = !args->prompts.empty();
    const std::vector<PromptLine> lines =
        batch_file ? read_prompt_lines(args->prompts) : std::vector<PromptLine>{{1, args->input.text()}};
    const ModelFiles loaded = read_model_files(args->input.checkpoint);
    const std::unique_ptr<Tokenizer> tokenizer = args->input.tokenizer_for(loaded);
    const Device device = resolve_device(args->device, "--device");
    configure_threads(args->threads, "--threads");
    const InferenceModel inference(loaded.config, loaded.weights, loaded.origin, device,
                                   uses_mixed_precision(args->precision, device));
    const Decoder& model = inference.decoder();
    const std::vector<std::vector<uint32_t>> prompts =
        batch_file ? encode_prompt_lines(lines, *tokenizer, args->prompts)
                   : std::vector<std::vector<uint32_t>>{tokenizer->encode(lines[0].text)};
    size_t longest = 0;  // the prompt the caches are sized for
    int64_t prompt_tokens = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      if (prompts[p].size() > prompts[longest].size()) longest = p;
      prompt_tokens += int64_t(prompts[p].size());
    }
    const int64_t positions = int64_t(prompts[longest].size()) + args->options.max_new_tokens;
    const int64_t sequences = int64_t(prompts.size()) * args->options.batch;
    // The caches are allocated whole before the prompts are read: one that cannot fit fails now.
    const DType dtype = inference.activation_dtype();
    // A one-position state on the host says what a position costs, before the device is touched.
    const DecodeMemory memory = decode_memory(model, dtype);
    const size_t per_position = memory.bytes_per_position;
    size_t cache_bytes = 0;
    try {
      cache_bytes = check_decoding_caches_fit(memory, sequences, positions, available_memory(device), device.str());
    } catch (const Error& e) {
      if (!batch_file) throw;
      FATHOM_FAIL(e.message(), " (every sequence is sized for the longest prompt, line ", lines[longest].line, " of ",
                  args->prompts, ", ", prompts[longest].size(), " tokens)");
    }
    std::cerr << "fathom generate: " << loaded.origin << " on " << device.str() << ", ";
    if (batch_file)
      std::cerr << prompts.size() << " prompts of " << prompt_tokens << " tokens (longest " << prompts[longest].size()
                << ")";
    else
      std::cerr << prompt_tokens << " prompt tokens";
    std::cerr << ", caches " << gib_or_mib(cache_bytes) << " (" << per_position
              << " bytes per position and sequence)\n";
    if (memory.state_layers > 0)
      std::cerr << "  " << memory.state_layers << " " << join_names(memory.state_kinds, "/")
                << (memory.state_layers == 1 ? " layer keeps " : " layers keep ") << gib_or_mib(memory.state_bytes)
                << " of constant state per sequence instead of a KV cache of "
                << gib_or_mib(memory.kv_bytes_saved_per_position * 1000) << " per 1,000 tokens\n";
    GenerationResult result;
    if (batch_file) {
      result = generate_batch(model, *tokenizer, prompts, args->options, dtype, device);
      print_batch(lines, result, args->options.batch);
    } else {
      const std::string& text = lines[0].text;
      std::cout << text << std::flush;
      result = generate(model, *tokenizer, prompts[0], args->options, dtype, device,
                        [](const std::string& piece) { std::cout << piece << std::flush; });
      std::cout << std::endl;
      for (size_t b = 1; b < result.texts.size(); ++b)
        std::cout << "--- sample " << b << "\n" << text << result.texts[b] << std::endl;
    }
    const double decode_tokens = double(result.decode_steps * sequences);
    std::fprintf(
        stderr, "prefill %lld tokens in %.1f ms (%.0f tok/s); decode %lld steps x %lld in %.1f ms (%.0f tok/s)\n",
        (long long)result.prefill_tokens, 1e3 * result.prefill_seconds,
        double(result.prefill_tokens) / std::max(result.prefill_seconds, 1e-9), (long long)result.decode_steps,
        (long long)sequences, 1e3 * result.decode_seconds, decode_tokens / std::max(result.decode_seconds, 1e-9));
  });
}

}  // namespace fathom
