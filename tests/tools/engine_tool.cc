// engine_tool: test-only program for tests/test_serving_engine.py. Loads a model directory
// (and optional adapters) into the serving engine, submits every prompt at once (so they run
// in one continuous batch) and prints one JSON object {"outputs": [[token ids], ...]} with
// each prompt's generated tokens, eos excluded.
//
//   engine_tool <model_dir> <requests.json> [NAME=ADAPTER_DIR ...]
//
// requests.json: [{"prompt": [ids], "adapter": "" | NAME, "max_tokens": N,
//                  "temperature": 0, "top_p": 1, "top_k": 0, "seed": S, "ignore_eos": false}]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/serving/engine/engine.h"

namespace {

using namespace trainyard;
using namespace trainyard::serving;

int Fail(const Status& s) {
  std::fprintf(stderr, "engine_tool: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: engine_tool <model_dir> <requests.json> [NAME=DIR ...]\n");
    return 2;
  }
  EngineOptions options;
  options.model_dir = argv[1];
  // The GPU check runs the same test with ENGINE_TOOL_DEVICE=cuda (float32, so greedy tokens
  // still equal transformers' on the CPU).
  const char* device = std::getenv("ENGINE_TOOL_DEVICE");
  options.device = device != nullptr ? device : "cpu";
  options.dtype = "float32";
  for (int i = 3; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (eq == std::string::npos) return Fail(Status::InvalidArgument("adapters are NAME=DIR"));
    options.adapters.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
  }
  std::ifstream in(argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = ParseJsonExact(text.str());
  if (!parsed.ok()) return Fail(parsed.status());
  auto engine = Engine::Load(options);
  if (!engine.ok()) return Fail(engine.status());
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (const json::value& v : parsed->as_array()) {
    const json::object& o = v.as_object();
    GenerationRequest r;
    for (const json::value& id : o.at("prompt").as_array()) {
      r.prompt.push_back(static_cast<int32_t>(id.to_number<int64_t>()));
    }
    if (auto* a = o.if_contains("adapter")) r.adapter = std::string(a->as_string());
    r.sampling.temperature = 0;
    if (auto* t = o.if_contains("temperature")) r.sampling.temperature = t->to_number<double>();
    if (auto* t = o.if_contains("top_p")) r.sampling.top_p = t->to_number<double>();
    if (auto* t = o.if_contains("top_k")) r.sampling.top_k = t->to_number<int64_t>();
    if (auto* t = o.if_contains("seed")) r.sampling.seed = t->to_number<uint64_t>();
    if (auto* t = o.if_contains("max_tokens")) r.sampling.max_tokens = t->to_number<int64_t>();
    if (auto* t = o.if_contains("ignore_eos")) r.sampling.ignore_eos = t->as_bool();
    auto stream = (*engine)->Submit(std::move(r));
    if (!stream.ok()) return Fail(stream.status());
    streams.push_back(*stream);
  }
  json::array outputs;
  for (auto& stream : streams) {
    json::array ids;
    GenerationEvent e;
    while (stream->Next(&e)) {
      if (!e.error.ok()) return Fail(e.error);
      for (int32_t id : e.token_ids) ids.push_back(id);
    }
    outputs.push_back(std::move(ids));
  }
  std::printf("%s\n", json::serialize(json::object{{"outputs", std::move(outputs)}}).c_str());
  return 0;
}
