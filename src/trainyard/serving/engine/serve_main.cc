// trainyard-serve-model: an inference replica. Loads a Hugging Face model directory (and
// optional PEFT LoRA adapters) into the engine and serves the OpenAI API over HTTP:
// POST /v1/chat/completions, POST /v1/completions (both with "stream": true as server-sent
// events), GET /v1/models, and GET /health (503 while loading, 200 once ready). A workload
// like trainyard-train: the server launches it and never loads libtorch itself (decision 0006).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "trainyard/http/router.h"
#include "trainyard/http/server.h"
#include "trainyard/serving/engine/chat_template.h"
#include "trainyard/serving/engine/engine.h"
#include "trainyard/serving/openai_json.h"

namespace trainyard::serving {
namespace {

http::Response OpenAiError(int status, std::string_view message, std::string_view type,
                           std::string_view param = "", std::string_view code = "") {
  return http::Response::Json(status, EncodeError(message, type, param, code));
}

http::Response ErrorFor(int status, const std::string& message) {
  std::string_view type = status == 404   ? "not_found_error"
                          : status == 503 ? "service_unavailable_error"
                          : status >= 500 ? "server_error"
                                          : "invalid_request_error";
  return OpenAiError(status, message, type);
}

std::string RandomId(std::string_view prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(prefix) + buf;
}

// A token's text for logprobs: the tokenizer's bytes for it (special tokens included), or
// "token_id:N" without a tokenizer.
std::string TokenText(const model::Tokenizer* tok, int32_t id) {
  if (!tok || id < 0 || id >= tok->VocabSize()) return "token_id:" + std::to_string(id);
  const int32_t one[] = {id};
  return tok->Decode(one, /*skip_special_tokens=*/false);
}

// An event's tokens' log-probabilities as the API's choice carries them.
Choice ChoiceOf(const GenerationEvent& e, bool with_logprobs, const model::Tokenizer* tok) {
  Choice c;
  c.index = e.index;
  c.text = e.text;
  c.with_logprobs = with_logprobs;
  for (const TokenLogprob& t : e.logprobs) {
    LogprobToken out{TokenText(tok, t.token), t.logprob, {}};
    for (const auto& [id, logprob] : t.top) out.top.emplace_back(TokenText(tok, id), logprob);
    c.logprobs.push_back(std::move(out));
  }
  return c;
}

// The server-sent events of one streamed completion, as OpenAI sends them: `data: {chunk}`
// per piece of a choice's text (each chat choice opens with the assistant's role), a chunk with
// each choice's finish reason, a usage chunk when asked for (every choice's tokens), then
// `data: [DONE]`.
class SseStream : public http::BodyStream {
 public:
  struct Options {
    bool chat = false;
    std::string id;
    int64_t created = 0;
    std::string model;
    bool include_usage = false;
    int choices = 1;
    bool logprobs = false;
    int64_t prompt_tokens = 0;
  };
  SseStream(std::shared_ptr<GenerationStream> source, Options options,
            const model::Tokenizer* tokenizer)
      : source_(std::move(source)),
        o_(std::move(options)),
        tokenizer_(tokenizer),
        offsets_(static_cast<size_t>(o_.choices), 0) {}

  bool Next(std::string* chunk) override {
    if (done_) return false;
    if (o_.chat && !sent_role_) {
      sent_role_ = true;
      for (int i = 0; i < o_.choices; ++i) {
        Choice role;
        role.index = i;
        *chunk += Data(EncodeChunk(true, o_.id, o_.created, o_.model, &role, true, nullptr));
      }
      return true;
    }
    GenerationEvent e;
    if (!source_->Next(&e)) {
      done_ = true;
      if (o_.include_usage) {
        Usage usage{o_.prompt_tokens, completion_tokens_};
        *chunk += Data(EncodeChunk(o_.chat, o_.id, o_.created, o_.model, nullptr, false, &usage));
      }
      *chunk += "data: [DONE]\n\n";
      return true;
    }
    if (e.finish_reason == FinishReason::kError && e.finished) {
      done_ = true;
      *chunk = Data(EncodeError(e.error.message(), "server_error", "", "")) + "data: [DONE]\n\n";
      return true;
    }
    int64_t& offset = offsets_.at(static_cast<size_t>(e.index));
    if (!e.text.empty() || !e.logprobs.empty()) {
      Choice piece = ChoiceOf(e, o_.logprobs, tokenizer_);
      piece.text_offset = offset;
      offset += static_cast<int64_t>(SanitizeUtf8(e.text).size());
      *chunk += Data(EncodeChunk(o_.chat, o_.id, o_.created, o_.model, &piece, false, nullptr));
    }
    if (e.finished) {
      completion_tokens_ += e.completion_tokens;
      Choice end;
      end.index = e.index;
      end.finish_reason = std::string(FinishReasonName(e.finish_reason));
      *chunk += Data(EncodeChunk(o_.chat, o_.id, o_.created, o_.model, &end, false, nullptr));
    }
    return true;  // an empty chunk (no new text yet) is skipped by the server
  }
  void Cancel() override { source_->Cancel(); }
  ~SseStream() override { source_->Cancel(); }

