// BoundedRegex: a compiled PCRE2 pattern whose matching has bounded time and memory, for
// patterns and texts that come from users or jobs (failure policies over log tails, cluster
// output). std::regex recurses per character and overflows the stack on tens of KB of input;
// PCRE2 keeps its backtracking on the heap and stops at the match, depth and heap limits set
// here, so a hostile pattern or text costs a bounded amount of work and never crashes.
//
// A match that hits a limit counts as "no match" (Search returns kLimit) and is logged once per
// pattern. Patterns use PCRE2 (Perl) syntax, matched byte-wise (no UTF mode: log tails may hold
// invalid UTF-8). Compile once, share freely: all methods are const and thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard {

struct BoundedRegexLimits {
  uint32_t match_limit = 1'000'000;  // calls of PCRE2's internal match function
  uint32_t depth_limit = 10'000;     // backtracking depth
  uint32_t heap_limit_kib = 20'000;  // heap for backtracking frames
};

class BoundedRegex {
 public:
  // The longest pattern Compile accepts.
  static constexpr size_t kMaxPatternBytes = 1024;

  enum class Outcome { kMatch, kNoMatch, kLimit };

  // `field` names the pattern in errors, e.g. "failure_policies[0].pattern". An invalid or too
  // long pattern is InvalidArgument naming the field, the offset and PCRE2's reason.
  static Result<std::shared_ptr<const BoundedRegex>> Compile(std::string_view pattern,
                                                             std::string_view field,
                                                             BoundedRegexLimits limits = {});

  ~BoundedRegex();
  BoundedRegex(const BoundedRegex&) = delete;
  BoundedRegex& operator=(const BoundedRegex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Whether the pattern matches anywhere in `text`.
  Outcome Search(std::string_view text) const;
  // Whether the pattern matches the whole of `text`.
  Outcome FullMatch(std::string_view text) const;
  bool Matches(std::string_view text) const { return Search(text) == Outcome::kMatch; }

  // Calls on_match(groups) for each non-overlapping match, left to right; groups[0] is the whole
  // match, groups[i] capture group i (empty when it did not take part). Stops at a limit.
  // Returns false when a limit stopped it.
  bool ForEachMatch(
      std::string_view text,
      const std::function<void(const std::vector<std::string_view>&)>& on_match) const;

 private:
  struct Impl;
  explicit BoundedRegex(std::unique_ptr<Impl> impl, std::string pattern);
  int MatchAt(std::string_view text, size_t start, uint32_t options, void* match_data) const;
  void NoteLimit(int rc) const;

  std::unique_ptr<Impl> impl_;
  std::string pattern_;
  mutable std::atomic<bool> limit_logged_{false};
};

}  // namespace trainyard
