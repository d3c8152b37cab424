#include "trainyard/train/data.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "trainyard/common/json.h"

namespace trainyard::train {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a tiny PRNG whose output is fixed by its seed on
// every platform, unlike std:: distributions.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift with rejection: unbiased).
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

// A seed for one use of `seed` (`stream` separates the uses: split, epoch orders).
uint64_t DeriveSeed(uint64_t seed, uint64_t stream, uint64_t index) {
  SplitMix64 a(seed ^ (stream * 0xd1b54a32d192ed03ULL));
  uint64_t x = a.Next();
  SplitMix64 b(x ^ (index * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
  return b.Next();
}

// Fisher-Yates: a permutation of [0, n).
std::vector<int64_t> Permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  SplitMix64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

constexpr uint64_t kSplitStream = 1;
constexpr uint64_t kEpochStream = 2;

// How errors name a field's column: "message", or "text" (message) when mapped.
std::string ColumnLabel(std::string_view field, const std::string& column) {
  if (column == field) return "\"" + column + "\"";
  return "column \"" + column + "\" (" + std::string(field) + ")";
}

// The column of `field` under `columns`.
std::string ColumnOf(const ColumnMapping& columns, const std::string& field) {
  auto it = columns.find(field);
  return it == columns.end() ? field : it->second;
}

// A string field of a row; absent or null is nullopt.
Result<std::optional<std::string>> OptionalField(const json::object& o, std::string_view field,
                                                 const std::string& column,
                                                 const std::string& where) {
  const json::value* v = o.if_contains(column);
  if (v == nullptr || v->is_null()) return std::optional<std::string>();
  if (!v->is_string()) {
    return Status::InvalidArgument(where + ColumnLabel(field, column) + " must be a string (got " +
                                   DescribeJson(*v) + ")");
  }
  return std::optional<std::string>(std::string(v->as_string()));
}

Result<std::string> RequiredField(const json::object& o, std::string_view field,
                                  const std::string& column, const std::string& where) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalField(o, field, column, where));
  if (!v) return Status::InvalidArgument(where + ColumnLabel(field, column) + " is required");
  return std::move(*v);
}

enum class RecordKind { kFromRow, kClassification, kInstruction };

RecordKind KindOf(const ColumnMapping& columns) {
  for (const auto& [field, column] : columns) {
    if (field == "message" || field == "label") return RecordKind::kClassification;
    if (field == "instruction" || field == "input" || field == "response") {
      return RecordKind::kInstruction;
    }
  }
  return RecordKind::kFromRow;
}

class JsonlSource : public RecordSource {
 public:
  explicit JsonlSource(std::string path) : path_(std::move(path)) {}

  Result<std::vector<Record>> ReadAll() override {
    FILE* f = std::fopen(path_.c_str(), "rb");
    if (f == nullptr) {
      int err = errno;
      std::string why = std::strerror(err);
      if (err == ENOENT) {
        return Status::NotFound(path_ + ": no such file; check the data path in the config");
      }
      return Status::IOError(path_ + ": cannot open (" + why + ")");
    }
    std::vector<Record> records;
    std::string line;
    int64_t line_no = 0;
    bool too_long = false;
    Status status;
    char buf[1 << 16];
    auto finish_line = [&]() -> Status {
      ++line_no;
      if (too_long) {
        return Status::InvalidArgument(
            path_ + ":" + std::to_string(line_no) + ": line is longer than " +
            std::to_string(kMaxJsonlLineBytes >> 20) +
            " MiB; a JSONL record must fit on one line of at most that size");
      }
      TY_RETURN_IF_ERROR(ParseLine(line, line_no, records));
      line.clear();
      return Status::Ok();
    };
    while (status.ok()) {
      size_t n = std::fread(buf, 1, sizeof buf, f);
      if (n == 0) break;
      size_t start = 0;
      while (status.ok() && start < n) {
        const char* nl = static_cast<const char*>(std::memchr(buf + start, '\n', n - start));
        size_t end = nl ? static_cast<size_t>(nl - buf) : n;
        if (!too_long) {
          if (line.size() + (end - start) > kMaxJsonlLineBytes) {
            too_long = true;
            line.clear();
          } else {
            line.append(buf + start, end - start);
          }
        }
        if (nl == nullptr) break;
        status = finish_line();
        start = end + 1;
      }
    }
    bool read_error = std::ferror(f) != 0;
    std::fclose(f);
    TY_RETURN_IF_ERROR(status);
    if (read_error) return Status::IOError(path_ + ": read error");
    if (!line.empty() || too_long) TY_RETURN_IF_ERROR(finish_line());
    return records;
  }

