// fathom's generation speed against the memory-bandwidth limit, in the rows that
// bench/gpt_fast_reference.py and bench/hf_generate_reference.py print for their peers: greedy decoding
// of a prompt of C tokens to exactly N new tokens (past the end-of-text token) with the decoding caches,
// bf16 on the GPU (f32 on the CPU).
//
//   bench_generate MODEL [--ids FILE] [--context 128,4096] [--batch 1,8,32] [--new-tokens 64]
//                  [--warmup 2] [--repeats 5] [--eager] [--tokens-out FILE] [--copy-mib 1024] [--label NAME]
//
// MODEL: a fathom checkpoint or run folder, or hf:DIR. The prompt of context C is the ids of FILE
// (whitespace separated) repeated until C and cut there; without --ids, C ids drawn uniformly from the
// vocabulary by a generator seeded with C. Every sequence of a batch is that prompt. For each context and
// batch size, after the warm-up generations, prefill (the prompt's step) and decode (the N - 1 steps after
// it, per step) are the medians of the repeats; each run synchronises the device before it reads its
// clock. On a GPU the steps are replayed as a CUDA graph (train/generate/decode_step.h, what
// `fathom generate` does); --eager adds rows of the same steps run eagerly.
//
// The roofline columns. "MB/step" is what one decoding step must read (train/measure/decode_traffic.h:
// every weight in its inference dtype, the batch's rows of the input embedding, the whole LM head, the
// KV caches, dsla states, MoDA depth slots, MoD's routed layers at their capacity share of the
// positions), at the mean length the measured steps attend to, C + N / 2. "GB/s" is that over the
// measured step time, and "% of roofline" that over the copy bandwidth measured in the same process on
// the same device: a device-to-device copy of a --copy-mib buffer (cudaMemcpy D2D on a GPU, a host
// memcpy on the CPU), median of 7 samples of 5 copies, counting read + write bytes (2 x the buffer per
// copy). A step's reads alone can go a little faster than such a copy, so 100% is a practical, not an
// absolute, ceiling. Writes and activations are left out of the bytes.
//
// --tokens-out FILE: one line per context and batch, "C B id id ...": sequence 0's N greedy ids (bench/
// compare_generate_tokens.py checks them against a peer's). Rows (markdown):
// | system | model | batch | context | new | prefill ms | decode ms/step | decode tok/s | MB/step | GB/s |
//   copy GB/s | % of roofline |
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench/copy_bandwidth.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "kernels/decode_step/persistent_decode.h"
#include "train/cli/device_select.h"
#include "train/generate/generator.h"
#include "train/generate/inference_model.h"
#include "train/measure/decode_traffic.h"

using namespace fathom;

namespace {

// The benchmark reads and writes ids only: generate() needs a tokenizer for the end-of-text id (ignored
// here) and for the continuations' text (none is wanted).
class IdsOnlyTokenizer final : public Tokenizer {
 public:
  explicit IdsOnlyTokenizer(uint32_t vocab) : vocab_(vocab) {}
  std::string decode(std::span<const uint32_t>) const override { return {}; }
  uint32_t vocab_size() const override { return vocab_; }
  uint32_t eos_id() const override { return vocab_; }  // no id: runs go past it anyway (ignore_eos)
  std::string name() const override { return "ids"; }
  const std::vector<AddedToken>& added_tokens() const override { return none_; }

 protected:
  void encode_ordinary(std::string_view, std::vector<uint32_t>&) const override {
    FATHOM_FAIL("bench_generate reads token ids, not text");
  }

