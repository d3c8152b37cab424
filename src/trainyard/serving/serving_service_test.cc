// ServingService's control loop and replica choice without processes: a launcher that only
// records, a health probe the test turns on, a real registry on an in-memory store.
#include "trainyard/serving/serving_service.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <set>

#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::serving {
namespace {

namespace fs = std::filesystem;
using identity::Principal;

// Records launches and stops; places every replica at once unless the test holds them
// (HoldPlacement: they stay pending with a scheduler's reason); exits come when the test says
// so (Exit), as the scheduler's come from its own thread.
class FakeLauncher : public ReplicaLauncher {
 public:
  void SetExitCallback(ExitCallback cb) override {
    MutexLock lock(mu_);
    cb_ = std::move(cb);
  }
  void EndLeftovers() override {}
  std::string BindHost() const override { return "127.0.0.1"; }
  bool ReplicasReportPorts() const override { return reports_ports_.load(); }
  Status Launch(const ReplicaLaunch& launch) override {
    MutexLock lock(mu_);
    launched_.push_back(launch.id);
    launches_.push_back(launch);
    return Status::Ok();
  }
  ReplicaPlacement Placement(const std::string& id) override {
    MutexLock lock(mu_);
    ReplicaPlacement p;
    p.job_id = "j-" + id;
    if (hold_) {
      p.state = ReplicaPlacement::State::kPending;
      p.reason = "waiting for resources: 1 GPU free of 1 asked";
      return p;
    }
    p.state = ReplicaPlacement::State::kRunning;
    p.host = "127.0.0.1";
    p.pid = 1000 + static_cast<int>(launched_.size());
    if (reports_ports_) p.port = reported_port_;
    return p;
  }
  Status Stop(const std::string& id) override {
    MutexLock lock(mu_);
    stopped_.insert(id);
    return Status::Ok();
  }
  void Shutdown(std::chrono::milliseconds) override {}

  // Replicas pick their ports (as on cluster nodes); Placement reports `port` (0: not yet).
  void ReportPorts() { reports_ports_ = true; }
  void SetReportedPort(int port) {
    MutexLock lock(mu_);
    reported_port_ = port;
  }
  void HoldPlacement(bool hold) {
    MutexLock lock(mu_);
    hold_ = hold;
  }
  void Exit(const std::string& id, int code, bool stopped) {
    ExitCallback cb;
    {
      MutexLock lock(mu_);
      cb = cb_;
    }
    cb(id, ReplicaEnd{stopped, "exit code " + std::to_string(code) + " on rank 0"});
  }
  std::vector<ReplicaLaunch> launches() {
    MutexLock lock(mu_);
    return launches_;
  }
  std::vector<std::string> launched() {
    MutexLock lock(mu_);
    return launched_;
  }
  bool stopped(const std::string& id) {
    MutexLock lock(mu_);
    return stopped_.count(id) > 0;
  }

 private:
  Mutex mu_;
  ExitCallback cb_ TY_GUARDED_BY(mu_);
  std::vector<std::string> launched_ TY_GUARDED_BY(mu_);
  std::vector<ReplicaLaunch> launches_ TY_GUARDED_BY(mu_);
  bool hold_ TY_GUARDED_BY(mu_) = false;
  std::atomic<bool> reports_ports_{false};
  int reported_port_ TY_GUARDED_BY(mu_) = 0;
  std::set<std::string> stopped_ TY_GUARDED_BY(mu_);
};

// Polls `predicate` until it holds or 10 s pass.
template <typename Predicate>
bool Eventually(Predicate predicate) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling, bounded
  }
  return true;
}

class ServingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("serving-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    std::ofstream(dir_ / "model" / "MLmodel")
        << "flavors:\n  python_function:\n    loader_module: x\n";
    std::vector<store::Migration> migrations = tracking::TrackingService::Migrations();
    for (auto& m : registry::RegistryService::Migrations()) migrations.push_back(std::move(m));
    for (auto& m : identity::IdentityService::Migrations()) migrations.push_back(std::move(m));
    for (auto& m : ServingService::Migrations()) migrations.push_back(std::move(m));
    TY_ASSERT_OK_AND_ASSIGN(db_, store::OpenTestDatabase("sqlite", migrations));
    identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    tracking_ = std::make_unique<tracking::TrackingService>(*db_, clock_, random_, *identity_,
                                                            "mlflow-artifacts:");
    TY_ASSERT_OK(tracking_->Init("admin"));
    registry_ = std::make_unique<registry::RegistryService>(*db_, clock_, *identity_, *tracking_);
    TY_ASSERT_OK(registry_->CreateRegisteredModel(kAdmin, {.name = "m"}).status());
    TY_ASSERT_OK(
        registry_->CreateModelVersion(kAdmin, {.name = "m", .source = "mlflow-artifacts:/model"})
            .status());
    TY_ASSERT_OK(identity_->CreateUser(kAdmin, {.name = "bob"}).status());
    capture_ = std::make_unique<CaptureWriter>(CaptureOptions{(dir_ / "capture").string()});
    ServingOptions options;
    options.tick = std::chrono::milliseconds(5);
    options.cold_start_wait = std::chrono::seconds(10);
    options.restart_backoff = std::chrono::milliseconds(1);
    options_ = options;
  }

  void Start() {
    serving_ = std::make_unique<ServingService>(
        *db_, clock_, random_, *identity_, *registry_, launcher_, *capture_,
        [this](const std::string& location) -> Result<std::string> {
          return (dir_ / location.substr(std::string_view("mlflow-artifacts:/").size())).string();
        },
        [this](const std::string&) { return healthy_.load(); }, options_);
    TY_ASSERT_OK(serving_->Start());
  }

  void TearDown() override {
    if (serving_) serving_->Stop();
    serving_.reset();
    fs::remove_all(dir_);
  }

  Status Create(const std::string& body) {
    auto o = ParseJsonObject(body);
    if (!o.ok()) return o.status();
    return serving_->Create(kAdmin, *o).status();
  }

  EndpointState State(const std::string& name) { return serving_->Get(kAdmin, name).value(); }

  const Principal kAdmin = Principal::System();
  fs::path dir_;
  SystemClock clock_;
  SeededRandom random_{42};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<tracking::TrackingService> tracking_;
  std::unique_ptr<registry::RegistryService> registry_;
  std::unique_ptr<CaptureWriter> capture_;
  FakeLauncher launcher_;
  std::atomic<bool> healthy_{false};
  ServingOptions options_;
  std::unique_ptr<ServingService> serving_;
};

TEST_F(ServingServiceTest, ARequestToAnEndpointAtZeroStartsAReplicaAndWaitsForIt) {
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}]})"));
  EXPECT_TRUE(State("e").replicas.empty());
  auto lease = std::async(std::launch::async, [&] { return serving_->Acquire(kAdmin, "e"); });
  ASSERT_TRUE(Eventually([&] { return launcher_.launched().size() == 1; }));
  // Not ready yet: the request still waits.
  EXPECT_EQ(lease.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  healthy_ = true;
  auto got = lease.get();
  TY_ASSERT_OK(got.status());
  EXPECT_EQ(got->replica_id, launcher_.launched()[0]);
  EXPECT_EQ(got->model_version, 1);
  EXPECT_EQ(got->flavor, Flavor::kPyfunc);
  EXPECT_EQ(State("e").replicas[0].outstanding, 1);
}

TEST_F(ServingServiceTest, NoReadyReplicaInTimeIsUnavailableSayingWhy) {
  options_.cold_start_wait = std::chrono::milliseconds(200);
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}]})"));
  auto lease = serving_->Acquire(kAdmin, "e");
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lease.status().message().find("no ready replica"), std::string::npos);
}

TEST_F(ServingServiceTest, ADeadReplicaIsReplacedAndCounted) {
  healthy_ = true;
  Start();
  TY_ASSERT_OK(Create(
      R"({"name": "e", "served_entities": [{"model": "m", "version": 1}], "min_replicas": 1})"));
  ASSERT_TRUE(Eventually(
      [&] { return State("e").replicas.size() == 1 && State("e").replicas[0].state == "READY"; }));
  std::string first = launcher_.launched()[0];
  // The replacement must not pass its health check yet: once it is ready, last_error is
  // cleared, and reading it would race with the probe.
  healthy_ = false;
  launcher_.Exit(first, 137, false);
  ASSERT_TRUE(Eventually([&] { return launcher_.launched().size() == 2; }));
  EXPECT_NE(launcher_.launched()[1], first);
  EXPECT_EQ(State("e").entities[0].restarts, 1);
  EXPECT_NE(State("e").entities[0].last_error.find("ended: exit code 137"), std::string::npos);
  healthy_ = true;
  ASSERT_TRUE(Eventually(
      [&] { return State("e").replicas.size() == 1 && State("e").replicas[0].state == "READY"; }));
  EXPECT_EQ(State("e").entities[0].last_error, "");  // recovered
  EXPECT_EQ(State("e").entities[0].restarts, 1);
}

