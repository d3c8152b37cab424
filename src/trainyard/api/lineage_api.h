// /api/trainyard/v1/lineage: the lineage graph around one object.
//
//   GET /api/trainyard/v1/lineage?object=TYPE:KEY[@VERSION][&direction=upstream|downstream|both]
//       [&depth=N][&max_nodes=N][&kinds=read,produced,...]
//   → {"root", "direction", "nodes": [{id, type, key, version, display_name, created_at, depth,
//      redacted}], "edges": [{from, to, kind, job_id, run_id, column_mapping, created_at,
//      recorded_by}], "truncated"}
//
// Bad input (unknown object type, malformed key, depth out of range) is 400 naming the
// field; an unknown object 404; an object the caller may not read 403. Nodes the caller may
// not read are redacted (type only). Thin: decode → LineageService (which authorizes) →
// encode. Thread-safe once registered.
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/lineage/lineage_service.h"

namespace trainyard::api {

void RegisterLineageRoutes(Api& api, lineage::LineageService& lineage);

// The JSON of a graph, as the route returns it (exposed for tests and the CLI's format).
json::object LineageGraphToJson(const lineage::LineageGraph& graph);

}  // namespace trainyard::api
