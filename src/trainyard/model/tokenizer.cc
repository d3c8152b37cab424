#include "trainyard/model/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <deque>
#include <fstream>
#include <functional>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "trainyard/common/json.h"

namespace trainyard::model {

namespace {

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Token ids above this are refused: the id→token table is a dense vector.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// Bounds the work of one regex match, so that a pathological pattern from a tokenizer.json
// degrades one piece instead of hanging the caller.
constexpr uint32_t kRegexMatchLimit = 10'000'000;

// --- UTF-8 ---------------------------------------------------------------------------------

// Length of the valid UTF-8 sequence at s[i] (> 0), or minus the length of the maximal
// invalid subpart there (< 0), as Unicode's "substitution of maximal subparts" (and Rust's
// String::from_utf8_lossy) define it.
int Utf8SequenceAt(std::string_view s, size_t i) {
  auto byte = [&](size_t k) -> int { return i + k < s.size() ? uint8_t(s[i + k]) : -1; };
  auto cont = [](int b) { return b >= 0x80 && b <= 0xBF; };
  int b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(byte(1)) ? 2 : -1;
  int lo = 0x80, hi = 0xBF, len = 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  int b1 = byte(1);
  if (b1 < lo || b1 > hi) return -1;
  for (int k = 2; k < len; ++k) {
    if (!cont(byte(k))) return -k;
  }
  return len;
}

// `s` with every invalid UTF-8 subpart replaced by U+FFFD.
std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int n = Utf8SequenceAt(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += -n;
    }
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int n = Utf8SequenceAt(s, i);
    if (n < 0) return false;
    i += n;
  }
  return true;
}

// Decodes the code point at s[i] of valid UTF-8 and advances i.
char32_t NextCodePoint(std::string_view s, size_t& i) {
  uint8_t b0 = s[i];
  int len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  char32_t c = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < len; ++k) c = (c << 6) | (uint8_t(s[i + k]) & 0x3F);
  i += len;
  return c;
}

// The last code point of valid UTF-8 `s` (which must not be empty).
char32_t LastCodePoint(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
  return NextCodePoint(s, i);
}

void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

// Unicode \w as Rust's regex crate defines it (Alphabetic, marks, decimal digits, connector
// punctuation, Join_Control): `tokenizers` tests single_word boundaries with \w.
bool IsWordChar(char32_t c) {
  UChar32 u = UChar32(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  int8_t type = u_charType(u);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK ||
         type == U_ENCLOSING_MARK || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_CONNECTOR_PUNCTUATION;
}

// Unicode \s (the White_Space property), with which `tokenizers` strips for lstrip/rstrip.
bool IsWhitespace(char32_t c) { return u_hasBinaryProperty(UChar32(c), UCHAR_WHITE_SPACE); }

// --- ByteLevel's byte <-> character table (GPT-2's bytes_to_unicode) --------------------------

struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> char_to_byte;  // code point → byte, -1 when not a mapped character

  ByteLevelTable() {
    char_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char32_t c = printable ? char32_t(b) : char32_t(next++);
      AppendUtf8(byte_to_utf8[b], c);
      char_to_byte[c] = int16_t(b);
    }
  }
};

const ByteLevelTable& ByteLevel() {
  static const ByteLevelTable table;
  return table;
}

// --- PCRE2 -------------------------------------------------------------------------------------

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

// A compiled pattern. Immutable after Compile; matching needs a MatchData per thread.
class Regex {
 public:
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern, bool literal,
                                                const std::string& where) {
    if (!IsValidUtf8(pattern)) return Status::InvalidArgument(where + " is not valid UTF-8");
    uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     options, &error, &offset, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      return Status::InvalidArgument(where + " is not a valid regular expression at offset " +
                                     std::to_string(offset) + ": " +
                                     reinterpret_cast<const char*>(message.data()));
    }
    auto regex = std::unique_ptr<Regex>(new Regex(code));
    // JIT is an optimisation: without it (unsupported CPU, no executable memory) the
    // interpreter gives the same matches.
    regex->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    regex->context_ = pcre2_match_context_create(nullptr);
    if (regex->context_ == nullptr) return Status::Internal("pcre2: out of memory");
    pcre2_set_match_limit(regex->context_, kRegexMatchLimit);
    return regex;
  }

  ~Regex() {
    if (context_) pcre2_match_context_free(context_);
    pcre2_code_free(code_);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  MatchData NewMatchData() const {
    return MatchData(pcre2_match_data_create_from_pattern(code_, nullptr));
  }

  // Calls on_match(begin, end) for each non-empty match of valid UTF-8 `text`, left to
  // right, non-overlapping. If matching fails (a resource limit), the rest of the text is
  // left unmatched.
  template <typename F>
  void ForEachMatch(std::string_view text, pcre2_match_data* md, F&& on_match) const {
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;
    while (start < text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, context_);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
        // The JIT stack is small; the interpreter keeps its backtracking on the heap.
        rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         context_);
      }
      if (rc < 0) return;
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t begin = ov[0], end = ov[1];
      if (end < begin || end > text.size()) return;  // \K tricks; not something we support
      if (end > begin) {
        on_match(begin, end);
        start = end;
      } else {
        start = begin + 1;
        while (start < text.size() && (uint8_t(text[start]) & 0xC0) == 0x80) ++start;
      }
    }
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}

  pcre2_code* code_;
  pcre2_match_context* context_ = nullptr;
  bool jit_ = false;
};

