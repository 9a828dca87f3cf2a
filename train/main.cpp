// The `fathom` command line: one program, one subcommand per task (train/commands.h).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <iostream>

#include "core/error.h"
#include "train/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"fathom: a C++/CUDA training framework for depth-adaptive decoders (OLMo2, MoDA, MoD, DSLA)",
               "fathom"};
  app.require_subcommand(1);
  fathom::add_train_command(app);
  fathom::add_distill_command(app);
  fathom::add_eval_command(app);
  fathom::add_export_command(app);
  fathom::add_generate_command(app);
  fathom::add_data_command(app);
  fathom::add_tokenizer_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fathom::Error& e) {
    std::cerr << "fathom: error: " << e.message() << "\n";
    if (std::getenv("FATHOM_DEBUG")) std::cerr << "  (raised at " << e.where() << ")\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // Library code reports its own file failures as fathom::Error; this is the net under the rest.
    std::cerr << "fathom: error: " << e.code().message() << ": " << e.path1();
    if (!e.path2().empty()) std::cerr << " and " << e.path2();
    std::cerr << "; check that the path exists, is the kind of entry expected and is writable, and that the "
                 "disk has space\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "fathom: error: out of memory; use a smaller train.batch_size, train.seq_len or model\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "fathom: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
