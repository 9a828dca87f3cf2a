#include "train/cli/model_text_input.h"

#include "core/error.h"
#include "core/file_io.h"

namespace fathom {

void ModelTextInput::add_options(CLI::App* cmd, const std::string& what) {
  cmd->add_option("--checkpoint", checkpoint,
                  "A checkpoint folder, a run folder (its latest checkpoint), or hf:DIR (a HuggingFace folder)")
      ->required();
  auto* text_option = cmd->add_option("--prompt", prompt, "The " + what);
  auto* file_option =
      cmd->add_option("--prompt-file", prompt_file, "A file holding the " + what)->check(CLI::ExistingFile);
  text_option->excludes(file_option);
  cmd->add_option("--tokenizer", tokenizer, "Tokenizer name or file (default: the checkpoint's)");
}

std::string ModelTextInput::text() const {
  FATHOM_CHECK(!prompt.empty() || !prompt_file.empty(), "give --prompt TEXT or --prompt-file FILE");
  return prompt_file.empty() ? prompt : read_file(prompt_file);
}

std::unique_ptr<Tokenizer> ModelTextInput::tokenizer_for(const ModelFiles& loaded) const {
  const std::string name = tokenizer.empty() ? loaded.tokenizer : tokenizer;
  FATHOM_CHECK(!name.empty(), loaded.origin,
               " names no tokenizer (a HuggingFace folder without tokenizer.json); pass --tokenizer");
  return make_tokenizer(name);
}

}  // namespace fathom
