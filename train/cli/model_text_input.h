// What `generate` and `logits` both read: a model (checkpoint, run folder or hf:DIR), a text (--prompt or
// --prompt-file) and the tokenizer (the model's own, or --tokenizer).
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "train/generate/inference_model.h"

namespace fathom {

struct ModelTextInput {
  std::string checkpoint, prompt, prompt_file, tokenizer;

  // --checkpoint, --prompt / --prompt-file (one of them) and --tokenizer; `what` names the text ("prompt").
  void add_options(CLI::App* cmd, const std::string& what);
  // The text of --prompt or --prompt-file; an error when neither was given.
  std::string text() const;
  // --tokenizer, else the one `loaded` names; an error when neither names one.
  std::unique_ptr<Tokenizer> tokenizer_for(const ModelFiles& loaded) const;
};

}  // namespace fathom
