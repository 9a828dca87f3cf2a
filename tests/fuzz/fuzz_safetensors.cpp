// Fuzzes the safetensors reader: header validation, then loading every tensor it accepted.
#include <cstdint>

#include "core/error.h"
#include "core/safetensors.h"
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fathom::fuzz::FuzzInputFile file(".safetensors");
  const std::string& path = file.write(data, size);
  try {
    fathom::SafetensorsFile opened = fathom::read_safetensors(path);
    // An accepted header promises in-range offsets: loading must then never read out of bounds.
    for (const fathom::SafetensorsEntry& entry : opened.entries()) (void)opened.load(entry.name);
  } catch (const fathom::Error&) {
    // A clear error is the expected answer to a bad file.
  }
  return 0;
}