 private:
  static std::string Data(const std::string& json) { return "data: " + json + "\n\n"; }

  std::shared_ptr<GenerationStream> source_;
  const Options o_;
  const model::Tokenizer* tokenizer_;
  std::vector<int64_t> offsets_;  // per choice: the text sent so far
  int64_t completion_tokens_ = 0;
  bool sent_role_ = false;
  bool done_ = false;
};

struct ReplicaOptions {
  std::string served_name;
  std::string chat_template;
  std::string model_dir;
};

class Replica {
 public:
  explicit Replica(ReplicaOptions options) : options_(std::move(options)) {}

  // Called once, when the engine is loaded; the replica answers 503 until then.
  Status SetEngine(std::unique_ptr<Engine> engine) {
    if (engine->tokenizer()) {
      TY_ASSIGN_OR_RETURN(format_, ResolveChatFormat(options_.chat_template, options_.model_dir,
                                                     engine->config(), *engine->tokenizer()));
    } else if (!options_.chat_template.empty()) {
      return Status::InvalidArgument("--chat-template needs the model's tokenizer.json");
    }
    engine_ = std::move(engine);
    created_ = static_cast<int64_t>(std::time(nullptr));
    ready_.store(true);
    return Status::Ok();
  }

  void AddRoutes(http::Router& router) {
    router.Add(http::Method::kGet, "/health", [this](http::Request&) {
      return ready_.load() ? http::Response::Json(200, R"({"status":"ready"})")
                           : http::Response::Json(503, R"({"status":"loading"})");
    });
    router.Add(http::Method::kGet, "/v1/models", [this](http::Request&) { return Models(); });
    router.Add(http::Method::kPost, "/v1/completions",
               [this](http::Request& r) { return Complete(r, false); });
    router.Add(http::Method::kPost, "/v1/chat/completions",
               [this](http::Request& r) { return Complete(r, true); });
  }

 private:
  http::Response NotReady() const {
    return OpenAiError(503, "the model is still loading; retry when GET /health answers 200",
                       "service_unavailable_error");
  }

  http::Response Models() const {
    if (!ready_.load()) return NotReady();
    std::vector<ModelEntry> models{{options_.served_name, ""}};
    for (const std::string& a : engine_->adapter_names()) {
      models.push_back({a, options_.served_name});
    }
    return http::Response::Json(200, EncodeModelList(models, created_, "trainyard"));
  }

