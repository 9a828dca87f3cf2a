// Fuzzes the token shard reader: header, CRC, size and token-range validation, then reading tokens.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "data/crc32.h"
#include "data/shard.h"
#include "fuzz_input_file.h"

namespace {

constexpr size_t kCrcAt = 28;  // data/shard.h's header layout

// A random mutation almost never keeps the header CRC right, so the checks behind it would go
// unfuzzed. When the last reserved header byte is zero the CRC is recomputed; inputs with it set keep
// their CRC as given, so the CRC and reserved-byte checks are fuzzed too.
std::vector<uint8_t> with_crc_fixed(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= fathom::kShardHeaderBytes && bytes[fathom::kShardHeaderBytes - 1] == 0) {
    std::memset(bytes.data() + kCrcAt, 0, 4);
    const uint32_t crc = fathom::crc32(bytes.data(), fathom::kShardHeaderBytes);
    for (int i = 0; i < 4; ++i) bytes[kCrcAt + i] = uint8_t(crc >> (8 * i));  // little-endian
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fathom::fuzz::FuzzInputFile file(".tokens");
  const std::vector<uint8_t> bytes = with_crc_fixed(data, size);
  const std::string& path = file.write(bytes.data(), bytes.size());
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
