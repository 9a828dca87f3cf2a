// Hugging Face tokenizer.json (byte-level BPE models only).
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_reader.h"
#include "data/bpe_files.h"
#include "data/byte_level.h"

namespace fathom {

namespace {

// Reads one tokenizer.json, every error naming the file and the key path.
class HfReader {
 public:
  explicit HfReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    FATHOM_FAIL(source_, ": ", where, ": ", what);
  }
  // The member, or nullptr when it is absent or null.
  const JsonValue* optional(const JsonValue& object, std::string_view key) const {
    const JsonValue* value = object.find(key);
    return value == nullptr || value->is_null() ? nullptr : value;
  }
  const JsonValue& required(const JsonValue& object, std::string_view key, const std::string& path) const {
    const JsonValue* value = optional(object, key);
    if (value == nullptr) fail(path, "missing");
    return *value;
  }
  const JsonValue& object(const JsonValue& parent, std::string_view key, const std::string& path) const {
    const JsonValue& value = required(parent, key, path);
    if (!value.is_object()) fail(path, std::string("expected an object, found ") + value.kind_name());
    return value;
  }
  const std::string& string(const JsonValue& parent, std::string_view key, const std::string& path) const {
    const JsonValue& value = required(parent, key, path);
    if (!value.is_string()) fail(path, std::string("expected a string, found ") + value.kind_name());
    return value.text();
  }
  bool flag(const JsonValue& parent, std::string_view key, const std::string& path, bool fallback) const {
    const JsonValue* value = optional(parent, key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(path, std::string("expected true or false, found ") + value->kind_name());
    return value->boolean();
  }
  uint32_t id(const JsonValue& value, const std::string& path) const {
    const std::optional<int64_t> id = value.integer();
    if (!id || *id < 0 || *id > kMaxTokenId)
      fail(path, "expected a token id (an integer from 0 to " + std::to_string(kMaxTokenId) + "), found " +
                     std::string(value.kind_name()) + " " + value.text());
    return uint32_t(*id);
  }
  // A pre-tokenizer, decoder or normalizer "type".
  const std::string& type(const JsonValue& component, const std::string& path) const {
    if (!component.is_object()) fail(path, std::string("expected an object, found ") + component.kind_name());
    return string(component, "type", path + ".type");
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

std::vector<AddedToken> read_added_tokens(const HfReader& r, const JsonValue& root) {
  std::vector<AddedToken> added;
  const JsonValue* list = r.optional(root, "added_tokens");
  if (list == nullptr) return added;
  if (!list->is_array()) r.fail("added_tokens", std::string("expected an array, found ") + list->kind_name());
  for (size_t i = 0; i < list->items().size(); ++i) {
    const JsonValue& entry = list->items()[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object()) r.fail(path, std::string("expected an object, found ") + entry.kind_name());
    AddedToken token;
    token.id = r.id(r.required(entry, "id", path + ".id"), path + ".id");
    token.text = r.string(entry, "content", path + ".content");
    if (token.text.empty()) r.fail(path + ".content", "empty");
    token.special = r.flag(entry, "special", path + ".special", false);
    for (const char* unsupported : {"lstrip", "rstrip", "single_word"}) {
      if (r.flag(entry, unsupported, path + "." + unsupported, false))
        r.fail(path + "." + unsupported, "true is not supported (added tokens match their exact text)");
    }
    added.push_back(std::move(token));
  }
  return added;
}

// The regex of the supported pre-tokenizers: ByteLevel with use_regex (GPT-2's pattern), or a
// Sequence of one regex Split and a ByteLevel without use_regex (cl100k, Llama 3, ...).
std::string read_pretokenizer_pattern(const HfReader& r, const JsonValue& root) {
  const JsonValue& pre = r.required(root, "pre_tokenizer", "pre_tokenizer");
  const auto byte_level = [&](const JsonValue& node, const std::string& path) {
    if (r.flag(node, "add_prefix_space", path + ".add_prefix_space", true))
      r.fail(path + ".add_prefix_space", "true is not supported (text is encoded as given)");
    return r.flag(node, "use_regex", path + ".use_regex", true);
  };
  const std::string& type = r.type(pre, "pre_tokenizer");
  if (type == "ByteLevel") {
    if (!byte_level(pre, "pre_tokenizer")) r.fail("pre_tokenizer.use_regex", "false leaves no way to split the text");
    return std::string(kGpt2Pattern);
  }
  if (type != "Sequence") r.fail("pre_tokenizer.type", "\"" + type + "\" is not supported (ByteLevel or Sequence)");
  const JsonValue& steps = r.required(pre, "pretokenizers", "pre_tokenizer.pretokenizers");
  if (!steps.is_array()) r.fail("pre_tokenizer.pretokenizers", "expected an array");
  std::optional<std::string> pattern;
  bool saw_byte_level = false;
  for (size_t i = 0; i < steps.items().size(); ++i) {
    const JsonValue& step = steps.items()[i];
    const std::string path = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
    const std::string& step_type = r.type(step, path);
    if (step_type == "ByteLevel" && !saw_byte_level) {
      saw_byte_level = true;
      if (byte_level(step, path)) {
        if (pattern) r.fail(path + ".use_regex", "true after a Split is not supported");
        pattern = std::string(kGpt2Pattern);
      }
    } else if (step_type == "Split" && !pattern && !saw_byte_level) {
      const JsonValue& regex_holder = r.object(step, "pattern", path + ".pattern");
      if (r.optional(regex_holder, "Regex") == nullptr)
        r.fail(path + ".pattern", "only {\"Regex\": ...} patterns are supported");
      pattern = r.string(regex_holder, "Regex", path + ".pattern.Regex");
      const std::string& behavior = r.string(step, "behavior", path + ".behavior");
      const bool invert = r.flag(step, "invert", path + ".invert", false);
      // Both mean "each match is a piece"; other behaviours glue matches to their neighbours.
      if (!(behavior == "Isolated" && !invert) && !(behavior == "Removed" && invert))
        r.fail(path, "behavior \"" + behavior + "\" with invert " + (invert ? "true" : "false") +
                         " is not supported (Isolated, or Removed with invert true)");
    } else {
      r.fail(path, "a \"" + step_type + "\" step here is not supported (one regex Split, then ByteLevel)");
    }
  }
  if (!saw_byte_level) r.fail("pre_tokenizer", "a ByteLevel step is required (only byte-level BPE is supported)");
  if (!pattern) r.fail("pre_tokenizer", "no regex: the ByteLevel step has use_regex false and no Split precedes it");
  return *pattern;
}

// eos_token / pad_token of a tokenizer_config.json beside the tokenizer.json, if any.
std::optional<std::string> config_token(const std::filesystem::path& tokenizer_json, const std::string& key) {
  const std::filesystem::path config_path = tokenizer_json.parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_path, ec)) return std::nullopt;
  const JsonValue config = read_json(read_file(config_path), config_path.string());
  const JsonValue* value = config.find(key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (value->is_string()) return value->text();
  if (value->is_object()) {
    const JsonValue* content = value->find("content");
    if (content != nullptr && content->is_string()) return content->text();
  }
  FATHOM_FAIL(config_path.string(), ": ", key, " must be a string or an object with a \"content\" string");
}

}  // namespace

std::unique_ptr<BpeTokenizer> load_hf_tokenizer_json(const std::filesystem::path& file, const std::string& name) {
  const HfReader r(file.string());
  const JsonValue root = read_json(read_file(file), r.source());
  if (!root.is_object()) r.fail("top level", std::string("expected an object, found ") + root.kind_name());

  const JsonValue& model = r.object(root, "model", "model");
  const JsonValue* model_type = r.optional(model, "type");
  if (model_type == nullptr) r.fail("model.type", "missing (only \"BPE\" models are supported)");
  if (!model_type->is_string() || model_type->text() != "BPE")
    r.fail("model.type", "unsupported model type \"" + model_type->text() + "\" (only \"BPE\" is supported)");
  if (const JsonValue* dropout = r.optional(model, "dropout");
      dropout != nullptr && dropout->text() != "0" && dropout->text() != "0.0")
    r.fail("model.dropout", "BPE dropout is not supported");
  if (r.flag(model, "byte_fallback", "model.byte_fallback", false))
    r.fail("model.byte_fallback", "true is not supported (byte-level BPE needs no fallback)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const JsonValue* v = r.optional(model, affix); v != nullptr && !(v->is_string() && v->text().empty()))
      r.fail(std::string("model.") + affix, "not supported (byte-level BPE uses none)");
  }
  const bool ignore_merges = r.flag(model, "ignore_merges", "model.ignore_merges", false);
  if (const JsonValue* normalizer = r.optional(root, "normalizer"))
    r.fail("normalizer", "\"" + r.type(*normalizer, "normalizer") + "\" is not supported (byte-level BPE needs none)");
  if (const JsonValue* decoder = r.optional(root, "decoder");
      decoder != nullptr && r.type(*decoder, "decoder") != "ByteLevel")
    r.fail("decoder.type", "\"" + decoder->find("type")->text() + "\" is not supported (ByteLevel)");
  const std::string pattern = read_pretokenizer_pattern(r, root);
  std::vector<AddedToken> added = read_added_tokens(r, root);

  // Vocabulary: byte-level text -> id. Added tokens may appear here too (as in HF's own files).
  std::unordered_map<uint32_t, const AddedToken*> added_by_id;
  for (const AddedToken& t : added) added_by_id.emplace(t.id, &t);
  const JsonValue& vocab = r.object(model, "vocab", "model.vocab");
  std::unordered_map<std::string_view, uint32_t> id_of_text;
  id_of_text.reserve(vocab.keys().size());
  std::vector<std::string> tokens;
  for (size_t i = 0; i < vocab.keys().size(); ++i) {
    const std::string& text = vocab.keys()[i];
    const uint32_t id = r.id(vocab.items()[i], "model.vocab[\"" + text + "\"]");
    id_of_text.emplace(text, id);
    if (id >= tokens.size()) tokens.resize(id + 1);
    if (const auto it = added_by_id.find(id); it != added_by_id.end()) {
      if (it->second->text != text)
        r.fail("model.vocab[\"" + text + "\"]",
               "id " + std::to_string(id) + " is also added token \"" + it->second->text + "\"");
      continue;
    }
    const std::optional<std::string> bytes = byte_level_to_bytes(text);
    if (!bytes) r.fail("model.vocab[\"" + text + "\"]", "not written in the byte-level alphabet");
    if (!tokens[id].empty())
      r.fail("model.vocab[\"" + text + "\"]", "id " + std::to_string(id) + " is also token " + quote_bytes(tokens[id]));
    tokens[id] = *bytes;
  }
  if (tokens.empty()) r.fail("model.vocab", "empty");

  // Merges: "left right" strings (the older form) or ["left", "right"] pairs, in priority order.
  const JsonValue& merge_list = r.required(model, "merges", "model.merges");
  if (!merge_list.is_array()) r.fail("model.merges", std::string("expected an array, found ") + merge_list.kind_name());
  std::vector<BpeModel::Merge> merges;
  merges.reserve(merge_list.items().size());
  for (size_t i = 0; i < merge_list.items().size(); ++i) {
    const JsonValue& entry = merge_list.items()[i];
    const std::string path = "model.merges[" + std::to_string(i) + "]";
    std::string_view left, right;
    if (entry.is_string()) {
      const std::string_view text = entry.text();
      const size_t space = text.find(' ');
      if (space == std::string_view::npos || space == 0 || space + 1 == text.size() ||
          text.find(' ', space + 1) != std::string_view::npos)
        r.fail(path, "\"" + entry.text() + "\" is not \"<left> <right>\"");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (entry.is_array() && entry.items().size() == 2 && entry.items()[0].is_string() &&
               entry.items()[1].is_string()) {
      left = entry.items()[0].text();
      right = entry.items()[1].text();
    } else {
      r.fail(path, std::string("expected \"<left> <right>\" or a pair of strings, found ") + entry.kind_name());
    }
    const auto id_of = [&](std::string_view text) {
      const auto it = id_of_text.find(text);
      if (it == id_of_text.end()) r.fail(path, "\"" + std::string(text) + "\" is not in model.vocab");
      return it->second;
    };
    merges.push_back({id_of(left), id_of(right), id_of(std::string(left) + std::string(right)), uint32_t(i)});
  }

  const std::optional<std::string> config_eos = config_token(file, "eos_token");
  const std::string eos = config_eos.value_or(std::string(kEndOfText));
  const auto is_added = [&](const std::string& text) {
    for (const AddedToken& t : added)
      if (t.text == text) return true;
    return false;
  };
  if (!is_added(eos))
    r.fail("added_tokens", "no end-of-text token: \"" + eos + "\"" +
                               (config_eos ? " (eos_token of tokenizer_config.json)" : "") + " is not an added token");
  std::optional<std::string> pad = config_token(file, "pad_token");
  if (!pad && is_added("<|pad|>")) pad = "<|pad|>";

  BpeModel bpe(std::move(tokens), merges, ignore_merges, r.source());
  return std::make_unique<BpeTokenizer>(name, std::move(bpe), Pretokenizer(pattern, r.source()), std::move(added), eos,
                                        pad, 0, r.source());
}

}  // namespace fathom
