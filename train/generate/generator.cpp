#include "train/generate/generator.h"

#include <algorithm>
#include <chrono>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/argmax/argmax.h"
#include "kernels/sampling/sampling.h"
#include "layers/attention.h"
#include "train/cli/device_select.h"
#include "train/generate/decode_step.h"
#include "train/measure/memory_plan.h"

namespace fathom {

namespace {

using Clock = std::chrono::steady_clock;

// The next token of every sequence at decoding step `step`, chosen on the logits' device (argmax, or
// kernels/sampling's sample_rows), so only B ids cross to the host. Row b is sample
// samples[b] of its prompt, which numbers its draws (sampler.h: draw_index).
// `greedy_ids`: the argmax of the logits when already taken on the device (undefined: take it here).
std::vector<int64_t> next_tokens(const Tensor& logits, const SamplingOptions& sampling, int64_t step,
                                 const std::vector<int64_t>& samples, const Tensor& greedy_ids = {}) {
  const int64_t B = logits.dim(0);
  Tensor chosen;
  if (sampling.temperature == 0) {
    chosen = greedy_ids.defined() ? greedy_ids : argmax_rows(logits);
  } else {
    std::vector<int64_t> draws(static_cast<size_t>(B));  // draw_index's bits, as the kernel reads them
    for (int64_t b = 0; b < B; ++b) draws[size_t(b)] = int64_t(draw_index(step, samples[size_t(b)]));
    chosen = sample_rows(logits, sampling, Tensor::from_vector(draws, {B}).to(logits.device()));
  }
  const std::vector<int32_t> ids = chosen.to(Device::cpu()).to_vector<int32_t>();
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// Where a prompt sits in messages: "the prompt" alone, else "prompt 3" (1-based).
std::string prompt_name(size_t p, size_t prompts) {
  return prompts == 1 ? "the prompt" : "prompt " + std::to_string(p + 1);
}

// The prefill: every prompt read into `state` and the logits [B, vocab] of each sequence's last prompt
// position. One prompt: its samples read together, as one batch of copies. Several: each prompt read
// alone into a one-sequence state, which its rows then take (DecodeState::take_sequence), so a prompt's
// caches and logits are what it gets decoded alone.
Tensor prefill(const Decoder& model, const std::vector<std::vector<uint32_t>>& prompts, int64_t samples,
               DecodeState& state, DType dtype, Device device) {
  if (prompts.size() == 1) {
    const std::vector<uint32_t>& prompt = prompts[0];
    std::vector<int32_t> ids;
    for (int64_t s = 0; s < samples; ++s) ids.insert(ids.end(), prompt.begin(), prompt.end());
    const Tensor input = Tensor::from_vector(ids, {samples, int64_t(prompt.size())}).to(device);
    return last_logits(model, model.decode(input, state));
  }
  Tensor logits;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<int32_t> ids(prompts[p].begin(), prompts[p].end());
    const int64_t P = int64_t(ids.size());
    DecodeState alone = model.start_decoding(1, P, dtype, device);
    const Tensor own = last_logits(model, model.decode(Tensor::from_vector(ids, {1, P}).to(device), alone));
    if (!logits.defined()) logits = Tensor::empty({state.batch, own.dim(1)}, own.dtype(), device);
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t row = int64_t(p) * samples + s;
      state.take_sequence(row, alone);
      logits.narrow(row, 1).copy_from(own);
    }
  }
  return logits;
}

// How much of `text`'s end could be the start of `stop` (held back from streaming until it is known
// not to be the stop text).
size_t stop_prefix_at_end(const std::string& text, const std::string& stop) {
  for (size_t n = std::min(text.size(), stop.size() - 1); n > 0; --n)
    if (text.compare(text.size() - n, n, stop, 0, n) == 0) return n;
  return 0;
}

}  // namespace

