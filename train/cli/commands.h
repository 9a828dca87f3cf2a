// The `fathom` subcommands. Each adds itself to the CLI11 app with a callback that does its work;
// errors are thrown as fathom::Error and reported by main().
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "core/thread_pool.h"

namespace fathom {

// --threads for any command: 0 (every core) up to kMaxThreads, the bound train.threads shares.
template <class Int>
CLI::Option* add_threads_option(CLI::App* cmd, Int& threads, const std::string& what) {
  return cmd->add_option("--threads", threads, what + " (0: every core; at most " + std::to_string(kMaxThreads) + ")")
      ->check(CLI::Range(Int(0), Int(kMaxThreads)))
      ->capture_default_str();
}

void add_train_command(CLI::App& app);
void add_distill_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_recipe_command(CLI::App& app);

}  // namespace fathom
