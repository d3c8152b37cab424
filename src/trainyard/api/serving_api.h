// Serving endpoints over HTTP.
//
// Control plane, /api/trainyard/v1/endpoints: create, list, get, update (PATCH), delete, and
// grants on an endpoint (POST/DELETE .../permissions). Thin: decode → ServingService (which
// authorizes) → encode.
//
// Data plane (Databricks' scheme, so the `openai` client works with
// base_url=<server>/serving-endpoints and model=<endpoint name>):
//   POST /serving-endpoints/{name}/invocations   any model: MLflow pyfunc bodies
//        (dataframe_split, dataframe_records, inputs, instances) or, for an LLM endpoint,
//        an OpenAI chat (messages) or completions (prompt) body
//   POST /serving-endpoints/chat/completions     OpenAI; the body's `model` names the endpoint
//   POST /serving-endpoints/completions
//   GET  /serving-endpoints/models               the endpoints the caller may query
// and the same three OpenAI routes under /v1/ (/v1/chat/completions, ...). Each request goes
// to one ready replica (ServingService::Acquire), its body passed through unchanged and its
// answer (server-sent events chunk by chunk for `stream: true`) passed back; every answer
// carries `x-request-id`, and every request is captured (CaptureWriter). Errors of the
// OpenAI routes come in OpenAI's shape ({"error": {"message", "type", "code"}}).
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/serving/serving_service.h"

namespace trainyard::api {

void RegisterServingRoutes(Api& api, serving::ServingService& serving);

// The JSON form of an endpoint's state (GET /endpoints/{name}).
json::object EndpointStateToJson(const serving::EndpointState& state);

}  // namespace trainyard::api