  http::Response Complete(http::Request& http_request, bool chat) {
    if (!ready_.load()) return NotReady();
    RequestError error;
    auto request = ParseOpenAiRequest(http_request.body, chat, &error);
    if (!request) return OpenAiError(400, error.message, "invalid_request_error", error.param);
    GenerationRequest g;
    if (request->model != options_.served_name) {
      auto names = engine_->adapter_names();
      if (std::find(names.begin(), names.end(), request->model) == names.end()) {
        return OpenAiError(404,
                           "The model '" + request->model +
                               "' does not exist: this replica "
                               "serves '" +
                               options_.served_name +
                               "' and its adapters (GET /v1/models lists them)",
                           "invalid_request_error", "model", "model_not_found");
      }
      g.adapter = request->model;
    }
    const model::Tokenizer* tok = engine_->tokenizer();
    std::string prompt_field = chat ? "messages" : "prompt";
    if (chat) {
      if (!tok) {
        return OpenAiError(400,
                           "this model has no tokenizer.json, so it cannot take chat "
                           "messages; use /v1/completions with token ids",
                           "invalid_request_error", "messages");
      }
      auto ids = RenderChat(request->messages, format_, *tok);
      if (!ids.ok()) {
        return OpenAiError(400, ids.status().message(), "invalid_request_error", "messages");
      }
      g.prompt = std::move(*ids);
      g.extra_stop_ids = format_.stop_ids;
    } else if (!request->prompt_ids.empty()) {
      g.prompt = std::move(request->prompt_ids);
    } else {
      if (!tok) {
        return OpenAiError(400, "this model has no tokenizer.json: send prompt as token ids",
                           "invalid_request_error", "prompt");
      }
      g.prompt = tok->Encode(request->prompt, /*add_special_tokens=*/true);
      if (g.prompt.empty()) {
        return OpenAiError(400, "prompt is empty", "invalid_request_error", "prompt");
      }
    }
    SamplingParams& s = g.sampling;
    s.temperature = request->temperature.value_or(1.0);
    s.top_p = request->top_p.value_or(1.0);
    s.top_k = std::max<int64_t>(0, request->top_k.value_or(0));
    if (request->seed) s.seed = static_cast<uint64_t>(*request->seed);
    s.top_logprobs = request->logprobs;
    g.n = request->n;
    int64_t room = engine_->context() - static_cast<int64_t>(g.prompt.size());
    s.max_tokens = request->max_tokens.value_or(chat ? std::max<int64_t>(room, 1) : 16);
    s.stop = request->stop;
    s.ignore_eos = request->ignore_eos;
    int64_t prompt_tokens = static_cast<int64_t>(g.prompt.size());
    auto stream = engine_->Submit(std::move(g));
    if (!stream.ok()) {
      const Status& st = stream.status();
      if (st.IsNotFound()) return OpenAiError(404, st.message(), "invalid_request_error", "model");
      if (!st.IsInvalidArgument()) return ErrorFor(503, st.message());
      std::string param = st.message().rfind("max_tokens", 0) == 0 ? "max_tokens" : prompt_field;
      if (st.message().find("context") != std::string::npos) {
        return OpenAiError(400, st.message(), "invalid_request_error", param,
                           "context_length_exceeded");
      }
      return OpenAiError(400, st.message(), "invalid_request_error", param);
    }
    // The router's request id, when it sent one: the response's id then leads to the
    // request's capture and lineage (GET /api/trainyard/v1/lineage/requests/{id}).
    std::string request_id = http_request.Header("x-request-id");
    bool hex_id = !request_id.empty() && request_id.size() <= 64 &&
                  request_id.find_first_not_of("0123456789abcdef") == std::string::npos;
    std::string id = hex_id ? std::string(chat ? "chatcmpl-" : "cmpl-") + request_id
                            : RandomId(chat ? "chatcmpl-" : "cmpl-");
    int64_t created = static_cast<int64_t>(std::time(nullptr));
    const bool logprobs = request->logprobs >= 0;
    if (request->stream) {
      http::Response r;
      r.status = 200;
      r.content_type = "text/event-stream";
      r.headers.push_back({"Cache-Control", "no-cache"});
      SseStream::Options o{
          chat,       id,       created,      request->model, request->include_usage,
          request->n, logprobs, prompt_tokens};
      r.stream = std::make_shared<SseStream>(*stream, std::move(o), tok);
      return r;
    }
    std::vector<Choice> choices(static_cast<size_t>(request->n));
    for (int i = 0; i < request->n; ++i) {
      choices[static_cast<size_t>(i)].index = i;
      choices[static_cast<size_t>(i)].with_logprobs = logprobs;
    }
    GenerationEvent e;
    Usage usage{prompt_tokens, 0};
    while ((*stream)->Next(&e)) {
      if (e.finished && !e.error.ok()) {
        (*stream)->Cancel();  // the other choices stop too
        return ErrorFor(500, e.error.message());
      }
      Choice& c = choices.at(static_cast<size_t>(e.index));
      Choice piece = ChoiceOf(e, logprobs, tok);
      c.text += piece.text;
      for (LogprobToken& t : piece.logprobs) c.logprobs.push_back(std::move(t));
      if (e.finished) {
        usage.completion_tokens += e.completion_tokens;
        c.finish_reason = std::string(FinishReasonName(e.finish_reason));
      }
    }
    return http::Response::Json(
        200, EncodeCompletion(chat, id, created, request->model, choices, usage));
  }

