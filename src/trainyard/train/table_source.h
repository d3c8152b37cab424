// Catalog tables as training data: the trainer reads a table's rows through the server's
// tables API (GET /api/trainyard/v1/tables/{name}[/rows]) with the workload's TRAINYARD_URL
// and TRAINYARD_TOKEN, as any reader does, so the catalog's privileges (SELECT, USE CATALOG,
// USE SCHEMA) and whatever the server applies to reads (row filters, column masks) hold for
// the trainer too. JSON lines, not Arrow: the trainer links no Arrow, and the rows it needs
// are a few text columns.
//
// A read is pinned to one version: ResolveTableVersion turns "latest" (or a timestamp) into a
// concrete version once, and OpenTable asks every page for that version (the page token
// carries it too), so a commit landing during the read changes nothing. The trainer decides
// the version on rank 0 and hands it to the other ranks and to resumed attempts (trainer.cc).
// Pages name the run (`run_id`), so the server records the read in lineage
// (table@version -read-> run).
//
// Thread-compatible; a RecordSource is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "trainyard/common/status.h"
#include "trainyard/train/data.h"
#include "trainyard/train/platform.h"
#include "trainyard/train/train_config.h"

namespace trainyard::train {

// Rows per page asked of the server (its maximum).
inline constexpr int64_t kTablePageRows = 10000;

// The concrete version `source` names: its version, the version current at its timestamp,
// or the latest; the same call checks that the table exists, that the caller may read it
// and that the version exists. Errors name `field` (data.train) and the table, and say what
// to do. FailedPrecondition when env has no TRAINYARD_URL.
Result<int64_t> ResolveTableVersion(const WorkloadEnv& env, const TableSource& source,
                                    const std::string& field);

// The rows of source.table at `version` (ColumnsToRead(source.columns) projected) as Records
// (RecordFromRow with source.columns); a bad row is InvalidArgument "field: table@version
// row N: ...". `run_id` ("" = none) is passed to the server for lineage. Describe() is
// "table@version".
std::unique_ptr<RecordSource> OpenTable(const WorkloadEnv& env, const TableSource& source,
                                        int64_t version, const std::string& field,
                                        const std::string& run_id);

// The MLflow dataset input for a table read at `version` in `context`: named after the table,
// digest the version, source_type "delta_table" with MLflow's DeltaDatasetSource JSON
// {"delta_table_name": table, "delta_table_version": version} (which lineage reads as
// table@version), profile {"num_rows": rows}.
DatasetInputSpec TableDatasetInput(const std::string& table, int64_t version,
                                   const std::string& context, int64_t rows);

}  // namespace trainyard::train
