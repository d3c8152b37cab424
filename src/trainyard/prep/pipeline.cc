#include "trainyard/prep/pipeline.h"

#include <arrow/compute/api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <limits>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "trainyard/model/chat_template.h"
#include "trainyard/model/tokenizer.h"
#include "trainyard/prep/column_lineage.h"
#include "trainyard/prep/data_io.h"
#include "trainyard/prep/doc_id.h"
#include "trainyard/prep/minhash.h"
#include "trainyard/prep/pii.h"
#include "trainyard/prep/split.h"
#include "trainyard/prep/text_filters.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/export.h"

namespace trainyard::prep {
namespace {

constexpr int16_t kKept = -1;
constexpr size_t kExamplesPerReason = 3;

std::string JoinPath(const std::string& base, const std::string& path) {
  if (base.empty() || (!path.empty() && path[0] == '/')) return path;
  return base + "/" + path;
}

int64_t CountCodePoints(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Output commits' userMetadata: the properties as compact JSON, keys sorted (a std::map's
// order), so it equals Python's json.dumps(props, sort_keys=True, separators=(",", ":")).
std::string CommitMetadata(const std::map<std::string, std::string>& properties) {
  json::object o;
  for (const auto& [k, v] : properties) o[k] = v;
  return json::serialize(o);
}

bool IsStringType(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING;
}

// A step compiled against the source's schema.
struct StepRuntime {
  const Step* step = nullptr;
  std::string field;                 // "steps[2].filter": how errors name the step
  int slot = -1;                     // the text the step reads (-1 for none)
  std::vector<std::string> reasons;  // reason names; a row stores the index
  std::shared_ptr<const model::Tokenizer> tokenizer;
  std::optional<PiiRedactor> redactor;
  std::optional<MinHasher> hasher;
  model::PromptTemplate format = model::PromptTemplate::kChatML;
  int prompt_slot = -1, response_slot = -1, output_slot = -1;
  int tokens_index = -1;
  struct Required {
    std::string name;
    int slot = -1;    // a text slot, or
    int column = -1;  // a source column of another type
  };
  std::vector<Required> required;
  int dedup_index = -1;  // into the exact or near dedup state
  SplitSpec split;
  int group_slot = -1, group_column = -1;

  int Reason(const std::string& name) {
    for (size_t i = 0; i < reasons.size(); ++i) {
      if (reasons[i] == name) return static_cast<int>(i);
    }
    reasons.push_back(name);
    return static_cast<int>(reasons.size() - 1);
  }
};

// A text column the steps read or write, held per row as an optional string.
struct Slot {
  std::string name;
  int column = -1;       // the source column it starts from (-1: derived, starts null)
  bool written = false;  // a step replaces or creates it: the output carries the slot
};

// One row's text slots: views into the source batch until a step writes a slot (the batch
// outlives the row's processing, and nothing is copied for the rows no step changes).
struct WorkRow {
  std::vector<std::optional<std::string_view>> source;
  std::vector<std::optional<std::string>> written;
  std::vector<uint8_t> is_written;
  std::vector<std::vector<int32_t>> tokens;
  // NormalizeForDedup of one slot, shared by the exact and near dedup steps that read it.
  int normalized_slot = -1;
  std::string normalized;

  std::optional<std::string_view> Get(int slot) const {
    if (!is_written[slot]) return source[slot];
    if (!written[slot]) return std::nullopt;
    return std::string_view(*written[slot]);
  }
  void Set(int slot, std::optional<std::string> value) {
    written[slot] = std::move(value);
    is_written[slot] = 1;
    if (normalized_slot == slot) normalized_slot = -1;
  }
  const std::string& Normalized(int slot) {
    if (normalized_slot != slot) {
      normalized = NormalizeForDedup(Get(slot).value_or(std::string_view()));
      normalized_slot = slot;
    }
    return normalized;
  }
};

struct RowOutcome {
  int16_t drop_step = kKept;
  uint16_t reason = 0;
};

// Pass-1 state of one batch (or, appended in order, of the whole source).
struct ExactState {
  std::vector<std::array<uint64_t, 2>> hashes;
  std::vector<uint8_t> has;  // 0: the row has no text to compare (or did not reach the step)
};
struct NearState {
  int bands = 0, perm = 0;
  bool keep_signatures = false, keep_lengths = false;
  std::vector<uint64_t> keys;  // bands per row
  std::vector<uint32_t> signatures;
  std::vector<uint32_t> lengths;
  std::vector<uint8_t> has;
};

struct Pass1Batch {
  std::vector<RowOutcome> outcomes;
  std::vector<uint64_t> doc_ids;  // with dedup steps: each row's doc id, as a number
  std::vector<ExactState> exact;
  std::vector<NearState> near;
};

struct StepChanges {
  int64_t rows_changed = 0;
  std::map<std::string, int64_t> by_kind;
};

struct Pass2Batch {
  std::vector<std::shared_ptr<arrow::RecordBatch>> outputs;  // by output index
  std::shared_ptr<arrow::RecordBatch> dropped;
  std::vector<StepChanges> changes;  // by step
  std::vector<int64_t> split_rows;   // by split
};

class Engine {
 public:
  Engine(const PipelineSpec& spec, const PipelineOptions& options)
      : spec_(spec), options_(options) {}

  Result<PipelineReport> Run() {
    auto start = std::chrono::steady_clock::now();
    tables::InitializeArrowCompute();
    threads_ =
        options_.threads > 0 ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
    TY_RETURN_IF_ERROR(OpenSource());
    TY_RETURN_IF_ERROR(Compile());
    TY_RETURN_IF_ERROR(CheckCatalogOutputs());
    TY_RETURN_IF_ERROR(PassOne());
    ResolveDuplicates();
    TY_RETURN_IF_ERROR(OpenOutputs());
    TY_RETURN_IF_ERROR(source_->Rewind());
    TY_RETURN_IF_ERROR(PassTwo());
    TY_RETURN_IF_ERROR(FinishOutputs());
    report_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(report_);
  }

 private:
  // ---- setup ----

  Status OpenSource() {
    if (!spec_.source.table.empty()) {
      TY_ASSIGN_OR_RETURN(source_, OpenTableSource(options_.server, spec_.source.table,
                                                   spec_.source.version, options_.run_id));
    } else {
      std::vector<std::string> paths;
      for (const auto& f : spec_.source.files) paths.push_back(JoinPath(spec_.base_dir, f));
      TY_ASSIGN_OR_RETURN(
          source_, OpenFileSource(std::move(paths), spec_.source.files, options_.batch_rows));
    }
    schema_ = source_->schema();
    if (schema_->GetFieldIndex("doc_id") >= 0) {
      return Status::InvalidArgument(source_->Describe() +
                                     ": the source has a column doc_id, which prep adds to every "
                                     "row; rename it (or name it as source.id_column after "
                                     "renaming)");
    }
    if (!spec_.source.id_column.empty()) {
      id_column_ = schema_->GetFieldIndex(spec_.source.id_column);
      if (id_column_ < 0) {
        return Status::InvalidArgument("source.id_column: " + source_->Describe() +
                                       " has no column \"" + spec_.source.id_column +
                                       "\" (columns: " + ColumnList() + ")");
      }
    }
    return Status::Ok();
  }

  std::string ColumnList() const {
    std::string out;
    for (const auto& f : schema_->fields()) out += (out.empty() ? "" : ", ") + f->name();
    return out;
  }

  // The slot of a text column: an existing slot, or one started from a string source column.
  Result<int> TextSlot(const std::string& name, const std::string& field) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].name == name) return static_cast<int>(i);
    }
    int column = schema_->GetFieldIndex(name);
    if (column < 0) {
      return Status::InvalidArgument(field + ": " + source_->Describe() + " has no column \"" +
                                     name + "\" (columns: " + ColumnList() + ")");
    }
    if (!IsStringType(*schema_->field(column)->type())) {
      return Status::InvalidArgument(
          field + ": column \"" + name + "\" of " + source_->Describe() + " is " +
          schema_->field(column)->type()->ToString() +
          ", not text; point the step at a text column or fix the source's values");
    }
    slots_.push_back(Slot{name, column, false});
    return static_cast<int>(slots_.size() - 1);
  }

  // A slot a step writes: an existing one, a string source column, or a new column.
  Result<int> OutputSlot(const std::string& name, const std::string& field) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].name == name) {
        slots_[i].written = true;
        return static_cast<int>(i);
      }
    }
    int column = schema_->GetFieldIndex(name);
    if (column >= 0 && !IsStringType(*schema_->field(column)->type())) {
      return Status::InvalidArgument(field + ": column \"" + name + "\" exists and is " +
                                     schema_->field(column)->type()->ToString() +
                                     ", not text; choose another output_column");
    }
    slots_.push_back(Slot{name, column, true});
    return static_cast<int>(slots_.size() - 1);
  }

  Result<std::shared_ptr<const model::Tokenizer>> LoadTokenizer(const std::string& path,
                                                                const std::string& field) {
    std::string full = JoinPath(spec_.base_dir, path);
    auto it = tokenizers_.find(full);
    if (it != tokenizers_.end()) return it->second;
    auto loaded = model::Tokenizer::FromFile(full);
    if (!loaded.ok()) {
      return Status(loaded.status().code(), field + ": " + loaded.status().message());
    }
    tokenizers_[full] = *loaded;
    return *loaded;
  }

  Status Compile() {
    for (size_t i = 0; i < spec_.steps.size(); ++i) {
      const Step& step = spec_.steps[i];
      StepRuntime rt;
      rt.step = &step;
      rt.field = "steps[" + std::to_string(i) + "]." + std::string(StepKindName(step.kind));
      switch (step.kind) {
        case StepKind::kFilter: {
          const FilterStep& f = step.filter;
          bool reads_text = f.min_chars || f.max_chars || f.min_tokens || f.max_tokens ||
                            f.drop_regex || f.keep_regex || f.max_repetition || !f.language.empty();
          if (reads_text) {
            TY_ASSIGN_OR_RETURN(rt.slot, TextSlot(step.column, rt.field + ".column"));
          }
          if (!f.tokenizer.empty()) {
            TY_ASSIGN_OR_RETURN(rt.tokenizer, LoadTokenizer(f.tokenizer, rt.field + ".tokenizer"));
          }
          for (size_t r = 0; r < f.required.size(); ++r) {
            StepRuntime::Required req;
            req.name = f.required[r];
            for (size_t s = 0; s < slots_.size(); ++s) {
              if (slots_[s].name == req.name) req.slot = static_cast<int>(s);
            }
            if (req.slot < 0) {
              req.column = schema_->GetFieldIndex(req.name);
              if (req.column < 0) {
                return Status::InvalidArgument(rt.field + ".required[" + std::to_string(r) +
                                               "]: " + source_->Describe() + " has no column \"" +
                                               req.name + "\" (columns: " + ColumnList() + ")");
              }
              if (IsStringType(*schema_->field(req.column)->type())) {
                TY_ASSIGN_OR_RETURN(req.slot, TextSlot(req.name, rt.field));
                req.column = -1;
              }
            }
            rt.required.push_back(req);
          }
          break;
        }
        case StepKind::kDedupExact: {
          TY_ASSIGN_OR_RETURN(rt.slot, TextSlot(step.column, rt.field + ".column"));
          rt.dedup_index = static_cast<int>(exact_steps_.size());
          exact_steps_.push_back(i);
          rt.Reason("duplicate");
          break;
        }
        case StepKind::kDedupNear: {
          TY_ASSIGN_OR_RETURN(rt.slot, TextSlot(step.column, rt.field + ".column"));
          MinHashParams p;
          p.shingle_words = step.dedup_near.shingle_words;
          p.bands = step.dedup_near.bands;
          p.rows = step.dedup_near.rows;
          p.threshold = step.dedup_near.threshold;
          p.seed = step.dedup_near.seed;
          TY_RETURN_IF_ERROR(ValidateMinHashParams(p, rt.field));
          rt.hasher.emplace(p);
          rt.dedup_index = static_cast<int>(near_steps_.size());
          near_steps_.push_back(i);
          rt.Reason("near_duplicate");
          break;
        }
        case StepKind::kRedactPii: {
          TY_ASSIGN_OR_RETURN(rt.slot, OutputSlot(step.column, rt.field + ".column"));
          if (slots_[rt.slot].column < 0 && !SlotWrittenBefore(rt.slot, i)) {
            return Status::InvalidArgument(rt.field + ".column: " + source_->Describe() +
                                           " has no column \"" + step.column + "\"");
          }
          PiiOptions o;
          o.kinds = step.redact_pii.kinds;
          o.patterns = step.redact_pii.patterns;
          o.replacement = step.redact_pii.replacement;
          TY_ASSIGN_OR_RETURN(PiiRedactor redactor, PiiRedactor::Create(o, rt.field));
          rt.redactor.emplace(std::move(redactor));
          break;
        }
        case StepKind::kTemplate: {
          const TemplateStep& t = step.template_;
          TY_ASSIGN_OR_RETURN(rt.format, model::ParsePromptTemplate(t.format));
          TY_ASSIGN_OR_RETURN(rt.prompt_slot,
                              TextSlot(t.prompt_column, rt.field + ".prompt_column"));
          if (!t.response_column.empty()) {
            TY_ASSIGN_OR_RETURN(rt.response_slot,
                                TextSlot(t.response_column, rt.field + ".response_column"));
          }
          TY_ASSIGN_OR_RETURN(rt.output_slot,
                              OutputSlot(t.output_column, rt.field + ".output_column"));
          slot_writer_step_.emplace(rt.output_slot, i);
          rt.Reason("missing_prompt");
          rt.Reason("missing_response");
          break;
        }
        case StepKind::kTokenize: {
          TY_ASSIGN_OR_RETURN(rt.slot, TextSlot(step.column, rt.field + ".column"));
          TY_ASSIGN_OR_RETURN(rt.tokenizer,
                              LoadTokenizer(step.tokenize.tokenizer, rt.field + ".tokenizer"));
          const std::string& out = step.tokenize.output_column;
          bool clash = schema_->GetFieldIndex(out) >= 0 || out == "doc_id";
          for (const auto& s : slots_) clash = clash || s.name == out;
          for (const auto& t : token_columns_) clash = clash || t == out;
          if (clash) {
            return Status::InvalidArgument(rt.field + ".output_column: a column \"" + out +
                                           "\" exists already; choose another name");
          }
          rt.tokens_index = static_cast<int>(token_columns_.size());
          token_columns_.push_back(out);
          rt.Reason("missing_text");
          break;
        }
        case StepKind::kSplit: {
          rt.split.ratios = step.split.ratios;
          rt.split.seed = step.split.seed;
          TY_RETURN_IF_ERROR(ValidateSplit(rt.split, rt.field));
          if (!step.split.group_by.empty()) {
            for (size_t s = 0; s < slots_.size(); ++s) {
              if (slots_[s].name == step.split.group_by) rt.group_slot = static_cast<int>(s);
            }
            if (rt.group_slot < 0) {
              rt.group_column = schema_->GetFieldIndex(step.split.group_by);
              if (rt.group_column < 0) {
                return Status::InvalidArgument(rt.field + ".group_by: " + source_->Describe() +
                                               " has no column \"" + step.split.group_by +
                                               "\" (columns: " + ColumnList() + ")");
              }
            }
          }
          split_step_ = static_cast<int>(i);
          break;
        }
      }
      steps_.push_back(std::move(rt));
    }
    // A template's output column read by a later step starts null per row, and is written
    // before it is read; a step reading it before the template would read nulls.
    for (size_t i = 0; i < steps_.size(); ++i) {
      int slot = steps_[i].slot;
      if (slot >= 0 && slots_[slot].column < 0) {
        auto w = slot_writer_step_.find(slot);
        if (w == slot_writer_step_.end() || w->second >= i) {
          return Status::InvalidArgument(steps_[i].field + ".column: \"" + slots_[slot].name +
                                         "\" is not a column of " + source_->Describe() +
                                         " and no earlier step creates it");
        }
      }
    }
    return Status::Ok();
  }

  bool SlotWrittenBefore(int slot, size_t step) const {
    auto w = slot_writer_step_.find(slot);
    return w != slot_writer_step_.end() && w->second < step;
  }

  // ---- rows ----

  struct BatchView {
    const SourceBatch* batch = nullptr;
    std::vector<std::shared_ptr<arrow::Array>> columns;
  };

  static std::optional<std::string_view> StringAt(const arrow::Array& a, int64_t row) {
    if (a.IsNull(row)) return std::nullopt;
    if (a.type_id() == arrow::Type::LARGE_STRING) {
      return static_cast<const arrow::LargeStringArray&>(a).GetView(row);
    }
    return static_cast<const arrow::StringArray&>(a).GetView(row);
  }

  void LoadRow(const BatchView& in, int64_t row, WorkRow& w) const {
    w.source.assign(slots_.size(), std::nullopt);
    w.written.assign(slots_.size(), std::nullopt);
    w.is_written.assign(slots_.size(), 0);
    w.normalized_slot = -1;
    w.tokens.assign(token_columns_.size(), {});
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].column >= 0) w.source[s] = StringAt(*in.columns[slots_[s].column], row);
    }
  }

  Result<std::string> RowDocId(const BatchView& in, int64_t row) const {
    const SourceBatch& b = *in.batch;
    if (id_column_ < 0) return DocIdForOrdinal(b.doc_source, b.first_ordinal + row);
    const arrow::Array& a = *in.columns[id_column_];
    if (a.IsNull(row)) {
      return Status::InvalidArgument(b.doc_source + " row " +
                                     std::to_string(b.first_ordinal + row + 1) +
                                     ": source.id_column \"" + spec_.source.id_column +
                                     "\" is null; every row needs an id (or drop id_column to "
                                     "use the row's position)");
    }
    if (auto v = IsStringType(*a.type()) ? StringAt(a, row) : std::nullopt; v) {
      return DocId(b.doc_source, *v);
    }
    std::string key;
    tables::AppendJsonValue(a, row, &key);
    return DocId(b.doc_source, key);
  }

  static std::string_view Text(const WorkRow& w, int slot) {
    return w.Get(slot).value_or(std::string_view());
  }

  // Runs steps [0, end) on one row; stops at the first that drops it. `p1` (pass 1) receives
  // the dedup state; `changes` (pass 2) the redactions.
  RowOutcome RunRow(const BatchView& in, int64_t row, WorkRow& w, size_t end, Pass1Batch* p1,
                    std::vector<StepChanges>* changes) const {
    auto drop = [](size_t step, int reason) {
      return RowOutcome{static_cast<int16_t>(step), static_cast<uint16_t>(reason)};
    };
    for (size_t i = 0; i < end; ++i) {
      const StepRuntime& rt = steps_[i];
      const Step& step = *rt.step;
      switch (step.kind) {
        case StepKind::kFilter: {
          const FilterStep& f = step.filter;
          std::string_view text = rt.slot >= 0 ? Text(w, rt.slot) : std::string_view();
          auto reason = [&](const char* name) { return drop(i, ReasonIndex(rt, name)); };
          if (f.min_chars || f.max_chars) {
            int64_t n = CountCodePoints(text);
            if (f.min_chars && n < *f.min_chars) return reason("min_chars");
            if (f.max_chars && n > *f.max_chars) return reason("max_chars");
          }
          if (f.min_tokens || f.max_tokens) {
            int64_t n = static_cast<int64_t>(rt.tokenizer->Encode(text, false).size());
            if (f.min_tokens && n < *f.min_tokens) return reason("min_tokens");
            if (f.max_tokens && n > *f.max_tokens) return reason("max_tokens");
          }
          if (f.drop_regex) {
            auto o = f.drop_regex->Search(text);
            if (o == BoundedRegex::Outcome::kMatch) return reason("drop_regex");
            if (o == BoundedRegex::Outcome::kLimit) return reason("regex_limit");
          }
          if (f.keep_regex) {
            auto o = f.keep_regex->Search(text);
            if (o == BoundedRegex::Outcome::kNoMatch) return reason("keep_regex");
            if (o == BoundedRegex::Outcome::kLimit) return reason("regex_limit");
          }
          for (const auto& req : rt.required) {
            bool missing = req.slot >= 0 ? w.Get(req.slot).value_or("").empty()
                                         : in.columns[req.column]->IsNull(row);
            if (missing) return drop(i, ReasonIndex(rt, "required:" + req.name));
          }
          if (f.max_repetition && RepetitionRatio(text) > *f.max_repetition) {
            return reason("max_repetition");
          }
          if (!f.language.empty() && EnglishScore(text) < f.min_score) return reason("language");
          break;
        }
        case StepKind::kDedupExact: {
          if (!p1) break;
          const std::string& normalized = w.Normalized(rt.slot);
          ExactState& st = p1->exact[rt.dedup_index];
          if (!normalized.empty()) {
            st.hashes[row] = ExactHash(normalized);
            st.has[row] = 1;
          }
          break;
        }
        case StepKind::kDedupNear: {
          if (!p1) break;
          NearState& st = p1->near[rt.dedup_index];
          std::vector<uint32_t> sig(st.perm);
          std::string_view text = Text(w, rt.slot);
          if (rt.hasher->SignatureOfNormalized(w.Normalized(rt.slot), sig.data())) {
            rt.hasher->BandKeys(sig.data(), &st.keys[row * st.bands]);
            if (st.keep_signatures) {
              std::copy(sig.begin(), sig.end(), st.signatures.begin() + row * st.perm);
            }
            if (st.keep_lengths) {
              st.lengths[row] = static_cast<uint32_t>(
                  std::min<int64_t>(CountCodePoints(text), std::numeric_limits<uint32_t>::max()));
            }
            st.has[row] = 1;
          }
          break;
        }
        case StepKind::kRedactPii: {
          auto v = w.Get(rt.slot);
          if (!v) break;
          std::map<std::string, int64_t> counts;
          std::string redacted = rt.redactor->Redact(*v, changes ? &counts : nullptr);
          if (changes && !counts.empty()) {
            StepChanges& c = (*changes)[i];
            ++c.rows_changed;
            for (const auto& [kind, n] : counts) c.by_kind[kind] += n;
          }
          w.Set(rt.slot, std::move(redacted));
          break;
        }
        case StepKind::kTemplate: {
          const TemplateStep& t = step.template_;
          auto prompt = w.Get(rt.prompt_slot);
          if (!prompt) return drop(i, 0);
          std::vector<model::ChatMessage> messages;
          if (!t.system.empty()) messages.push_back({"system", t.system});
          messages.push_back({"user", std::string(*prompt)});
          if (rt.response_slot >= 0) {
            auto response = w.Get(rt.response_slot);
            if (!response) return drop(i, 1);
            messages.push_back({"assistant", std::string(*response)});
          }
          auto turns = model::RenderChat(rt.format, messages);
          std::string text;
          if (turns.ok()) {
            for (const auto& turn : *turns) text += turn.prompt + turn.response;
          }
          w.Set(rt.output_slot, std::move(text));
          break;
        }
        case StepKind::kTokenize: {
          auto v = w.Get(rt.slot);
          if (!v) return drop(i, 0);
          w.tokens[rt.tokens_index] = rt.tokenizer->Encode(*v, step.tokenize.add_special_tokens);
          break;
        }
        case StepKind::kSplit:
          break;
      }
    }
    return RowOutcome{};
  }

  // Reasons are registered while compiling for the fixed ones; filters' reasons are looked up
  // among a fixed set (see FilterReasons), so workers never add to the list.
  static int ReasonIndex(const StepRuntime& rt, const std::string& name) {
    for (size_t i = 0; i < rt.reasons.size(); ++i) {
      if (rt.reasons[i] == name) return static_cast<int>(i);
    }
    return 0;  // cannot happen: Compile registered every reason a step can give
  }

  void RegisterFilterReasons() {
    for (auto& rt : steps_) {
      if (rt.step->kind != StepKind::kFilter) continue;
      for (const char* r : {"min_chars", "max_chars", "min_tokens", "max_tokens", "drop_regex",
                            "keep_regex", "regex_limit", "max_repetition", "language"}) {
        rt.Reason(r);
      }
      for (const auto& req : rt.required) rt.Reason("required:" + req.name);
    }
  }

  // ---- pass 1 ----

  Pass1Batch NewPass1Batch(int64_t rows) const {
    Pass1Batch b;
    b.outcomes.resize(rows);
    for (size_t k = 0; k < exact_steps_.size(); ++k) {
      ExactState s;
      s.hashes.resize(rows);
      s.has.assign(rows, 0);
      b.exact.push_back(std::move(s));
    }
    for (size_t k = 0; k < near_steps_.size(); ++k) {
      const StepRuntime& rt = steps_[near_steps_[k]];
      NearState s;
      s.bands = rt.hasher->params().bands;
      s.perm = rt.hasher->num_perm();
      s.keep_signatures = rt.hasher->params().threshold > 0;
      s.keep_lengths = rt.step->dedup_near.keep == KeepRule::kLongest;
      s.keys.resize(rows * s.bands);
      if (s.keep_signatures) s.signatures.resize(rows * s.perm);
      if (s.keep_lengths) s.lengths.resize(rows);
      s.has.assign(rows, 0);
      b.near.push_back(std::move(s));
    }
    return b;
  }

  Result<Pass1Batch> ProcessPass1(const SourceBatch& batch) const {
    BatchView in{&batch, batch.rows->columns()};
    int64_t n = batch.rows->num_rows();
    Pass1Batch out = NewPass1Batch(n);
    WorkRow w;
    if (id_column_ >= 0 || track_ids_) out.doc_ids.resize(n);
    for (int64_t r = 0; r < n; ++r) {
      if (id_column_ >= 0 || track_ids_) {
        TY_ASSIGN_OR_RETURN(std::string id, RowDocId(in, r));
        out.doc_ids[r] = std::strtoull(id.c_str(), nullptr, 16);
      }
      LoadRow(in, r, w);
      out.outcomes[r] = RunRow(in, r, w, steps_.size(), &out, nullptr);
    }
    return out;
  }

  // With an id_column, every doc id must be unique: dedup keeps "the first" of a cluster and
  // the dropped table names rows by id, so two rows with one id would make both ambiguous.
  // Ids are checked in source order, so the error names the first two rows that share one.
  Status CheckUniqueIds(const Pass1Batch& p1, const SourceBatch& batch, int64_t first) {
    if (id_column_ < 0) return Status::Ok();
    id_batches_.push_back(IdBatch{first, batch.first_ordinal});
    for (size_t r = 0; r < p1.doc_ids.size(); ++r) {
      int64_t row = first + static_cast<int64_t>(r);
      auto [it, inserted] = first_row_of_id_.emplace(p1.doc_ids[r], row);
      if (inserted) continue;
      // Doc ids hash the source's name with the key, so both rows are in this batch's file.
      auto prior = std::upper_bound(id_batches_.begin(), id_batches_.end(), it->second,
                                    [](int64_t v, const IdBatch& b) { return v < b.first_row; });
      --prior;
      int64_t prior_ordinal = prior->first_ordinal + (it->second - prior->first_row);
      const arrow::Array& a = *batch.rows->column(id_column_);
      std::string value;
      tables::AppendJsonValue(a, static_cast<int64_t>(r), &value);
      return Status::InvalidArgument(
          batch.doc_source + " rows " + std::to_string(prior_ordinal + 1) + " and " +
          std::to_string(batch.first_ordinal + static_cast<int64_t>(r) + 1) +
          " have the same source.id_column \"" + spec_.source.id_column + "\" value " + value +
          "; ids must be unique within a source (drop or fix the duplicate rows, or drop "
          "id_column to use each row's position as its id)");
    }
    return Status::Ok();
  }

  void AppendPass1(Pass1Batch&& b) {
    const bool first = outcomes_.empty();
    outcomes_.insert(outcomes_.end(), b.outcomes.begin(), b.outcomes.end());
    if (track_ids_) doc_ids_.insert(doc_ids_.end(), b.doc_ids.begin(), b.doc_ids.end());
    if (first) {
      exact_ = std::move(b.exact);
      near_ = std::move(b.near);
      return;
    }
    for (size_t k = 0; k < exact_.size(); ++k) {
      auto& d = exact_[k];
      auto& s = b.exact[k];
      d.hashes.insert(d.hashes.end(), s.hashes.begin(), s.hashes.end());
      d.has.insert(d.has.end(), s.has.begin(), s.has.end());
    }
    for (size_t k = 0; k < near_.size(); ++k) {
      auto& d = near_[k];
      auto& s = b.near[k];
      d.keys.insert(d.keys.end(), s.keys.begin(), s.keys.end());
      d.signatures.insert(d.signatures.end(), s.signatures.begin(), s.signatures.end());
      d.lengths.insert(d.lengths.end(), s.lengths.begin(), s.lengths.end());
      d.has.insert(d.has.end(), s.has.begin(), s.has.end());
    }
  }

  // Parses each source batch that is a chunk of lines and runs `work` on it, on the workers
  // (at most `threads` batches in flight), and hands the results to `consume` in source order.
  template <typename T, typename Work, typename Consume>
  Status ForEachBatch(int pass, Work work, Consume consume) {
    std::deque<std::future<Result<T>>> inflight;
    std::deque<std::shared_ptr<SourceBatch>> batches;
    int64_t rows_done = 0;
    auto drain_one = [&]() -> Status {
      Result<T> r = inflight.front().get();
      inflight.pop_front();
      std::shared_ptr<SourceBatch> batch = std::move(batches.front());
      batches.pop_front();
      int64_t rows = batch->num_rows;
      int64_t first = base_of_front_;
      base_of_front_ += rows;
      if (!r.ok()) return r.status();
      TY_RETURN_IF_ERROR(consume(std::move(*r), *batch, first));
      rows_done += rows;
      if (options_.progress) options_.progress(pass, rows_done);
      return Status::Ok();
    };
    base_of_front_ = 0;
    int64_t next_base = 0;
    Status failed;
    Status read_failed;  // the source's own error comes after its batches in flight
    while (true) {
      auto next = source_->Next();
      if (!next.ok()) {
        read_failed = next.status();
        break;
      }
      if (!*next) break;
      auto batch = std::make_shared<SourceBatch>(std::move(**next));
      int64_t base = next_base;
      next_base += batch->num_rows;
      batches.push_back(batch);
      // The worker parses the batch's lines first (for JSON lines), then runs the steps.
      inflight.push_back(std::async(std::launch::async, [batch, base, &work]() -> Result<T> {
        TY_RETURN_IF_ERROR(batch->Parse());
        return work(*batch, base);
      }));
      if (inflight.size() >= static_cast<size_t>(threads_)) {
        failed = drain_one();
        if (!failed.ok()) break;
      }
    }
    // Always join what is running (their lambdas reference this frame); after a failure,
    // consume nothing more.
    while (!inflight.empty()) {
      if (failed.ok()) {
        failed = drain_one();
      } else {
        inflight.front().wait();
        inflight.pop_front();
        batches.pop_front();
      }
    }
    return failed.ok() ? read_failed : failed;
  }

  Status PassOne() {
    RegisterFilterReasons();
    track_ids_ = !exact_steps_.empty() || !near_steps_.empty();
    TY_RETURN_IF_ERROR(ForEachBatch<Pass1Batch>(
        1, [this](const SourceBatch& b, int64_t) { return ProcessPass1(b); },
        [this](Pass1Batch&& b, const SourceBatch& batch, int64_t first) {
          // (Not TY_RETURN_IF_ERROR: this runs inside one, whose variable it would shadow.)
          if (Status unique = CheckUniqueIds(b, batch, first); !unique.ok()) return unique;
          AppendPass1(std::move(b));
          return CheckMemory();
        }));
    first_row_of_id_ = {};
    id_batches_ = {};
    report_.rows_in = static_cast<int64_t>(outcomes_.size());
    if (outcomes_.size() >= std::numeric_limits<uint32_t>::max()) {
      return Status::InvalidArgument("the source has more than 2^32 rows; split it into parts");
    }
    return Status::Ok();
  }

  // The bytes of the per-document state pass 1 keeps (capacity, as allocated).
  int64_t StateBytes() const {
    size_t bytes = outcomes_.capacity() * sizeof(RowOutcome) + doc_ids_.capacity() * 8;
    // The id check's set: a node (key, row, next pointer, cached hash) and a bucket per id.
    bytes += first_row_of_id_.size() * 40 + first_row_of_id_.bucket_count() * 8;
    for (const auto& e : exact_) bytes += e.hashes.capacity() * 16 + e.has.capacity();
    for (const auto& nr : near_) {
      bytes += nr.keys.capacity() * 8 + nr.signatures.capacity() * 4 + nr.lengths.capacity() * 4 +
               nr.has.capacity();
    }
    return static_cast<int64_t>(bytes);
  }

  Status CheckMemory() const {
    if (options_.memory_limit <= 0) return Status::Ok();
    int64_t bytes = StateBytes();
    if (bytes <= options_.memory_limit) return Status::Ok();
    return Status::ResourceExhausted(
        "the per-document state of " + std::to_string(outcomes_.size()) + " rows takes " +
        std::to_string(bytes) + " bytes, over --memory-limit " +
        std::to_string(options_.memory_limit) +
        "; raise the limit, lower dedup_near's bands, or split the source");
  }

  // ---- between the passes ----

  bool AliveAt(size_t doc, size_t step) const {
    int16_t d = outcomes_[doc].drop_step;
    return d == kKept || static_cast<size_t>(d) > step;
  }

  void ResolveDuplicates() {
    // Dedup steps in pipeline order: a row dropped by one is not a candidate for a later one.
    std::vector<size_t> order(exact_steps_);
    order.insert(order.end(), near_steps_.begin(), near_steps_.end());
    std::sort(order.begin(), order.end());
    const size_t n = outcomes_.size();
    for (size_t step : order) {
      const StepRuntime& rt = steps_[step];
      if (rt.step->kind == StepKind::kDedupExact) {
        const ExactState& st = exact_[rt.dedup_index];
        struct Hash {
          size_t operator()(const std::array<uint64_t, 2>& h) const { return h[0] ^ (h[1] * 31); }
        };
        std::unordered_map<std::array<uint64_t, 2>, uint32_t, Hash> first;
        first.reserve(n);
        for (size_t doc = 0; doc < n; ++doc) {
          if (!AliveAt(doc, step) || !st.has[doc]) continue;
          auto [it, inserted] = first.emplace(st.hashes[doc], static_cast<uint32_t>(doc));
          if (!inserted) {
            outcomes_[doc] = RowOutcome{static_cast<int16_t>(step), 0};
            duplicate_of_[static_cast<uint32_t>(doc)] = it->second;
          }
        }
        continue;
      }
      NearState& st = near_[rt.dedup_index];
      NearDuplicateIndex index(st.bands);
      for (size_t doc = 0; doc < n; ++doc) {
        if (AliveAt(doc, step) && st.has[doc]) {
          index.Add(static_cast<uint32_t>(doc), &st.keys[doc * st.bands]);
        }
      }
      NearDuplicateIndex::VerifyFn verify;
      if (st.keep_signatures) {
        double threshold = rt.hasher->params().threshold;
        verify = [&st, threshold](uint32_t a, uint32_t b) {
          return EstimatedJaccard(&st.signatures[size_t{a} * st.perm],
                                  &st.signatures[size_t{b} * st.perm], st.perm) >= threshold;
        };
      }
      std::vector<uint32_t> roots = index.Clusters(static_cast<uint32_t>(n), verify);
      std::vector<uint32_t> keep(roots);  // by root: the member kept
      if (st.keep_lengths) {
        for (size_t doc = 0; doc < n; ++doc) {
          uint32_t root = roots[doc];
          if (root == doc || !AliveAt(doc, step) || !st.has[doc]) continue;
          if (st.lengths[doc] > st.lengths[keep[root]]) keep[root] = static_cast<uint32_t>(doc);
        }
      }
      for (size_t doc = 0; doc < n; ++doc) {
        if (!AliveAt(doc, step) || !st.has[doc]) continue;
        if (keep[roots[doc]] != doc) {
          outcomes_[doc] = RowOutcome{static_cast<int16_t>(step), 0};
          duplicate_of_[static_cast<uint32_t>(doc)] = keep[roots[doc]];
        }
      }
      // The signatures and keys are not needed any more.
      st = NearState{};
    }
    exact_.clear();
  }

  // ---- outputs ----

  std::shared_ptr<arrow::Schema> OutputSchema() const {
    std::vector<std::shared_ptr<arrow::Field>> fields;
    fields.push_back(arrow::field("doc_id", arrow::utf8()));
    for (int c = 0; c < schema_->num_fields(); ++c) {
      auto f = schema_->field(c);
      bool replaced = false;
      for (const auto& s : slots_) replaced = replaced || (s.written && s.column == c);
      fields.push_back(replaced ? arrow::field(f->name(), arrow::utf8()) : f);
    }
    for (const auto& s : slots_) {
      if (s.written && s.column < 0) fields.push_back(arrow::field(s.name, arrow::utf8()));
    }
    for (const auto& t : token_columns_) {
      fields.push_back(arrow::field(t, arrow::list(arrow::int32())));
    }
    return arrow::schema(fields);
  }

  static std::shared_ptr<arrow::Schema> DroppedSchema() {
    return arrow::schema(
        {arrow::field("doc_id", arrow::utf8()), arrow::field("step", arrow::utf8()),
         arrow::field("reason", arrow::utf8()), arrow::field("duplicate_of", arrow::utf8())});
  }

  // Before the passes: the server would take every catalog output's writes (grants, the run),
  // so that a missing grant fails now rather than after the work.
  Status CheckCatalogOutputs() {
    for (const OutputSpec& o : spec_.outputs) {
      if (o.table.empty()) continue;
      TY_RETURN_IF_ERROR(CheckCatalogOutput(options_.server, o.name, o.table, options_.run_id));
    }
    return Status::Ok();
  }

  Status OpenOutputs() {
    output_schema_ = OutputSchema();
    std::map<std::string, std::string> properties = {{"trainyard.prep.pipeline", spec_.name},
                                                     {"trainyard.prep.version", spec_.version}};
    // Every commit of every output names the pipeline and its version (the Spark engine
    // writes the same string).
    std::string commit_metadata = CommitMetadata(properties);
    if (split_step_ >= 0) {
      for (const auto& [name, ratio] : steps_[split_step_].split.ratios)
        data_outputs_.push_back(name);
    } else {
      data_outputs_.push_back("rows");
    }
    auto open =
        [&](const OutputSpec& o,
            std::shared_ptr<arrow::Schema> schema) -> Result<std::unique_ptr<OutputWriter>> {
      if (!o.path.empty()) {
        return OpenLocalOutput(JoinPath(spec_.base_dir, o.path), schema, properties,
                               options_.flush_rows, commit_metadata);
      }
      // Column lineage for a catalog source (a table version lineage knows; not for files),
      // when there is a run to record it under (lineage's writer).
      std::string lineage;
      if (!spec_.source.table.empty() && source_->version() && !options_.run_id.empty()) {
        lineage = ColumnLineageJson(spec_.source.table, *source_->version(),
                                    o.name == "dropped"
                                        ? DroppedOutputColumns(spec_)
                                        : DeriveOutputColumns(spec_, schema_->field_names()));
      }
      return OpenCatalogOutput(options_.server, o.table, schema, options_.run_id,
                               options_.flush_rows, std::move(lineage), commit_metadata);
    };
    for (const auto& name : data_outputs_) {
      TY_ASSIGN_OR_RETURN(auto w, open(*spec_.Output(name), output_schema_));
      writers_.push_back(std::move(w));
    }
    if (const OutputSpec* d = spec_.Output("dropped")) {
      TY_ASSIGN_OR_RETURN(dropped_writer_, open(*d, DroppedSchema()));
    }
    return Status::Ok();
  }

  // ---- pass 2 ----

  Result<std::shared_ptr<arrow::RecordBatch>> BuildOutput(const BatchView& in,
                                                          const std::vector<int64_t>& rows,
                                                          const std::vector<std::string>& ids,
                                                          const std::vector<WorkRow>& work) const {
    const std::string what = "building the output of " + in.batch->doc_source;
    std::vector<std::shared_ptr<arrow::Array>> columns;
    arrow::StringBuilder id_builder;
    for (const auto& id : ids) TY_RETURN_IF_ERROR(tables::FromArrow(id_builder.Append(id), what));
    std::shared_ptr<arrow::Array> id_array;
    TY_RETURN_IF_ERROR(tables::FromArrow(id_builder.Finish(&id_array), what));
    columns.push_back(id_array);
    arrow::Int64Builder index_builder;
    TY_RETURN_IF_ERROR(tables::FromArrow(index_builder.AppendValues(rows), what));
    std::shared_ptr<arrow::Array> indices;
    TY_RETURN_IF_ERROR(tables::FromArrow(index_builder.Finish(&indices), what));
    auto string_column = [&](int slot) -> Result<std::shared_ptr<arrow::Array>> {
      arrow::StringBuilder b;
      for (const auto& w : work) {
        auto v = w.Get(slot);
        TY_RETURN_IF_ERROR(tables::FromArrow(v ? b.Append(*v) : b.AppendNull(), what));
      }
      std::shared_ptr<arrow::Array> out;
      TY_RETURN_IF_ERROR(tables::FromArrow(b.Finish(&out), what));
      return out;
    };
    for (int c = 0; c < schema_->num_fields(); ++c) {
      int slot = -1;
      for (size_t s = 0; s < slots_.size(); ++s) {
        if (slots_[s].written && slots_[s].column == c) slot = static_cast<int>(s);
      }
      if (slot >= 0) {
        TY_ASSIGN_OR_RETURN(auto col, string_column(slot));
        columns.push_back(col);
        continue;
      }
      TY_ASSIGN_OR_RETURN(arrow::Datum taken,
                          tables::FromArrow(arrow::compute::Take(in.columns[c], indices), what));
      columns.push_back(taken.make_array());
    }
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].written && slots_[s].column < 0) {
        TY_ASSIGN_OR_RETURN(auto col, string_column(static_cast<int>(s)));
        columns.push_back(col);
      }
    }
    for (size_t t = 0; t < token_columns_.size(); ++t) {
      auto values = std::make_shared<arrow::Int32Builder>();
      arrow::ListBuilder b(arrow::default_memory_pool(), values);
      for (const auto& w : work) {
        TY_RETURN_IF_ERROR(tables::FromArrow(b.Append(), what));
        TY_RETURN_IF_ERROR(tables::FromArrow(
            values->AppendValues(w.tokens[t].data(), static_cast<int64_t>(w.tokens[t].size())),
            what));
      }
      std::shared_ptr<arrow::Array> out;
      TY_RETURN_IF_ERROR(tables::FromArrow(b.Finish(&out), what));
      columns.push_back(out);
    }
    return arrow::RecordBatch::Make(output_schema_, static_cast<int64_t>(rows.size()), columns);
  }

  Result<std::string> GroupKey(const BatchView& in, int64_t row, const WorkRow& w,
                               const std::string& doc_id) const {
    const StepRuntime& rt = steps_[split_step_];
    if (rt.group_slot >= 0) {
      auto v = w.Get(rt.group_slot);
      return v ? std::string(*v) : doc_id;
    }
    if (rt.group_column >= 0) {
      const arrow::Array& a = *in.columns[rt.group_column];
      if (a.IsNull(row)) return doc_id;
      if (IsStringType(*a.type())) return std::string(*StringAt(a, row));
      std::string key;
      tables::AppendJsonValue(a, row, &key);
      return key;
    }
    return doc_id;
  }

  Result<Pass2Batch> ProcessPass2(const SourceBatch& batch, int64_t base) const {
    BatchView in{&batch, batch.rows->columns()};
    const int64_t n = batch.rows->num_rows();
    const size_t outputs = data_outputs_.size();
    Pass2Batch out;
    out.changes.resize(steps_.size());
    out.split_rows.assign(outputs, 0);
    std::vector<std::vector<int64_t>> rows(outputs);
    std::vector<std::vector<std::string>> ids(outputs);
    std::vector<std::vector<WorkRow>> work(outputs);
    arrow::StringBuilder d_id, d_step, d_reason, d_of;
    const std::string what = "writing the dropped rows of " + batch.doc_source;
    WorkRow w;
    for (int64_t r = 0; r < n; ++r) {
      const RowOutcome& decided = outcomes_[base + r];
      TY_ASSIGN_OR_RETURN(std::string doc_id, RowDocId(in, r));
      if (decided.drop_step != kKept) {
        // The steps before the one that dropped it ran on it (their changes count).
        size_t end = static_cast<size_t>(decided.drop_step);
        if (first_redact_ >= 0 && static_cast<size_t>(first_redact_) < end) {
          LoadRow(in, r, w);
          RunRow(in, r, w, end, nullptr, &out.changes);
        }
        const StepRuntime& rt = steps_[decided.drop_step];
        TY_RETURN_IF_ERROR(tables::FromArrow(d_id.Append(doc_id), what));
        TY_RETURN_IF_ERROR(tables::FromArrow(d_step.Append(rt.step->label), what));
        TY_RETURN_IF_ERROR(tables::FromArrow(d_reason.Append(rt.reasons[decided.reason]), what));
        auto of = duplicate_of_.find(static_cast<uint32_t>(base + r));
        if (of == duplicate_of_.end()) {
          TY_RETURN_IF_ERROR(tables::FromArrow(d_of.AppendNull(), what));
        } else {
          char hex[17];
          std::snprintf(hex, sizeof(hex), "%016llx",
                        static_cast<unsigned long long>(doc_ids_[of->second]));
          TY_RETURN_IF_ERROR(tables::FromArrow(d_of.Append(hex, 16), what));
        }
        continue;
      }
      LoadRow(in, r, w);
      RowOutcome again = RunRow(in, r, w, steps_.size(), nullptr, &out.changes);
      if (again.drop_step != kKept) {
        return Status::Internal(batch.doc_source + " row " +
                                std::to_string(batch.first_ordinal + r + 1) +
                                ": a step decided differently on the second pass");
      }
      size_t o = 0;
      if (split_step_ >= 0) {
        TY_ASSIGN_OR_RETURN(std::string key, GroupKey(in, r, w, doc_id));
        o = static_cast<size_t>(AssignSplit(steps_[split_step_].split, key));
      }
      ++out.split_rows[o];
      rows[o].push_back(r);
      ids[o].push_back(std::move(doc_id));
      work[o].push_back(std::move(w));
    }
    for (size_t o = 0; o < outputs; ++o) {
      if (rows[o].empty()) {
        out.outputs.push_back(nullptr);
        continue;
      }
      TY_ASSIGN_OR_RETURN(auto b, BuildOutput(in, rows[o], ids[o], work[o]));
      out.outputs.push_back(std::move(b));
    }
    std::shared_ptr<arrow::Array> a, b, c, d;
    TY_RETURN_IF_ERROR(tables::FromArrow(d_id.Finish(&a), what));
    TY_RETURN_IF_ERROR(tables::FromArrow(d_step.Finish(&b), what));
    TY_RETURN_IF_ERROR(tables::FromArrow(d_reason.Finish(&c), what));
    TY_RETURN_IF_ERROR(tables::FromArrow(d_of.Finish(&d), what));
    out.dropped = arrow::RecordBatch::Make(DroppedSchema(), a->length(), {a, b, c, d});
    return out;
  }

  Status PassTwo() {
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (steps_[i].step->kind == StepKind::kRedactPii) {
        first_redact_ = static_cast<int>(i);
        break;
      }
    }
    for (const auto& rt : steps_) {
      StepReport s;
      s.label = rt.step->label;
      s.kind = rt.step->kind;
      s.line = rt.step->line;
      report_.steps.push_back(std::move(s));
    }
    // Rows in and out of each step follow from where each row was dropped.
    std::vector<int64_t> dropped_at(steps_.size(), 0);
    for (const auto& o : outcomes_) {
      if (o.drop_step != kKept) ++dropped_at[o.drop_step];
    }
    int64_t alive = report_.rows_in;
    for (size_t i = 0; i < steps_.size(); ++i) {
      report_.steps[i].rows_in = alive;
      alive -= dropped_at[i];
      report_.steps[i].rows_out = alive;
    }
    report_.rows_out = alive;
    report_.rows_dropped = report_.rows_in - alive;
    output_rows_.assign(data_outputs_.size(), 0);
    return ForEachBatch<Pass2Batch>(
        2, [this](const SourceBatch& b, int64_t base) { return ProcessPass2(b, base); },
        [this](Pass2Batch&& b, const SourceBatch&, int64_t) { return ConsumePass2(std::move(b)); });
  }

  Status ConsumePass2(Pass2Batch&& b) {
    for (size_t o = 0; o < writers_.size(); ++o) {
      if (b.outputs[o]) TY_RETURN_IF_ERROR(writers_[o]->Write(b.outputs[o]));
      output_rows_[o] += b.split_rows[o];
    }
    for (size_t i = 0; i < steps_.size(); ++i) {
      report_.steps[i].rows_changed += b.changes[i].rows_changed;
      for (const auto& [k, v] : b.changes[i].by_kind) report_.steps[i].changed[k] += v;
    }
    const auto& dropped = *b.dropped;
    if (dropped.num_rows() > 0) {
      auto ids = std::static_pointer_cast<arrow::StringArray>(dropped.column(0));
      auto labels = std::static_pointer_cast<arrow::StringArray>(dropped.column(1));
      auto reasons = std::static_pointer_cast<arrow::StringArray>(dropped.column(2));
      for (int64_t r = 0; r < dropped.num_rows(); ++r) {
        std::string label(labels->GetView(r));
        for (auto& s : report_.steps) {
          if (s.label != label) continue;
          ReasonReport& rr = s.dropped[std::string(reasons->GetView(r))];
          ++rr.rows;
          if (rr.examples.size() < kExamplesPerReason) rr.examples.emplace_back(ids->GetView(r));
        }
      }
      if (dropped_writer_) TY_RETURN_IF_ERROR(dropped_writer_->Write(b.dropped));
    }
    return Status::Ok();
  }

  Status FinishOutputs() {
    for (size_t o = 0; o < writers_.size(); ++o) {
      TY_ASSIGN_OR_RETURN(OutputResult r, writers_[o]->Finish());
      const OutputSpec& spec = *spec_.Output(data_outputs_[o]);
      report_.outputs.push_back(
          OutputReport{spec.name, spec.table.empty() ? spec.path : spec.table, r.rows, r.version});
    }
    if (dropped_writer_) {
      TY_ASSIGN_OR_RETURN(OutputResult r, dropped_writer_->Finish());
      const OutputSpec& spec = *spec_.Output("dropped");
      report_.outputs.push_back(
          OutputReport{spec.name, spec.table.empty() ? spec.path : spec.table, r.rows, r.version});
    }
    if (split_step_ >= 0) {
      auto& s = report_.steps[split_step_];
      for (size_t o = 0; o < data_outputs_.size(); ++o)
        s.split_rows[data_outputs_[o]] = output_rows_[o];
    }
    report_.pipeline = spec_.name;
    report_.version = spec_.version;
    report_.source = source_->Describe();
    report_.source_version = source_->version();
    report_.threads = threads_;
    return Status::Ok();
  }

  const PipelineSpec& spec_;
  const PipelineOptions& options_;
  int threads_ = 1;
  std::unique_ptr<BatchSource> source_;
  std::shared_ptr<arrow::Schema> schema_;
  int id_column_ = -1;
  std::vector<Slot> slots_;
  std::map<int, size_t> slot_writer_step_;  // slot -> the first step that writes it
  std::vector<std::string> token_columns_;
  std::map<std::string, std::shared_ptr<const model::Tokenizer>> tokenizers_;
  std::vector<StepRuntime> steps_;
  std::vector<size_t> exact_steps_, near_steps_;
  int split_step_ = -1;
  int first_redact_ = -1;
  // Pass 1's decisions, one per source row in order.
  std::vector<RowOutcome> outcomes_;
  bool track_ids_ = false;         // dedup steps name the row each duplicate duplicates
  std::vector<uint64_t> doc_ids_;  // with track_ids_, per row
  std::unordered_map<uint32_t, uint32_t> duplicate_of_;  // dropped duplicate -> row kept
  // Pass 1's check of id_column's uniqueness: each doc id's first row, and where each batch
  // starts (its first row overall and within its file), to name that row in an error.
  struct IdBatch {
    int64_t first_row = 0;
    int64_t first_ordinal = 0;
  };
  std::unordered_map<uint64_t, int64_t> first_row_of_id_;
  std::vector<IdBatch> id_batches_;
  std::vector<ExactState> exact_;
  std::vector<NearState> near_;
  int64_t base_of_front_ = 0;
  std::shared_ptr<arrow::Schema> output_schema_;
  std::vector<std::string> data_outputs_;
  std::vector<std::unique_ptr<OutputWriter>> writers_;
  std::unique_ptr<OutputWriter> dropped_writer_;
  std::vector<int64_t> output_rows_;
  PipelineReport report_;
};

}  // namespace

