// Fuzzes the Hugging Face tokenizer.json loader (JSON reader, vocab/merges/added-token checks), then
// runs an accepted tokenizer once over a fixed text so its tables are exercised too.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bpe_files.h"
#include "data/bpe_tokenizer.h"
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fathom::fuzz::FuzzInputFile file("_tokenizer.json");
  const std::string& path = file.write(data, size);
  try {
    auto tokenizer = fathom::load_hf_tokenizer_json(path, "fuzz");
    const std::vector<uint32_t> ids = tokenizer->encode("Hello, world! 123 <|endoftext|> \xc3\xa9t\xc3\xa9", true);
    for (uint32_t id : ids) {
      if (id >= tokenizer->vocab_size()) __builtin_trap();  // encode promised ids < vocab size
    }
    (void)tokenizer->decode(ids);
  } catch (const fathom::Error&) {
  }
  return 0;
}
