// A choice between kernels that an environment variable can make (FATHOM_SKINNY_MATMUL,
// FATHOM_DECODE_PROLOGUE, FATHOM_DEPENDENT_LAUNCH, FATHOM_MERGE_IN_SPLIT, ...): read at the first use, replaced by
// set() in tests and benchmarks. A kernel that has not yet run on a GPU is opt-in through one until its GPU tests and
// benchmark pass.
#pragma once
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "core/error.h"

namespace fathom {

// The two words of a choice between a fused kernel and the separate ops it joins.
enum class Fusion { separate, fused };
inline Fusion parse_fusion(std::string_view text, std::string_view source) {
  if (text == "fused") return Fusion::fused;
  if (text == "separate") return Fusion::separate;
  FATHOM_FAIL(source, " must be fused or separate, got '", text, "'");
}

// The two words of a choice to use a launch feature or not.
enum class Toggle { off, on };
inline Toggle parse_toggle(std::string_view text, std::string_view source) {
  if (text == "on") return Toggle::on;
  if (text == "off") return Toggle::off;
  FATHOM_FAIL(source, " must be on or off, got '", text, "'");
}

// The three words of a choice whose default is a measured rule: automatic (the rule), always, never.
enum class Usage { automatic, always, never };
inline Usage parse_usage(std::string_view text, std::string_view source) {
  if (text == "auto") return Usage::automatic;
  if (text == "always") return Usage::always;
  if (text == "never") return Usage::never;
  FATHOM_FAIL(source, " must be auto, always or never, got '", text, "'");
}

// A count (a measurement's knob): a whole number, at least 1.
inline int parse_count(std::string_view text, std::string_view source) {
  int count = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (error != std::errc() || end != text.data() + text.size() || count < 1)
    FATHOM_FAIL(source, " must be a whole number, at least 1, got '", text, "'");
  return count;
}

template <typename Choice>
class KernelChoice {
 public:
  // parse maps the variable's text to a choice, and fails naming the variable and the choices.
  using Parse = Choice (*)(std::string_view text, std::string_view source);
  constexpr KernelChoice(const char* variable, Choice unset, Parse parse)
      : variable_(variable), unset_(unset), parse_(parse) {}

  Choice get() {
    std::call_once(read_, [this] {
      const char* value = std::getenv(variable_);
      choice_.store(value ? parse_(value, variable_) : unset_);
    });
    return choice_.load();
  }
  void set(Choice choice) {
    get();  // the environment is read first, so a later first get() cannot overwrite this
    choice_.store(choice);
  }

 private:
  const char* variable_;
  Choice unset_;
  Parse parse_;
  std::once_flag read_;
  std::atomic<Choice> choice_{};
};

}  // namespace fathom