  std::string Describe() const override { return path_; }

 private:
  Status ParseLine(std::string_view text, int64_t line_no, std::vector<Record>& out) const {
    if (line_no == 1 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // BOM
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return Status::Ok();
    std::string where = path_ + ":" + std::to_string(line_no) + ": ";
    boost::system::error_code ec;
    json::value parsed = json::parse(text, ec);
    if (ec) {
      return Status::InvalidArgument(where + "not valid JSON (" + ec.message() +
                                     "); each line must be one JSON object");
    }
    if (!parsed.is_object()) {
      return Status::InvalidArgument(where + "must be a JSON object (got " + DescribeJson(parsed) +
                                     ")");
    }
    TY_ASSIGN_OR_RETURN(Record r, RecordFromRow(parsed.as_object(), {}, where));
    out.push_back(std::move(r));
    return Status::Ok();
  }

  std::string path_;
};

}  // namespace

Result<Record> RecordFromRow(const json::object& o, const ColumnMapping& columns,
                             const std::string& where) {
  const std::string message = ColumnOf(columns, "message");
  const std::string label = ColumnOf(columns, "label");
  const std::string instruction = ColumnOf(columns, "instruction");
  RecordKind kind = KindOf(columns);
  if (kind == RecordKind::kFromRow) {
    if (o.contains(message)) {
      kind = RecordKind::kClassification;
    } else if (o.contains(instruction)) {
      kind = RecordKind::kInstruction;
    } else {
      return Status::InvalidArgument(
          where +
          "a record needs \"instruction\" and \"response\" (optionally \"input\"), or "
          "\"message\" and \"label\"");
    }
  }
  Record r;
  if (kind == RecordKind::kClassification) {
    TY_ASSIGN_OR_RETURN(r.instruction, RequiredField(o, "message", message, where));
    TY_ASSIGN_OR_RETURN(r.label, RequiredField(o, "label", label, where));
    r.response = r.label;
    return r;
  }
  TY_ASSIGN_OR_RETURN(r.instruction, RequiredField(o, "instruction", instruction, where));
  TY_ASSIGN_OR_RETURN(auto input, OptionalField(o, "input", ColumnOf(columns, "input"), where));
  r.input = input.value_or("");
  const bool response_mapped = columns.count("response") > 0;
  const std::string response_column = ColumnOf(columns, "response");
  TY_ASSIGN_OR_RETURN(auto response, OptionalField(o, "response", response_column, where));
  if (!response && !response_mapped) {
    TY_ASSIGN_OR_RETURN(response, OptionalField(o, "output", "output", where));
  }
  if (!response) {
    return Status::InvalidArgument(where + ColumnLabel("response", response_column) +
                                   (response_mapped ? "" : " (or \"output\")") + " is required");
  }
  r.response = std::move(*response);
  return r;
}

std::vector<std::string> ColumnsToRead(const ColumnMapping& columns) {
  switch (KindOf(columns)) {
    case RecordKind::kFromRow:
      return {};
    case RecordKind::kClassification:
      return {ColumnOf(columns, "message"), ColumnOf(columns, "label")};
    case RecordKind::kInstruction: {
      std::vector<std::string> out = {ColumnOf(columns, "instruction"),
                                      ColumnOf(columns, "response")};
      if (columns.count("input")) out.push_back(columns.at("input"));
      return out;
    }
  }
  return {};
}

std::unique_ptr<RecordSource> OpenJsonl(const std::string& path) {
  return std::make_unique<JsonlSource>(path);
}

RenderedExample Render(const Record& r, model::PromptTemplate t, std::string_view system_prompt) {
  const model::ChatMessage messages[] = {
      {"system", std::string(system_prompt)},
      {"user", model::InstructionMessage(t, r.instruction, r.input)},
      {"assistant", r.response},
  };
  // Cannot fail: the messages are a system prompt, a user message and a reply.
  Result<std::vector<model::RenderedTurn>> turns = model::RenderChat(t, messages);
  model::RenderedTurn& turn = turns.value().front();
  return RenderedExample{std::move(turn.prompt), std::move(turn.response)};
}

TokenizedExample TokenizeExample(const model::Tokenizer& tok, const RenderedExample& ex,
                                 const TokenizeOptions& o) {
  std::vector<int32_t> prompt = tok.Encode(ex.prompt, /*add_special_tokens=*/false);
  std::vector<int32_t> response = tok.Encode(ex.response, /*add_special_tokens=*/false);
  const bool bos = o.add_bos && o.bos_id >= 0;
  const bool eos = o.eos_id >= 0;
  const int64_t fixed = (bos ? 1 : 0) + static_cast<int64_t>(response.size()) + (eos ? 1 : 0);
  const int64_t limit = o.max_seq_len > 0 ? o.max_seq_len : INT64_MAX;
  size_t prompt_keep = prompt.size();
  if (fixed + static_cast<int64_t>(prompt.size()) > limit) {
    prompt_keep = fixed >= limit ? 0 : static_cast<size_t>(limit - fixed);
  }

  TokenizedExample out;
  out.ids.reserve(fixed + prompt_keep);
  if (bos) out.ids.push_back(o.bos_id);
  out.ids.insert(out.ids.end(), prompt.end() - static_cast<std::ptrdiff_t>(prompt_keep),
                 prompt.end());
  out.prompt_length = static_cast<int32_t>(out.ids.size());
  out.ids.insert(out.ids.end(), response.begin(), response.end());
  if (eos) out.ids.push_back(o.eos_id);
  if (static_cast<int64_t>(out.ids.size()) > limit) out.ids.resize(static_cast<size_t>(limit));
  if (out.prompt_length > static_cast<int64_t>(out.ids.size())) {
    out.prompt_length = static_cast<int32_t>(out.ids.size());  // a limit below 1 + bos
  }
  out.loss_mask.assign(out.ids.size(), 0);
  std::fill(out.loss_mask.begin() + out.prompt_length, out.loss_mask.end(), 1);
  return out;
}

void SplitRecords(std::vector<Record> all, double val_fraction, uint64_t seed,
                  std::vector<Record>* train, std::vector<Record>* val) {
  train->clear();
  val->clear();
  const int64_t n = static_cast<int64_t>(all.size());
  int64_t n_val = 0;
  if (val_fraction > 0 && n >= 2) {
    n_val = static_cast<int64_t>(static_cast<double>(n) * val_fraction + 0.5);
    n_val = std::clamp<int64_t>(n_val, 1, n - 1);
  }
  std::vector<uint8_t> is_val(all.size(), 0);
  if (n_val > 0) {
    std::vector<int64_t> p = Permutation(n, DeriveSeed(seed, kSplitStream, 0));
    for (int64_t i = 0; i < n_val; ++i) is_val[p[i]] = 1;
  }
  train->reserve(n - n_val);
  val->reserve(n_val);
  for (int64_t i = 0; i < n; ++i) (is_val[i] ? val : train)->push_back(std::move(all[i]));
}

BatchIterator::BatchIterator(std::vector<TokenizedExample> examples, BatchOptions options)
    : examples_(std::move(examples)), options_(options) {
  // Preconditions are clamped rather than trusted: a bad option must not index out of range.
  options_.rows_per_batch = std::max<int64_t>(options_.rows_per_batch, 1);
  options_.seq_len = std::max<int64_t>(options_.seq_len, 1);
  options_.world_size = std::max(options_.world_size, 1);
  options_.rank = std::clamp(options_.rank, 0, options_.world_size - 1);
  const int64_t seq_len = options_.seq_len;

  std::vector<Segment> segments;
  for (size_t i = 0; i < examples_.size(); ++i) {
    int64_t len = std::min<int64_t>(static_cast<int64_t>(examples_[i].ids.size()), seq_len);
    if (len > 0) segments.push_back({static_cast<int32_t>(i), static_cast<int32_t>(len)});
  }
  if (!options_.packing) {
    for (const Segment& s : segments) rows_.push_back({s});
    return;
  }
  // Best-fit decreasing: longest first; each goes into the row with the least room that
  // still holds it (ties: the earliest row), else a new row.
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
    if (a.length != b.length) return a.length > b.length;
    return a.example < b.example;
  });
  std::set<std::pair<int64_t, int64_t>> room;  // (free tokens, row index)
  for (const Segment& s : segments) {
    auto it = room.lower_bound({s.length, -1});
    if (it == room.end()) {
      rows_.push_back({s});
      int64_t left = seq_len - s.length;
      if (left > 0) room.insert({left, static_cast<int64_t>(rows_.size()) - 1});
      continue;
    }
    auto [left, row] = *it;
    room.erase(it);
    rows_[row].push_back(s);
    left -= s.length;
    if (left > 0) room.insert({left, row});
  }
}