// --- the tokenizer -----------------------------------------------------------------------------

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  std::string pattern;  // what is matched: content, NFC-normalized when `normalized`
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A set of added tokens matched leftmost-longest, as an Aho-Corasick automaton would.
struct AddedTokenMatcher {
  std::array<std::vector<const AddedToken*>, 256> by_first_byte;  // longest pattern first

  void Add(const AddedToken* token) {
    auto& list = by_first_byte[uint8_t(token->pattern[0])];
    list.push_back(token);
    std::stable_sort(list.begin(), list.end(), [](const AddedToken* a, const AddedToken* b) {
      return a->pattern.size() > b->pattern.size();
    });
  }
  bool empty() const {
    return std::all_of(by_first_byte.begin(), by_first_byte.end(),
                       [](const auto& l) { return l.empty(); });
  }
};

// A piece of the input: text to pre-tokenize (token == nullptr) or a matched added token.
struct Segment {
  size_t begin = 0;
  size_t end = 0;
  const AddedToken* token = nullptr;
};

// Splits `text` around the matches of `matcher`, applying single_word/lstrip/rstrip the way
// `tokenizers`' AddedVocabulary::find_matches does.
void FindAddedTokens(std::string_view text, const AddedTokenMatcher& matcher,
                     std::vector<Segment>& out) {
  out.clear();
  size_t taken = 0;  // end of the previous accepted match (with its stripped whitespace)
  size_t pos = 0;    // where the automaton resumes
  while (pos < text.size()) {
    const AddedToken* found = nullptr;
    for (const AddedToken* t : matcher.by_first_byte[uint8_t(text[pos])]) {
      if (text.substr(pos, t->pattern.size()) == t->pattern) {
        found = t;
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + found->pattern.size();
    pos = stop;
    if (found->single_word) {
      bool space_before = start == 0 || !IsWordChar(LastCodePoint(text.substr(0, start)));
      size_t k = stop;
      bool space_after = stop == text.size() || !IsWordChar(NextCodePoint(text, k));
      if (!space_before || !space_after) continue;
    }
    if (found->lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t k = new_start - 1;
        while (k > 0 && (uint8_t(text[k]) & 0xC0) == 0x80) --k;
        size_t j = k;
        if (!IsWhitespace(NextCodePoint(text, j))) break;
        new_start = k;
      }
      start = std::max(new_start, taken);
    }
    if (found->rstrip) {
      while (stop < text.size()) {
        size_t j = stop;
        if (!IsWhitespace(NextCodePoint(text, j))) break;
        stop = j;
      }
    }
    if (taken < start) out.push_back({taken, start, nullptr});
    out.push_back({start, stop, found});
    taken = stop;
  }
  if (taken < text.size() || text.empty()) out.push_back({taken, text.size(), nullptr});
}

enum class SplitBehavior { kIsolated, kRemoved };

struct SplitStep {
  std::unique_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
};

struct Merge {
  int32_t rank;
  int32_t new_id;
};

// A token that a post-processor template puts around the sequence.
struct TemplatePiece {
  bool is_sequence = false;  // $A
  std::vector<int32_t> ids;  // a special token's ids
};

// Scratch space one Encode call reuses across its pieces.
struct EncodeScratch {
  std::vector<MatchData> split_match_data;
  MatchData byte_level_match_data;
  std::vector<Segment> segments;
  std::vector<Segment> normalized_segments;
  std::vector<std::string_view> pieces;
  std::vector<std::string_view> next_pieces;
  std::deque<std::string> owned;  // pieces that got a prefix space
  std::string mapped;
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& o) const {  // the heap's top: lowest rank, then leftmost
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> heap;
};

uint64_t PairKey(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

class BpeTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  std::optional<std::string> IdToToken(int32_t id) const override;
  int32_t VocabSize() const override { return vocab_size_; }

 private:
  friend class TokenizerParser;

  // The token string of `id` (an added token first, as `tokenizers` looks them up), or null.
  const std::string* TokenOf(int32_t id) const;
  void Normalize(std::string_view in, std::string& out) const;
  void EncodeText(std::string_view text, EncodeScratch& scratch, std::vector<int32_t>& ids) const;
  void EncodePiece(std::string_view piece, EncodeScratch& scratch, std::vector<int32_t>& ids) const;

  TokenMap vocab_;
  std::vector<const std::string*> id_to_token_;  // model vocabulary, indexed by id
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // the id of each byte's ByteLevel character, or -1
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;

  std::deque<AddedToken> added_;  // stable addresses for the matchers
  std::unordered_map<int32_t, const AddedToken*> added_by_id_;
  TokenMap added_by_content_;
  AddedTokenMatcher raw_matcher_;         // normalized == false: matched in the input
  AddedTokenMatcher normalized_matcher_;  // normalized == true: matched after normalization

  const icu::Normalizer2* nfc_ = nullptr;  // null: no normalizer
  std::vector<SplitStep> splits_;
  bool add_prefix_space_ = false;
  std::unique_ptr<Regex> byte_level_regex_;  // GPT-2's, when ByteLevel use_regex

  std::vector<std::vector<TemplatePiece>> templates_;  // applied in order with special tokens
  bool byte_level_decoder_ = true;                     // false: tokens joined with " "
  int32_t vocab_size_ = 0;
};

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::string valid;
  if (!IsValidUtf8(text)) {
    valid = ToValidUtf8(text);
    text = valid;
  }
  EncodeScratch scratch;
  for (const SplitStep& s : splits_) scratch.split_match_data.push_back(s.regex->NewMatchData());
  if (byte_level_regex_) scratch.byte_level_match_data = byte_level_regex_->NewMatchData();

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  FindAddedTokens(text, raw_matcher_, segments);
  std::string normalized;
  for (const Segment& seg : segments) {
    if (seg.token != nullptr) {
      ids.push_back(seg.token->id);
      continue;
    }
    std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
    if (nfc_ != nullptr) {
      Normalize(part, normalized);
      part = normalized;
    }
    if (normalized_matcher_.empty()) {
      EncodeText(part, scratch, ids);
      continue;
    }
    FindAddedTokens(part, normalized_matcher_, scratch.normalized_segments);
    for (const Segment& inner : scratch.normalized_segments) {
      if (inner.token != nullptr) {
        ids.push_back(inner.token->id);
      } else {
        EncodeText(part.substr(inner.begin, inner.end - inner.begin), scratch, ids);
      }
    }
  }
  if (!add_special_tokens) return ids;
  for (const auto& pieces : templates_) {
    std::vector<int32_t> wrapped;
    wrapped.reserve(ids.size() + 4);
    for (const TemplatePiece& p : pieces) {
      if (p.is_sequence) {
        wrapped.insert(wrapped.end(), ids.begin(), ids.end());
      } else {
        wrapped.insert(wrapped.end(), p.ids.begin(), p.ids.end());
      }
    }
    ids = std::move(wrapped);
  }
  return ids;
}

