// GPT-2's byte-level alphabet: every byte is written as one printable Unicode character (printable
// Latin-1 bytes as themselves, the rest as U+0100 onwards), so vocab.bpe, encoder.json and HF
// tokenizer.json can store arbitrary byte strings as readable text ("Ġthe" is " the").
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fathom {

// The alphabet's UTF-8 text for a byte string.
std::string bytes_to_byte_level(std::string_view bytes);
// The byte string a byte-level text stands for; nullopt when it holds a character outside the
// alphabet (or is not valid UTF-8).
std::optional<std::string> byte_level_to_bytes(std::string_view text);
// The 256 bytes ordered by their alphabet character's code point: the order in which GPT-2,
// cl100k_base and HF's ByteLevel trainer number the single-byte tokens 0..255.
const std::array<uint8_t, 256>& bytes_in_byte_level_order();

// A byte string for error messages: in double quotes, printable ASCII as is, every other byte as
// \xNN; long strings are cut after max_bytes.
std::string quote_bytes(std::string_view bytes, size_t max_bytes = 40);

}  // namespace fathom
