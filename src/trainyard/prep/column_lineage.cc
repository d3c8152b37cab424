#include "trainyard/prep/column_lineage.h"

#include <algorithm>
#include <map>

#include "trainyard/common/json.h"

namespace trainyard::prep {
namespace {

std::string Chain(const std::string& before, const std::string& step) {
  return before == "copy" ? step : before + "+" + step;
}

void AddSources(std::vector<std::string>& into, const std::vector<std::string>& from) {
  for (const auto& c : from) {
    if (std::find(into.begin(), into.end(), c) == into.end()) into.push_back(c);
  }
}

std::vector<std::string> IdSources(const PipelineSpec& spec) {
  if (spec.source.id_column.empty()) return {};
  return {spec.source.id_column};
}

}  // namespace

std::vector<DerivedColumn> DeriveOutputColumns(const PipelineSpec& spec,
                                               const std::vector<std::string>& source_columns) {
  std::vector<DerivedColumn> columns;
  std::map<std::string, size_t> index;  // column name -> position in `columns`
  auto at = [&](const std::string& name) -> DerivedColumn& {
    auto it = index.find(name);
    if (it != index.end()) return columns[it->second];
    index[name] = columns.size();
    columns.push_back({name, {}, "copy"});
    return columns.back();
  };
  at("doc_id") = {"doc_id", IdSources(spec), "doc_id"};
  for (const auto& c : source_columns) at(c) = {c, {c}, "copy"};
  for (const Step& step : spec.steps) {
    switch (step.kind) {
      case StepKind::kTemplate: {
        const TemplateStep& t = step.template_;
        std::vector<std::string> from = at(t.prompt_column).from;
        if (!t.response_column.empty()) AddSources(from, at(t.response_column).from);
        DerivedColumn& out = at(t.output_column);
        out.from = std::move(from);
        out.transform = "template";
        break;
      }
      case StepKind::kRedactPii: {
        DerivedColumn& c = at(step.column);
        c.transform = Chain(c.transform, "redact");
        break;
      }
      case StepKind::kTokenize: {
        DerivedColumn in = at(step.column);
        DerivedColumn& out = at(step.tokenize.output_column);
        out.from = std::move(in.from);
        out.transform = Chain(in.transform, "tokenize");
        break;
      }
      case StepKind::kFilter:
      case StepKind::kDedupExact:
      case StepKind::kDedupNear:
      case StepKind::kSplit:
        break;  // they keep or drop rows; no column changes
    }
  }
  return columns;
}

std::vector<DerivedColumn> DroppedOutputColumns(const PipelineSpec& spec) {
  return {{"doc_id", IdSources(spec), "doc_id"},
          {"step", {}, "prep_step"},
          {"reason", {}, "prep_reason"},
          {"duplicate_of", IdSources(spec), "doc_id"}};
}

std::string ColumnLineageJson(const std::string& table, int64_t version,
                              const std::vector<DerivedColumn>& columns) {
  json::array out;
  for (const auto& c : columns) {
    json::array from;
    for (const auto& f : c.from) from.emplace_back(f);
    out.push_back(
        json::object{{"column", c.column}, {"from", std::move(from)}, {"transform", c.transform}});
  }
  return json::serialize(
      json::object{{"source", table + "@" + std::to_string(version)}, {"columns", std::move(out)}});
}

}  // namespace trainyard::prep