int64_t BatchIterator::rows_per_epoch() const { return static_cast<int64_t>(rows_.size()); }

IteratorPosition BatchIterator::position() const { return position_; }

void BatchIterator::Seek(IteratorPosition p) {
  const int64_t n = rows_per_epoch();
  p.epoch = std::max<int64_t>(p.epoch, 0);
  p.cursor = std::max<int64_t>(p.cursor, 0);
  if (n > 0) {
    p.epoch += p.cursor / n;
    p.cursor %= n;
  } else {
    p.cursor = 0;
  }
  position_ = p;
}

const std::vector<int64_t>& BatchIterator::Order(int64_t epoch) {
  for (int i = 0; i < 2; ++i) {
    if (cached_epoch_[i] == epoch) return cached_order_[i];
  }
  // Replace the older epoch (the smaller number): batches move forward through epochs.
  int slot = cached_epoch_[0] <= cached_epoch_[1] ? 0 : 1;
  cached_epoch_[slot] = epoch;
  cached_order_[slot] = Permutation(
      rows_per_epoch(), DeriveSeed(options_.seed, kEpochStream, static_cast<uint64_t>(epoch)));
  return cached_order_[slot];
}

void BatchIterator::FillRow(const std::vector<Segment>& row, int64_t r, Batch& out) const {
  const int64_t base = r * out.seq_len;
  int64_t col = 0;
  for (size_t s = 0; s < row.size(); ++s) {
    const TokenizedExample& ex = examples_[row[s].example];
    const int64_t len = row[s].length;
    for (int64_t i = 0; i < len; ++i) {
      const int64_t at = base + col + i;
      out.input_ids[at] = ex.ids[i];
      out.position_ids[at] = i;
      out.segment_ids[at] = static_cast<int64_t>(s);
      const bool next_counts = i + 1 < len && static_cast<size_t>(i + 1) < ex.loss_mask.size() &&
                               ex.loss_mask[i + 1] != 0;
      if (next_counts) {
        out.targets[at] = ex.ids[i + 1];
        ++out.loss_tokens;
      }
    }
    col += len;
  }
}

Batch BatchIterator::Next() {
  Batch b;
  b.rows = options_.rows_per_batch;
  b.seq_len = options_.seq_len;
  const size_t cells = static_cast<size_t>(b.rows * b.seq_len);
  b.input_ids.assign(cells, options_.pad_id);
  b.targets.assign(cells, -100);
  b.position_ids.assign(cells, 0);
  b.segment_ids.assign(cells, -1);
  const int64_t n = rows_per_epoch();
  if (n == 0) return b;

  const int64_t global_rows = options_.rows_per_batch * options_.world_size;
  const int64_t first = position_.cursor + options_.rank * options_.rows_per_batch;
  for (int64_t r = 0; r < b.rows; ++r) {
    const int64_t k = first + r;  // rows into the stream from this epoch's start
    const int64_t epoch = position_.epoch + k / n;
    const int64_t row = Order(epoch)[k % n];
    FillRow(rows_[row], r, b);
  }
  const int64_t end = position_.cursor + global_rows;
  position_.epoch += end / n;
  position_.cursor = end % n;
  return b;
}

}  // namespace trainyard::train
