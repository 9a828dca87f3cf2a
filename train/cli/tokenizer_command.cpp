#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/tokenizer.h"
#include "train/cli/commands.h"

namespace fathom {

namespace {

uint32_t parse_token_id(const std::string& text) {
  uint64_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  FATHOM_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && id <= UINT32_MAX, "'", text,
               "' is not a token id (a non-negative integer)");
  return uint32_t(id);
}

void add_train(CLI::App& parent) {
  struct Args {
    uint32_t vocab = 0;
    std::string out;
    std::vector<std::string> files;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd =
      parent.add_subcommand("train", "Train a byte-level BPE tokenizer on text files; writes a tokenizer.json");
  cmd->add_option("--vocab", args->vocab, "Vocabulary size, counting the 256 bytes and <|endoftext|>")->required();
  cmd->add_option("--out", args->out, "The tokenizer.json to write")->required();
  cmd->add_option("files", args->files, "Text files to learn from")->required();
  cmd->callback([args] {
    const auto start = std::chrono::steady_clock::now();
    const BpeTrainingReport r = train_bpe_tokenizer(args->files, args->vocab, args->out);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "read " << r.bytes << " bytes (" << r.pieces << " pieces, " << r.unique_pieces << " distinct) from "
              << args->files.size() << " file(s); learned " << r.merges << " merges in " << seconds << " s\n";
    if (r.vocab_size < args->vocab)
      std::cout << "note: the text ran out of pairs to merge: vocab is " << r.vocab_size << ", not " << args->vocab
                << "\n";
    std::cout << "wrote " << args->out << ": vocab " << r.vocab_size << ", <|endoftext|> = " << r.vocab_size - 1
              << "\n";
  });
}

void add_encode(CLI::App& parent) {
  struct Args {
    std::string tokenizer, text;
    bool allow_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = parent.add_subcommand("encode", "Print the token ids of a text");
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer name (bytes, cl100k, dolma2, gpt2) or path")->required();
  cmd->add_flag("--allow-special", args->allow_special, "Turn special-token text such as <|endoftext|> into its id");
  cmd->add_option("text", args->text, "The text; - reads standard input")->required();
  cmd->callback([args] {
    const std::unique_ptr<Tokenizer> tok = make_tokenizer(args->tokenizer);
    const std::string text = args->text == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {}) : args->text;
    const std::vector<uint32_t> ids = tok->encode(text, args->allow_special);
    std::string line;
    for (const uint32_t id : ids) {
      if (!line.empty()) line += ' ';
      line += std::to_string(id);
    }
    std::cout << line << "\n";
  });
}

void add_decode(CLI::App& parent) {
  struct Args {
    std::string tokenizer;
    std::vector<std::string> ids;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = parent.add_subcommand("decode", "Print the text of token ids");
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer name (bytes, cl100k, dolma2, gpt2) or path")->required();
  cmd->add_option("ids", args->ids, "Token ids")->required();
  cmd->callback([args] {
    const std::unique_ptr<Tokenizer> tok = make_tokenizer(args->tokenizer);
    std::vector<uint32_t> ids;
    for (const std::string& text : args->ids) ids.push_back(parse_token_id(text));
    std::cout << tok->decode(ids) << "\n";
  });
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("tokenizer", "Train a BPE tokenizer, or encode and decode with one");
  cmd->require_subcommand(1);
  add_train(*cmd);
  add_encode(*cmd);
  add_decode(*cmd);
}

}  // namespace fathom
