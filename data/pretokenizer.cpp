#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/error.h"

namespace fathom {

namespace {

pcre2_code* as_code(void* code) { return static_cast<pcre2_code*>(code); }

// Per-thread match state: one ovector pair is all split() reads. The JIT stack is only made when a
// match outgrows PCRE2's default 32 KiB one (very long runs of one class can).
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* big_stack = nullptr;
  pcre2_match_context* big_context = nullptr;

  ~MatchState() {
    pcre2_match_context_free(big_context);
    pcre2_jit_stack_free(big_stack);
    pcre2_match_data_free(data);
  }
  pcre2_match_context* context_with_big_stack() {
    if (big_context == nullptr) {
      big_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      big_context = pcre2_match_context_create(nullptr);
      FATHOM_CHECK(big_stack != nullptr && big_context != nullptr, "out of memory for the pre-tokenizer's regex stack");
      pcre2_jit_stack_assign(big_context, nullptr, big_stack);
    }
    return big_context;
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int length = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return length < 0 ? "PCRE2 error " + std::to_string(code)
                    : std::string(reinterpret_cast<char*>(buffer), size_t(length));
}

}  // namespace

Pretokenizer::Pretokenizer(std::string pattern, const std::string& source) : pattern_(std::move(pattern)) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \d and \w follow Unicode like \p{..}; MATCH_INVALID_UTF: arbitrary bytes are legal
  // input (invalid sequences simply match nothing and become pieces of their own).
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  FATHOM_CHECK(code != nullptr, source, ": the pre-tokenizer regex does not compile at offset ", offset, ": ",
               pcre2_message(error), " (pattern: ", pattern_, ")");
  // Without JIT support pcre2_match falls back to the interpreter: slower, same pieces.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(as_code(code_)); }

Pretokenizer::Pretokenizer(Pretokenizer&& other) noexcept : pattern_(std::move(other.pattern_)), code_(other.code_) {
  other.code_ = nullptr;
}

Pretokenizer& Pretokenizer::operator=(Pretokenizer&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(as_code(code_));
    pattern_ = std::move(other.pattern_);
    code_ = other.code_;
    other.code_ = nullptr;
  }
  return *this;
}

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  thread_local MatchState state;
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t position = 0;
  size_t gap_start = 0;  // start of text not yet emitted
  while (position < text.size()) {
    int rc = pcre2_match(as_code(code_), subject, text.size(), position, 0, state.data, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(as_code(code_), subject, text.size(), position, 0, state.data, state.context_with_big_stack());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    // rc == 0 only says the one-pair ovector could not hold the pattern's groups; the match is there.
    FATHOM_CHECK(rc >= 0, "pre-tokenizer regex failed at byte ", position, " of a ", text.size(),
                 "-byte text: ", pcre2_message(rc), " (pattern: ", pattern_, ")");
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t start = ovector[0], end = ovector[1];
    if (end == start) {
      // An empty match would loop forever: step over one character; it joins the gap.
      position = start + 1;
      while (position < text.size() && (static_cast<unsigned char>(text[position]) & 0xC0) == 0x80) ++position;
      continue;
    }
    if (start > gap_start) pieces.push_back(text.substr(gap_start, start - gap_start));
    pieces.push_back(text.substr(start, end - start));
    position = gap_start = end;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
}

}  // namespace fathom
