// Fuzzes the recipe parser: YAML text through parse_recipe's schema checks.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "train/recipe/recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)fathom::parse_recipe(text, "fuzz.yaml");
  } catch (const fathom::Error&) {
  }
  return 0;
}