DecodeMemory decode_memory(const Decoder& model, DType dtype) {
  const DecodeState one = model.start_decoding(1, 1, dtype, Device::cpu());
  // An attention layer's cache for one position: what a layer without one saves.
  const size_t kv_per_position = Attention(model.config()).make_cache(1, 1, dtype, Device::cpu())->bytes_per_position();
  DecodeMemory memory;
  for (size_t i = 0; i < one.layers.size(); ++i) {
    const MixerCache& cache = *one.layers[i];
    memory.bytes_per_position += cache.bytes_per_position();
    if (cache.bytes_per_position() > 0) continue;
    memory.state_bytes += cache.bytes();
    ++memory.state_layers;
    memory.kv_bytes_saved_per_position += kv_per_position;
    const std::string& kind = model.config().layer_kind(int64_t(i));
    if (std::find(memory.state_kinds.begin(), memory.state_kinds.end(), kind) == memory.state_kinds.end())
      memory.state_kinds.push_back(kind);
  }
  return memory;
}

size_t complete_utf8_prefix(const std::string& text) {
  // Walk back over at most 3 continuation bytes to the last lead byte; keep it only if its
  // character is whole.
  size_t n = text.size(), back = 0;
  while (back < n && back < 4 && (static_cast<unsigned char>(text[n - 1 - back]) & 0xC0) == 0x80) ++back;
  if (back == n) return n;
  const auto lead = static_cast<unsigned char>(text[n - 1 - back]);
  const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  return back + 1 >= length ? n : n - 1 - back;
}

