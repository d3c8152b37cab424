// ValidateLogBatch without a database: limits, keys, values, params given twice, and
// the normalized batch (points grouped by key, sorted, without repeats; latest points).
#include "trainyard/tracking/log_batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace trainyard::tracking {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Metric M(std::string key, int64_t step, int64_t timestamp, double value) {
  Metric m;
  m.key = std::move(key);
  m.step = step;
  m.timestamp = timestamp;
  m.value = value;
  return m;
}

// The error's message, or "" for ok; InvalidArgument is the only error expected.
std::string Error(const std::vector<Metric>& metrics, const std::vector<KeyValue>& params,
                  const std::vector<KeyValue>& tags, const TrackingLimits& limits = {}) {
  auto r = ValidateLogBatch(metrics, params, tags, limits);
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  return std::string(r.status().message());
}

TEST(LogBatchTest, CountsOverTheLimitsAreRefusedWithWhatToDo) {
  TrackingLimits limits;
  limits.max_metrics_per_batch = 2;
  limits.max_params_per_batch = 1;
  limits.max_tags_per_batch = 1;
  limits.max_entities_per_batch = 3;
  std::vector<Metric> three = {M("a", 0, 0, 0), M("a", 1, 0, 0), M("a", 2, 0, 0)};
  EXPECT_EQ(Error(three, {}, {}, limits),
            "a batch may contain at most 2 metrics (got 3); split it into several requests");
  EXPECT_EQ(Error({}, {{"p", "1"}, {"q", "2"}}, {}, limits),
            "a batch may contain at most 1 params (got 2); split it into several requests");
  EXPECT_EQ(Error({}, {}, {{"t", "1"}, {"u", "2"}}, limits),
            "a batch may contain at most 1 tags (got 2); split it into several requests");
  EXPECT_EQ(Error({M("a", 0, 0, 0), M("a", 1, 0, 0)}, {{"p", "1"}}, {{"t", "1"}}, limits),
            "a batch may contain at most 3 metrics, params and tags together");
  EXPECT_EQ(Error({M("a", 0, 0, 0), M("a", 1, 0, 0)}, {{"p", "1"}}, {}, limits), "");
}

TEST(LogBatchTest, KeysAndValuesAreCheckedAndNamed) {
  TrackingLimits limits;
  limits.max_key_length = 5;
  limits.max_param_value_length = 3;
  limits.max_tag_value_length = 4;
  EXPECT_EQ(Error({}, {{"", "1"}}, {}, limits), "param key must not be empty");
  EXPECT_EQ(Error({}, {}, {{"toolong", "1"}}, limits),
            "tag key 'toolong' is longer than 5 characters");
  EXPECT_NE(Error({M("a$", 0, 0, 0)}, {}, {}, limits).find("invalid metric key 'a$'"),
            std::string::npos);
  EXPECT_EQ(Error({M("../x", 0, 0, 0)}, {}, {}, limits),
            "invalid metric key '../x': it must be a relative path without '..'");
  EXPECT_EQ(Error({}, {{"lr", "0.01"}}, {}, limits),
            "param 'lr' value is longer than 3 characters");
  EXPECT_EQ(Error({}, {}, {{"t", "12345"}}, limits), "tag 't' value is longer than 4 characters");
  // Params before tags before metrics, as MLflow reports them.
  EXPECT_EQ(Error({M("", 0, 0, 0)}, {{"", "1"}}, {{"", "1"}}, limits),
            "param key must not be empty");
  EXPECT_EQ(Error({M("", 0, 0, 0)}, {}, {{"", "1"}}, limits), "tag key must not be empty");
  EXPECT_EQ(Error({M("", 0, 0, 0)}, {}, {}, limits), "metric key must not be empty");
}

TEST(LogBatchTest, AParamTwiceNeedsOneValue) {
  EXPECT_EQ(Error({}, {{"lr", "0.1"}, {"lr", "0.2"}}, {}),
            "param 'lr' appears twice in the batch with different values");
  auto batch = ValidateLogBatch({}, {{"lr", "0.1"}, {"bs", "8"}, {"lr", "0.1"}}, {}, {});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->params, (std::map<std::string, std::string>{{"bs", "8"}, {"lr", "0.1"}}));
}

TEST(LogBatchTest, MetricsAreGroupedByKeySortedAndKeptOnce) {
  std::vector<Metric> metrics = {M("loss", 3, 1, 0.5), M("loss", 1, 1, 0.9),  M("acc", 2, 5, 0.1),
                                 M("loss", 3, 1, 0.5), M("loss", 2, 0, kNaN), M("acc", 1, 9, 0.2)};
  metrics[2].model_id = "m-1";
  auto batch = ValidateLogBatch(metrics, {}, {{"t", "1"}, {"t", "2"}}, {});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->series.size(), 2u);
  const SeriesPoints& loss = batch->series[0];
  EXPECT_EQ(loss.key, "loss");
  ASSERT_EQ(loss.points.size(), 3u);  // the repeated point once
  EXPECT_EQ(loss.points[0].step, 1);
  EXPECT_EQ(loss.points[1].step, 2);
  EXPECT_TRUE(std::isnan(loss.points[1].value));
  EXPECT_EQ(loss.points[2].step, 3);
  EXPECT_EQ(loss.latest.step, 3);
  const SeriesPoints& acc = batch->series[1];
  EXPECT_EQ(acc.key, "acc");
  ASSERT_EQ(acc.points.size(), 2u);
  EXPECT_EQ(acc.points[0].step, 1);
  EXPECT_EQ(acc.latest.step, 2);
  EXPECT_EQ(acc.latest.value, 0.1);
  ASSERT_EQ(batch->model_metrics.size(), 1u);
  EXPECT_EQ(batch->model_metrics[0].model_id, "m-1");
  ASSERT_EQ(batch->tags.size(), 2u);  // as given: the write lets the later one win
  EXPECT_EQ(batch->tags[1].value, "2");
}

TEST(LogBatchTest, LatestFollowsMLflowsOrderWithNaNAboveNumbers) {
  // Same step: the later timestamp wins; same timestamp: the larger value, NaN above all.
  auto batch = ValidateLogBatch(
      {M("x", 5, 2, 1.0), M("x", 5, 3, -1.0), M("x", 5, 3, 7.0), M("x", 4, 9, 100.0)}, {}, {}, {});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->series[0].latest.value, 7.0);
  batch = ValidateLogBatch({M("x", 5, 3, kNaN), M("x", 5, 3, 7.0)}, {}, {}, {});
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(std::isnan(batch->series[0].latest.value));
  batch = ValidateLogBatch({M("x", 6, 0, 0.0), M("x", 5, 3, kNaN)}, {}, {}, {});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->series[0].latest.step, 6);
}

TEST(LogBatchTest, AnEmptyBatchIsValid) {
  auto batch = ValidateLogBatch({}, {}, {}, {});
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(batch->series.empty());
  EXPECT_TRUE(batch->params.empty());
  EXPECT_TRUE(batch->model_metrics.empty());
}

}  // namespace
}  // namespace trainyard::tracking
