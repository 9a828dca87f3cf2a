// Shared by the tokenizer tests: tokenizers loaded once per test binary, the shipped corpus as
// documents, random multilingual text, base64 for building rank files.
#pragma once
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "data/text.h"
#include "data/tokenizer.h"

namespace fathom::testing {

inline const std::string kTokenizerFiles = std::string(FATHOM_SOURCE_DIR) + "/data/tokenizers";
inline const std::string kCl100kHfJson = kTokenizerFiles + "/cl100k_hf/tokenizer.json";

// Loading cl100k takes a few hundred milliseconds: each name is loaded once and shared.
inline const Tokenizer& shared_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Tokenizer>& slot = loaded[name];
  if (!slot) slot = make_tokenizer(name);
  return *slot;
}

// The quickstart corpus as training reads it: one document per address line, Moby Dick whole.
inline const std::vector<std::string>& quickstart_documents() {
  static const std::vector<std::string> docs = [] {
    const std::filesystem::path root = std::filesystem::path(FATHOM_SOURCE_DIR) / "data/corpus/quickstart";
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(root / "train")) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    std::vector<std::string> out;
    for (const auto& file : files)
      for (std::string& d : read_documents(file.string(), DocumentSplit::per_line)) out.push_back(std::move(d));
    out.push_back(read_file(root / "validation/moby_dick.txt"));
    return out;
  }();
  return docs;
}

// Random text mixing scripts, digits of several systems, emoji (with joiners and modifiers),
// punctuation, contractions and runs of assorted whitespace.
inline std::string random_multilingual_text(uint32_t seed, size_t pieces) {
  static const std::vector<std::string> parts = {"Hello",
                                                 " world",
                                                 "I'm",
                                                 " they'll",
                                                 " DON'T",
                                                 " x",
                                                 "ab",
                                                 "Größe",
                                                 " straße",
                                                 " Ærø",
                                                 " naïve",
                                                 " café",
                                                 " Привет",
                                                 " мир",
                                                 "日本語",
                                                 "の",
                                                 "テキスト",
                                                 " 中文",
                                                 " 한국어",
                                                 " العربية",
                                                 " עברית",
                                                 " हिन्दी",
                                                 " ภาษาไทย",
                                                 " Ελληνικά",
                                                 "12345",
                                                 " 2024",
                                                 "٣٤٥",
                                                 "१२३",
                                                 "½",
                                                 "Ⅻ",
                                                 "3.14159",
                                                 "-42",
                                                 "🐋",
                                                 "👩‍👩‍👧",
                                                 "👍🏽",
                                                 "🇩🇪",
                                                 "∑∫≠",
                                                 "—",
                                                 "…",
                                                 "«»",
                                                 "!?",
                                                 "(){}",
                                                 "<|endoftext|>",
                                                 "<|",
                                                 "|>",
                                                 " ",
                                                 "  ",
                                                 "   ",
                                                 "\t",
                                                 "\n",
                                                 "\n\n",
                                                 "\r\n",
                                                 " \n ",
                                                 "\u00a0",
                                                 "\u3000",
                                                 "\u2028",
                                                 "\u200b",
                                                 "$",
                                                 "@#",
                                                 "'s",
                                                 "'",
                                                 "\"",
                                                 "\\",
                                                 "ſ",
                                                 "İ",
                                                 "ﬁ"};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, parts.size() - 1);
  std::string text;
  for (size_t i = 0; i < pieces; ++i) text += parts[pick(rng)];
  return text;
}

inline std::string base64(std::string_view bytes) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = uint32_t(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) group |= uint32_t(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) group |= uint32_t(static_cast<unsigned char>(bytes[i + 2]));
    out += alphabet[(group >> 18) & 63];
    out += alphabet[(group >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(group >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[group & 63] : '=';
  }
  return out;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace fathom::testing
