#include "core/json_reader.h"

#include <charconv>
#include <unordered_set>

#include "core/error.h"

namespace fathom {

const char* JsonValue::kind_name() const {
  switch (kind_) {
    case Kind::null:
      return "null";
    case Kind::boolean:
      return "a boolean";
    case Kind::number:
      return "a number";
    case Kind::string:
      return "a string";
    case Kind::array:
      return "an array";
    case Kind::object:
      return "an object";
  }
  return "?";
}

std::optional<int64_t> JsonValue::integer() const {
  if (kind_ != Kind::number) return std::nullopt;
  int64_t value = 0;
  const char* first = text_.data();
  const char* last = first + text_.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last) return std::nullopt;
  return value;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

class JsonParser {
 public:
  JsonParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  JsonValue document() {
    JsonValue value;
    skip_space();
    if (at_end()) fail("the text is empty");
    parse_value(value, 0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected content after the JSON value (truncated or concatenated file?)");
    return value;
  }

 private:
  // Deep enough for any tokenizer file, shallow enough that hostile nesting cannot overflow the stack.
  static constexpr int kMaxDepth = 256;

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    // A raw control byte is never valid outside a string either; naming it explains the failure.
    const unsigned char found = pos_ < text_.size() ? static_cast<unsigned char>(text_[pos_]) : 0x20;
    if (found < 0x20 || found == 0x7f) {
      FATHOM_FAIL(source_, ": invalid JSON at line ", line, ", column ", column, ": ", what, " (found control byte 0x",
                  "0123456789abcdef"[found >> 4], "0123456789abcdef"[found & 15], ")");
    }
    FATHOM_FAIL(source_, ": invalid JSON at line ", line, ", column ", column, ": ", what);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
      ++pos_;
    }
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'" + (at_end() ? " but the text ended" : ""));
    ++pos_;
  }

  void parse_value(JsonValue& out, int depth) {
    if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    const char c = peek();
    if (c == '{') {
      parse_object(out, depth);
    } else if (c == '[') {
      parse_array(out, depth);
    } else if (c == '"') {
      out.kind_ = JsonValue::Kind::string;
      parse_string(out.text_);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number(out);
    } else if (literal("true")) {
      out.kind_ = JsonValue::Kind::boolean;
      out.boolean_ = true;
    } else if (literal("false")) {
      out.kind_ = JsonValue::Kind::boolean;
    } else if (literal("null")) {
      out.kind_ = JsonValue::Kind::null;
    } else {
      fail(at_end() ? "expected a value but the text ended" : "expected a value");
    }
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // The elements between `open` and `close`, separated by commas; read_item reads one (for an
  // object, a key, ':' and a value).
  template <typename ReadItem>
  void parse_items(char open, char close, ReadItem&& read_item) {
    expect(open);
    skip_space();
    if (peek() == close) {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      read_item();
      skip_space();
      if (peek() != ',') break;
      ++pos_;
    }
    expect(close);
  }

  void parse_object(JsonValue& out, int depth) {
    out.kind_ = JsonValue::Kind::object;
    std::unordered_set<std::string> seen;
    parse_items('{', '}', [&] {
      if (peek() != '"') fail("expected a string key");
      const size_t key_start = pos_;
      std::string& key = out.keys_.emplace_back();
      parse_string(key);
      if (!seen.insert(key).second) {
        pos_ = key_start;  // the error points at the repeated key
        fail("duplicate object key \"" + key + "\"");
      }
      skip_space();
      expect(':');
      skip_space();
      parse_value(out.items_.emplace_back(), depth + 1);
    });
  }

  void parse_array(JsonValue& out, int depth) {
    out.kind_ = JsonValue::Kind::array;
    parse_items('[', ']', [&] { parse_value(out.items_.emplace_back(), depth + 1); });
  }

  void parse_number(JsonValue& out) {
    const size_t start = pos_;
    const auto digits = [&] {
      const size_t first = pos_;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - first;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      fail("invalid number");
    }
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("invalid number: no digits after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("invalid number: no digits in the exponent");
    }
    out.kind_ = JsonValue::Kind::number;
    out.text_.assign(text_.substr(start, pos_ - start));
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      value <<= 4;
      if (c >= '0' && c <= '9')
        value |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        value |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        value |= uint32_t(c - 'A' + 10);
      else
        fail("invalid hex digit in \\u escape");
    }
    return value;
  }

  static void append_utf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += char(code);
    } else if (code < 0x800) {
      out += char(0xC0 | (code >> 6));
      out += char(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += char(0xE0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3F));
      out += char(0x80 | (code & 0x3F));
    } else {
      out += char(0xF0 | (code >> 18));
      out += char(0x80 | ((code >> 12) & 0x3F));
      out += char(0x80 | ((code >> 6) & 0x3F));
      out += char(0x80 | (code & 0x3F));
    }
  }

  void parse_string(std::string& out) {
    expect('"');
    while (true) {
      // Copy the run of plain bytes up to the next quote, backslash or control character at once.
      const size_t run_start = pos_;
      while (!at_end()) {
        const unsigned char c = static_cast<unsigned char>(text_[pos_]);
        if (c == '"' || c == '\\' || c < 0x20) break;
        ++pos_;
      }
      out.append(text_.substr(run_start, pos_ - run_start));
      if (at_end()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return;
      if (c != '\\') {
        --pos_;
        fail("raw control character in a string (must be escaped)");
      }
      if (at_end()) fail("unterminated string");
      const char escape = text_[pos_++];
      switch (escape) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t code = parse_hex4();
          if (code >= 0xD800 && code <= 0xDBFF) {
            // A high surrogate must be followed by an escaped low one; together they name one code point.
            if (text_.substr(pos_, 2) != "\\u") fail("unpaired UTF-16 surrogate in \\u escape");
            pos_ += 2;
            const uint32_t low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired UTF-16 surrogate in \\u escape");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code <= 0xDFFF) {
            fail("unpaired UTF-16 surrogate in \\u escape");
          }
          append_utf8(out, code);
          break;
        }
        default:
          --pos_;
          fail(std::string("invalid escape '\\") + escape + "'");
      }
    }
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
};

JsonValue read_json(std::string_view text, const std::string& source_name) {
  return JsonParser(text, source_name).document();
}

}  // namespace fathom
