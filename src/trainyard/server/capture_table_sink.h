// CatalogCaptureSink: request capture into catalog tables ("inference tables"), the
// serving::CaptureTableSink the server hands the CaptureWriter. A batch is appended as the
// endpoint's owner through the catalog's TableService (one Delta commit per batch; the
// table is created, MANAGED, with serving::CaptureTableColumns(), on the first batch), and
// the lineage edge endpoint -wrote-> table@version is recorded.
//
// Also the check at endpoint create/update (ServingOptions::check_capture_table): the owner
// needs CREATE TABLE on the schema while the table does not exist, MODIFY on it once it
// does; errors name capture.table.
//
// Thread-safe (the services are). Everything is borrowed and must outlive the sink.
#pragma once

#include <memory>
#include <string>

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/table_service.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/identity_service.h"

namespace trainyard::lineage {
class LineageRecorder;
}
namespace trainyard::serving {
class CaptureTableSink;
}

namespace trainyard::server {

std::unique_ptr<serving::CaptureTableSink> MakeCatalogCaptureSink(
    identity::IdentityService& identity, catalog::CatalogService& catalog,
    catalog::TableService& tables, lineage::LineageRecorder* lineage);

// Whether an endpoint owned by `owner` may capture into `table` (see above).
Status CheckCaptureTable(identity::IdentityService& identity, catalog::CatalogService& catalog,
                         const std::string& owner, const std::string& table);

}  // namespace trainyard::server
