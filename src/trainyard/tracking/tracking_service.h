// TrackingService: experiments, runs, params, metrics, tags, dataset inputs,
// run outputs and logged models — MLflow's tracking model, stored in the
// metadata store.
//
// Validation follows MLflow's rules and limits (param values immutable, at most
// 1000 metrics / 100 params / 100 tags per batch, key and value lengths), and
// errors are InvalidArgument naming the field.
//
// Authorization: every public method that changes an experiment, run or logged model
// takes the caller's Principal and asks the Authorizer given at construction first (a
// run's and a logged model's permissions are their experiment's; a job's scoped token
// may write only its own run). Reads are open to every authenticated caller, as
// Authorizer grants READ to all.
//
// Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/limits.h"
#include "trainyard/tracking/metric_blocks.h"
#include "trainyard/tracking/metric_store.h"
#include "trainyard/tracking/types.h"

namespace trainyard::tracking {

// Experiment owners and run experiments cached for authorization (an entry is about
// 100 bytes): past these many the cache starts over, so it stays under about 10 MB and
// 100 MB.
inline constexpr size_t kMaxCachedExperimentOwners = 100'000;
inline constexpr size_t kMaxCachedRunExperiments = 1'000'000;

struct SearchRunsRequest {
  std::vector<std::string> experiment_ids;
  std::string filter;
  ViewType view_type = ViewType::kActiveOnly;
  int64_t max_results = 1000;
  std::vector<std::string> order_by;
  std::string page_token;
};

// The runs listing behind the web UI's runs table (ListRuns): MLflow's filter and order_by
// (the same grammar and semantics as SearchRuns), but only the columns asked for, and keyset
// pages (run_list.h), so every page costs the same and nothing else of a run is loaded.
struct ListRunsRequest {
  std::string experiment_id;
  std::string filter;
  ViewType view_type = ViewType::kActiveOnly;
  std::vector<std::string> order_by;  // at most kMaxListOrderBy clauses
  // "metrics.<k>", "params.<k>" or "tags.<k>"; empty: the first kDefaultListMetrics metric
  // keys and kDefaultListParams param keys, by name, of the page's runs (cheap; pass the
  // returned columns with the next pages so that they stay the same).
  std::vector<std::string> columns;
  int64_t page_size = 500;
  std::string cursor;  // "" for the first page, which also carries the count of matching runs
  // Also list the metric and param keys of all the experiment's runs (for a column chooser:
  // it reads every run's keys, ~10x the cost of a page of 100 with 10,000 runs).
  bool with_keys = false;
};

inline constexpr size_t kMaxListOrderBy = 3;
inline constexpr size_t kMaxListColumns = 200;
inline constexpr int64_t kMaxListPageSize = 5000;
inline constexpr size_t kMaxListKeys = 2000;
inline constexpr size_t kDefaultListMetrics = 6;
inline constexpr size_t kDefaultListParams = 4;

// One run of a listing: its info and one cell per requested column (absent: monostate; a
// metric's latest value as a double, NaN included; params and tags as text).
struct RunListRow {
  RunInfo info;
  std::vector<store::Value> cells;
};

struct RunListPage {
  std::vector<std::string> columns;  // canonical: "metrics.acc", "params.lr", "tags.t"
  std::vector<RunListRow> rows;
  std::string next_cursor;       // "" after the last page
  std::optional<int64_t> total;  // runs matching the filter: with the first page (no cursor)
  // With with_keys: the keys of the experiment's runs in the view, sorted.
  std::optional<std::vector<std::string>> metric_keys;
  std::optional<std::vector<std::string>> param_keys;
  bool keys_truncated = false;  // more than kMaxListKeys of either
};

struct SearchExperimentsRequest {
  std::string filter;
  ViewType view_type = ViewType::kActiveOnly;
  int64_t max_results = 1000;
  std::vector<std::string> order_by;
  std::string page_token;
};

struct LoggedModelOrder {
  std::string field_name;
  bool ascending = true;
  std::string dataset_name;
  std::string dataset_digest;
};

struct SearchLoggedModelsRequest {
  std::vector<std::string> experiment_ids;
  std::string filter;
  int64_t max_results = 100;
  std::vector<LoggedModelOrder> order_by;
  std::string page_token;
};

class TrackingService {
 public:
  // `artifact_root` is the URI prefix of new experiments' artifact locations
  // (e.g. "mlflow-artifacts:"); experiment N stores under "<root>/N".
  // `authz` must outlive the service.
  TrackingService(store::Database& db, Clock& clock, Random& random, identity::Authorizer& authz,
                  std::string artifact_root, TrackingLimits limits = {});
  TrackingService(const TrackingService&) = delete;
  TrackingService& operator=(const TrackingService&) = delete;

