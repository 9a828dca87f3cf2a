// The `fathom` command line: one program, one subcommand per task (train/cli/commands.h).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>

#include "core/error.h"
#include "distributed/world.h"
#include "train/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"fathom: a C++/CUDA training framework for depth-adaptive decoders (OLMo2, MoDA, MoD, DSLA)", "fathom"};
  app.require_subcommand(1);
  fathom::add_train_command(app);
  fathom::add_distill_command(app);
  fathom::add_eval_command(app);
  fathom::add_export_command(app);
  fathom::add_generate_command(app);
  fathom::add_logits_command(app);
  fathom::add_data_command(app);
  fathom::add_tokenizer_command(app);
  fathom::add_recipe_command(app);
  // An error on one rank of a data-parallel job ends every rank (naming this one); alone, main reports it.
  auto report = [](const std::string& message) {
    fathom::end_job_after_error(message);
    std::cerr << "fathom: error: " << message << "\n";
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fathom::Error& e) {
    if (std::getenv("FATHOM_DEBUG")) std::cerr << "  (raised at " << e.where() << ")\n";
    report(e.message());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // Library code reports its own file failures as fathom::Error; this is the net under the rest.
    std::string message = e.code().message() + ": \"" + e.path1().string() + "\"";
    if (!e.path2().empty()) message += " and \"" + e.path2().string() + "\"";
    report(message +
           "; check that the path exists, is the kind of entry expected and is writable, and that the "
           "disk has space");
    return 1;
  } catch (const std::bad_alloc&) {
    report("out of memory; use a smaller train.batch_size, train.seq_len or model");
    return 1;
  } catch (const std::exception& e) {
    report(e.what());
    return 1;
  }
  return 0;
}
