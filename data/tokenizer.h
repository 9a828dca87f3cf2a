// The interface every tokenizer implements (bytes now; byte-level BPE from tokenizer.json or
// tiktoken files later), so text reading, data prep and generation never depend on a concrete one.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Plain text to ids. Special-token text such as "<|endoftext|>" is NOT turned into its id:
  // documents are separated by appending eos_id() explicitly.
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  // Ids to text; an id >= vocab_size() is an error naming its position and value.
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  virtual uint32_t vocab_size() const = 0;
  virtual uint32_t eos_id() const = 0;
  virtual std::string name() const = 0;
};

// Names make_tokenizer accepts.
std::vector<std::string> known_tokenizers();
// Builds a tokenizer by name ("bytes"); an unknown name is an error listing the known ones.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace fathom
