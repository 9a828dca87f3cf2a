// tiktoken rank files: "<base64 token> <rank>" per line.
#include <charconv>

#include "core/error.h"
#include "core/file_io.h"
#include "data/bpe_files.h"
#include "data/byte_level.h"

namespace fathom {

namespace {

// Standard base64 with '=' padding; nullopt for anything else (wrong length, bad characters,
// padding in the middle).
std::optional<std::string> decode_base64(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  const auto value_of = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  size_t padding = 0;
  if (text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    uint32_t group = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      int v;
      if (c == '=' && last && k >= 4 - padding) {
        v = 0;
      } else {
        v = value_of(c);
        if (v < 0) return std::nullopt;
      }
      group = (group << 6) | uint32_t(v);
    }
    out += char(group >> 16);
    if (!last || padding < 2) out += char((group >> 8) & 0xFF);
    if (!last || padding < 1) out += char(group & 0xFF);
  }
  return out;
}

std::string shorten(std::string_view text) {
  return text.size() <= 60 ? std::string(text) : std::string(text.substr(0, 60)) + "...";
}

}  // namespace

std::unique_ptr<BpeTokenizer> load_tiktoken(const std::filesystem::path& rank_file, const TiktokenSpec& spec) {
  const std::string source = "tiktoken rank file " + rank_file.string();
  const std::string contents = read_file(rank_file);
  std::vector<std::string> tokens;
  size_t line_number = 0;
  for (size_t start = 0; start < contents.size();) {
    size_t end = contents.find('\n', start);
    if (end == std::string::npos) end = contents.size();
    std::string_view line(contents.data() + start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    FATHOM_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos, source,
                 ": line ", line_number, " is not \"<base64 token> <rank>\": \"", shorten(line), "\"");
    const std::string_view encoded = line.substr(0, space);
    const std::string_view rank_text = line.substr(space + 1);
    const std::optional<std::string> bytes = decode_base64(encoded);
    FATHOM_CHECK(bytes.has_value(), source, ": line ", line_number, ": invalid base64 token \"", shorten(encoded),
                 "\"");
    uint64_t rank = 0;
    const auto [rank_end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    FATHOM_CHECK(ec == std::errc() && rank_end == rank_text.data() + rank_text.size(), source, ": line ", line_number,
                 ": the rank \"", shorten(rank_text), "\" is not a non-negative integer");
    FATHOM_CHECK(rank >= tokens.size(), source, ": line ", line_number, ": rank ", rank,
                 " repeats (ranks must run 0, 1, 2, ... without gaps or repeats)");
    FATHOM_CHECK(rank == tokens.size(), source, ": line ", line_number, ": rank ", rank, " skips rank ", tokens.size(),
                 " (ranks must run 0, 1, 2, ... without gaps or repeats)");
    tokens.push_back(*bytes);
  }
  FATHOM_CHECK(!tokens.empty(), source, ": the file holds no tokens");
  std::vector<AddedToken> added = spec.added;
  if (added.empty()) added.push_back({spec.eos_text, uint32_t(tokens.size()), true});
  BpeModel model = BpeModel::from_ranks(std::move(tokens), source);
  return std::make_unique<BpeTokenizer>(spec.name, std::move(model), Pretokenizer(spec.pattern, source),
                                        std::move(added), spec.eos_text, spec.pad_text, spec.vocab_size, source);
}

}  // namespace fathom