void BpeTokenizer::Normalize(std::string_view in, std::string& out) const {
  out.clear();
  UErrorCode status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out, int32_t(in.size()));
  nfc_->normalizeUTF8(0, icu::StringPiece(in.data(), int32_t(in.size())), sink, nullptr, status);
  if (U_FAILURE(status)) out.assign(in);
}

void BpeTokenizer::EncodeText(std::string_view text, EncodeScratch& scratch,
                              std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  auto& pieces = scratch.pieces;
  auto& next = scratch.next_pieces;
  pieces.assign(1, text);
  scratch.owned.clear();
  for (size_t s = 0; s < splits_.size(); ++s) {
    const SplitStep& step = splits_[s];
    next.clear();
    for (std::string_view piece : pieces) {
      size_t gap = 0;
      step.regex->ForEachMatch(piece, scratch.split_match_data[s].get(), [&](size_t b, size_t e) {
        if (b > gap) next.push_back(piece.substr(gap, b - gap));
        if (step.behavior == SplitBehavior::kIsolated) next.push_back(piece.substr(b, e - b));
        gap = e;
      });
      if (gap < piece.size()) next.push_back(piece.substr(gap));
    }
    std::swap(pieces, next);
  }
  // ByteLevel: the prefix space, then GPT-2's regex, then the byte mapping inside EncodePiece.
  if (add_prefix_space_) {
    for (std::string_view& piece : pieces) {
      if (piece.empty() || piece[0] != ' ') {
        scratch.owned.push_back(" " + std::string(piece));
        piece = scratch.owned.back();
      }
    }
  }
  if (byte_level_regex_) {
    next.clear();
    for (std::string_view piece : pieces) {
      size_t gap = 0;
      byte_level_regex_->ForEachMatch(piece, scratch.byte_level_match_data.get(),
                                      [&](size_t b, size_t e) {
                                        if (b > gap) next.push_back(piece.substr(gap, b - gap));
                                        next.push_back(piece.substr(b, e - b));
                                        gap = e;
                                      });
      if (gap < piece.size()) next.push_back(piece.substr(gap));
    }
    std::swap(pieces, next);
  }
  for (std::string_view piece : pieces) EncodePiece(piece, scratch, ids);
}

