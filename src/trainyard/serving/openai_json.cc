#include "trainyard/serving/openai_json.h"

#include <cmath>

#include "trainyard/common/json.h"

namespace trainyard::serving {

namespace {

// Sets `error` from a field reader's status; the field is its `param`.
bool Fail(RequestError* error, std::string message, std::string param) {
  error->message = std::move(message);
  error->param = std::move(param);
  return false;
}

bool ParseContent(const json::value& v, const std::string& field, std::string* out,
                  RequestError* error) {
  if (v.is_string()) {
    *out = std::string(v.as_string());
    return true;
  }
  if (!v.is_array()) {
    return Fail(error, field + " must be a string or an array of text parts", field);
  }
  for (const json::value& part : v.as_array()) {
    const json::object* o = part.if_object();
    const json::value* type = o ? o->if_contains("type") : nullptr;
    const json::value* text = o ? o->if_contains("text") : nullptr;
    if (!type || !type->is_string() || type->as_string() != "text" || !text || !text->is_string()) {
      return Fail(error,
                  field +
                      " parts must be {\"type\": \"text\", \"text\": \"...\"}; only "
                      "text is supported",
                  field);
    }
    *out += std::string(text->as_string());
  }
  return true;
}

bool ParseMessages(const json::object& o, OpenAiRequest* r, RequestError* error) {
  const json::value* v = o.if_contains("messages");
  if (!v || v->is_null()) return Fail(error, "messages is required", "messages");
  if (!v->is_array() || v->as_array().empty()) {
    return Fail(error, "messages must be a non-empty array of {role, content}", "messages");
  }
  size_t i = 0;
  for (const json::value& m : v->as_array()) {
    std::string field = "messages[" + std::to_string(i++) + "]";
    const json::object* mo = m.if_object();
    if (!mo) return Fail(error, field + " must be an object {role, content}", field);
    const json::value* role = mo->if_contains("role");
    if (!role || !role->is_string()) {
      return Fail(error, field + ".role must be a string", field + ".role");
    }
    ChatMessage msg;
    msg.role = std::string(role->as_string());
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant") {
      return Fail(error, field + ".role must be system, user or assistant (got '" + msg.role + "')",
                  field + ".role");
    }
    const json::value* content = mo->if_contains("content");
    if (!content || content->is_null()) {
      return Fail(error, field + ".content is required", field + ".content");
    }
    if (!ParseContent(*content, field + ".content", &msg.content, error)) return false;
    r->messages.push_back(std::move(msg));
  }
  return true;
}

bool ParseTokenArray(const json::array& a, std::vector<int32_t>* out, RequestError* error) {
  for (const json::value& t : a) {
    auto id = AsInt64(t, "prompt token");
    if (!id.ok() || *id < 0 || *id > INT32_MAX) {
      return Fail(error,
                  "prompt must be a string or an array of token ids (non-negative "
                  "integers)",
                  "prompt");
    }
    out->push_back(static_cast<int32_t>(*id));
  }
  if (out->empty()) return Fail(error, "prompt must not be empty", "prompt");
  return true;
}

bool ParsePrompt(const json::object& o, OpenAiRequest* r, RequestError* error) {
  const json::value* v = o.if_contains("prompt");
  if (!v || v->is_null()) return Fail(error, "prompt is required", "prompt");
  if (v->is_string()) {
    r->prompt = std::string(v->as_string());
    return true;
  }
  if (!v->is_array()) {
    return Fail(error,
                "prompt must be a string, an array of token ids, or an array of one of "
                "them",
                "prompt");
  }
  const json::array& a = v->as_array();
  if (a.empty()) return Fail(error, "prompt must not be empty", "prompt");
  if (a[0].is_string() || a[0].is_array()) {
    if (a.size() != 1) {
      return Fail(error,
                  "prompt: only one prompt per request is supported (got " +
                      std::to_string(a.size()) + "); send one request per prompt",
                  "prompt");
    }
    if (a[0].is_string()) {
      r->prompt = std::string(a[0].as_string());
      return true;
    }
    return ParseTokenArray(a[0].as_array(), &r->prompt_ids, error);
  }
  return ParseTokenArray(a, &r->prompt_ids, error);
}

bool ParseStop(const json::object& o, OpenAiRequest* r, RequestError* error) {
  const json::value* v = o.if_contains("stop");
  if (!v || v->is_null()) return true;
  std::vector<const json::value*> items;
  if (v->is_array()) {
    for (const json::value& s : v->as_array()) items.push_back(&s);
  } else {
    items.push_back(v);
  }
  if (items.size() > 4) return Fail(error, "stop may hold at most 4 sequences", "stop");
  for (const json::value* s : items) {
    if (!s->is_string() || s->as_string().empty()) {
      return Fail(error, "stop must be a non-empty string or an array of them", "stop");
    }
    r->stop.emplace_back(s->as_string());
  }
  return true;
}

template <typename T>
bool Read(Result<std::optional<T>> value, std::optional<T>* out, const char* field,
          RequestError* error);

// Chat: logprobs (a boolean) and top_logprobs (0..20, only with logprobs: true); completions:
// logprobs (0..5, the alternatives per token).
bool ParseLogprobs(const json::object& o, OpenAiRequest* r, RequestError* error) {
  if (!r->chat) {
    std::optional<int64_t> k;
    if (!Read(OptionalInt64(o, "logprobs"), &k, "logprobs", error)) return false;
    if (k && (*k < 0 || *k > kMaxCompletionLogprobs)) {
      return Fail(error,
                  "logprobs must be between 0 and " + std::to_string(kMaxCompletionLogprobs) +
                      " (the most likely tokens listed per token; got " + std::to_string(*k) + ")",
                  "logprobs");
    }
    r->logprobs = k ? static_cast<int>(*k) : -1;
    return true;
  }
  std::optional<bool> on;
  if (!Read(OptionalBool(o, "logprobs"), &on, "logprobs", error)) return false;
  std::optional<int64_t> k;
  if (!Read(OptionalInt64(o, "top_logprobs"), &k, "top_logprobs", error)) return false;
  if (k && (*k < 0 || *k > kMaxChatTopLogprobs)) {
    return Fail(error,
                "top_logprobs must be between 0 and " + std::to_string(kMaxChatTopLogprobs) +
                    " (got " + std::to_string(*k) + ")",
                "top_logprobs");
  }
  if (k && !on.value_or(false)) {
    return Fail(error, "top_logprobs needs \"logprobs\": true", "top_logprobs");
  }
  r->logprobs = on.value_or(false) ? static_cast<int>(k.value_or(0)) : -1;
  return true;
}

template <typename T>
bool Read(Result<std::optional<T>> value, std::optional<T>* out, const char* field,
          RequestError* error) {
  if (!value.ok()) return Fail(error, value.status().message(), field);
  *out = *value;
  return true;
}

bool ParseSampling(const json::object& o, OpenAiRequest* r, RequestError* error) {
  if (!Read(OptionalDouble(o, "temperature"), &r->temperature, "temperature", error)) return false;
  if (r->temperature &&
      (!std::isfinite(*r->temperature) || *r->temperature < 0 || *r->temperature > 2)) {
    return Fail(error, "temperature must be between 0 and 2", "temperature");
  }
  if (!Read(OptionalDouble(o, "top_p"), &r->top_p, "top_p", error)) return false;
  if (r->top_p && (!std::isfinite(*r->top_p) || *r->top_p <= 0 || *r->top_p > 1)) {
    return Fail(error, "top_p must be greater than 0 and at most 1", "top_p");
  }
  if (!Read(OptionalInt64(o, "top_k"), &r->top_k, "top_k", error)) return false;
  if (r->top_k && *r->top_k < -1) {
    return Fail(error, "top_k must be -1 or 0 (all tokens) or positive", "top_k");
  }
  const char* max_field = "max_tokens";
  if (!Read(OptionalInt64(o, "max_tokens"), &r->max_tokens, "max_tokens", error)) return false;
  if (!r->max_tokens && r->chat) {
    max_field = "max_completion_tokens";
    if (!Read(OptionalInt64(o, max_field), &r->max_tokens, max_field, error)) return false;
  }
  if (r->max_tokens && *r->max_tokens < 1) {
    return Fail(error, std::string(max_field) + " must be at least 1", max_field);
  }
  std::optional<int64_t> n;
  if (!Read(OptionalInt64(o, "n"), &n, "n", error)) return false;
  if (n && (*n < 1 || *n > kMaxChoicesPerRequest)) {
    return Fail(error,
                "n must be between 1 and " + std::to_string(kMaxChoicesPerRequest) + " (got " +
                    std::to_string(*n) + "); for more completions send several requests",
                "n");
  }
  r->n = static_cast<int>(n.value_or(1));
  if (!ParseLogprobs(o, r, error)) return false;
  if (!Read(OptionalInt64(o, "seed"), &r->seed, "seed", error)) return false;
  std::optional<bool> flag;
  if (!Read(OptionalBool(o, "stream"), &flag, "stream", error)) return false;
  r->stream = flag.value_or(false);
  if (!Read(OptionalBool(o, "ignore_eos"), &flag, "ignore_eos", error)) return false;
  r->ignore_eos = flag.value_or(false);
  auto options = OptionalObject(o, "stream_options");
  if (!options.ok()) return Fail(error, options.status().message(), "stream_options");
  if (*options) {
    if (!Read(OptionalBool(**options, "include_usage"), &flag, "stream_options.include_usage",
              error)) {
      return false;
    }
    r->include_usage = flag.value_or(false);
  }
  return ParseStop(o, r, error);
}

json::object UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json::value NullOr(std::string_view s) {
  if (s.empty()) return nullptr;
  return json::string(s);
}

json::array Bytes(std::string_view s) {
  json::array out;
  for (char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// A choice's "logprobs": chat's {"content": [...], "refusal": null}, or completions'
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"} (the sampled token is among
// a token's top_logprobs, as in OpenAI's legacy API, even with logprobs 0).
json::value LogprobsJson(bool chat, const Choice& c) {
  if (!c.with_logprobs || c.logprobs.empty()) return nullptr;
  if (chat) {
    json::array content;
    for (const LogprobToken& t : c.logprobs) {
      json::array top;
      for (const auto& [token, logprob] : t.top) {
        top.push_back(json::object{
            {"token", SanitizeUtf8(token)}, {"logprob", logprob}, {"bytes", Bytes(token)}});
      }
      content.push_back(json::object{{"token", SanitizeUtf8(t.token)},
                                     {"logprob", t.logprob},
                                     {"bytes", Bytes(t.token)},
                                     {"top_logprobs", std::move(top)}});
    }
    return json::object{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json::array tokens, token_logprobs, top_logprobs, offsets;
  int64_t offset = c.text_offset;
  for (const LogprobToken& t : c.logprobs) {
    std::string token = SanitizeUtf8(t.token);
    tokens.push_back(json::string(token));
    token_logprobs.push_back(t.logprob);
    json::object top;
    for (const auto& [alt, logprob] : t.top) top.emplace(SanitizeUtf8(alt), logprob);
    top.emplace(token, t.logprob);
    top_logprobs.push_back(std::move(top));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(token.size());
  }
  return json::object{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_logprobs)},
                      {"top_logprobs", std::move(top_logprobs)},
                      {"text_offset", std::move(offsets)}};
}

}  // namespace

std::optional<OpenAiRequest> ParseOpenAiRequest(std::string_view body, bool chat,
                                                RequestError* error) {
  auto parsed = ParseJsonExact(body);
  if (!parsed.ok() || !parsed->is_object()) {
    Fail(
        error,
        "the request body is not a JSON object: " +
            (parsed.ok() ? std::string("got ") + DescribeJson(*parsed) : parsed.status().message()),
        "");
    return std::nullopt;
  }
  const json::object& o = parsed->as_object();
  OpenAiRequest r;
  r.chat = chat;
  auto model = OptionalString(o, "model");
  if (!model.ok() || !*model || (*model)->empty()) {
    Fail(error,
         "model is required: a string naming the model or one of its adapters (list them "
         "with GET /v1/models)",
         "model");
    return std::nullopt;
  }
  r.model = **model;
  bool ok = chat ? ParseMessages(o, &r, error) : ParsePrompt(o, &r, error);
  if (!ok || !ParseSampling(o, &r, error)) return std::nullopt;
  return r;
}

std::string EncodeError(std::string_view message, std::string_view type, std::string_view param,
                        std::string_view code) {
  json::object e{{"message", SanitizeUtf8(message)},
                 {"type", type},
                 {"param", NullOr(param)},
                 {"code", NullOr(code)}};
  return json::serialize(json::object{{"error", std::move(e)}});
}

std::string EncodeCompletion(bool chat, std::string_view id, int64_t created,
                             std::string_view model, const std::vector<Choice>& choices,
                             const Usage& usage) {
  json::array out_choices;
  for (const Choice& c : choices) {
    json::object choice{{"index", c.index}};
    if (chat) {
      choice["message"] = json::object{{"role", "assistant"}, {"content", SanitizeUtf8(c.text)}};
    } else {
      choice["text"] = SanitizeUtf8(c.text);
    }
    choice["logprobs"] = LogprobsJson(chat, c);
    choice["finish_reason"] = NullOr(c.finish_reason);
    out_choices.push_back(std::move(choice));
  }
  json::object out{{"id", id},
                   {"object", chat ? "chat.completion" : "text_completion"},
                   {"created", created},
                   {"model", model},
                   {"choices", std::move(out_choices)},
                   {"usage", UsageJson(usage)}};
  return json::serialize(out);
}

std::string EncodeChunk(bool chat, std::string_view id, int64_t created, std::string_view model,
                        const Choice* c, bool role_chunk, const Usage* usage) {
  json::array choices;
  if (c) {
    json::object choice{{"index", c->index}};
    if (chat) {
      json::object delta;
      if (role_chunk) {
        delta["role"] = "assistant";
        delta["content"] = "";
      } else if (!c->text.empty() || c->finish_reason.empty()) {
        delta["content"] = SanitizeUtf8(c->text);
      }
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = SanitizeUtf8(c->text);
    }
    choice["logprobs"] = LogprobsJson(chat, *c);
    choice["finish_reason"] = NullOr(c->finish_reason);
    choices.push_back(std::move(choice));
  }
  json::object out{{"id", id},
                   {"object", chat ? "chat.completion.chunk" : "text_completion"},
                   {"created", created},
                   {"model", model},
                   {"choices", std::move(choices)}};
  if (usage) out["usage"] = UsageJson(*usage);
  return json::serialize(out);
}

std::string EncodeModelList(const std::vector<ModelEntry>& models, int64_t created,
                            std::string_view owned_by) {
  json::array data;
  for (const ModelEntry& m : models) {
    json::object o{{"id", m.id}, {"object", "model"}, {"created", created}, {"owned_by", owned_by}};
    if (!m.parent.empty()) o["parent"] = m.parent;
    data.push_back(std::move(o));
  }
  return json::serialize(json::object{{"object", "list"}, {"data", std::move(data)}});
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; ok && k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
               (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))) {
      ok = false;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace trainyard::serving