TEST_F(ServingServiceTest, APendingReplicaShowsTheSchedulersReasonAndARequestTimesOutSayingIt) {
  healthy_ = true;
  options_.cold_start_wait = std::chrono::milliseconds(300);
  launcher_.HoldPlacement(true);
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}],
                          "resources": {"gpus": 1, "cpus": 2, "memory": "1Gi"}})"));
  auto lease = serving_->Acquire(kAdmin, "e");
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lease.status().message().find("waits for resources: waiting for resources: 1 GPU"),
            std::string::npos)
      << lease.status().message();
  ASSERT_EQ(launcher_.launches().size(), 1u);
  ReplicaLaunch launch = launcher_.launches()[0];
  EXPECT_EQ(launch.endpoint, "e");
  EXPECT_EQ(launch.owner, "admin");
  EXPECT_EQ(launch.resources.gpus, 1);
  EXPECT_EQ(launch.resources.cpus, 2);
  EXPECT_EQ(launch.resources.memory_bytes, int64_t{1} << 30);
  EXPECT_NE(launch.command.find("--host '127.0.0.1' --port "), std::string::npos) << launch.command;
  EndpointState s = State("e");
  ASSERT_EQ(s.replicas.size(), 1u);
  EXPECT_EQ(s.replicas[0].state, "PENDING");
  EXPECT_EQ(s.replicas[0].job_id, "j-" + launch.id);
  EXPECT_NE(s.replicas[0].pending_reason.find("1 GPU"), std::string::npos);
  EXPECT_EQ(s.replicas[0].url, "");
  // Placed: its health check starts at the host the launcher says, and it serves.
  launcher_.HoldPlacement(false);
  ASSERT_TRUE(Eventually([&] { return State("e").replicas[0].state == "READY"; }));
  EXPECT_EQ(State("e").replicas[0].url.rfind("http://127.0.0.1:", 0), 0u);
  TY_ASSERT_OK(serving_->Acquire(kAdmin, "e").status());
}

TEST_F(ServingServiceTest, AReplicaThatPicksItsPortIsReachedOnceItReportsIt) {
  healthy_ = true;
  options_.cold_start_wait = std::chrono::milliseconds(200);
  launcher_.ReportPorts();
  fs::create_directories(dir_ / "llm");
  std::ofstream(dir_ / "llm" / "config.json") << R"({"model_type": "gpt2"})";
  TY_ASSERT_OK(
      registry_->CreateModelVersion(kAdmin, {.name = "m", .source = "mlflow-artifacts:/llm"})
          .status());
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 2}],
                          "min_replicas": 1})"));
  ASSERT_TRUE(Eventually([&] {
    auto s = State("e");
    return s.replicas.size() == 1 && s.replicas[0].state == "STARTING";
  }));
  ReplicaLaunch launch = launcher_.launches()[0];
  EXPECT_NE(launch.command.find("--port 0 --port-file \"$TRAINYARD_REPLICA_PORT_FILE\""),
            std::string::npos)
      << launch.command;
  // Placed but its port unknown: not probed (the probe would pass), not routed to.
  EXPECT_EQ(serving_->Acquire(kAdmin, "e").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(State("e").replicas[0].url, "");
  EXPECT_EQ(State("e").replicas[0].state, "STARTING");
  launcher_.SetReportedPort(41234);
  ASSERT_TRUE(Eventually([&] { return State("e").replicas[0].state == "READY"; }));
  EXPECT_EQ(State("e").replicas[0].url, "http://127.0.0.1:41234");
  TY_ASSERT_OK(serving_->Acquire(kAdmin, "e").status());
}

TEST_F(ServingServiceTest, APyfuncReplicaThatPicksItsPortPicksOneOnItsNode) {
  launcher_.ReportPorts();
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}],
                          "min_replicas": 1})"));
  ASSERT_TRUE(Eventually([&] { return launcher_.launches().size() == 1; }));
  const std::string command = launcher_.launches()[0].command;
  EXPECT_EQ(command.rfind("port=$(python3 -c ", 0), 0u) << command;
  EXPECT_NE(command.find("> \"$TRAINYARD_REPLICA_PORT_FILE\".tmp && mv -f"), std::string::npos)
      << command;
  EXPECT_NE(command.find("models serve -m \"$TRAINYARD_MODEL_DIR\""), std::string::npos);
  EXPECT_NE(command.find(" --port \"$port\" --env-manager local"), std::string::npos) << command;
}

