// Generation: the prompts read in a prefill, then one token per sequence per step from the decoding
// caches (Decoder::decode), each chosen by the sampler. The batch holds `batch` samples of each prompt;
// a sequence stops at the tokenizer's end-of-text token, at the stop text, or after max_new_tokens.
//
// Prompts of different lengths decode as one batch (a ragged batch), and no prompt's output depends on
// the others: each prompt is prefilled alone (a one-sequence state, then DecodeState::take_sequence
// into its rows), every later step runs the whole batch with each sequence at its own position and
// length, and a sampled token's draw is numbered by its prompt's sample and the step, not by the batch
// row (sampler.h: draw_index). Finished sequences keep stepping with the batch (their tokens are
// dropped) until every sequence has finished. A single prompt's samples are prefilled together, as one
// batch of copies.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "layers/decoder.h"
#include "train/generate/sampler.h"

namespace fathom {

struct GenerationOptions {
  int64_t max_new_tokens = 128;
  int64_t batch = 1;  // samples of each prompt
  SamplingOptions sampling;
  std::string stop{};       // stop text ("" for none): a sequence ends where its continuation first holds it
  bool ignore_eos = false;  // keep going past the end-of-text token (benchmarks: a fixed length)
  bool cuda_graphs =
      true;  // GPU: replay the decoding steps as a CUDA graph where they can be (train/generate/decode_step.h)
};

// Sequences are prompt-major: sequence p * batch + s is sample s of prompt p.
struct GenerationResult {
  std::vector<std::string> texts;             // per sequence: the continuation (cut at the stop text)
  std::vector<std::vector<uint32_t>> tokens;  // per sequence: the generated ids
  int64_t prompt_tokens = 0;                  // of the prompts, each counted once
  int64_t prefill_tokens = 0;                 // the prefill read (a single prompt: once per sample)
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;  // steps after the prefill
  size_t cache_bytes = 0, cache_bytes_per_position = 0;
  bool cuda_graph = false;        // the decoding steps replayed a CUDA graph
  std::string eager_reason;       // else why not (train/generate/decode_step.h)
  bool persistent = false;        // the steps ran as the persistent kernel (train/generate/persistent_step.h)
  std::string persistent_reason;  // else why not
};

// What decoding keeps per sequence: the KV caches' bytes per position, and the constant states of the
// layers that keep one instead (dsla), with the KV cache those layers would hold as attention layers.
struct DecodeMemory {
  size_t bytes_per_position = 0;
  size_t state_bytes = 0;  // constant: whatever the length
  int64_t state_layers = 0;
  std::vector<std::string> state_kinds = {};  // the kinds of those layers
  size_t kv_bytes_saved_per_position = 0;     // by those layers, against attention in their place
};
// Measured from a one-position decoding state of `model` on the host, activations in `dtype`.
DecodeMemory decode_memory(const Decoder& model, DType dtype);

// Called after each step with sequence 0's new text (complete UTF-8 only), for streaming.
using TextSink = std::function<void(const std::string&)>;

// `dtype` is the activations' (the caches'), on `device`. Throws, naming the prompt (1-based) where
// there are several, when there are no prompts, a prompt is empty or holds an id outside the model's
// vocabulary, or a prompt + max_new_tokens positions exceed the I32 positions. Several prompts need
// every layer kind's MixerCache::copy_sequence.
GenerationResult generate_batch(const Decoder& model, const Tokenizer& tokenizer,
                                const std::vector<std::vector<uint32_t>>& prompts, const GenerationOptions& options,
                                DType dtype, Device device, const TextSink& sink = {});
// One prompt: generate_batch of {prompt}.
GenerationResult generate(const Decoder& model, const Tokenizer& tokenizer, const std::vector<uint32_t>& prompt,
                          const GenerationOptions& options, DType dtype, Device device, const TextSink& sink = {});

// The decoding caches and states of `batch` sequences of `positions` positions, against the `free_bytes`
// of `device_name`: their size, or an error naming both that says what to lower.
size_t check_decoding_caches_fit(const DecodeMemory& memory, int64_t batch, int64_t positions, size_t free_bytes,
                                 const std::string& device_name);

// The length of the longest prefix of `text` that ends on a whole UTF-8 character.
size_t complete_utf8_prefix(const std::string& text);

}  // namespace fathom