void BpeTokenizer::EncodePiece(std::string_view piece, EncodeScratch& scratch,
                               std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  const ByteLevelTable& table = ByteLevel();
  if (ignore_merges_) {
    scratch.mapped.clear();
    for (char c : piece) scratch.mapped += table.byte_to_utf8[uint8_t(c)];
    auto it = vocab_.find(std::string_view(scratch.mapped));
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  using Symbol = EncodeScratch::Symbol;
  auto& symbols = scratch.symbols;
  symbols.clear();
  bool previous_unk = false;
  for (char c : piece) {
    int32_t id = byte_ids_[uint8_t(c)];
    if (id < 0) {
      if (!unk_id_) continue;
      if (fuse_unk_ && previous_unk) continue;
      id = *unk_id_;
      previous_unk = true;
    } else {
      previous_unk = false;
    }
    int32_t n = int32_t(symbols.size());
    symbols.push_back(Symbol{id, n - 1, n + 1, false});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto& heap = scratch.heap;
  heap.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    auto it = merges_.find(PairKey(symbols[i].id, symbols[i + 1].id));
    if (it != merges_.end()) heap.push_back({it->second.rank, int32_t(i), it->second.new_id});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    auto top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) {
      auto p = merges_.find(PairKey(symbols[left.prev].id, left.id));
      if (p != merges_.end()) {
        heap.push_back({p->second.rank, left.prev, p->second.new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (left.next >= 0) {
      auto n = merges_.find(PairKey(left.id, symbols[left.next].id));
      if (n != merges_.end()) {
        heap.push_back({n->second.rank, top.pos, n->second.new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

const std::string* BpeTokenizer::TokenOf(int32_t id) const {
  auto added = added_by_id_.find(id);
  if (added != added_by_id_.end()) return &added->second->content;
  if (id >= 0 && size_t(id) < id_to_token_.size()) return id_to_token_[id];
  return nullptr;
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const ByteLevelTable& table = ByteLevel();
  std::string bytes;
  std::string token_bytes;
  bool first = true;
  for (int32_t id : ids) {
    const std::string* token = TokenOf(id);
    if (token == nullptr) continue;  // unknown ids are dropped, as `tokenizers` does
    if (skip_special_tokens) {
      auto added = added_by_content_.find(std::string_view(*token));
      if (added != added_by_content_.end() && added_by_id_.at(added->second)->special) continue;
    }
    if (!byte_level_decoder_) {
      if (!first) bytes += ' ';
      bytes += *token;
      first = false;
      continue;
    }
    // A token whose characters are all ByteLevel characters stands for those bytes; any other
    // token (e.g. an added token with a space) stands for its own UTF-8.
    token_bytes.clear();
    bool mapped = true;
    for (size_t i = 0; i < token->size();) {
      char32_t c = NextCodePoint(*token, i);
      int b = c < table.char_to_byte.size() ? table.char_to_byte[c] : -1;
      if (b < 0) {
        mapped = false;
        break;
      }
      token_bytes += char(b);
    }
    bytes += mapped ? token_bytes : *token;
  }
  return ToValidUtf8(bytes);
}

std::optional<int32_t> BpeTokenizer::TokenToId(std::string_view token) const {
  auto added = added_by_content_.find(token);
  if (added != added_by_content_.end()) return added->second;
  auto it = vocab_.find(token);
  if (it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> BpeTokenizer::IdToToken(int32_t id) const {
  const std::string* token = TokenOf(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

// --- tokenizer.json ----------------------------------------------------------------------------

// Reads tokenizer.json into a BpeTokenizer; every error names the JSON path.
class TokenizerParser {
 public:
  explicit TokenizerParser(std::string_view source) : source_(source) {}

  Result<std::shared_ptr<const Tokenizer>> Parse(std::string_view json_text) {
    boost::system::error_code ec;
    json::parse_options options;
    options.max_depth = 64;
    json::value root = json::parse(json::string_view(json_text.data(), json_text.size()), ec,
                                   json::storage_ptr(), options);
    if (ec) {
      return Status::InvalidArgument(source_ + ": not valid JSON (" + ec.message() +
                                     "); pass the tokenizer.json file of a Hugging Face tokenizer");
    }
    if (!root.is_object())
      return Error("", "must be a JSON object (got " + DescribeJson(root) + ")");
    const json::object& top = root.get_object();
    tok_ = std::make_shared<BpeTokenizer>();

    for (std::string_view field : {"truncation", "padding"}) {
      if (const json::value* v = top.if_contains(field); v && !v->is_null()) {
        return Error(field, "is not supported (got " + DescribeJson(*v) +
                                "); set it to null and truncate or pad in the caller");
      }
    }
    const json::value* model = top.if_contains("model");
    if (model == nullptr || !model->is_object()) {
      return Error("model", "must be an object with the BPE vocabulary and merges");
    }
    TY_RETURN_IF_ERROR(ParseModel(model->get_object()));
    TY_RETURN_IF_ERROR(ParseNormalizer(top));
    TY_RETURN_IF_ERROR(ParseAddedTokens(top));
    TY_RETURN_IF_ERROR(ParsePreTokenizer(top));
    TY_RETURN_IF_ERROR(ParsePostProcessor(top));
    TY_RETURN_IF_ERROR(ParseDecoder(top));

    int64_t size = int64_t(tok_->id_to_token_.size());
    for (const AddedToken& t : tok_->added_) size = std::max<int64_t>(size, int64_t(t.id) + 1);
    tok_->vocab_size_ = int32_t(size);
    return std::shared_ptr<const Tokenizer>(std::move(tok_));
  }

 private:
  Status Error(std::string_view path, std::string_view what) const {
    std::string m = source_ + ": ";
    if (!path.empty()) m += std::string(path) + " ";
    m += what;
    return Status::InvalidArgument(std::move(m));
  }

  // The object's "type" string, or an error naming `path`.type.
  Result<std::string> TypeOf(const json::object& o, const std::string& path) const {
    const json::value* t = o.if_contains("type");
    if (t == nullptr || !t->is_string()) return Error(path + ".type", "must be a string");
    return std::string(t->get_string());
  }

  Result<bool> Bool(const json::object& o, std::string_view field, bool fallback,
                    const std::string& path) const {
    const json::value* v = o.if_contains(field);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_bool()) {
      return Error(path + "." + std::string(field),
                   "must be true or false (got " + DescribeJson(*v) + ")");
    }
    return v->get_bool();
  }

  Result<int32_t> Id(const json::value& v, const std::string& path) const {
    if (!v.is_int64() && !v.is_uint64()) {
      return Error(path, "must be a token id (got " + DescribeJson(v) + ")");
    }
    if (v.is_uint64() || v.get_int64() < 0 || v.get_int64() > kMaxTokenId) {
      return Error(path, "is out of range (token ids go from 0 to " + std::to_string(kMaxTokenId) +
                             "; got " + DescribeJson(v) + ")");
    }
    return int32_t(v.get_int64());
  }

  Status ParseModel(const json::object& m) {
    if (const json::value* t = m.if_contains("type"); t != nullptr) {
      if (!t->is_string()) return Error("model.type", "must be a string");
      if (t->get_string() != "BPE") {
        return Error("model.type", "\"" + std::string(t->get_string()) +
                                       "\" is not supported (byte-level BPE only)");
      }
    }
    if (const json::value* d = m.if_contains("dropout");
        d && !d->is_null() && !(d->is_number() && d->to_number<double>() == 0.0)) {
      return Error("model.dropout", "is not supported (got " + DescribeJson(*d) +
                                        "); set it to null for deterministic encoding");
    }
    for (std::string_view field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json::value* v = m.if_contains(field);
      if (v && !v->is_null() && !(v->is_string() && v->get_string().empty())) {
        return Error("model." + std::string(field),
                     "is not supported (got " + DescribeJson(*v) + "; byte-level BPE only)");
      }
    }
    TY_ASSIGN_OR_RETURN(bool byte_fallback, Bool(m, "byte_fallback", false, "model"));
    if (byte_fallback)
      return Error("model.byte_fallback", "is not supported (byte-level BPE only)");
    TY_ASSIGN_OR_RETURN(tok_->ignore_merges_, Bool(m, "ignore_merges", false, "model"));
    TY_ASSIGN_OR_RETURN(tok_->fuse_unk_, Bool(m, "fuse_unk", false, "model"));

    const json::value* vocab = m.if_contains("vocab");
    if (vocab == nullptr || !vocab->is_object()) {
      return Error("model.vocab", "must be an object mapping tokens to ids");
    }
    int32_t max_id = -1;
    for (const auto& kv : vocab->get_object()) {
      std::string path = "model.vocab[" + DescribeJson(json::value(kv.key())) + "]";
      TY_ASSIGN_OR_RETURN(int32_t id, Id(kv.value(), path));
      if (!IsValidUtf8(std::string_view(kv.key().data(), kv.key().size()))) {
        return Error(path, "is not valid UTF-8");
      }
      tok_->vocab_[std::string(kv.key())] = id;
      max_id = std::max(max_id, id);
    }
    tok_->id_to_token_.assign(size_t(max_id + 1), nullptr);
    for (const auto& [token, id] : tok_->vocab_) tok_->id_to_token_[id] = &token;

    const ByteLevelTable& table = ByteLevel();
    for (int b = 0; b < 256; ++b) {
      auto it = tok_->vocab_.find(std::string_view(table.byte_to_utf8[b]));
      tok_->byte_ids_[b] = it == tok_->vocab_.end() ? -1 : it->second;
    }

    if (const json::value* unk = m.if_contains("unk_token"); unk && !unk->is_null()) {
      if (!unk->is_string()) return Error("model.unk_token", "must be a string or null");
      auto it = tok_->vocab_.find(std::string_view(unk->get_string()));
      if (it == tok_->vocab_.end()) {
        return Error("model.unk_token", DescribeJson(*unk) + " is not in model.vocab");
      }
      tok_->unk_id_ = it->second;
    }

    const json::value* merges = m.if_contains("merges");
    if (merges == nullptr || !merges->is_array()) {
      return Error("model.merges", "must be an array of merges (\"a b\" or [\"a\", \"b\"])");
    }
    const json::array& list = merges->get_array();
    tok_->merges_.reserve(list.size());
    for (size_t rank = 0; rank < list.size(); ++rank) {
      std::string path = "model.merges[" + std::to_string(rank) + "]";
      const json::value& v = list[rank];
      std::string_view a, b;
      if (v.is_string()) {
        std::string_view s(v.get_string().data(), v.get_string().size());
        size_t space = s.find(' ');
        if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos) {
          return Error(path,
                       "must be two tokens separated by one space (got " + DescribeJson(v) + ")");
        }
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (v.is_array() && v.get_array().size() == 2 && v.get_array()[0].is_string() &&
                 v.get_array()[1].is_string()) {
        const json::string& x = v.get_array()[0].get_string();
        const json::string& y = v.get_array()[1].get_string();
        a = std::string_view(x.data(), x.size());
        b = std::string_view(y.data(), y.size());
      } else {
        return Error(path, "must be \"a b\" or [\"a\", \"b\"] (got " + DescribeJson(v) + ")");
      }
      auto ia = tok_->vocab_.find(a);
      auto ib = tok_->vocab_.find(b);
      std::string joined = std::string(a) + std::string(b);
      auto ij = tok_->vocab_.find(std::string_view(joined));
      if (ia == tok_->vocab_.end() || ib == tok_->vocab_.end() || ij == tok_->vocab_.end()) {
        std::string missing = ia == tok_->vocab_.end()   ? std::string(a)
                              : ib == tok_->vocab_.end() ? std::string(b)
                                                         : joined;
        return Error(path, "uses \"" + missing + "\", which is not in model.vocab");
      }
      tok_->merges_[PairKey(ia->second, ib->second)] = Merge{int32_t(rank), ij->second};
    }
    return Status::Ok();
  }

  Status ParseNormalizer(const json::object& top) {
    const json::value* n = top.if_contains("normalizer");
    if (n == nullptr || n->is_null()) return Status::Ok();
    if (!n->is_object()) return Error("normalizer", "must be an object or null");
    TY_ASSIGN_OR_RETURN(std::string type, TypeOf(n->get_object(), "normalizer"));
    bool nfc = type == "NFC";
    if (type == "Sequence") {
      const json::value* list = n->get_object().if_contains("normalizers");
      if (list == nullptr || !list->is_array()) {
        return Error("normalizer.normalizers", "must be an array");
      }
      for (size_t i = 0; i < list->get_array().size(); ++i) {
        std::string path = "normalizer.normalizers[" + std::to_string(i) + "]";
        const json::value& item = list->get_array()[i];
        if (!item.is_object()) return Error(path, "must be an object");
        TY_ASSIGN_OR_RETURN(std::string inner, TypeOf(item.get_object(), path));
        if (inner != "NFC") {
          return Error(path + ".type", "\"" + inner + "\" is not supported (only NFC)");
        }
        nfc = true;
      }
    } else if (!nfc) {
      return Error("normalizer.type", "\"" + type + "\" is not supported (only NFC or null)");
    }
    if (nfc) {
      UErrorCode status = U_ZERO_ERROR;
      tok_->nfc_ = icu::Normalizer2::getNFCInstance(status);
      if (U_FAILURE(status)) return Status::Internal("ICU: NFC data is unavailable");
    }
    return Status::Ok();
  }

  Status ParseAddedTokens(const json::object& top) {
    const json::value* list = top.if_contains("added_tokens");
    if (list == nullptr || list->is_null()) return Status::Ok();
    if (!list->is_array()) return Error("added_tokens", "must be an array");
    int64_t max_added = -1;
    for (size_t i = 0; i < list->get_array().size(); ++i) {
      std::string path = "added_tokens[" + std::to_string(i) + "]";
      const json::value& item = list->get_array()[i];
      if (!item.is_object()) return Error(path, "must be an object");
      const json::object& o = item.get_object();
      AddedToken t;
      const json::value* id = o.if_contains("id");
      if (id == nullptr) return Error(path + ".id", "is missing");
      TY_ASSIGN_OR_RETURN(t.id, Id(*id, path + ".id"));
      const json::value* content = o.if_contains("content");
      if (content == nullptr || !content->is_string() || content->get_string().empty()) {
        return Error(path + ".content", "must be a non-empty string");
      }
      t.content = std::string(content->get_string());
      if (!IsValidUtf8(t.content)) return Error(path + ".content", "is not valid UTF-8");
      TY_ASSIGN_OR_RETURN(t.special, Bool(o, "special", false, path));
      TY_ASSIGN_OR_RETURN(t.lstrip, Bool(o, "lstrip", false, path));
      TY_ASSIGN_OR_RETURN(t.rstrip, Bool(o, "rstrip", false, path));
      TY_ASSIGN_OR_RETURN(t.single_word, Bool(o, "single_word", false, path));
      TY_ASSIGN_OR_RETURN(t.normalized, Bool(o, "normalized", !t.special, path));
      t.pattern = t.content;
      if (t.normalized && tok_->nfc_ != nullptr) tok_->Normalize(t.content, t.pattern);
      if (t.pattern.empty()) t.pattern = t.content;
      if (tok_->added_by_content_.count(std::string_view(t.content))) continue;  // first wins
      // `tokenizers` does not take the id from the file: it gives the token its vocabulary id,
      // or the next id after the model's vocabulary and the added tokens so far (and warns when
      // that differs from the file). The same rule keeps our ids equal to its ids.
      if (auto in_vocab = tok_->vocab_.find(std::string_view(t.content));
          in_vocab != tok_->vocab_.end()) {
        t.id = in_vocab->second;
      } else {
        int64_t model_size = int64_t(tok_->vocab_.size());
        int64_t next = model_size;
        if (max_added >= 0 && (max_added >= model_size || model_size == 0)) next = max_added + 1;
        if (next > kMaxTokenId) return Error(path + ".id", "is out of range");
        t.id = int32_t(next);
      }
      max_added = std::max<int64_t>(max_added, t.id);
      tok_->added_.push_back(std::move(t));
      const AddedToken* added = &tok_->added_.back();
      tok_->added_by_id_[added->id] = added;
      tok_->added_by_content_[added->content] = added->id;
      (added->normalized ? tok_->normalized_matcher_ : tok_->raw_matcher_).Add(added);
    }
    return Status::Ok();
  }

  Status ParseSplit(const json::object& o, const std::string& path) {
    const json::value* pattern = o.if_contains("pattern");
    if (pattern == nullptr || !pattern->is_object() || pattern->get_object().size() != 1) {
      return Error(path + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
    }
    const auto& entry = *pattern->get_object().begin();
    bool literal = entry.key() == "String";
    if ((!literal && entry.key() != "Regex") || !entry.value().is_string()) {
      return Error(path + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
    }
    if (entry.value().get_string().empty()) return Error(path + ".pattern", "must not be empty");
    TY_ASSIGN_OR_RETURN(bool invert, Bool(o, "invert", false, path));
    if (invert) return Error(path + ".invert", "true is not supported");
    const json::value* behavior = o.if_contains("behavior");
    SplitStep step;
    if (behavior == nullptr || !behavior->is_string()) {
      return Error(path + ".behavior", "must be a string");
    }
    if (behavior->get_string() == "Isolated") {
      step.behavior = SplitBehavior::kIsolated;
    } else if (behavior->get_string() == "Removed") {
      step.behavior = SplitBehavior::kRemoved;
    } else {
      return Error(path + ".behavior",
                   DescribeJson(*behavior) + " is not supported (only Isolated or Removed)");
    }
    const json::string& text = entry.value().get_string();
    TY_ASSIGN_OR_RETURN(step.regex, Regex::Compile(std::string_view(text.data(), text.size()),
                                                   literal, source_ + ": " + path + ".pattern"));
    tok_->splits_.push_back(std::move(step));
    return Status::Ok();
  }

  Status ParseByteLevel(const json::object& o, const std::string& path) {
    TY_ASSIGN_OR_RETURN(tok_->add_prefix_space_, Bool(o, "add_prefix_space", true, path));
    TY_ASSIGN_OR_RETURN(bool use_regex, Bool(o, "use_regex", true, path));
    if (use_regex) {
      TY_ASSIGN_OR_RETURN(tok_->byte_level_regex_, Regex::Compile(kGpt2Pattern, false, "GPT-2"));
    }
    return Status::Ok();
  }

  Status ParsePreTokenizer(const json::object& top) {
    const json::value* p = top.if_contains("pre_tokenizer");
    if (p == nullptr || !p->is_object()) {
      return Error("pre_tokenizer",
                   "must be ByteLevel or a Sequence ending in ByteLevel "
                   "(byte-level BPE only)");
    }
    TY_ASSIGN_OR_RETURN(std::string type, TypeOf(p->get_object(), "pre_tokenizer"));
    if (type == "ByteLevel") return ParseByteLevel(p->get_object(), "pre_tokenizer");
    if (type != "Sequence") {
      return Error("pre_tokenizer.type", "\"" + type +
                                             "\" is not supported (ByteLevel, or a Sequence of "
                                             "Split steps ending in ByteLevel)");
    }
    const json::value* list = p->get_object().if_contains("pretokenizers");
    if (list == nullptr || !list->is_array() || list->get_array().empty()) {
      return Error("pre_tokenizer.pretokenizers", "must be a non-empty array");
    }
    const json::array& steps = list->get_array();
    for (size_t i = 0; i < steps.size(); ++i) {
      std::string path = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
      if (!steps[i].is_object()) return Error(path, "must be an object");
      TY_ASSIGN_OR_RETURN(std::string step, TypeOf(steps[i].get_object(), path));
      bool last = i + 1 == steps.size();
      if (step == "Split" && !last) {
        TY_RETURN_IF_ERROR(ParseSplit(steps[i].get_object(), path));
      } else if (step == "ByteLevel" && last) {
        TY_RETURN_IF_ERROR(ParseByteLevel(steps[i].get_object(), path));
      } else {
        return Error(path + ".type", "\"" + step +
                                         "\" is not supported here (Split steps, then "
                                         "ByteLevel last: byte-level BPE only)");
      }
    }
    return Status::Ok();
  }

  Status ParseTemplate(const json::object& o, const std::string& path) {
    const json::value* single = o.if_contains("single");
    if (single == nullptr || !single->is_array())
      return Error(path + ".single", "must be an array");
    const json::value* specials = o.if_contains("special_tokens");
    if (specials != nullptr && !specials->is_null() && !specials->is_object()) {
      return Error(path + ".special_tokens", "must be an object");
    }
    std::vector<TemplatePiece> pieces;
    bool has_sequence = false;
    for (size_t i = 0; i < single->get_array().size(); ++i) {
      std::string item_path = path + ".single[" + std::to_string(i) + "]";
      const json::value& item = single->get_array()[i];
      if (!item.is_object() || item.get_object().size() != 1) {
        return Error(item_path, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
      const auto& entry = *item.get_object().begin();
      const json::value* id =
          entry.value().is_object() ? entry.value().get_object().if_contains("id") : nullptr;
      if (id == nullptr || !id->is_string()) return Error(item_path, "must have a string \"id\"");
      TemplatePiece piece;
      if (entry.key() == "Sequence") {
        if (id->get_string() != "A") {
          return Error(item_path, "refers to sequence " + DescribeJson(*id) +
                                      "; a single-sequence template has only A");
        }
        piece.is_sequence = true;
        has_sequence = true;
      } else if (entry.key() == "SpecialToken") {
        const json::value* special = specials && specials->is_object()
                                         ? specials->get_object().if_contains(id->get_string())
                                         : nullptr;
        const json::value* ids =
            special && special->is_object() ? special->get_object().if_contains("ids") : nullptr;
        if (ids == nullptr || !ids->is_array()) {
          return Error(item_path, "uses " + DescribeJson(*id) + ", which " + path +
                                      ".special_tokens does not define with its ids");
        }
        for (size_t k = 0; k < ids->get_array().size(); ++k) {
          TY_ASSIGN_OR_RETURN(int32_t token_id, Id(ids->get_array()[k],
                                                   path + ".special_tokens[" + DescribeJson(*id) +
                                                       "].ids[" + std::to_string(k) + "]"));
          // `tokenizers` would emit any id here; one outside the vocabulary would index past
          // a model's embeddings, so it is refused.
          if (tok_->TokenOf(token_id) == nullptr) {
            return Error(
                path + ".special_tokens[" + DescribeJson(*id) + "].ids[" + std::to_string(k) + "]",
                std::to_string(token_id) + " is not a token of this tokenizer");
          }
          piece.ids.push_back(token_id);
        }
      } else {
        return Error(item_path, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
      pieces.push_back(std::move(piece));
    }
    if (!has_sequence) return Error(path + ".single", "must contain the sequence $A");
    tok_->templates_.push_back(std::move(pieces));
    return Status::Ok();
  }

  Status ParsePostProcessor(const json::object& top) {
    const json::value* p = top.if_contains("post_processor");
    if (p == nullptr || p->is_null()) return Status::Ok();
    std::vector<std::pair<const json::value*, std::string>> steps{{p, "post_processor"}};
    if (p->is_object()) {
      TY_ASSIGN_OR_RETURN(std::string type, TypeOf(p->get_object(), "post_processor"));
      if (type == "Sequence") {
        const json::value* list = p->get_object().if_contains("processors");
        if (list == nullptr || !list->is_array()) {
          return Error("post_processor.processors", "must be an array");
        }
        steps.clear();
        for (size_t i = 0; i < list->get_array().size(); ++i) {
          steps.emplace_back(&list->get_array()[i],
                             "post_processor.processors[" + std::to_string(i) + "]");
        }
      }
    }
    for (const auto& step : steps) {
      const json::value* v = step.first;
      const std::string& path = step.second;
      if (!v->is_object()) return Error(path, "must be an object");
      TY_ASSIGN_OR_RETURN(std::string type, TypeOf(v->get_object(), path));
      if (type == "ByteLevel") continue;  // only offsets change; ids do not
      if (type == "TemplateProcessing") {
        TY_RETURN_IF_ERROR(ParseTemplate(v->get_object(), path));
        continue;
      }
      return Error(path + ".type", "\"" + type +
                                       "\" is not supported (ByteLevel, TemplateProcessing or a "
                                       "Sequence of them)");
    }
    return Status::Ok();
  }

  Status ParseDecoder(const json::object& top) {
    const json::value* d = top.if_contains("decoder");
    if (d == nullptr || d->is_null()) {
      tok_->byte_level_decoder_ = false;
      return Status::Ok();
    }
    if (!d->is_object()) return Error("decoder", "must be an object or null");
    TY_ASSIGN_OR_RETURN(std::string type, TypeOf(d->get_object(), "decoder"));
    if (type != "ByteLevel") {
      return Error("decoder.type", "\"" + type + "\" is not supported (ByteLevel or null)");
    }
    return Status::Ok();
  }

  std::string source_;
  std::shared_ptr<BpeTokenizer> tok_;
};

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                             std::string_view source) {
  return TokenizerParser(source).Parse(json_text);
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound(path + ": cannot open the tokenizer file; check the path");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read failed");
  return FromJson(text.str(), path);
}

}  // namespace trainyard::model
