#include "data/byte_level.h"

#include <algorithm>

namespace fathom {

namespace {

struct Alphabet {
  std::array<uint16_t, 256> code_of_byte{};
  std::array<int16_t, 512> byte_of_code{};  // -1 where the code point is not in the alphabet
  std::array<uint8_t, 256> ordered{};

  Alphabet() {
    byte_of_code.fill(-1);
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      code_of_byte[b] = uint16_t(printable(b) ? b : next++);
      byte_of_code[code_of_byte[b]] = int16_t(b);
    }
    for (int b = 0; b < 256; ++b) ordered[b] = uint8_t(b);
    std::sort(ordered.begin(), ordered.end(), [&](uint8_t x, uint8_t y) { return code_of_byte[x] < code_of_byte[y]; });
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

}  // namespace

std::string bytes_to_byte_level(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const uint16_t code = a.code_of_byte[static_cast<unsigned char>(c)];
    if (code < 0x80) {
      out += char(code);
    } else {  // every alphabet code point is below U+0800: two UTF-8 bytes
      out += char(0xC0 | (code >> 6));
      out += char(0x80 | (code & 0x3F));
    }
  }
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    uint32_t code;
    if (lead < 0x80) {
      code = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      code = ((lead & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      if (code < 0x80) return std::nullopt;  // overlong form
      i += 2;
    } else {
      return std::nullopt;  // 3- and 4-byte characters are all outside the alphabet
    }
    if (code >= a.byte_of_code.size() || a.byte_of_code[code] < 0) return std::nullopt;
    out += char(a.byte_of_code[code]);
  }
  return out;
}

const std::array<uint8_t, 256>& bytes_in_byte_level_order() { return alphabet().ordered; }

std::string quote_bytes(std::string_view bytes, size_t max_bytes) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c >= 0x20 && c < 0x7F) {
      out += char(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xF];
    }
  }
  out += bytes.size() > max_bytes ? "\"..." : "\"";
  return out;
}

}  // namespace fathom
