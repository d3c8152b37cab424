#include "trainyard/jobs/job_spec.h"

#include <gtest/gtest.h>

#include "trainyard/common/json.h"

namespace trainyard::jobs {
namespace {

TEST(JobSpecTest, ParsesAFullSpec) {
  auto spec = ParseJobSpec(R"yaml(
name: finetune-intents
project: support
experiment: support-intents
command: python train.py --lr 3e-4
env:
  SEED: 7
  MODE: fast
working_dir: /tmp
resources:
  nodes: 2
  gpus_per_node: 4
  cpus_per_node: 16
  memory: 64Gi
processes_per_node: 4
priority: 10
queue: research
preemptible: true
max_restarts: 5
restart_backoff: 2s
restart_backoff_max: 1m
hang_timeout: 10m
time_limit: 1h30m
preemption_grace: 45s
crash_loop_limit: 4
failure_policies:
  - pattern: "CUDA out of memory"
    action: fail
  - pattern: "NCCL (error|timeout)"
    action: avoid_node
)yaml",
                           "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "finetune-intents");
  EXPECT_EQ(spec->project, "support");
  EXPECT_EQ(spec->env.at("SEED"), "7");
  EXPECT_EQ(spec->resources.nodes, 2);
  EXPECT_EQ(spec->resources.gpus_per_node, 4);
  EXPECT_EQ(spec->resources.memory_bytes, int64_t{64} << 30);
  EXPECT_EQ(spec->priority, 10);
  EXPECT_TRUE(spec->preemptible);
  EXPECT_EQ(spec->restart_backoff_ms, 2000);
  EXPECT_EQ(spec->restart_backoff_max_ms, 60000);
  EXPECT_EQ(spec->hang_timeout_ms, 600000);
  EXPECT_EQ(spec->time_limit_ms, 5400000);
  EXPECT_EQ(spec->crash_loop_limit, 4);
  ASSERT_EQ(spec->failure_policies.size(), 2u);
  EXPECT_EQ(spec->failure_policies[1].action, FailureAction::kAvoidNode);

  // The JSON form round-trips.
  auto again = ParseJobSpecJson(JobSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(json::serialize(JobSpecToJson(*again)), json::serialize(JobSpecToJson(*spec)));
}

TEST(JobSpecTest, DefaultsAndArgvCommand) {
  auto spec = ParseJobSpec("name: a\ncommand: [python, -c, \"print('hi')\"]\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->command, "'python' '-c' 'print('\\''hi'\\'')'");
  EXPECT_EQ(spec->project, "default");
  EXPECT_EQ(spec->EffectiveProcessesPerNode(), 1);
  EXPECT_EQ(spec->max_restarts, 3);
}

TEST(JobSpecTest, SecretsMapVariablesToSecretNamesWithTheirLines) {
  auto spec = ParseJobSpec("name: a\ncommand: x\nsecrets:\n  HF_TOKEN: hf-token\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->secrets, (std::map<std::string, std::string>{{"HF_TOKEN", "hf-token"}}));
  EXPECT_EQ(spec->secret_sources.at("HF_TOKEN"), "job.yaml:4: secrets.HF_TOKEN");
  EXPECT_TRUE(spec->env.empty());
  json::object o = JobSpecToJson(*spec);
  EXPECT_EQ(json::serialize(o.at("secrets")), R"({"HF_TOKEN":"hf-token"})");
  auto again = ParseJobSpecJson(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->secrets, spec->secrets);

  auto bad = ParseJobSpec("name: a\ncommand: x\nsecrets:\n  1X: s\n", "job.yaml");
  EXPECT_EQ(bad.status().message(),
            "job.yaml:4: secrets keys must be environment variable names (got \"1X\")");
  bad = ParseJobSpec("name: a\ncommand: x\nsecrets:\n  X: \"bad name\"\n", "job.yaml");
  EXPECT_NE(bad.status().message().find("job.yaml:4: secrets.X must be"), std::string::npos);
  bad = ParseJobSpec("name: a\ncommand: x\nenv: {X: \"1\"}\nsecrets: {X: s}\n", "job.yaml");
  EXPECT_NE(bad.status().message().find("secrets.X is also set in env"), std::string::npos);
  bad = ParseJobSpec("name: a\ncommand: x\nsecrets: [s]\n", "job.yaml");
  EXPECT_NE(bad.status().message().find("job.yaml:3: secrets must be a mapping"),
            std::string::npos);
}

TEST(JobSpecTest, RunAsNamesAServicePrincipalWithItsLine) {
  auto spec = ParseJobSpec("name: a\ncommand: x\nrun_as: etl-bot@team.x\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->run_as, "etl-bot@team.x");
  json::object o = JobSpecToJson(*spec);
  EXPECT_EQ(o.at("run_as").as_string(), "etl-bot@team.x");
  auto again = ParseJobSpecJson(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->run_as, "etl-bot@team.x");
  // Unset: the submitter, and the JSON form leaves it out.
  auto plain = ParseJobSpec("name: a\ncommand: x\n", "job.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->run_as, "");
  EXPECT_FALSE(JobSpecToJson(*plain).contains("run_as"));

  auto bad = ParseJobSpec("name: a\ncommand: x\nrun_as: \"bot; rm -rf /\"\n", "job.yaml");
  EXPECT_EQ(bad.status().message().rfind("job.yaml:3: run_as must name a service principal", 0), 0u)
      << bad.status().message();
  bad = ParseJobSpec("name: a\ncommand: x\nrun_as: \"\"\n", "job.yaml");
  EXPECT_EQ(bad.status().message().rfind("job.yaml:3: run_as must name a service principal", 0), 0u)
      << bad.status().message();
  bad = ParseJobSpec("name: a\ncommand: x\nrun_as: [a, b]\n", "job.yaml");
  EXPECT_EQ(bad.status().message().rfind("job.yaml:3: run_as must be", 0), 0u)
      << bad.status().message();
  bad = ParseJobSpecJson(json::object{{"name", "a"}, {"command", "x"}, {"run_as", json::object{}}});
  EXPECT_NE(bad.status().message().find("run_as"), std::string::npos) << bad.status().message();
  bad = ParseJobSpecJson(
      json::object{{"name", "a"}, {"command", "x"}, {"run_as", std::string(300, 'b')}});
  EXPECT_NE(bad.status().message().find("run_as must be at most 128 bytes"), std::string::npos)
      << bad.status().message();
}

TEST(JobSpecTest, ErrorsGiveFileLineAndKeyPath) {
  auto spec = ParseJobSpec("name: a\ncommand: x\nresources:\n  gpus_per_node: two\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            "job.yaml:4: resources.gpus_per_node must be a non-negative integer (at most 1024) "
            "(got two)");

  spec = ParseJobSpec("name: a\ncommand: x\nresources:\n  gpu: 2\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("job.yaml:4: resources.gpu is not a known key"),
            std::string::npos)
      << spec.status().message();

  spec = ParseJobSpec("name: a\ncommand: x\npriorty: 3\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("job.yaml:3: priorty is not a known key"),
            std::string::npos);

  spec = ParseJobSpec("name: a\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("command is required"), std::string::npos);

  spec = ParseJobSpec("name: a\ncommand: x\ntime_limit: forever\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("job.yaml:3: time_limit must be a duration"),
            std::string::npos);

  spec = ParseJobSpec("name: a\ncommand: [x\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("not valid YAML"), std::string::npos);

  spec = ParseJobSpec("name: a\ncommand: x\nfailure_policies:\n  - pattern: \"(\"\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("failure_policies[0].pattern"), std::string::npos);
}

TEST(JobSpecTest, JsonRejectsWrongTypesNamingTheField) {
  auto spec = ParseJobSpecJson(
      json::parse(R"({"name": "a", "command": "x", "resources": {"nodes": "2"}})"));
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            "resources.nodes must be an integer from 1 to 100000 (got \"2\")");
  spec = ParseJobSpecJson(json::parse(R"({"name": "a", "command": "x", "priority": 1e9})"));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("priority must be an integer"), std::string::npos);
  spec = ParseJobSpecJson(json::parse(R"({"name": "../etc", "command": "x"})"));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("name must be"), std::string::npos);
  spec = ParseJobSpecJson(json::parse(R"(["a"])"));
  ASSERT_FALSE(spec.ok());
}

// Issue 13: a 50,000-character env key crashed the server (a recursive std::regex_match).
TEST(JobSpecTest, OversizedFieldsAreErrorsNamingFieldAndLimit) {
  auto with = [](const std::string& key, json::value v) {
    json::object o{{"name", "a"}, {"command", "x"}};
    o[key] = std::move(v);
    return ParseJobSpecJson(o);
  };
  auto spec = with("env", json::object{{std::string(50000, 'A'), "1"}});
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(spec.status().IsInvalidArgument());
  EXPECT_NE(spec.status().message().find("env keys must be at most 256 bytes"), std::string::npos)
      << spec.status().message();
  EXPECT_LT(spec.status().message().size(), 300u);  // the key is not echoed whole

  spec = with("env", json::object{{std::string(200, 'A') + "-", "1"}});
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("environment variable names"), std::string::npos);
  EXPECT_TRUE(with("env", json::object{{"_OK_1", "1"}}).ok());
  EXPECT_FALSE(with("env", json::object{{"1BAD", "1"}}).ok());

  spec = with("env", json::object{{"BIG", std::string(100 << 10, 'v')}});
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("env.BIG must be at most 65536 bytes"), std::string::npos);

  json::object many;
  for (int i = 0; i < 2000; ++i) many["V" + std::to_string(i)] = "1";
  spec = with("env", many);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("env must have at most 1024 variables"),
            std::string::npos);

  spec = ParseJobSpecJson(json::object{{"name", "a"}, {"command", std::string(1 << 20, 'x')}});
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("command must be at most 131072 bytes"), std::string::npos)
      << spec.status().message();

  spec = with("working_dir", json::string(5000, 'd'));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("working_dir must be at most 4096 bytes"),
            std::string::npos);

  spec = with("project", json::string(300, 'p'));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("project must be at most 128 bytes"), std::string::npos);

