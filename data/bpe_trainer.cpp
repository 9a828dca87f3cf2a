#include "data/bpe_trainer.h"

#include <algorithm>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json.h"
#include "data/byte_level.h"
#include "data/pretokenizer.h"
#include "data/text.h"
#include "data/tokenizer.h"

namespace fathom {

namespace {

uint64_t pack(uint32_t left, uint32_t right) { return (uint64_t(left) << 32) | right; }

// A pair and its count when pushed; stale once the count has changed since (checked on pop).
struct Candidate {
  int64_t count;
  uint32_t left, right;
  // std heaps put the greatest on top: the highest count, then the smallest left, right ids.
  bool operator<(const Candidate& o) const {
    if (count != o.count) return count < o.count;
    if (left != o.left) return left > o.left;
    return right > o.right;
  }
};

}  // namespace

TrainedBpe train_bpe(const std::unordered_map<std::string, uint64_t>& piece_counts, size_t target_tokens) {
  TrainedBpe bpe;
  std::unordered_map<std::string, uint32_t> id_of_token;
  uint32_t id_of_byte[256];
  const std::array<uint8_t, 256>& order = bytes_in_byte_level_order();
  for (uint32_t id = 0; id < 256; ++id) {
    bpe.tokens.emplace_back(1, char(order[id]));
    id_of_token.emplace(bpe.tokens.back(), id);
    id_of_byte[order[id]] = id;
  }

  // Pieces sorted by their bytes, so word indices (and everything after) do not depend on the
  // hash map's order. Single bytes hold no pair and are left out.
  std::vector<std::pair<std::string_view, uint64_t>> sorted;
  for (const auto& [piece, count] : piece_counts)
    if (piece.size() >= 2 && count > 0) sorted.emplace_back(piece, count);
  std::sort(sorted.begin(), sorted.end());

  struct Word {
    std::vector<uint32_t> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(sorted.size());
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> words_with_pair;  // may list words that lost the pair
  for (const auto& [piece, count] : sorted) {
    const uint32_t w = uint32_t(words.size());
    Word word{{}, int64_t(count)};
    for (const char c : piece) word.symbols.push_back(id_of_byte[static_cast<unsigned char>(c)]);
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const uint64_t key = pack(word.symbols[i], word.symbols[i + 1]);
      pair_count[key] += word.count;
      std::vector<uint32_t>& list = words_with_pair[key];
      if (list.empty() || list.back() != w) list.push_back(w);
    }
    words.push_back(std::move(word));
  }
  std::vector<Candidate> heap;
  heap.reserve(pair_count.size());
  for (const auto& [key, count] : pair_count) heap.push_back({count, uint32_t(key >> 32), uint32_t(key)});
  std::make_heap(heap.begin(), heap.end());

  std::vector<uint32_t> last_visit(words.size(), UINT32_MAX);  // merge index that last rewrote the word
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<uint32_t> rewritten;
  while (bpe.tokens.size() < target_tokens && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate best = heap.back();
    heap.pop_back();
    const uint64_t key = pack(best.left, best.right);
    const auto current = pair_count.find(key);
    if (current == pair_count.end() || current->second != best.count) continue;  // stale

    const std::string joined = bpe.tokens[best.left] + bpe.tokens[best.right];
    const auto [existing, fresh] = id_of_token.emplace(joined, uint32_t(bpe.tokens.size()));
    if (fresh) bpe.tokens.push_back(joined);
    const uint32_t merged = existing->second;
    const uint32_t merge_index = uint32_t(bpe.merges.size());
    bpe.merges.push_back({best.left, best.right, merged});

    // Rewrite every word holding the pair, left to right, and collect the net change of every
    // pair count; only pairs whose count changed go back on the heap.
    delta.clear();
    const std::vector<uint32_t> holders = std::move(words_with_pair[key]);
    words_with_pair.erase(key);
    for (const uint32_t w : holders) {
      if (last_visit[w] == merge_index) continue;
      last_visit[w] = merge_index;
      Word& word = words[w];
      const std::vector<uint32_t>& s = word.symbols;
      rewritten.clear();
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == best.left && s[i + 1] == best.right) {
          rewritten.push_back(merged);
          i += 2;
        } else {
          rewritten.push_back(s[i++]);
        }
      }
      if (rewritten.size() == s.size()) continue;  // an earlier merge took the pair away
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[pack(s[i], s[i + 1])] -= word.count;
      for (size_t i = 0; i + 1 < rewritten.size(); ++i) {
        const uint64_t pair = pack(rewritten[i], rewritten[i + 1]);
        delta[pair] += word.count;
        if (rewritten[i] == merged || rewritten[i + 1] == merged) {
          std::vector<uint32_t>& list = words_with_pair[pair];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      word.symbols.swap(rewritten);
    }
    for (const auto& [pair, change] : delta) {
      if (change == 0) continue;
      int64_t& count = pair_count[pair];
      count += change;
      if (count <= 0) {
        pair_count.erase(pair);
      } else {
        heap.push_back({count, uint32_t(pair >> 32), uint32_t(pair)});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  return bpe;
}

std::string trained_bpe_json(const TrainedBpe& bpe, std::string_view pattern, std::string_view eos_text) {
  const uint32_t eos_id = uint32_t(bpe.tokens.size());
  // Laid out one vocabulary entry and one merge per line, so diffs of trained files stay readable.
  std::string out;
  out += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  out += "  \"added_tokens\": [\n    {\"id\": " + std::to_string(eos_id) + ", \"content\": " + json_quote(eos_text) +
         ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}\n"
         "  ],\n";
  out += "  \"normalizer\": null,\n";
  out +=
      "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
      "    {\"type\": \"Split\", \"pattern\": {\"Regex\": " +
      json_quote(pattern) +
      "}, \"behavior\": \"Isolated\", \"invert\": false},\n"
      "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}\n"
      "  ]},\n";
  out += "  \"post_processor\": null,\n";
  out +=
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": "
      "true},\n";
  out +=
      "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
      "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
      "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {\n";
  for (uint32_t id = 0; id < bpe.tokens.size(); ++id)
    out += "      " + json_quote(bytes_to_byte_level(bpe.tokens[id])) + ": " + std::to_string(id) + ",\n";
  out += "      " + json_quote(eos_text) + ": " + std::to_string(eos_id) + "\n    },\n    \"merges\": [\n";
  for (size_t i = 0; i < bpe.merges.size(); ++i) {
    const TrainedBpe::Merge& m = bpe.merges[i];
    // Byte-level text never holds a space (it is "Ġ"), so "left right" is unambiguous.
    out +=
        "      " + json_quote(bytes_to_byte_level(bpe.tokens[m.left]) + " " + bytes_to_byte_level(bpe.tokens[m.right]));
    out += i + 1 < bpe.merges.size() ? ",\n" : "\n";
  }
  out += "    ]\n  }\n}\n";
  return out;
}

BpeTrainingReport train_bpe_tokenizer(const std::vector<std::string>& files, uint32_t vocab_size,
                                      const std::filesystem::path& out) {
  FATHOM_CHECK(vocab_size >= 257, "tokenizer vocab size ", vocab_size,
               " is too small: it must hold the 256 bytes and <|endoftext|> (at least 257)");
  FATHOM_CHECK(!files.empty(), "no text files to train the tokenizer on");
  BpeTrainingReport report;
  const Pretokenizer pretokenizer(std::string(kGpt2Pattern), "GPT-2 pre-tokenizer");
  std::unordered_map<std::string, uint64_t> counts;
  std::vector<std::string_view> pieces;
  for (const std::string& file : files) {
    for_each_document(file, DocumentSplit::whole_file, [&](std::string_view text) {
      report.bytes += text.size();
      pieces.clear();
      pretokenizer.split(text, pieces);
      report.pieces += pieces.size();
      for (const std::string_view piece : pieces) ++counts[std::string(piece)];
    });
  }
  std::string names;
  for (const std::string& f : files) names += (names.empty() ? "" : ", ") + f;
  FATHOM_CHECK(report.bytes > 0, "no text to train the tokenizer on: every file is empty or blank [", names, "]");
  report.unique_pieces = counts.size();
  const TrainedBpe bpe = train_bpe(counts, vocab_size - 1);
  report.merges = bpe.merges.size();
  report.vocab_size = uint32_t(bpe.tokens.size() + 1);
  if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
  write_file_atomically(out, trained_bpe_json(bpe, kGpt2Pattern, kEndOfText));
  return report;
}

}  // namespace fathom
