// fathom's generation speed, in the rows bench/hf_generate_reference.py prints for HF transformers:
// greedy decoding of a fixed prompt to exactly N new tokens (past the end-of-text token) with the
// decoding caches, bf16 on the GPU.
//
//   bench_generate CHECKPOINT IDS_FILE N BATCH...
//
// CHECKPOINT is a fathom checkpoint or run folder; IDS_FILE the prompt's token ids, whitespace
// separated. After two warm-up generations, prefill (the prompt's step, to its first token's logits) and
// decode (the N - 1 steps after it) are the medians of 5 runs; each run synchronises the device before
// it reads its clock. On a GPU each batch size gives two rows: the decoding steps replayed as a CUDA
// graph (train/generate/decode_step.h, what `fathom generate` does), and "(eager steps)" without graphs.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "train/cli/device_select.h"
#include "train/generate/generator.h"
#include "train/generate/inference_model.h"

using namespace fathom;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: bench_generate CHECKPOINT IDS_FILE N BATCH...\n");
    return 2;
  }
  try {
    const ModelFiles files = read_model_files(argv[1]);
    std::ifstream ids_file(argv[2]);
    const std::vector<uint32_t> prompt{std::istream_iterator<uint32_t>(ids_file), std::istream_iterator<uint32_t>()};
    const int64_t new_tokens = std::stoll(argv[3]);
    const Device device = resolve_device("auto");
    const bool mixed = device.is_cuda();
    const InferenceModel inference(files.config, files.weights, files.origin, device, mixed);
    const Decoder& model = inference.decoder();
    const auto tokenizer = make_tokenizer(files.tokenizer);
    // The run folder's name (RUN/checkpoints/step_N).
    const std::string label = std::filesystem::path(files.origin).parent_path().parent_path().filename().string();
    for (int i = 4; i < argc; ++i) {
      // The decoding steps as CUDA graphs (what `fathom generate` runs), then eagerly for comparison.
      for (const bool graphs : {true, false}) {
        GenerationOptions options{.max_new_tokens = new_tokens,
                                  .batch = std::stoll(argv[i]),
                                  .sampling = {.temperature = 0},
                                  .ignore_eos = true,
                                  .cuda_graphs = graphs};
        std::vector<double> prefill, decode;
        bool graphed = false;
        std::string reason;
        for (int run = 0; run < 7; ++run) {
          const GenerationResult r = generate(model, *tokenizer, prompt, options, inference.activation_dtype(), device);
          graphed = r.cuda_graph;
          reason = r.eager_reason;
          if (run < 2) continue;
          prefill.push_back(r.prefill_seconds);
          decode.push_back(r.decode_seconds / double(std::max<int64_t>(r.decode_steps, 1)));
        }
        if (graphs && !graphed && device.is_cuda())
          std::fprintf(stderr, "bench_generate: the decoding steps ran eagerly: %s\n", reason.c_str());
        const double p = median(prefill), step = median(decode);
        std::printf("| fathom generate%s | %s | %lld | %zu | %lld | %.1f | %.0f | %.2f | %.0f |\n",
                    graphed ? "" : " (eager steps)", label.c_str(), (long long)options.batch, prompt.size(),
                    (long long)new_tokens, 1e3 * p, double(options.batch) * double(prompt.size()) / p, 1e3 * step,
                    double(options.batch) / step);
        std::fflush(stdout);
        if (!device.is_cuda()) break;  // the CPU has no graphs: one row
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