TEST_F(ServingServiceTest, RequestsGoToTheReplicaWithFewestInFlight) {
  healthy_ = true;
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}],
                          "min_replicas": 2, "max_replicas": 2})"));
  ASSERT_TRUE(Eventually([&] {
    auto s = State("e");
    return s.replicas.size() == 2 && s.replicas[0].state == "READY" &&
           s.replicas[1].state == "READY";
  }));
  auto a = serving_->Acquire(kAdmin, "e");
  auto b = serving_->Acquire(kAdmin, "e");
  TY_ASSERT_OK(a.status());
  TY_ASSERT_OK(b.status());
  EXPECT_NE(a->replica_id, b->replica_id);
  std::string freed = a->replica_id;
  *a = Lease();  // released
  auto c = serving_->Acquire(kAdmin, "e");
  TY_ASSERT_OK(c.status());
  EXPECT_EQ(c->replica_id, freed);
}

TEST_F(ServingServiceTest, IdleEndpointsScaleToZero) {
  healthy_ = true;
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}],
                          "scale_to_zero_seconds": 1})"));
  { TY_ASSERT_OK(serving_->Acquire(kAdmin, "e").status()); }
  std::string id = launcher_.launched()[0];
  ASSERT_TRUE(Eventually([&] { return launcher_.stopped(id); }));
  launcher_.Exit(id, 143, true);
  EXPECT_TRUE(State("e").replicas.empty());
  EXPECT_EQ(State("e").entities[0].restarts, 0);
}

TEST_F(ServingServiceTest, QueryNeedsAGrant) {
  healthy_ = true;
  Start();
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}]})"));
  Principal bob{"bob", false, "t", ""};
  EXPECT_EQ(serving_->Acquire(bob, "e").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(serving_->Get(bob, "e").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(serving_->Grant(bob, "e", "bob", "QUERY").code(), StatusCode::kPermissionDenied);
  TY_ASSERT_OK(serving_->Grant(kAdmin, "e", "bob", "QUERY"));
  TY_EXPECT_OK(serving_->Acquire(bob, "e").status());
  EXPECT_EQ(serving_->Delete(bob, "e").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(serving_->Grant(kAdmin, "e", "bob", "OWN").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(serving_->Acquire(kAdmin, "nope").status().code(), StatusCode::kNotFound);
}

TEST_F(ServingServiceTest, ServedEntitiesAreCheckedAtCreation) {
  Start();
  EXPECT_EQ(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 9}]})").code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Create(R"({"name": "e", "served_entities": [{"model": "x", "version": 1}]})").code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Create(R"({"name": "e", "served_entities": [{"model": "m", "alias": "a"}]})").code(),
            StatusCode::kNotFound);
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}]})"));
  EXPECT_EQ(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}]})").code(),
            StatusCode::kAlreadyExists);
}

// Lineage's hook hears what an endpoint serves each time that may change: create, an update of
// its served entities, an alias it serves moving (as the endpoint's owner), and delete.
TEST_F(ServingServiceTest, TheServesListenerHearsEveryChangeOfWhatIsServed) {
  TY_ASSERT_OK(
      registry_->CreateModelVersion(kAdmin, {.name = "m", .source = "mlflow-artifacts:/model"})
          .status());
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "m", "champ", 1));
  options_.alias_check = std::chrono::milliseconds(1);
  std::mutex mu;
  std::vector<std::pair<std::string, std::vector<ServedModelVersion>>> heard;
  auto heard_copy = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return heard;
  };
  using Heard = std::pair<std::string, std::vector<ServedModelVersion>>;
  Start();
  // Set after Start() (the fixture starts the service): no endpoint exists yet, so the control
  // loop has nothing to tell it about.
  serving_->SetServesListener([&](const Principal& who, const std::string& endpoint,
                                  const std::vector<ServedModelVersion>& versions) {
    std::lock_guard<std::mutex> lock(mu);
    heard.push_back({who.user + "/" + endpoint, versions});
  });
  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 2}]})"));
  EXPECT_EQ(heard_copy().back(), (Heard{"admin/e", {{"m", 2}}}));
  auto o = ParseJsonObject(R"({"served_entities": [{"model": "m", "alias": "champ"}]})");
  TY_ASSERT_OK(serving_->Update(kAdmin, "e", *o).status());
  EXPECT_EQ(heard_copy().back(), (Heard{"admin/e", {{"m", 1}}}));
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "m", "champ", 2));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (heard_copy().back() != Heard{"admin/e", {{"m", 2}}} &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();  // the control loop's alias check, bounded by the deadline
  }
  EXPECT_EQ(heard_copy().back(), (Heard{"admin/e", {{"m", 2}}}));
  TY_ASSERT_OK(serving_->Delete(kAdmin, "e"));
  EXPECT_EQ(heard_copy().back(), (Heard{"admin/e", {}}));
  // A change that touches no served entity says nothing.
  size_t before = heard_copy().size();
  TY_ASSERT_OK(Create(R"({"name": "f", "served_entities": [{"model": "m", "version": 1}]})"));
  auto scale = ParseJsonObject(R"({"max_replicas": 2})");
  TY_ASSERT_OK(serving_->Update(kAdmin, "f", *scale).status());
  EXPECT_EQ(heard_copy().size(), before + 1);
}