  static std::vector<store::Migration> Migrations();
  // Creates the "Default" experiment (id 0) when missing.
  Status Init(const std::string& default_owner);

  // --- experiments
  // `who` becomes the owner; anyone may create an experiment.
  Result<std::string> CreateExperiment(const identity::Principal& who, const std::string& name,
                                       const std::string& artifact_location,
                                       const std::vector<KeyValue>& tags);
  Result<Experiment> GetExperiment(const std::string& experiment_id);
  Result<Experiment> GetExperimentByName(const std::string& name);
  Result<Page<Experiment>> SearchExperiments(const SearchExperimentsRequest& request);
  Status RenameExperiment(const identity::Principal& who, const std::string& experiment_id,
                          const std::string& new_name);
  Status DeleteExperiment(const identity::Principal& who, const std::string& experiment_id);
  Status RestoreExperiment(const identity::Principal& who, const std::string& experiment_id);
  Status SetExperimentTag(const identity::Principal& who, const std::string& experiment_id,
                          const KeyValue& tag);
  Status DeleteExperimentTag(const identity::Principal& who, const std::string& experiment_id,
                             const std::string& key);
  // The owner of an experiment (cached; owners never change). NotFound if absent.
  Result<std::string> ExperimentOwner(const std::string& experiment_id);

  // --- runs
  // EDIT on the experiment ("" = the default one, "0").
  Result<Run> CreateRun(const identity::Principal& who, const std::string& experiment_id,
                        const std::string& user_id, const std::string& run_name,
                        std::optional<int64_t> start_time, const std::vector<KeyValue>& tags);
  Result<Run> GetRun(const std::string& run_id);
  // The experiment a run belongs to (cached; it never changes). NotFound if absent.
  Result<std::string> RunExperiment(const std::string& run_id);
  // A run's name as it is now (runs can be renamed: not cached). NotFound if absent.
  Result<std::string> RunName(const std::string& run_id);
  Result<RunInfo> UpdateRun(const identity::Principal& who, const std::string& run_id,
                            const std::optional<std::string>& status,
                            std::optional<int64_t> end_time,
                            const std::optional<std::string>& run_name);
  Status DeleteRun(const identity::Principal& who, const std::string& run_id);
  Status RestoreRun(const identity::Principal& who, const std::string& run_id);
  Status LogBatch(const identity::Principal& who, const std::string& run_id,
                  const std::vector<Metric>& metrics, const std::vector<KeyValue>& params,
                  const std::vector<KeyValue>& tags);
  Status DeleteTag(const identity::Principal& who, const std::string& run_id,
                   const std::string& key);
  Status LogInputs(const identity::Principal& who, const std::string& run_id,
                   const std::vector<DatasetInput>& datasets,
                   const std::vector<std::string>& model_ids);
  Status LogOutputs(const identity::Principal& who, const std::string& run_id,
                    const std::vector<ModelOutput>& models);
  Result<Page<Run>> SearchRuns(const SearchRunsRequest& request);
  Result<RunListPage> ListRuns(const ListRunsRequest& request);
  // Called after every successful LogBatch with the run's id (the jobs service
  // treats logged metrics as a workload's sign of progress). Set once, before
  // serving; the listener must be cheap and must not call back into this service.
  void SetRunActivityListener(std::function<void(const std::string& run_id)> listener) {
    activity_listener_ = std::move(listener);
  }
  // Called after every successful LogInputs with the caller, the run and its datasets (the
  // server records lineage from them). Set once, before serving; it runs after the write
  // committed, outside any lock, so it may read from this service.
  using InputsListener =
      std::function<void(const identity::Principal& who, const std::string& run_id,
                         const std::vector<DatasetInput>& datasets)>;
  void SetInputsListener(InputsListener listener) { inputs_listener_ = std::move(listener); }

