// GPT-2's encoder.json + vocab.bpe.
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_reader.h"
#include "data/bpe_files.h"
#include "data/byte_level.h"

namespace fathom {

std::unique_ptr<BpeTokenizer> load_gpt2_folder(const std::filesystem::path& folder, const std::string& name) {
  const std::filesystem::path encoder_path = folder / "encoder.json";
  const std::filesystem::path merges_path = folder / "vocab.bpe";
  const std::string encoder_source = encoder_path.string();
  const std::string merges_source = merges_path.string();

  // encoder.json: {"<byte-level token text>": id, ...}
  const JsonValue encoder = read_json(read_file(encoder_path), encoder_source);
  FATHOM_CHECK(encoder.is_object(), encoder_source, ": expected an object of token text to id, found ",
               encoder.kind_name());
  std::unordered_map<std::string_view, uint32_t> id_of_text;
  id_of_text.reserve(encoder.keys().size());
  std::vector<std::string> tokens;
  std::vector<AddedToken> added;
  for (size_t i = 0; i < encoder.keys().size(); ++i) {
    const std::string& text = encoder.keys()[i];
    const std::optional<int64_t> id = encoder.items()[i].integer();
    FATHOM_CHECK(id && *id >= 0 && *id <= kMaxTokenId, encoder_source, ": the id of token \"", text,
                 "\" must be an integer from 0 to ", kMaxTokenId, ", not ", encoder.items()[i].kind_name(), " ",
                 encoder.items()[i].text());
    const uint32_t u = uint32_t(*id);
    id_of_text.emplace(text, u);
    if (u >= tokens.size()) tokens.resize(u + 1);
    if (text == kEndOfText) {
      added.push_back({std::string(kEndOfText), u, true});
      continue;
    }
    const std::optional<std::string> bytes = byte_level_to_bytes(text);
    FATHOM_CHECK(bytes.has_value(), encoder_source, ": token \"", text, "\" (id ", u,
                 ") is not written in GPT-2's byte-level alphabet");
    FATHOM_CHECK(tokens[u].empty(), encoder_source, ": id ", u, " is given to two tokens, ", quote_bytes(tokens[u]),
                 " and \"", text, "\"");
    tokens[u] = *bytes;
  }
  FATHOM_CHECK(!tokens.empty(), encoder_source, ": the vocabulary is empty");

  // vocab.bpe: one "<left> <right>" merge per line, highest priority first.
  const std::string merges_text = read_file(merges_path);
  std::vector<BpeModel::Merge> merges;
  size_t line_number = 0;
  for (size_t start = 0; start < merges_text.size();) {
    size_t end = merges_text.find('\n', start);
    if (end == std::string::npos) end = merges_text.size();
    std::string_view line(merges_text.data() + start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    FATHOM_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string_view::npos,
                 merges_source, ": line ", line_number, " is not \"<left> <right>\": \"", line, "\"");
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    const auto id_of = [&](std::string_view text) {
      const auto it = id_of_text.find(text);
      FATHOM_CHECK(it != id_of_text.end(), merges_source, ": line ", line_number, ": \"", text, "\" is not a token of ",
                   encoder_source);
      return it->second;
    };
    const std::string joined = std::string(left) + std::string(right);
    merges.push_back({id_of(left), id_of(right), id_of(joined), uint32_t(merges.size())});
  }
  BpeModel model(std::move(tokens), merges, /*whole_piece_first=*/false, merges_source);
  return std::make_unique<BpeTokenizer>(name, std::move(model), Pretokenizer(std::string(kGpt2Pattern), encoder_source),
                                        std::move(added), std::string(kEndOfText), std::nullopt, 0, encoder_source);
}

}  // namespace fathom
