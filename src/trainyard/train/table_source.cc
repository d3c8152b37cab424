#include "trainyard/train/table_source.h"

#include <string_view>
#include <utility>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"
#include "trainyard/http/api_call.h"
#include "trainyard/train/server_api.h"

namespace trainyard::train {
namespace {

std::string TablesApi(const WorkloadEnv& env, const std::string& table) {
  return StripSlash(env.url) + "/api/trainyard/v1/tables/" + UrlEncode(table);
}

Status NeedServer(const WorkloadEnv& env, const TableSource& source, const std::string& field) {
  if (!env.url.empty()) return Status::Ok();
  return Status::FailedPrecondition(
      field + " reads the catalog table " + source.table +
      " through the Trainyard server: set TRAINYARD_URL and TRAINYARD_TOKEN (a job gets both), "
      "or give a JSONL file");
}

// A failed call, with what to do about it.
Status Explain(const Status& s, const std::string& table) {
  std::string hint;
  switch (s.code()) {
    case StatusCode::kNotFound:
      hint = "; list tables with 'trainyard tables show " + table +
             "' and versions with 'trainyard tables history " + table + "'";
      break;
    case StatusCode::kPermissionDenied:
      hint =
          "; reading needs SELECT on the table and USE CATALOG / USE SCHEMA above it (trainyard "
          "grant SELECT ON TABLE " +
          table + " TO <user>)";
      break;
    default:
      break;
  }
  return Status(s.code(), s.message() + hint);
}

class TableRecordSource : public RecordSource {
 public:
  TableRecordSource(WorkloadEnv env, TableSource source, int64_t version, std::string field,
                    std::string run_id)
      : env_(std::move(env)),
        source_(std::move(source)),
        version_(version),
        field_(std::move(field)),
        run_id_(std::move(run_id)) {}

  Result<std::vector<Record>> ReadAll() override {
    TY_RETURN_IF_ERROR(NeedServer(env_, source_, field_));
    std::string query = "?format=jsonl&version=" + std::to_string(version_) +
                        "&max_rows=" + std::to_string(kTablePageRows);
    std::string columns;
    for (const auto& c : ColumnsToRead(source_.columns)) {
      columns += (columns.empty() ? "" : ",") + c;
    }
    if (!columns.empty()) query += "&columns=" + UrlEncode(columns);
    if (!run_id_.empty()) query += "&run_id=" + UrlEncode(run_id_);
    const std::string url = TablesApi(env_, source_.table) + "/rows" + query;
    const std::string what = field_ + ": reading " + Describe();
    std::vector<Record> records;
    std::string page_token;
    int64_t row = 0;
    do {
      std::string page_url = url;
      if (!page_token.empty()) page_url += "&page_token=" + UrlEncode(page_token);
      auto r = http::CallApi("GET", page_url, env_.token, "", "", what);
      if (!r.ok()) return Explain(r.status(), source_.table);
      auto served = r->headers.find("x-trainyard-table-version");
      if (served == r->headers.end() || served->second != std::to_string(version_)) {
        return Status::Internal(what + ": the server answered with version " +
                                (served == r->headers.end() ? "?" : served->second) +
                                " instead of " + std::to_string(version_));
      }
      TY_RETURN_IF_ERROR(ParsePage(r->body, row, records));
      auto next = r->headers.find("x-trainyard-next-page-token");
      page_token = next == r->headers.end() ? "" : next->second;
    } while (!page_token.empty());
    return records;
  }

  std::string Describe() const override { return source_.table + "@" + std::to_string(version_); }

 private:
  // One page of JSON lines; `row` counts the table's rows from 1 across pages.
  Status ParsePage(std::string_view body, int64_t& row, std::vector<Record>& out) const {
    size_t start = 0;
    while (start < body.size()) {
      size_t nl = body.find('\n', start);
      if (nl == std::string_view::npos) nl = body.size();
      std::string_view line = body.substr(start, nl - start);
      start = nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      ++row;
      std::string where = field_ + ": " + Describe() + " row " + std::to_string(row) + ": ";
      boost::system::error_code ec;
      json::value parsed = json::parse(line, ec);
      if (ec || !parsed.is_object()) {
        return Status::Internal(where + "the server sent a row that is not a JSON object");
      }
      TY_ASSIGN_OR_RETURN(Record r, RecordFromRow(parsed.as_object(), source_.columns, where));
      out.push_back(std::move(r));
    }
    return Status::Ok();
  }

  WorkloadEnv env_;
  TableSource source_;
  int64_t version_;
  std::string field_;
  std::string run_id_;
};

}  // namespace

Result<int64_t> ResolveTableVersion(const WorkloadEnv& env, const TableSource& source,
                                    const std::string& field) {
  TY_RETURN_IF_ERROR(NeedServer(env, source, field));
  std::string url = TablesApi(env, source.table);
  if (source.version) {
    url += "?version=" + std::to_string(*source.version);
  } else if (!source.timestamp.empty()) {
    url += "?timestamp=" + UrlEncode(source.timestamp);
  }
  auto described =
      http::CallApiJson("GET", url, env.token, {}, field + ": reading table " + source.ToString());
  if (!described.ok()) return Explain(described.status(), source.table);
  auto version = OptionalInt64(*described, "version");
  if (!version.ok() || !*version || **version < 0) {
    return Status::Internal(field + ": the server described " + source.table +
                            " without a version");
  }
  if (source.version && **version != *source.version) {
    return Status::Internal(field + ": the server described " + source.ToString() + " as version " +
                            std::to_string(**version));
  }
  return **version;
}

std::unique_ptr<RecordSource> OpenTable(const WorkloadEnv& env, const TableSource& source,
                                        int64_t version, const std::string& field,
                                        const std::string& run_id) {
  return std::make_unique<TableRecordSource>(env, source, version, field, run_id);
}

DatasetInputSpec TableDatasetInput(const std::string& table, int64_t version,
                                   const std::string& context, int64_t rows) {
  DatasetInputSpec d;
  d.name = table;
  d.digest = std::to_string(version);
  d.source_type = "delta_table";
  d.source =
      json::serialize(json::object{{"delta_table_name", table}, {"delta_table_version", version}});
  d.profile = json::serialize(json::object{{"num_rows", rows}});
  d.context = context;
  return d;
}

}  // namespace trainyard::train
