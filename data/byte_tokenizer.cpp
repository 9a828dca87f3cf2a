#include "data/byte_tokenizer.h"

#include "core/error.h"

namespace fathom {

void ByteTokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  for (const char c : text) out.push_back(static_cast<unsigned char>(c));
}

const std::vector<AddedToken>& ByteTokenizer::added_tokens() const {
  static const std::vector<AddedToken> tokens = {{std::string(kEosText), kEos, true}};
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    FATHOM_CHECK(id < kVocabSize, "byte tokenizer cannot decode id ", id, " at position ", i, ": ids must be < ",
                 kVocabSize);
    if (id == kEos) {
      text += kEosText;
    } else {
      text += static_cast<char>(static_cast<unsigned char>(id));
    }
  }
  return text;
}

}  // namespace fathom
