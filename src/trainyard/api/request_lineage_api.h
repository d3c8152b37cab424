// GET /api/trainyard/v1/lineage/requests/{request_id}: what served a request and what made
// it. The id is a response's `x-request-id` header or its OpenAI `id` ("chatcmpl-<id>",
// "cmpl-<id>"); the request index (serving/capture.h) gives the endpoint, the served entity
// and the model version, and the lineage graph upstream of that version gives the run that
// produced it, the run's job and the table versions the run read:
//
//   → {"request_id", "endpoint", "served_entity", "model", "model_version", "timestamp_ms",
//      "latency_ms", "status", "capture": {"table", "version"}, "run_id" (the run that
//      produced the version), "job_id" (that run's job), "training_tables": [{"table",
//      "version"}] (what that run read), "upstream_tables": [...] (every table version
//      upstream, a prep job's sources too), "lineage": <the upstream graph, as GET /lineage>}
//
// Who may ask: admins and those who may MANAGE the endpoint (403 for a QUERY-only caller);
// an id never captured is 404. Nodes of the graph the caller may not read are redacted, as
// in GET /lineage. Thread-safe once registered.
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/lineage/lineage_service.h"
#include "trainyard/serving/serving_service.h"

namespace trainyard::api {

void RegisterRequestLineageRoute(Api& api, serving::ServingService& serving,
                                 lineage::LineageService& lineage);

// The request id inside a response id: "chatcmpl-ab12" and "cmpl-ab12" -> "ab12"; anything
// else as it is. InvalidArgument naming request_id for an id that cannot be one.
Result<std::string> RequestIdFromResponseId(std::string_view id);

}  // namespace trainyard::api
