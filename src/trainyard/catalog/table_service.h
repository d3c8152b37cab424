// TableService: a catalog table's data — the catalog composes the table's metadata (the
// CatalogService row: name, owner, grants, managed storage location, columns), its access
// (CatalogService::Authorize with UC's rules) and its data (a Delta table, tables/table.h, at
// the row's storage location, opened through blob::OpenBlobStore).
//
// What each call needs (UC's USE CATALOG / USE SCHEMA rule comes with Authorize):
//   create (and import into a table that does not exist yet): CREATE TABLE on the schema;
//   import, delete rows: MODIFY on the table; read rows, describe, history, export: SELECT.
//
// Writes are one Delta commit each, made last: an import streams the body through the
// importer (import.h) into data files and commits only after the whole body was read and
// checked, so a bad record (named by its line) leaves the table at its previous version. An
// import that creates its table removes the catalog row again when it fails.
//
// Reads page: at most kMaxPageRows rows a page; the page token pins the version the first
// page read, so the pages of one read are consistent while other writers commit.
//
// Row filters and column masks (table_policy.h) are enforced here, so that no read path
// bypasses them: ReadRows (every format the API encodes), Export, Describe and History see
// the table as its policies leave the caller, owners and admins included (as Databricks does):
//   - the row filter, bound to the caller, is ANDed into the read's filter (pruning and all);
//   - masked columns come back masked, keeping their type (tables/column_mask.h);
//   - a caller's own `filter` is evaluated over what they see: over the masked values when it
//     names a masked column (so it cannot probe raw values), pushed down with the row filter
//     otherwise; current_user() and is_member() work in it too;
//   - Describe leaves storage_location empty for a restricted caller, and History hides the
//     predicates of past deletes and overwrites (their literals are row values) from them.
// Writes by a restricted caller: an append is allowed (the rows may be ones they will not see,
// as in Databricks); DeleteRows deletes only rows the caller sees (the filter is ANDed in) and
// refuses a predicate over a column masked for them; an overwrite is refused while the row
// filter hides rows from them (it would replace rows they cannot see).
// Masks apply to the data's column of the same name in any case; a stored filter that no
// longer parses fails the read (FailedPrecondition), never reads unfiltered. Policies are the
// table's current ones, whatever version is read.
//
// Lineage: every read and write is recorded with the table version through the
// LineageRecorder when the call has a context (a run id given by the caller, or the job of a
// job-scoped token); lineage has no node for a bare user. A run id is accepted only from a
// caller who may log to that run (TableServiceOptions::authorize_run): 404 for an unknown
// run, 403 naming run_id otherwise, before anything is read or written. Recording is best effort: a
// failure is logged and does not fail the read or write.
//
// Thread-safe (no mutable state of its own). `catalog` and `lineage` are borrowed and must
// outlive the service; `lineage` may be null (no recording).
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/table_policy.h"
#include "trainyard/common/clock.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/lineage/lineage_recorder.h"
#include "trainyard/tables/export.h"
#include "trainyard/tables/import.h"
#include "trainyard/tables/table.h"

namespace trainyard::catalog {

inline constexpr int64_t kMaxPageRows = 10000;
inline constexpr int64_t kDefaultPageRows = 1000;

// May `who` log to the run `run_id` (write on its experiment; a job's token only its own
// run)? Ok, NotFound for an unknown run, PermissionDenied otherwise.
using RunWriteAuthorizer =
    std::function<Status(const identity::Principal& who, const std::string& run_id)>;

struct TableServiceOptions {
  // Downloads of S3-backed tables are cached here ("" = a temporary directory).
  std::string blob_cache_dir{};
  // Checks a call's run_id before the call reads or writes anything (lineage would otherwise
  // let any caller attach reads and writes to anyone's run). Unset: calls naming a run are
  // refused.
  RunWriteAuthorizer authorize_run{};
};

// Who reads or writes on behalf of what, for lineage: a run id ("" = none), and for a write,
// what each column written was derived from (column-level lineage, e.g. prep's outputs; the
// sources must be tables the caller may read, the columns the table's; needs a run or a
// job's token, which lineage records as the writer).
struct TableCallContext {
  std::string run_id{};
  std::vector<lineage::ColumnLineage> column_lineage{};
};

enum class ImportMode { kAppend, kOverwrite };
// "append" / "overwrite"; InvalidArgument naming `mode` otherwise.
Result<ImportMode> ParseImportMode(std::string_view text);

struct ImportTableRequest {
  std::string full_name{};  // catalog.schema.table; created (MANAGED, DELTA) when absent
  tables::ImportFormat format = tables::ImportFormat::kJsonl;
  ImportMode mode = ImportMode::kAppend;
  std::string file_path{};    // the data in a file (an uploaded body), or
  std::string data{};         // in memory, when file_path is empty
  std::string source_name{};  // how errors name the source ("body" when empty)
  TableCallContext context{};
  // The commit's Delta commitInfo.userMetadata ("" = none; at most kMaxUserMetadataBytes).
  std::string user_metadata{};
};

inline constexpr size_t kMaxUserMetadataBytes = 4096;

struct ImportTableResult {
  int64_t version = 0;
  int64_t rows = 0;
  bool created = false;
};

struct ReadRowsRequest {
  std::string full_name{};
  tables::VersionSpec at{};             // ignored when page_token is set (the token pins it)
  std::vector<std::string> columns{};   // empty = all
  std::string filter{};                 // tables' Predicate grammar; "" = all rows
  int64_t max_rows = kDefaultPageRows;  // 1..kMaxPageRows
  std::string page_token{};
  TableCallContext context{};
};

struct RowsPage {
  std::shared_ptr<arrow::Table> rows{};
  int64_t version = 0;
  std::string next_page_token{};  // empty on the last page
};

struct TableDescription {
  TableInfo table{};           // the catalog's row, with its row filter and column masks
  tables::TableInfo delta{};   // schema, version, files, rows, bytes, partitioning, properties
  ReadPolicy caller_policy{};  // what the policies leave the caller (restricted() or not)
};

// Arrow schema -> the catalog's columns (type_text "bigint"-style names as UC reports them,
// type_name, type_json of the Delta field). InvalidArgument naming the column.
Result<std::vector<ColumnInfo>> ColumnsFromArrow(const arrow::Schema& schema);
// The catalog's columns -> an Arrow schema (from type_json when set, else type_text).
Result<std::shared_ptr<arrow::Schema>> ArrowFromColumns(const std::vector<ColumnInfo>& columns);
// Page tokens: "<version>:<offset>", opaque to clients. InvalidArgument naming page_token.
std::string FormatPageToken(int64_t version, int64_t offset);
Result<std::pair<int64_t, int64_t>> ParsePageToken(std::string_view token);

class TableService {
 public:
  TableService(CatalogService& catalog, lineage::LineageRecorder* lineage, Clock& clock,
               TableServiceOptions options = {});
  ~TableService();
  TableService(const TableService&) = delete;
  TableService& operator=(const TableService&) = delete;