  ReplicaOptions options_;
  std::atomic<bool> ready_{false};
  // Written once by SetEngine before ready_ is set, read only after ready_ is seen.
  std::unique_ptr<Engine> engine_;
  ChatFormat format_;
  int64_t created_ = 0;
};

Status WritePortFile(const std::string& path, int port) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << port << "\n";
    if (!f) return Status::IOError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace
}  // namespace trainyard::serving

int main(int argc, char** argv) {
  using namespace trainyard;
  using namespace trainyard::serving;
  CLI::App app{
      "Serves a Hugging Face model directory (and PEFT LoRA adapters on it) with the OpenAI "
      "API: /v1/chat/completions, /v1/completions, /v1/models, and /health.",
      "trainyard-serve-model"};
  EngineOptions engine_options;
  std::vector<std::string> adapters;
  std::string served_name, host = "127.0.0.1", port_file, chat_template;
  int port = -1;
  app.add_option("--model-dir", engine_options.model_dir,
                 "the model: config.json, *.safetensors, tokenizer.json")
      ->required();
  app.add_option("--adapter", adapters, "a PEFT LoRA adapter on the model, NAME=DIR (repeatable)");
  app.add_option("--served-model-name", served_name,
                 "the name requests give as \"model\" (default: the directory's name)");
  app.add_option("--host", host, "the address to listen on");
  app.add_option("--port", port, "the port (0: a free one; see --port-file)")->required();
  app.add_option("--port-file", port_file,
                 "write the bound port here once the model is loaded and /health is ready");
  app.add_option("--device", engine_options.device, "auto | cpu | cuda | cuda:N");
  app.add_option("--dtype", engine_options.dtype,
                 "auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16");
  app.add_option("--max-batch", engine_options.max_batch,
                 "the most sequences decoded together (continuous batching)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--threads", engine_options.threads,
                 "CPU threads for the forward steps (0: the cores but one, at least 1)");
  app.add_option("--chat-template", chat_template,
                 "mistral | chatml | alpaca (default: from the model)");
  std::string load_gate;
  app.add_option("--load-gate-for-test", load_gate,
                 "testing aid: wait for this file to exist before loading the model")
      ->group("");
  CLI11_PARSE(app, argc, argv);

  for (const std::string& a : adapters) {
    size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size()) {
      std::cerr << "error: --adapter must be NAME=DIR (got '" << a << "')\n";
      return 2;
    }
    engine_options.adapters.emplace_back(a.substr(0, eq), a.substr(eq + 1));
  }
  if (served_name.empty()) {
    served_name = std::filesystem::path(engine_options.model_dir).lexically_normal().filename();
    if (served_name.empty()) {
      served_name = std::filesystem::path(engine_options.model_dir)
                        .lexically_normal()
                        .parent_path()
                        .filename();
    }
  }
  if (!chat_template.empty()) {
    if (auto t = model::ParsePromptTemplate(chat_template); !t.ok()) {
      std::cerr << "error: --chat-template must be mistral, chatml or alpaca (got '"
                << chat_template << "')\n";
      return 2;
    }
  }

  // Signals are taken by sigwait below; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Replica replica({served_name, chat_template, engine_options.model_dir});
  http::Router router;
  router.SetErrorRenderer(ErrorFor);
  replica.AddRoutes(router);
  http::ServerOptions server_options;
  server_options.host = host;
  server_options.port = port;
  // A streamed response holds a worker while it waits for tokens.
  server_options.worker_threads = std::max(16, 2 * engine_options.max_batch + 8);
  server_options.render_error = ErrorFor;
  http::HttpServer server(server_options,
                          [&router](http::Request& r) { return router.Dispatch(r); });
  if (Status s = server.Start(); !s.ok()) {
    std::cerr << "error: cannot listen on " << host << ":" << port << ": " << s.message() << "\n";
    return 1;
  }
  spdlog::info("listening on {}:{}; loading {}", host, server.port(), engine_options.model_dir);
  while (!load_gate.empty() && !std::filesystem::exists(load_gate)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto engine = Engine::Load(engine_options);
  if (!engine.ok()) {
    std::cerr << "error: " << engine.status().message() << "\n";
    server.Stop(std::chrono::seconds(1));
    return 1;
  }
  spdlog::info("loaded {} ({}, {} adapters) on {}; serving as '{}'", engine_options.model_dir,
               (*engine)->config().model_type, (*engine)->adapter_names().size(),
               (*engine)->device_name(), served_name);
  if (Status s = replica.SetEngine(std::move(*engine)); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    server.Stop(std::chrono::seconds(1));
    return 1;
  }
  if (!port_file.empty()) {
    if (Status s = WritePortFile(port_file, server.port()); !s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      server.Stop(std::chrono::seconds(1));
      return 1;
    }
  }
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining", sig);
  server.Stop(std::chrono::seconds(10));
  return 0;
}
