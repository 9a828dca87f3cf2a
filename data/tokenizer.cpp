#include "data/tokenizer.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "data/bpe_files.h"
#include "data/byte_tokenizer.h"

namespace fathom {

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 1);
  // The added tokens to recognise, each with the position of its next occurrence.
  struct Candidate {
    const AddedToken* token;
    size_t next;
  };
  std::vector<Candidate> candidates;
  for (const AddedToken& t : added_tokens())
    if (allow_special || !t.special) candidates.push_back({&t, text.find(t.text)});
  if (candidates.empty()) {
    encode_ordinary(text, out);
    return out;
  }
  size_t position = 0;
  while (true) {
    // The earliest occurrence wins; among those starting together, the longest.
    const Candidate* best = nullptr;
    for (const Candidate& c : candidates) {
      if (c.next == std::string_view::npos) continue;
      if (best == nullptr || c.next < best->next ||
          (c.next == best->next && c.token->text.size() > best->token->text.size()))
        best = &c;
    }
    if (best == nullptr) break;
    const size_t start = best->next;
    encode_ordinary(text.substr(position, start - position), out);
    out.push_back(best->token->id);
    position = start + best->token->text.size();
    for (Candidate& c : candidates)
      if (c.next != std::string_view::npos && c.next < position) c.next = text.find(c.token->text, position);
  }
  encode_ordinary(text.substr(position), out);
  return out;
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view added_token_text) const {
  for (const AddedToken& t : added_tokens())
    if (t.text == added_token_text) return t.id;
  return std::nullopt;
}

namespace {

std::filesystem::path tokenizers_folder() {
  const char* override_folder = std::getenv("FATHOM_TOKENIZERS");
  if (override_folder != nullptr && *override_folder != '\0') return override_folder;
  return std::filesystem::path(FATHOM_SOURCE_DIR) / "data" / "tokenizers";
}

TiktokenSpec cl100k_spec(std::string name) {
  return {.name = std::move(name),
          .pattern = std::string(kCl100kPattern),
          .added = {{std::string(kEndOfText), 100257, true},
                    {"<|fim_prefix|>", 100258, true},
                    {"<|fim_middle|>", 100259, true},
                    {"<|fim_suffix|>", 100260, true},
                    {"<|endofprompt|>", 100276, true}},
          .eos_text = std::string(kEndOfText),
          .pad_text = std::nullopt};
}

// OLMo2's tokenizer (OLMo-core's "dolma2"): cl100k_base's ranks with EOS 100257 and PAD 100277;
// no BOS. Models pad the embedding to 100352 rows.
TiktokenSpec dolma2_spec() {
  return {.name = "dolma2",
          .pattern = std::string(kCl100kPattern),
          .added = {{std::string(kEndOfText), 100257, true}, {"<|pad|>", 100277, true}},
          .eos_text = std::string(kEndOfText),
          .pad_text = "<|pad|>",
          .vocab_size = 100278};
}

// A rank file given by path: cl100k_base by its name, GPT-2-era files (r50k/p50k) with GPT-2's
// regex; EOS "<|endoftext|>" takes the id after the last rank unless the preset places it.
TiktokenSpec spec_for_rank_file(const std::filesystem::path& path, const std::string& name) {
  const std::string stem = path.stem().string();
  if (stem == "cl100k_base") return cl100k_spec(name);
  const bool gpt2_era = stem == "r50k_base" || stem == "p50k_base" || stem == "p50k_edit" || stem == "gpt2";
  return {.name = name,
          .pattern = std::string(gpt2_era ? kGpt2Pattern : kCl100kPattern),
          .added = {},
          .eos_text = std::string(kEndOfText),
          .pad_text = std::nullopt};
}

std::string known_names() {
  std::string known;
  for (const std::string& k : known_tokenizers()) known += (known.empty() ? "" : ", ") + k;
  return known;
}

std::unique_ptr<Tokenizer> tokenizer_from_path(const std::string& path_text) {
  const std::filesystem::path path(path_text);
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  FATHOM_CHECK(std::filesystem::exists(status), "unknown tokenizer '", path_text, "': not a known name (",
               known_names(),
               ") and no file or folder at that path (a path may name a tiktoken rank file, a folder with "
               "encoder.json + vocab.bpe, or a HF tokenizer.json)");
  if (std::filesystem::is_directory(status)) {
    if (std::filesystem::exists(path / "encoder.json") || std::filesystem::exists(path / "vocab.bpe"))
      return load_gpt2_folder(path, path_text);
    if (std::filesystem::exists(path / "tokenizer.json"))
      return load_hf_tokenizer_json(path / "tokenizer.json", path_text);
    FATHOM_FAIL("tokenizer folder ", path_text, " holds neither encoder.json + vocab.bpe nor tokenizer.json");
  }
  if (path.extension() == ".json") return load_hf_tokenizer_json(path, path_text);
  return load_tiktoken(path, spec_for_rank_file(path, path_text));
}

}  // namespace

std::vector<std::string> known_tokenizers() { return {"bytes", "cl100k", "dolma2", "gpt2"}; }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name == "cl100k") return load_tiktoken(tokenizers_folder() / "cl100k_base.tiktoken", cl100k_spec("cl100k"));
  if (name == "dolma2") return load_tiktoken(tokenizers_folder() / "cl100k_base.tiktoken", dolma2_spec());
  if (name == "gpt2") return load_gpt2_folder(tokenizers_folder() / "gpt2", "gpt2");
  return tokenizer_from_path(name);
}

}  // namespace fathom
