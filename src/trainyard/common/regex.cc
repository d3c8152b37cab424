#include "trainyard/common/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <spdlog/spdlog.h>

#include <array>

#include "trainyard/common/strings.h"

namespace trainyard {
namespace {

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

std::string ErrorMessage(int code) {
  std::array<PCRE2_UCHAR, 256> message{};
  pcre2_get_error_message(code, message.data(), message.size());
  return reinterpret_cast<const char*>(message.data());
}

}  // namespace

struct BoundedRegex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  bool jit = false;
  ~Impl() {
    if (context) pcre2_match_context_free(context);
    if (code) pcre2_code_free(code);
  }
};

Result<std::shared_ptr<const BoundedRegex>> BoundedRegex::Compile(std::string_view pattern,
                                                                  std::string_view field,
                                                                  BoundedRegexLimits limits) {
  if (pattern.size() > kMaxPatternBytes) {
    return Status::InvalidArgument(std::string(field) + " must be at most " +
                                   std::to_string(kMaxPatternBytes) + " bytes (got " +
                                   std::to_string(pattern.size()) + ")");
  }
  if (pattern.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(std::string(field) + " must not contain a NUL byte");
  }
  auto impl = std::make_unique<Impl>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_NEVER_UTF: a pattern cannot switch on UTF mode ((*UTF)), in which invalid UTF-8 in a
  // log tail would be an error or, unchecked, undefined behaviour.
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_NEVER_UTF | PCRE2_NEVER_BACKSLASH_C, &error, &offset, nullptr);
  if (impl->code == nullptr) {
    return Status::InvalidArgument(
        std::string(field) +
        " is not a valid regular expression (PCRE2 syntax): " + ErrorMessage(error) +
        " at offset " + std::to_string(offset) + " of \"" + Abbreviate(pattern, 100) + "\"");
  }
  // JIT is an optimisation: without it (unsupported CPU, no executable memory) the interpreter
  // gives the same matches.
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  impl->context = pcre2_match_context_create(nullptr);
  if (impl->context == nullptr) return Status::Internal("pcre2: out of memory");
  pcre2_set_match_limit(impl->context, limits.match_limit);
  pcre2_set_depth_limit(impl->context, limits.depth_limit);
  pcre2_set_heap_limit(impl->context, limits.heap_limit_kib);
  return std::shared_ptr<const BoundedRegex>(
      new BoundedRegex(std::move(impl), std::string(pattern)));
}

BoundedRegex::BoundedRegex(std::unique_ptr<Impl> impl, std::string pattern)
    : impl_(std::move(impl)), pattern_(std::move(pattern)) {}

BoundedRegex::~BoundedRegex() = default;

int BoundedRegex::MatchAt(std::string_view text, size_t start, uint32_t options,
                          void* match_data) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pcre2_match(impl_->code, subject, text.size(), start, options, md, impl_->context);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && impl_->jit) {
    // The JIT stack is small; the interpreter keeps its backtracking on the (limited) heap.
    rc = pcre2_match(impl_->code, subject, text.size(), start, options | PCRE2_NO_JIT, md,
                     impl_->context);
  }
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) NoteLimit(rc);
  return rc;
}

void BoundedRegex::NoteLimit(int rc) const {
  if (!limit_logged_.exchange(true)) {
    spdlog::warn("regular expression \"{}\" stopped at a limit ({}); counted as no match",
                 Abbreviate(pattern_, 200), ErrorMessage(rc));
  }
}

BoundedRegex::Outcome BoundedRegex::Search(std::string_view text) const {
  MatchData md(pcre2_match_data_create(1, nullptr));
  if (!md) return Outcome::kLimit;
  int rc = MatchAt(text, 0, 0, md.get());
  if (rc >= 0) return Outcome::kMatch;
  return rc == PCRE2_ERROR_NOMATCH ? Outcome::kNoMatch : Outcome::kLimit;
}

BoundedRegex::Outcome BoundedRegex::FullMatch(std::string_view text) const {
  MatchData md(pcre2_match_data_create(1, nullptr));
  if (!md) return Outcome::kLimit;
  int rc = MatchAt(text, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md.get());
  if (rc >= 0) return Outcome::kMatch;
  return rc == PCRE2_ERROR_NOMATCH ? Outcome::kNoMatch : Outcome::kLimit;
}

bool BoundedRegex::ForEachMatch(
    std::string_view text,
    const std::function<void(const std::vector<std::string_view>&)>& on_match) const {
  MatchData md(pcre2_match_data_create_from_pattern(impl_->code, nullptr));
  if (!md) return false;
  size_t start = 0;
  std::vector<std::string_view> groups;
  while (start <= text.size()) {
    int rc = MatchAt(text, start, 0, md.get());
    if (rc == PCRE2_ERROR_NOMATCH) return true;
    if (rc < 0) return false;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    uint32_t pairs = pcre2_get_ovector_count(md.get());
    size_t begin = ov[0], end = ov[1];
    if (end < begin || end > text.size()) return true;  // \K tricks; not something we support
    groups.assign(pairs, std::string_view());
    for (uint32_t i = 0; i < pairs; ++i) {
      if (ov[2 * i] != PCRE2_UNSET && ov[2 * i + 1] >= ov[2 * i] && ov[2 * i + 1] <= text.size())
        groups[i] = text.substr(ov[2 * i], ov[2 * i + 1] - ov[2 * i]);
    }
    on_match(groups);
    start = end > begin ? end : begin + 1;
  }
  return true;
}

}  // namespace trainyard