  spec = with("experiment", json::string(600, 'e'));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("experiment must be"), std::string::npos);

  spec = with("failure_policies", json::array{json::object{{"pattern", std::string(2000, 'a')}}});
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("failure_policies[0].pattern must be at most 1024 bytes"),
            std::string::npos)
      << spec.status().message();

  spec = ParseJobSpec("name: a\ncommand: " + std::string(200 << 10, 'x') + "\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("job.yaml:2: command must be at most 131072 bytes"),
            std::string::npos)
      << spec.status().message();

  spec = ParseJobSpec(std::string(3 << 20, '#'), "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("larger than 1 MiB"), std::string::npos);
}

TEST(JobSpecTest, FailurePolicyPatternsAreCheckedAtSubmit) {
  auto spec = ParseJobSpec(
      "name: a\ncommand: x\nfailure_policies:\n  - pattern: \"ok\"\n  - pattern: \"NCCL (error\"\n",
      "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(spec.status().IsInvalidArgument());
  EXPECT_NE(spec.status().message().find("job.yaml:5: failure_policies[1].pattern is not a valid "
                                         "regular expression"),
            std::string::npos)
      << spec.status().message();
}

TEST(JobSpecTest, DurationsAndSizes) {
  EXPECT_EQ(*ParseDurationMs("90"), 90000);
  EXPECT_EQ(*ParseDurationMs("1.5"), 1500);
  EXPECT_EQ(*ParseDurationMs("250ms"), 250);
  EXPECT_EQ(*ParseDurationMs("1h30m"), 5400000);
  EXPECT_EQ(*ParseDurationMs("2d"), 172800000);
  EXPECT_FALSE(ParseDurationMs("-1").ok());
  EXPECT_FALSE(ParseDurationMs("5 years").ok());
  EXPECT_FALSE(ParseDurationMs("99999999999999d").ok());
  EXPECT_EQ(FormatDuration(5400000), "1h30m");
  EXPECT_EQ(FormatDuration(250), "250ms");
  EXPECT_EQ(*ParseBytes("512Mi"), 512 << 20);
  EXPECT_EQ(*ParseBytes("2G"), 2000000000);
  EXPECT_FALSE(ParseBytes("2 apples").ok());
  EXPECT_FALSE(ParseBytes("99999999999999999Ti").ok());
}

}  // namespace
}  // namespace trainyard::jobs
