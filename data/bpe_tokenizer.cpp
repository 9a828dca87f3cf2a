#include "data/bpe_tokenizer.h"

#include <unordered_set>

#include "core/error.h"
#include "data/byte_level.h"

namespace fathom {

BpeTokenizer::BpeTokenizer(std::string name, BpeModel model, Pretokenizer pretokenizer, std::vector<AddedToken> added,
                           const std::string& eos_text, const std::optional<std::string>& pad_text, uint32_t vocab_size,
                           const std::string& source)
    : name_(std::move(name)),
      model_(std::move(model)),
      pretokenizer_(std::move(pretokenizer)),
      added_(std::move(added)) {
  uint32_t end = model_.size();
  std::unordered_set<std::string_view> texts;
  for (size_t k = 0; k < added_.size(); ++k) {
    const AddedToken& t = added_[k];
    FATHOM_CHECK(!t.text.empty(), source, ": added token id ", t.id, " has empty text");
    FATHOM_CHECK(t.id >= model_.size() || model_.bytes_of(t.id).empty(), source, ": added token ", quote_bytes(t.text),
                 " has id ", t.id, ", which is already the regular token ", quote_bytes(model_.bytes_of(t.id)));
    FATHOM_CHECK(added_by_id_.emplace(t.id, k).second, source, ": added tokens ",
                 quote_bytes(added_[added_by_id_[t.id]].text), " and ", quote_bytes(t.text), " share id ", t.id);
    FATHOM_CHECK(texts.insert(t.text).second, source, ": added token ", quote_bytes(t.text), " appears twice");
    end = std::max(end, t.id + 1);
  }
  FATHOM_CHECK(vocab_size == 0 || vocab_size >= end, source, ": vocab size ", vocab_size,
               " is smaller than one past the largest id, ", end);
  vocab_size_ = vocab_size == 0 ? end : vocab_size;
  const std::optional<uint32_t> eos = token_to_id(eos_text);
  FATHOM_CHECK(eos.has_value(), source, ": the end-of-text token ", quote_bytes(eos_text), " is not an added token");
  eos_id_ = *eos;
  if (pad_text) {
    pad_id_ = token_to_id(*pad_text);
    FATHOM_CHECK(pad_id_.has_value(), source, ": the padding token ", quote_bytes(*pad_text), " is not an added token");
  }
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  pretokenizer_.split(text, pieces);
  for (const std::string_view piece : pieces) model_.encode_piece(piece, out);
}

std::string BpeTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    FATHOM_CHECK(id < vocab_size_, "tokenizer ", name_, " cannot decode id ", id, " at position ", i,
                 ": ids must be < ", vocab_size_);
    if (id < model_.size() && !model_.bytes_of(id).empty()) {
      text += model_.bytes_of(id);
      continue;
    }
    const auto added = added_by_id_.find(id);
    FATHOM_CHECK(added != added_by_id_.end(), "tokenizer ", name_, " cannot decode id ", id, " at position ", i,
                 ": no token has this id");
    text += added_[added->second].text;
  }
  return text;
}

}  // namespace fathom