GenerationResult generate_batch(const Decoder& model, const Tokenizer& tokenizer,
                                const std::vector<std::vector<uint32_t>>& prompts, const GenerationOptions& options,
                                DType dtype, Device device, const TextSink& sink) {
  FATHOM_CHECK(!prompts.empty(), "generate: no prompts");
  FATHOM_CHECK(options.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got ", options.max_new_tokens);
  FATHOM_CHECK(options.batch >= 1, "--batch must be >= 1, got ", options.batch);
  options.sampling.validate();
  const int64_t vocab = model.config().vocab_size;
  int64_t longest = 0, prompt_tokens = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::string name = prompt_name(p, prompts.size());
    FATHOM_CHECK(!prompts[p].empty(), "generate: ", name, " encodes to no tokens");
    for (uint32_t id : prompts[p])
      FATHOM_CHECK(int64_t(id) < vocab, "generate: ", name, "'s token ", id, " is outside the model's vocabulary of ",
                   vocab, " (is this the model's tokenizer?)");
    FATHOM_CHECK(int64_t(prompts[p].size()) + options.max_new_tokens < (int64_t(1) << 31), "generate: ", name, "'s ",
                 prompts[p].size(), " tokens + ", options.max_new_tokens,
                 " new ones exceed the 2^31 - 1 positions decoding counts");
    longest = std::max(longest, int64_t(prompts[p].size()));
    prompt_tokens += int64_t(prompts[p].size());
  }
  NoGrad no_grad;
  const int64_t S = options.batch, B = int64_t(prompts.size()) * S;
  DecodeState state = model.start_decoding(B, longest + options.max_new_tokens, dtype, device);
  GenerationResult result;
  result.prompt_tokens = prompt_tokens;
  result.prefill_tokens = prompts.size() == 1 ? prompt_tokens * S : prompt_tokens;
  result.tokens.resize(size_t(B));
  result.texts.resize(size_t(B));
  result.cache_bytes = state.bytes();
  result.cache_bytes_per_position = state.bytes_per_position();
  std::vector<bool> done(size_t(B), false);
  std::vector<int64_t> samples(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) samples[size_t(b)] = b % S;
  size_t streamed = 0;

  // The prompts are the prefill; every later step one token per sequence (a CUDA graph on a GPU).
  DecodeStep decode_step(model, state, options.sampling.temperature == 0, options.cuda_graphs);
  std::vector<int32_t> next(static_cast<size_t>(B));
  auto start = Clock::now();
  bool launched_ahead = false;  // the step this iteration reads was launched by the iteration before
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    std::vector<int64_t> chosen;
    if (step == 0) {
      chosen = next_tokens(prefill(model, prompts, S, state, dtype, device), options.sampling, step, samples);
    } else if (decode_step.chains()) {
      // The next step goes to the device before this one's ids reach the host, so the device does not wait
      // for the host's work between steps (a greedy step's input is the step before's argmax).
      if (!launched_ahead) decode_step.run(next);
      // Where every sequence then stops early (end of text, stop text), the step launched past it is
      // discarded; its time counts in decode_seconds.
      const bool launch_next = step + 1 < options.max_new_tokens;
      const std::vector<int32_t> ids = decode_step.ids_then_launch_next(launch_next);
      launched_ahead = launch_next;
      chosen.assign(ids.begin(), ids.end());
    } else {
      const DecodeStep::Output out = decode_step.run(next);
      chosen = next_tokens(out.logits, options.sampling, step, samples, out.ids);
    }
    if (step == 0) {
      synchronize(device);
      result.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      start = Clock::now();
    }
    for (int64_t b = 0; b < B; ++b) {
      const int64_t token = chosen[size_t(b)];
      next[size_t(b)] = int32_t(token);
      if (done[size_t(b)]) continue;
      if (uint32_t(token) == tokenizer.eos_id() && !options.ignore_eos) {
        done[size_t(b)] = true;
        continue;
      }
      std::vector<uint32_t>& tokens = result.tokens[size_t(b)];
      tokens.push_back(uint32_t(token));
      // The text is needed as it grows only to find the stop text or to stream; else once at the end.
      if (options.stop.empty() && !(sink && b == 0)) continue;
      std::string& text = result.texts[size_t(b)];
      text = tokenizer.decode(tokens);
      if (!options.stop.empty()) {
        const size_t at = text.find(options.stop);
        if (at != std::string::npos) {
          text.resize(at);
          done[size_t(b)] = true;
        }
      }
    }
    if (sink) {
      const std::string& text = result.texts[0];
      size_t whole = text.size();
      if (!done[0]) {
        whole = complete_utf8_prefix(text);
        if (!options.stop.empty()) whole = std::min(whole, text.size() - stop_prefix_at_end(text, options.stop));
      }
      if (whole > streamed) sink(text.substr(streamed, whole - streamed));
      streamed = std::max(streamed, whole);
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; }) || step + 1 == options.max_new_tokens) break;
    ++result.decode_steps;
  }
  result.cuda_graph = decode_step.graphed();
  result.eager_reason = decode_step.eager_reason();
  result.persistent = decode_step.persistent();
  result.persistent_reason = decode_step.persistent_reason();
  synchronize(device);
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.stop.empty())
    for (int64_t b = 0; b < B; ++b) result.texts[size_t(b)] = tokenizer.decode(result.tokens[size_t(b)]);
  return result;
}

GenerationResult generate(const Decoder& model, const Tokenizer& tokenizer, const std::vector<uint32_t>& prompt,
                          const GenerationOptions& options, DType dtype, Device device, const TextSink& sink) {
  return generate_batch(model, tokenizer, {prompt}, options, dtype, device, sink);
}

size_t check_decoding_caches_fit(const DecodeMemory& memory, int64_t batch, int64_t positions, size_t free_bytes,
                                 const std::string& device_name) {
  FATHOM_CHECK(batch >= 1 && positions >= 1, "decoding needs at least one sequence and one position, got ", batch,
               " x ", positions);
  const double bytes =
      (double(memory.bytes_per_position) * double(positions) + double(memory.state_bytes)) * double(batch);
  FATHOM_CHECK(bytes < double(free_bytes), "the decoding caches for ", batch, " x ", positions, " positions need ",
               gib(size_t(std::min(bytes, 1e18))), " but ", device_name, " has ", gib(free_bytes),
               " free; lower --batch or --max-new-tokens");
  return size_t(bytes);
}

}  // namespace fathom
