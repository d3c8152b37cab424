// Trainyard's tables API (/api/trainyard/v1/tables/{full_name}...): a catalog table's data,
// through catalog::TableService (which authorizes with the catalog's grants and records
// lineage). Routes:
//   GET  .../{full_name}            describe: schema, version, files, rows, bytes, partitioning,
//                                   properties (?version= or ?timestamp= for an older one)
//   POST .../{full_name}/import     ?format=jsonl|csv|parquet&mode=append|overwrite[&run_id=]
//                                   the body is the file (streamed to disk, then imported);
//                                   creates the table on the first import
//   GET  .../{full_name}/rows       ?version=&timestamp=&columns=a,b&filter=&max_rows=
//                                   &page_token=&format=jsonl|arrow; the version read and the
//                                   next page's token come back in the headers
//                                   X-Trainyard-Table-Version and X-Trainyard-Next-Page-Token
//   GET  .../{full_name}/export     ?format=jsonl|csv|parquet|arrow&version=&timestamp=
//   GET  .../{full_name}/history    ?limit=
//   POST .../{full_name}/delete     {"predicate": "..."}
//   PUT  .../{full_name}/row-filter {"predicate": "region = 'EU' OR is_member('leads')"}
//   DELETE .../{full_name}/row-filter
//   PUT  .../{full_name}/columns/{column}/mask  {"kind": "last4", "except": ["pii-readers"]}
//   DELETE .../{full_name}/columns/{column}/mask
//                                   the four answer {full_name, row_filter?, column_masks};
//                                   owner or MANAGE (catalog::CatalogService::SetRowFilter)
// Describe shows the row filter and each column's mask, each with applies_to_caller; every
// read returns what they leave the caller (catalog::TableService enforces them).
// Bad input is 400 naming the field; an unknown version 404 saying the latest; a timestamp
// before the first commit 400. Thread-safe after registration.
#pragma once

#include <string_view>

#include "trainyard/api/api.h"
#include "trainyard/catalog/table_service.h"

namespace trainyard::api {

// Registers the routes; `catalog` and `tables` must outlive `api`.
void RegisterTableRoutes(Api& api, catalog::CatalogService& catalog, catalog::TableService& tables);

// For http::ServerOptions::stream_body_to_file: an import's body goes to a file.
bool IsTableImport(http::Method method, std::string_view path);

}  // namespace trainyard::api