TEST_F(ServingServiceTest, RateLimitsRefuseBeforeAReplicaIsChosen) {
  healthy_ = true;
  Start();
  TY_ASSERT_OK(identity_->CreateGroup(kAdmin, "team").status());
  TY_ASSERT_OK(identity_->AddGroupMember(kAdmin, "team", "bob"));
  Status unknown = Create(R"({"name": "x", "served_entities": [{"model": "m", "version": 1}],
      "rate_limits": [{"key": "group", "principal": "nobody", "queries_per_minute": 1}]})");
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("rate_limits[0].principal: no group named 'nobody'"),
            std::string::npos)
      << unknown.message();
  Status user_as_group = Create(R"({"name": "x", "served_entities": [{"model": "m", "version": 1}],
      "rate_limits": [{"key": "group", "principal": "bob", "queries_per_minute": 1}]})");
  EXPECT_NE(user_as_group.message().find("'bob' is a user, not a group"), std::string::npos)
      << user_as_group.message();

  TY_ASSERT_OK(Create(R"({"name": "e", "served_entities": [{"model": "m", "version": 1}],
      "min_replicas": 1,
      "rate_limits": [{"key": "group", "principal": "team", "queries_per_minute": 1}]})"));
  TY_ASSERT_OK(serving_->Grant(kAdmin, "e", "bob", "QUERY"));
  ASSERT_TRUE(Eventually([&] {
    auto s = State("e");
    return s.replicas.size() == 1 && s.replicas[0].state == "READY";
  }));
  Principal bob{"bob", false, "t", ""};
  TY_ASSERT_OK(serving_->Acquire(bob, "e").status());
  RateDecision refused;
  auto again = serving_->Acquire(bob, "e", &refused);
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.limit, "group team: 1 queries/min");
  EXPECT_GE(refused.retry_after_seconds, 59);
  EXPECT_LE(refused.retry_after_seconds, 60);
  EXPECT_EQ(State("e").replicas[0].served, 1);  // the refused request reached no replica
  // Not in the group: not limited.
  TY_EXPECT_OK(serving_->Acquire(kAdmin, "e").status());
  TY_EXPECT_OK(serving_->Acquire(kAdmin, "e").status());
  auto lifted = ParseJsonObject(R"({"rate_limits": []})");
  TY_ASSERT_OK(serving_->Update(kAdmin, "e", *lifted).status());
  TY_EXPECT_OK(serving_->Acquire(bob, "e").status());
}

TEST_F(ServingServiceTest, QueryOnlyTokenReachesOnlyItsEndpoints) {
  healthy_ = true;
  Start();
  for (const char* name : {"e", "f"}) {
    TY_ASSERT_OK(
        Create(std::string(R"({"name": ")") + name +
               R"(", "served_entities": [{"model": "m", "version": 1}], "min_replicas": 1})"));
  }
  Principal only_e{"admin", false, "t", "query:e"};
  auto refused = serving_->Acquire(only_e, "f");
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("query-only token may query only endpoint(s) e"),
            std::string::npos)
      << refused.status().message();
  auto listed = serving_->List(only_e);
  TY_ASSERT_OK(listed.status());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].endpoint.name, "e");
  ASSERT_TRUE(Eventually([&] { return serving_->Acquire(only_e, "e").ok(); }));
  Principal any{"admin", false, "t", "query"};
  EXPECT_EQ(serving_->List(any)->size(), 2u);
  // Like every scoped token, it may not change endpoints.
  auto body = ParseJsonObject(R"({"max_replicas": 2})");
  EXPECT_EQ(serving_->Update(only_e, "e", *body).status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace trainyard::serving