 private:
  uint32_t vocab_;
  std::vector<AddedToken> none_;
};

// The prompt of `context` tokens: `ids` repeated and cut, or uniform draws seeded by the context.
std::vector<uint32_t> prompt_of(const std::vector<uint32_t>& ids, int64_t context, int64_t vocab) {
  std::vector<uint32_t> prompt(static_cast<size_t>(context));
  if (!ids.empty()) {
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = ids[i % ids.size()];
    return prompt;
  }
  std::mt19937_64 rng(static_cast<uint64_t>(context));
  std::uniform_int_distribution<int64_t> draw(0, vocab - 1);
  for (uint32_t& id : prompt) id = static_cast<uint32_t>(draw(rng));
  return prompt;
}

std::string default_label(const std::string& spec, const std::string& origin) {
  namespace fs = std::filesystem;
  if (spec.starts_with("hf:")) return fs::path(spec.substr(3)).lexically_normal().filename().string();
  // A checkpoint: RUN/checkpoints/step_N.
  return fs::path(origin).parent_path().parent_path().filename().string();
}

struct Args {
  std::string model, ids_file, tokens_out, label;
  std::vector<int64_t> contexts{128}, batches{1};
  int64_t new_tokens = 64, warmup = 2, repeats = 5, copy_mib = 1024;
  bool eager = false;
};

void run(const Args& a) {
  const ModelFiles files = read_model_files(a.model);
  const Device device = resolve_device("auto");
  const InferenceModel inference(files.config, files.weights, files.origin, device, device.is_cuda());
  const Decoder& model = inference.decoder();
  const DType dtype = inference.activation_dtype();  // the caches' and, with the compute copy, the weights'
  const IdsOnlyTokenizer tokenizer(uint32_t(files.config.vocab_size));
  const std::string label = a.label.empty() ? default_label(a.model, files.origin) : a.label;
  std::vector<uint32_t> ids;
  if (!a.ids_file.empty()) {
    std::ifstream in(a.ids_file);
    FATHOM_CHECK(in, "--ids: cannot read '", a.ids_file, "'");
    ids.assign(std::istream_iterator<uint32_t>(in), std::istream_iterator<uint32_t>());
    FATHOM_CHECK(!ids.empty(), "--ids: '", a.ids_file, "' holds no token ids");
  }
  std::ofstream tokens_out;
  if (!a.tokens_out.empty()) {
    tokens_out.open(a.tokens_out);
    FATHOM_CHECK(tokens_out, "--tokens-out: cannot write '", a.tokens_out, "'");
  }
  const double copy = bench::copy_bandwidth(device, size_t(a.copy_mib) << 20);
  std::fprintf(stderr, "bench_generate: copy bandwidth %.0f GB/s (%s of %lld MiB, read + write counted)\n", copy / 1e9,
               device.is_cuda() ? "cudaMemcpy D2D" : "host memcpy", (long long)a.copy_mib);
  const DecodeMemory memory = decode_memory(model, dtype);

  for (const int64_t context : a.contexts) {
    const std::vector<uint32_t> prompt = prompt_of(ids, context, files.config.vocab_size);
    for (const int64_t batch : a.batches) {
      check_decoding_caches_fit(memory, batch, context + a.new_tokens, available_memory(device), device.str());
      const DecodeTraffic traffic = decode_step_traffic(files.config, dtype, dtype, Decoder::depth_dtype(device), batch,
                                                        context + a.new_tokens / 2);
      for (const bool graphs : {true, false}) {
        if (!graphs && !(a.eager && device.is_cuda())) break;  // the CPU has no graphs: one row
        const GenerationOptions options{.max_new_tokens = a.new_tokens,
                                        .batch = batch,
                                        .sampling = {.temperature = 0},
                                        .ignore_eos = true,
                                        .cuda_graphs = graphs};
        std::vector<double> prefill, step;
        GenerationResult last;
        for (int64_t r = 0; r < a.warmup + a.repeats; ++r) {
          last = generate(model, tokenizer, prompt, options, dtype, device);
          if (r < a.warmup) continue;
          prefill.push_back(last.prefill_seconds);
          step.push_back(last.decode_seconds / double(std::max<int64_t>(last.decode_steps, 1)));
        }
        if (graphs && !last.cuda_graph && device.is_cuda())
          std::fprintf(stderr, "bench_generate: the decoding steps ran eagerly: %s\n", last.eager_reason.c_str());
        if (persistent_decode_choice() == Toggle::on && !last.persistent)
          std::fprintf(stderr, "bench_generate: the steps ran layer by layer: %s\n", last.persistent_reason.c_str());
        const double p = bench::median(prefill), s = bench::median(step), rate = double(traffic.total()) / s;
        std::printf(
            "| fathom generate%s%s | %s | %lld | %lld | %lld | %.1f | %.3f | %.0f | %.3f | %.1f | %.1f | %.1f |\n",
            last.cuda_graph || !device.is_cuda() ? "" : " (eager steps)", last.persistent ? " (persistent)" : "",
            label.c_str(), (long long)batch, (long long)context, (long long)a.new_tokens, 1e3 * p, 1e3 * s,
            double(batch) / s, double(traffic.total()) / 1e6, rate / 1e9, copy / 1e9, 100.0 * rate / copy);
        std::fflush(stdout);
        if (graphs && tokens_out.is_open()) {
          tokens_out << context << ' ' << batch;
          for (const uint32_t id : last.tokens[0]) tokens_out << ' ' << id;
          tokens_out << '\n' << std::flush;
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("fathom's greedy decoding speed against the copy bandwidth (see the header of bench_generate.cpp)");
  Args a;
  app.add_option("model", a.model, "Checkpoint, run folder or hf:DIR")->required();
  app.add_option("--ids", a.ids_file, "Prompt token ids (whitespace separated), repeated up to each context");
  app.add_option("--context", a.contexts, "Prompt lengths, comma separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--batch", a.batches, "Batch sizes, comma separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--new-tokens", a.new_tokens, "Tokens generated per sequence (2 or more)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--warmup", a.warmup, "Untimed generations first")
      ->check(CLI::Range(int64_t(0), int64_t(1000)))
      ->capture_default_str();
  app.add_option("--repeats", a.repeats, "Timed generations (medians)")
      ->check(CLI::Range(int64_t(1), int64_t(1000)))
      ->capture_default_str();
  app.add_flag("--eager", a.eager, "GPU: also rows of the steps run eagerly (no CUDA graph)");
  app.add_option("--tokens-out", a.tokens_out, "Write sequence 0's greedy ids per context and batch here");
  app.add_option("--copy-mib", a.copy_mib, "Buffer of the copy-bandwidth measurement, MiB")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
      ->capture_default_str();
  app.add_option("--label", a.label, "The model column (default: the run or HF folder's name)");
  CLI11_PARSE(app, argc, argv);
  try {
    run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
