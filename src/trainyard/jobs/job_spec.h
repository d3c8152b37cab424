// JobSpec: what a user asks to run — a command, its resources and its recovery
// policy. Written as YAML (`trainyard submit job.yaml`) or sent as the same
// structure in JSON over the API; both go through ParseJobSpec, so the rules and
// error messages are the same. Errors name the key path and, for files, the
// line: `job.yaml:12: resources.gpus_per_node must be a non-negative integer
// (got "two")`. Unknown keys are errors (a typo must not silently drop a setting).
//
// A JobSpec is a plain value; ToJson/ParseJobSpec round-trip it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/json_fwd.h"
#include "trainyard/common/status.h"

namespace trainyard::jobs {

struct JobResources {
  int nodes = 1;
  int gpus_per_node = 0;
  int cpus_per_node = 1;
  int64_t memory_bytes = 0;  // per node; 0 = no requirement
};

enum class FailureAction { kFail, kAvoidNode, kRetry };
std::string_view FailureActionName(FailureAction a);

// Size limits of a spec's fields; a spec over one is InvalidArgument naming the field and the
// limit (the whole document has a limit of 1 MiB). They keep one submit from costing the server
// unbounded memory or time.
inline constexpr size_t kMaxCommandBytes = 128 << 10;
inline constexpr size_t kMaxCommandArgs = 4096;
inline constexpr size_t kMaxEnvVars = 1024;
inline constexpr size_t kMaxEnvNameBytes = 256;
inline constexpr size_t kMaxEnvValueBytes = 64 << 10;
inline constexpr size_t kMaxEnvTotalBytes = 512 << 10;
inline constexpr size_t kMaxWorkingDirBytes = 4096;
inline constexpr size_t kMaxFailurePolicies = 64;
inline constexpr size_t kMaxRunAsBytes = 128;  // a principal's name, as identity allows
// Failure policy patterns: PCRE2 syntax, at most BoundedRegex::kMaxPatternBytes (1024) bytes.

// A regular expression (PCRE2 syntax) matched against the tail of the failed attempt's logs.
struct FailurePolicy {
  std::string pattern;
  FailureAction action = FailureAction::kFail;
};

// A batch job runs to its end and is recovered by the recovery policy; a service job is a
// replica of a serving endpoint: it runs until stopped, and when it fails it ends (serving
// health-checks it and starts its replacement itself). Service jobs are submitted by the
// server (JobService::SubmitService), never through the jobs API.
enum class JobKind { kBatch, kService };
std::string_view JobKindName(JobKind k);  // "batch", "service"

struct JobSpec {
  std::string name;
  JobKind kind = JobKind::kBatch;
  std::string endpoint;  // kService: the serving endpoint the job is a replica of
  std::string project = "default";
  std::string experiment;  // "" → the job's name
  std::string command;     // run with /bin/sh -c
  std::map<std::string, std::string> env;
  std::string working_dir;  // "" → the server's working directory
  JobResources resources;
  int processes_per_node = 0;  // 0 → gpus_per_node, or 1 without GPUs
  int priority = 0;            // higher runs first; -1000..1000
  std::string queue = "default";
  bool preemptible = false;
  int max_restarts = 3;
  int64_t restart_backoff_ms = 1000;  // first retry delay; doubles per retry
  int64_t restart_backoff_max_ms = 60000;
  int64_t hang_timeout_ms = 0;  // 0 = no hang detection
  int64_t time_limit_ms = 0;    // 0 = unlimited
  int64_t preemption_grace_ms = 30000;
  int crash_loop_limit = 3;  // consecutive failures without a new checkpoint → give up
  std::vector<FailurePolicy> failure_policies;
  // Environment variables whose values are secrets, by name (`secrets: {HF_TOKEN: hf-token}`);
  // the values are injected at launch and never stored in the spec.
  std::map<std::string, std::string> secrets;
  // Where each secret reference is ("job.yaml:12: secrets.HF_TOKEN"), for errors found at
  // submit; not serialized.
  std::map<std::string, std::string> secret_sources;
  // The service principal the job acts as ("" = its submitter): the workload's scoped token
  // is that principal's, so the catalog authorizes its reads and writes with that
  // principal's grants. Whether the submitter may use it is checked at submit and at each
  // launch (IdentityService::AuthorizeRunAs).
  std::string run_as;

  int EffectiveProcessesPerNode() const {
    if (processes_per_node > 0) return processes_per_node;
    return resources.gpus_per_node > 0 ? resources.gpus_per_node : 1;
  }
};

// Parses YAML (or JSON, which is YAML) text. `filename` prefixes errors with
// `filename:line: `; pass "" for API bodies (errors then name only the key path).
Result<JobSpec> ParseJobSpec(std::string_view text, std::string_view filename);

// Parses an already-decoded JSON object (the API's `spec` field).
Result<JobSpec> ParseJobSpecJson(const json::value& spec);

json::object JobSpecToJson(const JobSpec& spec);

// "90s", "5m", "1h30m", "250ms", "2d", or a plain number of seconds.
Result<int64_t> ParseDurationMs(std::string_view text);
std::string FormatDuration(int64_t ms);
// "512Mi", "4Gi", "2G", "1000000" (bytes).
Result<int64_t> ParseBytes(std::string_view text);

}  // namespace trainyard::jobs
