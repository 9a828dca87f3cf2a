#include "data/byte_tokenizer.h"

#include "core/error.h"

namespace fathom {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    FATHOM_CHECK(id < kVocabSize, "byte tokenizer cannot decode id ", id, " at position ", i,
                 ": ids must be < ", kVocabSize);
    if (id == kEos) {
      text += kEosText;
    } else {
      text += static_cast<char>(static_cast<unsigned char>(id));
    }
  }
  return text;
}

}  // namespace fathom
