#include "trainyard/jobs/job_spec.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "trainyard/common/json.h"
#include "trainyard/common/regex.h"
#include "trainyard/common/strings.h"
#include "trainyard/common/yaml_reader.h"

namespace trainyard::jobs {
namespace {

constexpr int64_t kMaxDurationMs = int64_t{366} * 24 * 3600 * 1000;  // a year
// Names (job, project, queue, secret references): short enough for tables and paths.
constexpr size_t kMaxNameBytes = 128;
// An experiment name (as tracking allows).
constexpr size_t kMaxExperimentBytes = 500;
// Upper bounds of the spec's integers: far beyond any real job, low enough that arithmetic on
// them cannot overflow.
constexpr int64_t kMaxProcessesPerNode = 1024;
constexpr int64_t kMaxPriority = 1000;  // priorities are -kMaxPriority..kMaxPriority
constexpr int64_t kMaxRestartsLimit = 1000;

// The shared YAML field reader, plus the job spec's durations.
class SpecReader : public YamlReader {
 public:
  using YamlReader::YamlReader;

  Result<int64_t> Duration(const YAML::Node& n, const std::string& path) const {
    if (n.IsScalar()) {
      auto ms = ParseDurationMs(n.Scalar());
      if (ms.ok()) return *ms;
    }
    return Error(
        n, path,
        "must be a duration such as 30s, 10m, 2h or a number of seconds (got " + Describe(n) + ")");
  }
};

bool IsAsciiAlnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// [A-Za-z0-9][A-Za-z0-9._-]{0,127}, as a loop: no regex on user input.
bool IsValidName(std::string_view v) {
  if (v.empty() || v.size() > kMaxNameBytes || !IsAsciiAlnum(v[0])) return false;
  for (char c : v) {
    if (!IsAsciiAlnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// [A-Za-z_][A-Za-z0-9_]*
bool IsEnvName(std::string_view v) {
  if (v.empty() || (v[0] >= '0' && v[0] <= '9')) return false;
  for (char c : v) {
    if (!IsAsciiAlnum(c) && c != '_') return false;
  }
  return true;
}

Status ValidName(const SpecReader& r, const YAML::Node& n, const std::string& path,
                 const std::string& v) {
  if (!IsValidName(v)) {
    return r.Error(n, path,
                   "must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or "
                   "digit (got \"" +
                       Abbreviate(v, 140) + "\")");
  }
  return Status::Ok();
}

Status MaxBytes(const SpecReader& r, const YAML::Node& n, const std::string& path,
                std::string_view v, size_t limit) {
  if (v.size() <= limit) return Status::Ok();
  return r.Error(
      n, path,
      "must be at most " + std::to_string(limit) + " bytes (got " + std::to_string(v.size()) + ")");
}

Status ReadResources(const SpecReader& r, const YAML::Node& n, JobResources& out) {
  if (!n.IsMap()) return r.Error(n, "resources", "must be a mapping");
  TY_RETURN_IF_ERROR(
      r.OnlyKeys(n, "resources", {"nodes", "gpus_per_node", "cpus_per_node", "memory"}));
  if (auto v = n["nodes"]; v) {
    TY_ASSIGN_OR_RETURN(int64_t x,
                        r.Integer(v, "resources.nodes", 1, 100000, "an integer from 1 to 100000"));
    out.nodes = static_cast<int>(x);
  }
  if (auto v = n["gpus_per_node"]; v) {
    TY_ASSIGN_OR_RETURN(int64_t x, r.Integer(v, "resources.gpus_per_node", 0, 1024,
                                             "a non-negative integer (at most 1024)"));
    out.gpus_per_node = static_cast<int>(x);
  }
  if (auto v = n["cpus_per_node"]; v) {
    TY_ASSIGN_OR_RETURN(
        int64_t x, r.Integer(v, "resources.cpus_per_node", 0, 100000, "a non-negative integer"));
    out.cpus_per_node = static_cast<int>(x);
  }
  if (auto v = n["memory"]; v) {
    Result<int64_t> bytes =
        v.IsScalar() ? ParseBytes(v.Scalar()) : Result<int64_t>(Status::InvalidArgument(""));
    if (!bytes.ok()) {
      return r.Error(v, "resources.memory",
                     "must be a size such as 512Mi, 16Gi or a number of bytes (got " +
                         SpecReader::Describe(v) + ")");
    }
    out.memory_bytes = *bytes;
  }
  return Status::Ok();
}

Status ReadFailurePolicies(const SpecReader& r, const YAML::Node& n,
                           std::vector<FailurePolicy>& out) {
  if (!n.IsSequence()) return r.Error(n, "failure_policies", "must be a list");
  if (n.size() > kMaxFailurePolicies) {
    return r.Error(n, "failure_policies",
                   "must have at most " + std::to_string(kMaxFailurePolicies) + " entries (got " +
                       std::to_string(n.size()) + ")");
  }
  for (size_t i = 0; i < n.size(); ++i) {
    std::string path = "failure_policies[" + std::to_string(i) + "]";
    const YAML::Node item = n[i];
    if (!item.IsMap()) return r.Error(item, path, "must be a mapping with pattern and action");
    TY_RETURN_IF_ERROR(r.OnlyKeys(item, path, {"pattern", "action"}));
    FailurePolicy p;
    if (!item["pattern"]) return r.Error(item, path + ".pattern", "is required");
    TY_ASSIGN_OR_RETURN(p.pattern, r.String(item["pattern"], path + ".pattern"));
    if (auto compiled = BoundedRegex::Compile(p.pattern, path + ".pattern"); !compiled.ok()) {
      // The message names the field already; Error adds the file and line.
      std::string why = compiled.status().message();
      return r.Error(item["pattern"], path + ".pattern", why.substr(path.size() + 9));
    }
    std::string action = "fail";
    if (item["action"]) {
      TY_ASSIGN_OR_RETURN(action, r.String(item["action"], path + ".action"));
    }
    if (action == "fail") {
      p.action = FailureAction::kFail;
    } else if (action == "avoid_node") {
      p.action = FailureAction::kAvoidNode;
    } else if (action == "retry") {
      p.action = FailureAction::kRetry;
    } else {
      return r.Error(item["action"], path + ".action",
                     "must be fail, avoid_node or retry (got \"" + action + "\")");
    }
    out.push_back(std::move(p));
  }
  return Status::Ok();
}

bool EnvVarName(std::string_view s) {
  if (s.empty() || s.size() > kMaxEnvNameBytes || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// `secrets: {ENV_VAR: secret-name}`.
Status ReadSecrets(const SpecReader& r, const YAML::Node& n, JobSpec& spec) {
  if (!n.IsMap()) {
    return r.Error(n, "secrets",
                   "must be a mapping of environment variable names to secret names, e.g. "
                   "{HF_TOKEN: hf-token}");
  }
  for (const auto& kv : n) {
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (!EnvVarName(key)) {
      return r.Error(kv.first, "secrets",
                     "keys must be environment variable names (got \"" + Abbreviate(key) + "\")");
    }
    if (spec.env.count(key)) {
      return r.Error(kv.first, "secrets." + key,
                     "is also set in env; set a variable in one of them");
    }
    std::string path = "secrets." + key;
    TY_ASSIGN_OR_RETURN(std::string name, r.String(kv.second, path));
    TY_RETURN_IF_ERROR(ValidName(r, kv.second, path, name));
    spec.secrets[key] = name;
    std::string where = r.Error(kv.second, path, "").message();
    spec.secret_sources[key] = where.substr(0, where.size() - 1);
  }
  return Status::Ok();
}

// A principal's name as identity allows it: 1-128 of [A-Za-z0-9_.@-].
bool IsPrincipalName(std::string_view v) {
  if (v.empty() || v.size() > kMaxRunAsBytes) return false;
  for (char c : v) {
    if (!IsAsciiAlnum(c) && c != '_' && c != '-' && c != '.' && c != '@') return false;
  }
  return true;
}

// name, project, experiment, run_as.
Status ReadNames(const SpecReader& r, const YAML::Node& root, JobSpec& spec) {
  if (!root["name"]) return r.Error(root, "name", "is required");
  TY_ASSIGN_OR_RETURN(spec.name, r.String(root["name"], "name"));
  TY_RETURN_IF_ERROR(MaxBytes(r, root["name"], "name", spec.name, kMaxNameBytes));
  TY_RETURN_IF_ERROR(ValidName(r, root["name"], "name", spec.name));
  if (auto v = root["project"]; v) {
    TY_ASSIGN_OR_RETURN(spec.project, r.String(v, "project"));
    TY_RETURN_IF_ERROR(MaxBytes(r, v, "project", spec.project, kMaxNameBytes));
    TY_RETURN_IF_ERROR(ValidName(r, v, "project", spec.project));
  }
  if (auto v = root["experiment"]; v) {
    TY_ASSIGN_OR_RETURN(spec.experiment, r.String(v, "experiment"));
    if (spec.experiment.empty() || spec.experiment.size() > kMaxExperimentBytes) {
      return r.Error(v, "experiment",
                     "must be a non-empty name of at most " + std::to_string(kMaxExperimentBytes) +
                         " characters");
    }
  }
  if (auto v = root["run_as"]; v) {
    TY_ASSIGN_OR_RETURN(spec.run_as, r.String(v, "run_as"));
    TY_RETURN_IF_ERROR(MaxBytes(r, v, "run_as", spec.run_as, kMaxRunAsBytes));
    if (!IsPrincipalName(spec.run_as)) {
      return r.Error(v, "run_as",
                     "must name a service principal: 1-128 letters, digits, '_', '-', '.' or "
                     "'@' (got \"" +
                         Abbreviate(spec.run_as, 140) + "\")");
    }
  }
  return Status::Ok();
}

// `command`: a string for /bin/sh -c, or a list (an argv, each element quoted for the shell).
Status ReadCommand(const SpecReader& r, const YAML::Node& root, JobSpec& spec) {
  if (!root["command"]) return r.Error(root, "command", "is required");
  const YAML::Node c = root["command"];
  if (!c.IsSequence()) {
    TY_ASSIGN_OR_RETURN(spec.command, r.String(c, "command"));
    if (spec.command.size() > kMaxCommandBytes) {
      return r.Error(c, "command",
                     "must be at most " + std::to_string(kMaxCommandBytes) + " bytes (got " +
                         std::to_string(spec.command.size()) +
                         "); put a long script in a file and run that");
    }
    if (spec.command.find_first_not_of(" \t\n") == std::string::npos) {
      return r.Error(c, "command", "must not be empty");
    }
    return Status::Ok();
  }
  if (c.size() == 0) return r.Error(c, "command", "must not be empty");
  if (c.size() > kMaxCommandArgs) {
    return r.Error(c, "command",
                   "must have at most " + std::to_string(kMaxCommandArgs) + " arguments (got " +
                       std::to_string(c.size()) + ")");
  }
  for (size_t i = 0; i < c.size(); ++i) {
    TY_ASSIGN_OR_RETURN(std::string arg, r.String(c[i], "command[" + std::to_string(i) + "]"));
    std::string quoted = "'";
    for (char ch : arg) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    quoted += "'";
    spec.command += (i ? " " : "") + quoted;
    if (spec.command.size() > kMaxCommandBytes) {
      return r.Error(c, "command",
                     "must be at most " + std::to_string(kMaxCommandBytes) +
                         " bytes once quoted for the shell; put a long script in a file and "
                         "run that");
    }
  }
  return Status::Ok();
}

// `env: {NAME: value}`.
Status ReadEnv(const SpecReader& r, const YAML::Node& v, JobSpec& spec) {
  if (!v.IsMap()) return r.Error(v, "env", "must be a mapping of variable names to values");
  if (v.size() > kMaxEnvVars) {
    return r.Error(v, "env",
                   "must have at most " + std::to_string(kMaxEnvVars) + " variables (got " +
                       std::to_string(v.size()) + ")");
  }
  size_t env_bytes = 0;
  for (const auto& kv : v) {
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (key.size() > kMaxEnvNameBytes) {
      return r.Error(kv.first, "env",
                     "keys must be at most " + std::to_string(kMaxEnvNameBytes) +
                         " bytes (got one of " + std::to_string(key.size()) + ": \"" +
                         Abbreviate(key, 40) + "\")");
    }
    if (!IsEnvName(key)) {
      return r.Error(
          kv.first, "env",
          "keys must be environment variable names (got \"" + Abbreviate(key, 100) + "\")");
    }
    if (!kv.second.IsScalar()) {
      return r.Error(kv.second, "env." + key, "must be a string, number or boolean");
    }
    TY_RETURN_IF_ERROR(MaxBytes(r, kv.second, "env." + key, kv.second.Scalar(), kMaxEnvValueBytes));
    env_bytes += key.size() + kv.second.Scalar().size();
    if (env_bytes > kMaxEnvTotalBytes) {
      return r.Error(
          v, "env",
          "must total at most " + std::to_string(kMaxEnvTotalBytes) + " bytes of names and values");
    }
    spec.env[key] = kv.second.Scalar();
  }
  return Status::Ok();
}

// An integer field in [lo, hi], with the usual message.
Status ReadInt(const SpecReader& r, const YAML::Node& root, const std::string& key, int64_t lo,
               int64_t hi, int& out) {
  auto v = root[key];
  if (!v) return Status::Ok();
  TY_ASSIGN_OR_RETURN(
      int64_t x, r.Integer(v, key, lo, hi,
                           "an integer from " + std::to_string(lo) + " to " + std::to_string(hi)));
  out = static_cast<int>(x);
  return Status::Ok();
}

// A duration field.
Status ReadDuration(const SpecReader& r, const YAML::Node& root, const std::string& key,
                    int64_t& out_ms) {
  auto v = root[key];
  if (!v) return Status::Ok();
  TY_ASSIGN_OR_RETURN(out_ms, r.Duration(v, key));
  return Status::Ok();
}

// working_dir, resources, processes_per_node, priority, queue, preemptible.
Status ReadPlacement(const SpecReader& r, const YAML::Node& root, JobSpec& spec) {
  if (auto v = root["working_dir"]; v) {
    TY_ASSIGN_OR_RETURN(spec.working_dir, r.String(v, "working_dir"));
    TY_RETURN_IF_ERROR(MaxBytes(r, v, "working_dir", spec.working_dir, kMaxWorkingDirBytes));
    if (spec.working_dir.find('\0') != std::string::npos) {
      return r.Error(v, "working_dir", "must not contain a NUL byte");
    }
  }
  if (auto v = root["resources"]; v) TY_RETURN_IF_ERROR(ReadResources(r, v, spec.resources));
  TY_RETURN_IF_ERROR(
      ReadInt(r, root, "processes_per_node", 1, kMaxProcessesPerNode, spec.processes_per_node));
  TY_RETURN_IF_ERROR(ReadInt(r, root, "priority", -kMaxPriority, kMaxPriority, spec.priority));
  if (auto v = root["queue"]; v) {
    TY_ASSIGN_OR_RETURN(spec.queue, r.String(v, "queue"));
    TY_RETURN_IF_ERROR(MaxBytes(r, v, "queue", spec.queue, kMaxNameBytes));
    TY_RETURN_IF_ERROR(ValidName(r, v, "queue", spec.queue));
  }
  if (auto v = root["preemptible"]; v) {
    TY_ASSIGN_OR_RETURN(spec.preemptible, r.Bool(v, "preemptible"));
  }
  return Status::Ok();
}

// max_restarts, crash_loop_limit, backoff, hang_timeout, time_limit, preemption_grace,
// failure_policies.
Status ReadRecovery(const SpecReader& r, const YAML::Node& root, JobSpec& spec) {
  TY_RETURN_IF_ERROR(ReadInt(r, root, "max_restarts", 0, kMaxRestartsLimit, spec.max_restarts));
  TY_RETURN_IF_ERROR(
      ReadInt(r, root, "crash_loop_limit", 1, kMaxRestartsLimit, spec.crash_loop_limit));
  TY_RETURN_IF_ERROR(ReadDuration(r, root, "restart_backoff", spec.restart_backoff_ms));
  TY_RETURN_IF_ERROR(ReadDuration(r, root, "restart_backoff_max", spec.restart_backoff_max_ms));
  if (spec.restart_backoff_max_ms < spec.restart_backoff_ms) {
    spec.restart_backoff_max_ms = spec.restart_backoff_ms;
  }
  TY_RETURN_IF_ERROR(ReadDuration(r, root, "hang_timeout", spec.hang_timeout_ms));
  TY_RETURN_IF_ERROR(ReadDuration(r, root, "time_limit", spec.time_limit_ms));
  TY_RETURN_IF_ERROR(ReadDuration(r, root, "preemption_grace", spec.preemption_grace_ms));
  if (auto v = root["failure_policies"]; v) {
    TY_RETURN_IF_ERROR(ReadFailurePolicies(r, v, spec.failure_policies));
  }
  return Status::Ok();
}

// `kind` (batch or service) and, for a service, the `endpoint` it is a replica of.
Status ReadKind(const SpecReader& r, const YAML::Node& root, JobSpec& spec) {
  if (auto v = root["kind"]; v) {
    TY_ASSIGN_OR_RETURN(std::string kind, r.String(v, "kind"));
    if (kind == "batch") {
      spec.kind = JobKind::kBatch;
    } else if (kind == "service") {
      spec.kind = JobKind::kService;
    } else {
      return r.Error(v, "kind", "must be batch or service (got \"" + Abbreviate(kind, 40) + "\")");
    }
  }
  if (auto v = root["endpoint"]; v) {
    TY_ASSIGN_OR_RETURN(spec.endpoint, r.String(v, "endpoint"));
    TY_RETURN_IF_ERROR(MaxBytes(r, v, "endpoint", spec.endpoint, kMaxNameBytes));
    TY_RETURN_IF_ERROR(ValidName(r, v, "endpoint", spec.endpoint));
    if (spec.kind != JobKind::kService) {
      return r.Error(v, "endpoint", "is only for jobs of kind service (serving replicas)");
    }
  }
  if (spec.kind == JobKind::kService && spec.endpoint.empty()) {
    return r.Error(root, "endpoint", "is required for a job of kind service");
  }
  return Status::Ok();
}

Result<JobSpec> ParseRoot(const SpecReader& r, const YAML::Node& root) {
  if (!root.IsMap()) return r.Error(root, "the job spec", "must be a mapping of keys to values");
  TY_RETURN_IF_ERROR(r.OnlyKeys(root, "",
                                {"name",
                                 "project",
                                 "experiment",
                                 "command",
                                 "env",
                                 "working_dir",
                                 "resources",
                                 "processes_per_node",
                                 "priority",
                                 "queue",
                                 "preemptible",
                                 "max_restarts",
                                 "restart_backoff",
                                 "restart_backoff_max",
                                 "hang_timeout",
                                 "time_limit",
                                 "preemption_grace",
                                 "crash_loop_limit",
                                 "failure_policies",
                                 "secrets",
                                 "run_as",
                                 "kind",
                                 "endpoint"}));
  JobSpec spec;
  TY_RETURN_IF_ERROR(ReadNames(r, root, spec));
  TY_RETURN_IF_ERROR(ReadCommand(r, root, spec));
  if (auto v = root["env"]; v) TY_RETURN_IF_ERROR(ReadEnv(r, v, spec));
  TY_RETURN_IF_ERROR(ReadPlacement(r, root, spec));
  TY_RETURN_IF_ERROR(ReadRecovery(r, root, spec));
  if (auto v = root["secrets"]; v) TY_RETURN_IF_ERROR(ReadSecrets(r, v, spec));
  TY_RETURN_IF_ERROR(ReadKind(r, root, spec));
  return spec;
}

}  // namespace

std::string_view JobKindName(JobKind k) { return k == JobKind::kService ? "service" : "batch"; }

std::string_view FailureActionName(FailureAction a) {
  switch (a) {
    case FailureAction::kFail:
      return "fail";
    case FailureAction::kAvoidNode:
      return "avoid_node";
    case FailureAction::kRetry:
      return "retry";
  }
  return "fail";
}

Result<JobSpec> ParseJobSpec(std::string_view text, std::string_view filename) {
  SpecReader reader(filename);
  std::string prefix = filename.empty() ? "" : std::string(filename) + ": ";
  TY_ASSIGN_OR_RETURN(YAML::Node root, LoadYamlDocument(text, filename, "the job spec"));
  try {
    return ParseRoot(reader, root);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(prefix + "invalid job spec: " + e.msg);
  }
}

Result<JobSpec> ParseJobSpecJson(const json::value& spec) {
  if (!spec.is_object()) {
    return Status::InvalidArgument("spec must be an object (got " + DescribeJson(spec) + ")");
  }
  // Sizes first, naming the field: YAML refuses keys over 1024 characters with a vaguer error,
  // and the whole document has a limit of its own.
  const json::object& o = spec.as_object();
  if (const json::value* c = o.if_contains("command");
      c && c->is_string() && c->as_string().size() > kMaxCommandBytes) {
    return Status::InvalidArgument("command must be at most " + std::to_string(kMaxCommandBytes) +
                                   " bytes (got " + std::to_string(c->as_string().size()) +
                                   "); put a long script in a file and run that");
  }
  if (const json::value* env = o.if_contains("env"); env && env->is_object()) {
    for (const auto& kv : env->as_object()) {
      if (kv.key().size() > kMaxEnvNameBytes) {
        return Status::InvalidArgument(
            "env keys must be at most " + std::to_string(kMaxEnvNameBytes) + " bytes (got one of " +
            std::to_string(kv.key().size()) + ": \"" + Abbreviate(kv.key(), 40) + "\")");
      }
    }
  }
  return ParseJobSpec(json::serialize(spec), "");
}

json::object JobSpecToJson(const JobSpec& s) {
  json::object o;
  o["name"] = s.name;
  o["project"] = s.project;
  if (!s.experiment.empty()) o["experiment"] = s.experiment;
  if (!s.run_as.empty()) o["run_as"] = s.run_as;
  if (s.kind != JobKind::kBatch) {
    o["kind"] = std::string(JobKindName(s.kind));
    o["endpoint"] = s.endpoint;
  }
  o["command"] = s.command;
  if (!s.env.empty()) {
    json::object env;
    for (const auto& [k, v] : s.env) env[k] = v;
    o["env"] = std::move(env);
  }
  if (!s.working_dir.empty()) o["working_dir"] = s.working_dir;
  json::object res;
  res["nodes"] = s.resources.nodes;
  res["gpus_per_node"] = s.resources.gpus_per_node;
  res["cpus_per_node"] = s.resources.cpus_per_node;
  if (s.resources.memory_bytes > 0) res["memory"] = std::to_string(s.resources.memory_bytes);
  o["resources"] = std::move(res);
  if (s.processes_per_node > 0) o["processes_per_node"] = s.processes_per_node;
  o["priority"] = s.priority;
  o["queue"] = s.queue;
  o["preemptible"] = s.preemptible;
  o["max_restarts"] = s.max_restarts;
  o["restart_backoff"] = FormatDuration(s.restart_backoff_ms);
  o["restart_backoff_max"] = FormatDuration(s.restart_backoff_max_ms);
  if (s.hang_timeout_ms > 0) o["hang_timeout"] = FormatDuration(s.hang_timeout_ms);
  if (s.time_limit_ms > 0) o["time_limit"] = FormatDuration(s.time_limit_ms);
  o["preemption_grace"] = FormatDuration(s.preemption_grace_ms);
  o["crash_loop_limit"] = s.crash_loop_limit;
  if (!s.failure_policies.empty()) {
    json::array policies;
    for (const auto& p : s.failure_policies) {
      policies.emplace_back(
          json::object{{"pattern", p.pattern}, {"action", FailureActionName(p.action)}});
    }
    o["failure_policies"] = std::move(policies);
  }
  if (!s.secrets.empty()) {
    json::object secrets;
    for (const auto& [k, v] : s.secrets) secrets[k] = v;
    o["secrets"] = std::move(secrets);
  }
  return o;
}

Result<int64_t> ParseDurationMs(std::string_view text) {
  auto bad = [&] { return Status::InvalidArgument("bad duration \"" + std::string(text) + "\""); };
  if (text.empty() || text.size() > 32) return bad();
  // A plain number is seconds (fractions allowed).
  {
    double secs = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), secs);
    if (ec == std::errc() && end == text.data() + text.size()) {
      if (!std::isfinite(secs) || secs < 0 || secs * 1000 > static_cast<double>(kMaxDurationMs)) {
        return bad();
      }
      return static_cast<int64_t>(std::llround(secs * 1000));
    }
  }
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    int64_t n = 0;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), n);
    if (ec != std::errc() || n < 0) return bad();
    i = end - text.data();
    size_t u = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(u, i - u);
    int64_t scale = 0;
    if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60 * 1000;
    } else if (unit == "h") {
      scale = 3600 * 1000;
    } else if (unit == "d") {
      scale = 24 * 3600 * 1000;
    } else {
      return bad();
    }
    if (n > kMaxDurationMs / scale) return bad();
    total += n * scale;
    if (total > kMaxDurationMs) return bad();
  }
  return total;
}

