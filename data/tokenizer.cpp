#include "data/tokenizer.h"

#include "core/error.h"
#include "data/byte_tokenizer.h"

namespace fathom {

std::vector<std::string> known_tokenizers() { return {"bytes"}; }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  std::string known;
  for (const std::string& k : known_tokenizers()) known += (known.empty() ? "" : ", ") + k;
  FATHOM_FAIL("unknown tokenizer '", name, "' (known tokenizers: ", known, ")");
}

}  // namespace fathom