  // --- metrics
  using MetricPoint = tracking::MetricPoint;
  // Streams the points of one metric of a run to `fn`, ordered by step then timestamp,
  // without materializing them; with max_results, one page. Returns the next page's
  // token ("" on the last page).
  Result<std::string> ScanMetricHistory(const std::string& run_id, const std::string& key,
                                        std::optional<int64_t> max_results,
                                        const std::string& page_token,
                                        const std::function<void(const MetricPoint&)>& fn);
  // A whole history (no paging) scanned as `shards` consecutive step ranges, each on
  // its own thread and snapshot: fn(shard, point) is called in order within a shard,
  // and shard i's steps all precede shard i+1's. NotFound for an unknown run.
  Status ScanMetricHistorySharded(const std::string& run_id, const std::string& key, int shards,
                                  const std::function<void(int, const MetricPoint&)>& fn);
  // A whole history (no paging) scanned as consecutive step ranges of about
  // `steps_per_range` steps (at least `threads` ranges) by `threads` threads, each
  // taking the next unscanned range in step order: fn(range, points, n) hands over the
  // next n points of a range (in order, on one thread; the array is valid during the
  // call), and range i's steps all precede range i+1's. Each thread reads one snapshot.
  // plan(ranges) comes first, once, with the number of ranges (not called for an empty
  // history). NotFound for an unknown run, before any call.
  Status ScanMetricHistoryRanges(const std::string& run_id, const std::string& key, int threads,
                                 int64_t steps_per_range, const std::function<void(int)>& plan,
                                 const std::function<void(int, const MetricPoint*, size_t)>& fn);
  // The same, collected (for small histories and tests).
  Result<Page<Metric>> GetMetricHistory(const std::string& run_id, const std::string& key,
                                        std::optional<int64_t> max_results,
                                        const std::string& page_token);
  // For charts: per run, up to max_results points at evenly spaced steps in
  // [start_step, end_step], always including the first and last step.
  Result<std::vector<Metric>> GetMetricHistoryBulkInterval(const std::vector<std::string>& run_ids,
                                                           const std::string& key,
                                                           std::optional<int64_t> start_step,
                                                           std::optional<int64_t> end_step,
                                                           int64_t max_results);

  // For zoomable charts: MetricStore::Downsample (min/max per bucket over the step range).
  Result<DownsampledHistory> DownsampleMetricHistory(const std::string& run_id,
                                                     const std::string& key, int64_t buckets,
                                                     std::optional<int64_t> min_step,
                                                     std::optional<int64_t> max_step);
  // The same for several runs at once (a chart of several runs): MetricStore::DownsampleMany.
  Result<std::vector<DownsampledHistory>> DownsampleMetricHistories(
      const std::vector<std::string>& run_ids, const std::string& key, int64_t buckets,
      std::optional<int64_t> min_step, std::optional<int64_t> max_step);

  // --- logged models (MLflow 3)
  // `who` becomes the owner. EDIT on the experiment; a scoped token's model must name its
  // own run as source_run_id, in this experiment.
  Result<LoggedModel> CreateLoggedModel(const identity::Principal& who,
                                        const std::string& experiment_id, const std::string& name,
                                        const std::string& model_type,
                                        const std::string& source_run_id,
                                        const std::vector<KeyValue>& params,
                                        const std::vector<KeyValue>& tags);
  Result<LoggedModel> GetLoggedModel(const std::string& model_id);
  Result<LoggedModel> FinalizeLoggedModel(const identity::Principal& who,
                                          const std::string& model_id, const std::string& status);
  Status DeleteLoggedModel(const identity::Principal& who, const std::string& model_id);
  Result<LoggedModel> SetLoggedModelTags(const identity::Principal& who,
                                         const std::string& model_id,
                                         const std::vector<KeyValue>& tags);
  Status DeleteLoggedModelTag(const identity::Principal& who, const std::string& model_id,
                              const std::string& key);
  Status LogLoggedModelParams(const identity::Principal& who, const std::string& model_id,
                              const std::vector<KeyValue>& params);
  Result<Page<LoggedModel>> SearchLoggedModels(const SearchLoggedModelsRequest& request);
  // The experiment of a logged model (for authorization). NotFound if absent.
  Result<std::string> LoggedModelExperiment(const std::string& model_id);

