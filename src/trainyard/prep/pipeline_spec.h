// The data-preparation pipeline spec (issue 18, docs/prep.md): a source (a catalog table at a
// version, or local files), the column the steps act on, a list of steps run in order, and the
// outputs (catalog tables or local Delta directories), parsed from YAML with errors that name
// the file, the line and the field:
//   pipeline.yaml:7: steps[2].dedup_near.bands: must be an integer from 1 to 1024 (got 0)
// Unknown keys are errors. The spec's SHA-256 (of its text) is the pipeline's version.
//
// Parsing reads no files and compiles only the regular expressions (BoundedRegex); tokenizers
// and the source are opened by the engine (pipeline.h). Paths stay as written; `base_dir` is
// the spec file's directory, against which the engine resolves them.
//
// Value types; a parsed spec is immutable and may be shared across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainyard/common/regex.h"
#include "trainyard/common/status.h"

namespace trainyard::prep {

// Upper bounds of a spec: far beyond real pipelines, low enough to keep reports readable.
inline constexpr size_t kMaxSteps = 64;
inline constexpr size_t kMaxSourceFiles = 10000;
inline constexpr size_t kMaxOutputs = 64;

struct SourceSpec {
  std::string table;               // catalog.schema.table, or
  std::vector<std::string> files;  // local .jsonl/.csv/.parquet files (relative to base_dir)
  std::optional<int64_t> version;  // only with table; unset: the latest, resolved once
  std::string id_column;           // the row's key for DocId; "" = the ordinal
};

enum class StepKind { kFilter, kDedupExact, kDedupNear, kRedactPii, kTemplate, kTokenize, kSplit };
std::string_view StepKindName(StepKind kind);

// One filter step: every criterion given must hold; a row failing one is dropped with that
// criterion's name as the reason (checked in the order of the fields below).
struct FilterStep {
  std::optional<int64_t> min_chars, max_chars;     // Unicode code points
  std::optional<int64_t> min_tokens, max_tokens;   // with `tokenizer`
  std::string tokenizer;                           // tokenizer.json (relative to base_dir)
  std::shared_ptr<const BoundedRegex> drop_regex;  // drop when it matches anywhere
  std::shared_ptr<const BoundedRegex> keep_regex;  // drop when it matches nowhere
  std::vector<std::string> required;               // columns: non-null and non-empty
  std::optional<double> max_repetition;            // RepetitionRatio <= this
  std::string language;                            // "en" with min_score
  double min_score = 0;                            // EnglishScore >= this
};

enum class KeepRule { kFirst, kLongest };

struct DedupNearStep {
  int shingle_words = 5;
  int bands = 14;
  int rows = 8;
  double threshold = 0.0;
  uint64_t seed = 1;
  KeepRule keep = KeepRule::kFirst;
};

struct RedactPiiStep {
  std::vector<std::string> kinds;                             // email, phone, card, iban, ip
  std::vector<std::pair<std::string, std::string>> patterns;  // name -> regex
  std::string replacement = "[{kind}]";
};

struct TemplateStep {
  std::string format;  // chatml, mistral, alpaca
  std::string prompt_column;
  std::string response_column;  // "" = prompt only
  std::string system;
  std::string output_column = "text";
};

struct TokenizeStep {
  std::string tokenizer;  // tokenizer.json (relative to base_dir)
  std::string output_column = "input_ids";
  bool add_special_tokens = true;
};

struct SplitStep {
  std::vector<std::pair<std::string, double>> ratios;  // in the spec's order
  uint64_t seed = 0;
  std::string group_by;  // "" = each row its own group (keyed by doc_id)
};

struct Step {
  StepKind kind = StepKind::kFilter;
  int line = 0;        // the step's line in the spec (1-based; 0 unknown)
  std::string label;   // unique in the pipeline: "<index>_<kind>", e.g. "0_filter"
  std::string column;  // the column it acts on (filter, dedup, redact, tokenize input)
  FilterStep filter;
  DedupNearStep dedup_near;
  RedactPiiStep redact_pii;
  TemplateStep template_;
  TokenizeStep tokenize;
  SplitStep split;
};

// An output: a catalog table or a local Delta table directory.
struct OutputSpec {
  std::string name;   // the split's name, "rows" or "dropped"
  std::string table;  // catalog.schema.table, or
  std::string path;   // a local directory (relative to base_dir)
};

struct PipelineSpec {
  std::string name;
  SourceSpec source;
  std::string text_column = "text";
  std::vector<Step> steps;
  std::vector<OutputSpec> outputs;  // sorted by name
  std::string base_dir;             // the spec file's directory ("" = the working directory)
  std::string version;              // SHA-256 hex of the spec's text

  const OutputSpec* Output(std::string_view name) const;
  const Step* SplitStepOrNull() const;
};

// Parses `text`; `filename` prefixes errors. Every error is InvalidArgument.
Result<PipelineSpec> ParsePipelineSpec(std::string_view text, std::string_view filename);
// Reads and parses the file at `path` (base_dir = its directory).
Result<PipelineSpec> LoadPipelineSpec(const std::string& path);

}  // namespace trainyard::prep