int64_t StepReport::dropped_rows() const {
  int64_t n = 0;
  for (const auto& [reason, r] : dropped) n += r.rows;
  return n;
}

Result<PipelineReport> RunPipeline(const PipelineSpec& spec, const PipelineOptions& options) {
  Engine engine(spec, options);
  return engine.Run();
}

json::object ReportToJson(const PipelineReport& report) {
  json::array steps;
  for (const auto& s : report.steps) {
    json::object dropped;
    for (const auto& [reason, r] : s.dropped) {
      json::array examples;
      for (const auto& e : r.examples) examples.emplace_back(e);
      dropped[reason] = json::object{{"rows", r.rows}, {"examples", std::move(examples)}};
    }
    json::object step{{"step", s.label},
                      {"kind", std::string(StepKindName(s.kind))},
                      {"line", s.line},
                      {"rows_in", s.rows_in},
                      {"rows_out", s.rows_out},
                      {"rows_dropped", s.dropped_rows()},
                      {"dropped", std::move(dropped)}};
    if (s.kind == StepKind::kRedactPii) {
      json::object changed;
      for (const auto& [k, v] : s.changed) changed[k] = v;
      step["rows_changed"] = s.rows_changed;
      step["changed"] = std::move(changed);
    }
    if (s.kind == StepKind::kSplit) {
      json::object splits;
      for (const auto& [k, v] : s.split_rows) splits[k] = v;
      step["splits"] = std::move(splits);
    }
    steps.push_back(std::move(step));
  }
  json::array outputs;
  for (const auto& o : report.outputs) {
    json::object out{{"name", o.name}, {"target", o.target}, {"rows", o.rows}};
    if (o.version) out["version"] = *o.version;
    outputs.push_back(std::move(out));
  }
  json::object o{{"pipeline", report.pipeline}, {"version", report.version},
                 {"source", report.source},     {"rows_in", report.rows_in},
                 {"rows_out", report.rows_out}, {"rows_dropped", report.rows_dropped},
                 {"steps", std::move(steps)},   {"outputs", std::move(outputs)},
                 {"seconds", report.seconds},   {"threads", report.threads}};
  if (report.source_version) o["source_version"] = *report.source_version;
  if (!report.master.empty()) {
    o["engine"] = "spark";
    o["master"] = report.master;
    o.erase("threads");
  }
  return o;
}

std::map<std::string, double> ReportMetrics(const PipelineReport& report) {
  std::map<std::string, double> m;
  m["prep.rows_in"] = static_cast<double>(report.rows_in);
  m["prep.rows_out"] = static_cast<double>(report.rows_out);
  m["prep.rows_dropped"] = static_cast<double>(report.rows_dropped);
  m["prep.seconds"] = report.seconds;
  for (const auto& s : report.steps) {
    std::string p = "prep." + s.label + ".";
    m[p + "rows_in"] = static_cast<double>(s.rows_in);
    m[p + "rows_out"] = static_cast<double>(s.rows_out);
    m[p + "rows_dropped"] = static_cast<double>(s.dropped_rows());
    for (const auto& [reason, r] : s.dropped) {
      std::string key = reason;
      std::replace(key.begin(), key.end(), ':', '.');
      m[p + "dropped." + key] = static_cast<double>(r.rows);
    }
    for (const auto& [kind, n] : s.changed) m[p + "redacted." + kind] = static_cast<double>(n);
    for (const auto& [split, n] : s.split_rows) m[p + "rows." + split] = static_cast<double>(n);
  }
  return m;
}

}  // namespace trainyard::prep