  // Creates the catalog row (MANAGED, DELTA, columns from `schema`) and an empty Delta
  // table at its storage location; the row is removed again if the Delta create fails.
  Result<TableInfo> CreateManagedTable(const identity::Principal& who, CreateTableRequest request,
                                       std::shared_ptr<arrow::Schema> schema);
  // For a MANAGED DELTA row created elsewhere (UC's POST /tables): the empty Delta table
  // from the row's columns, its first commit made by `who`.
  Status CreateDeltaForRow(const identity::Principal& who, const TableInfo& row);

  Result<ImportTableResult> Import(const identity::Principal& who,
                                   const ImportTableRequest& request);
  // What Import checks before it reads the data, with the same errors, and nothing written:
  // the context's run, MODIFY on the table (or, for a table that does not exist yet, CREATE
  // TABLE on its schema), and that an overwrite replaces no rows a row filter hides from `who`.
  // True when the import would create the table. For clients that check before long work.
  Result<bool> CheckImport(const identity::Principal& who, const ImportTableRequest& request);
  Result<RowsPage> ReadRows(const identity::Principal& who, const ReadRowsRequest& request);
  Result<TableDescription> Describe(const identity::Principal& who, std::string_view full_name,
                                    const tables::VersionSpec& at = {});
  Result<std::vector<tables::HistoryEntry>> History(const identity::Principal& who,
                                                    std::string_view full_name, int64_t limit = 0);
  // Streams the whole snapshot in `format` to `sink`; returns the version exported.
  Result<int64_t> Export(const identity::Principal& who, std::string_view full_name,
                         const tables::VersionSpec& at, tables::ExportFormat format,
                         const tables::ByteSink& sink, const TableCallContext& context = {});
  // Deletes the rows where `predicate` is TRUE.
  Result<tables::CommitResult> DeleteRows(const identity::Principal& who,
                                          std::string_view full_name, std::string_view predicate,
                                          const TableCallContext& context = {});

 private:
  struct Opened;
  // `table_options` for the DeltaTable (what its commits carry).
  Result<Opened> Open(const identity::Principal& who, std::string_view full_name,
                      Privilege privilege, tables::TableOptions table_options = {});
  // `writer`: who commits through the handle (named in each commit's commitInfo); nullptr
  // for a handle that only reads.
  Result<Opened> OpenRow(TableInfo row, const identity::Principal* writer,
                         tables::TableOptions table_options = {});
  // The policy for `who` on the opened table, its masks keyed by `schema`'s (the data's)
  // column names.
  Result<ReadPolicy> PolicyOf(const identity::Principal& who, const Opened& o,
                              const arrow::Schema& schema);
  // A reader of the snapshot `read.at` as `policy` lets its reader see it, with the caller's
  // `filter` (bound to them) applied over what they see. `read.filter` must be empty.
  Result<std::unique_ptr<arrow::RecordBatchReader>> ReadGoverned(
      Opened& o, const ReadPolicy& policy, tables::ReadOptions read,
      std::optional<tables::Predicate> filter);
  Result<ImportTableResult> ImportNew(const identity::Principal& who,
                                      const ImportTableRequest& request);
  // Whether Open failed because no table has that name (an import creates it), not because
  // it is hidden from the caller.
  bool IsNewTable(const Result<Opened>& opened, const std::string& full_name);
  // Ok unless `mode` overwrites rows of `o` that a row filter hides from `who`.
  Status CheckOverwrite(const identity::Principal& who, const Opened& o, ImportMode mode,
                        const arrow::Schema& schema);
  // Ok when the context names no run or `who` may log to the one it names, and its column
  // lineage (if any) names readable source tables and columns of `schema` (when given).
  Status CheckContext(const identity::Principal& who, const TableCallContext& context,
                      const arrow::Schema* schema = nullptr);
  void RecordRead(const identity::Principal& who, const std::string& table, int64_t version,
                  const TableCallContext& context);
  void RecordWrite(const identity::Principal& who, const std::string& table, int64_t version,
                   const TableCallContext& context);

  CatalogService& catalog_;
  lineage::LineageRecorder* lineage_;
  Clock& clock_;
  TableServiceOptions options_;
};

}  // namespace trainyard::catalog