std::string FormatDuration(int64_t ms) {
  if (ms < 0) ms = 0;
  if (ms % 1000 != 0 || ms == 0) return std::to_string(ms) + "ms";
  int64_t s = ms / 1000;
  std::string out;
  if (s >= 86400 && s % 86400 == 0) return std::to_string(s / 86400) + "d";
  if (s >= 3600) {
    out += std::to_string(s / 3600) + "h";
    s %= 3600;
  }
  if (s >= 60) {
    out += std::to_string(s / 60) + "m";
    s %= 60;
  }
  if (s > 0) out += std::to_string(s) + "s";
  return out;
}

Result<int64_t> ParseBytes(std::string_view text) {
  auto bad = [&] { return Status::InvalidArgument("bad size \"" + std::string(text) + "\""); };
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || n < 0) return bad();
  std::string_view unit = text.substr(end - text.data());
  int64_t scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "k" || unit == "KB") {
    scale = 1000;
  } else if (unit == "M" || unit == "MB") {
    scale = 1000 * 1000;
  } else if (unit == "G" || unit == "GB") {
    scale = 1000 * 1000 * 1000;
  } else if (unit == "T" || unit == "TB") {
    scale = int64_t{1000} * 1000 * 1000 * 1000;
  } else if (unit == "Ki" || unit == "KiB") {
    scale = 1024;
  } else if (unit == "Mi" || unit == "MiB") {
    scale = 1024 * 1024;
  } else if (unit == "Gi" || unit == "GiB") {
    scale = 1024 * 1024 * 1024;
  } else if (unit == "Ti" || unit == "TiB") {
    scale = int64_t{1024} * 1024 * 1024 * 1024;
  } else {
    return bad();
  }
  if (n > std::numeric_limits<int64_t>::max() / scale / 1024) return bad();
  return n * scale;
}

}  // namespace trainyard::jobs
