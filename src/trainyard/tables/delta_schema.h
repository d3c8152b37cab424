// Delta's JSON schema (metaData.schemaString, PROTOCOL.md "Schema Serialization Format") to and
// from Arrow schemas. Types: string, long, integer, short, byte, float, double, boolean, binary,
// date, timestamp (UTC, microseconds), timestamp_ntz, decimal(p,s), struct, array, map. Field
// metadata is kept as Arrow field metadata (values as JSON text). Pure functions; thread-safe.
#pragma once

#include <arrow/api.h>

#include <memory>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::tables {

// InvalidArgument naming the field for an unsupported or malformed type.
Result<std::shared_ptr<arrow::Schema>> SchemaFromDeltaJson(std::string_view schema_string);
// InvalidArgument naming the field for an Arrow type Delta has no name for (e.g. uint64).
Result<std::string> SchemaToDeltaJson(const arrow::Schema& schema);
// The Delta type name of a primitive Arrow type ("long"), or an error.
Result<std::string> DeltaTypeName(const arrow::DataType& type);
// Whether `type` (anywhere inside) is a timestamp without time zone (reader feature
// timestampNtz).
bool UsesTimestampNtz(const arrow::DataType& type);

}  // namespace trainyard::tables
