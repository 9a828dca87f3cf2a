// The `fathom` subcommands. Each adds itself to the CLI11 app with a callback that does its work;
// errors are thrown as fathom::Error and reported by main().
#pragma once
#include <CLI/CLI.hpp>

namespace fathom {

void add_train_command(CLI::App& app);
void add_distill_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_generate_command(CLI::App& app);

}  // namespace fathom
