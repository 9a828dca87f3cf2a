// Fuzzes the token shard reader: header, CRC, size and token-range validation, then reading tokens.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "data/shard.h"
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fathom::fuzz::FuzzInputFile file(".tokens");
  const std::string& path = file.write(data, size);
  try {
    fathom::TokenShard shard = fathom::open_shard(path);
    // A validated shard promises every token < vocab size; check that promise on what it read.
    std::vector<uint32_t> tokens(shard.size());
    shard.read(0, tokens);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= shard.vocab_size() || shard.at(i) != tokens[i]) __builtin_trap();
    }
  } catch (const fathom::Error&) {
  }
  return 0;
}