  // --- artifacts
  // May `who` do `action` to the artifact key `path` (of the blob store)? Paths start with
  // the experiment id, whose permissions govern them (a scoped token only its run's:
  // `<experiment>/<run>/...`, or `<experiment>/models/<model>/...` of its run's models);
  // anything else may be read by all and written by admins only.
  Status AuthorizeArtifactPath(const identity::Principal& who, const std::string& path,
                               identity::Action action);

 private:
  // The Authorizer's answers (tracking_authorization.cc): a run's and a logged model's
  // permissions are their experiment's; a scoped token is limited to its own run.
  Status AuthorizeExperiment(const identity::Principal& who, const std::string& experiment_id,
                             identity::Action action);
  Status AuthorizeRun(const identity::Principal& who, const std::string& run_id,
                      identity::Action action);
  Status AuthorizeLoggedModel(const identity::Principal& who, const std::string& model_id,
                              identity::Action action);
  Status AuthorizeNewLoggedModel(const identity::Principal& who, const std::string& experiment_id,
                                 const std::string& source_run_id);
  // The run an artifact path belongs to ("" when none): see AuthorizeArtifactPath.
  std::string RunOfArtifactPath(const std::string& path);
  Status ValidateKey(std::string_view what, const std::string& key) const;
  Result<Experiment> LoadExperiment(store::Transaction& tx, const std::string& where,
                                    const store::Value& arg);
  // LoadExperiment in its own read, with `not_found` as the message when absent.
  Result<Experiment> FindExperiment(const std::string& where, const store::Value& arg,
                                    const std::string& not_found);
  Status LoadRunData(store::Transaction& tx, std::vector<Run>& runs);
  Result<Run> LoadRun(store::Transaction& tx, const std::string& run_id);
  Status LoadLoggedModelData(store::Transaction& tx, std::vector<LoggedModel>& models);
  Status EnsureRunActive(store::Transaction& tx, const std::string& run_id);
  Result<std::string> NextExperimentId(store::Transaction& tx);
  // LogBatch's writes in its transaction, after the run was found active.
  Status WriteParams(store::Transaction& tx, const std::string& run_id,
                     const std::map<std::string, std::string>& params);
  Status WriteTags(store::Transaction& tx, const std::string& run_id,
                   const std::vector<KeyValue>& tags);
  Status WriteModelMetrics(store::Transaction& tx, const std::string& run_id,
                           const std::vector<Metric>& metrics);
  void CacheRunExperiment(const std::string& run_id, const std::string& experiment_id)
      TY_EXCLUDES(cache_mu_);
  Status SetLifecycle(const std::string& table, const std::string& id_column, const std::string& id,
                      const std::string& what, bool deleted);

  store::Database& db_;
  Clock& clock_;
  Random& random_;
  identity::Authorizer& authz_;
  const std::string artifact_root_;
  const TrackingLimits limits_;

  std::function<void(const std::string&)> activity_listener_;
  InputsListener inputs_listener_;
  MetricStore metrics_;

  Mutex cache_mu_;
  // Owners and experiments never change, so entries never go stale; the maps start over
  // when they reach their bounds (kMaxCachedExperimentOwners, kMaxCachedRunExperiments).
  std::unordered_map<std::string, std::string> experiment_owner_ TY_GUARDED_BY(cache_mu_);
  std::unordered_map<std::string, std::string> run_experiment_ TY_GUARDED_BY(cache_mu_);
};

}  // namespace trainyard::tracking
