// Test helpers for the model tests: the committed Hugging Face fixtures
// (tests/fixtures/train/models/<name>/reference.json, made by make_model_fixtures.py).
#pragma once

#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trainyard/common/json.h"

namespace trainyard::model::testutil {

inline std::string FixtureDir(const std::string& name) {
  return std::string(TRAINYARD_SOURCE_DIR) + "/tests/fixtures/train/models/" + name;
}

struct ReferenceCase {
  torch::Tensor input_ids;     // [B, T] int64
  torch::Tensor position_ids;  // undefined when the case has none
  torch::Tensor labels;        // [B, T], -100 = ignored
  torch::Tensor logits;        // [B, T, V] float32
  double loss = 0;
};

inline torch::Tensor Int64Matrix(const json::value& v) {
  std::vector<int64_t> flat;
  int64_t rows = 0;
  for (const auto& row : v.as_array()) {
    ++rows;
    for (const auto& x : row.as_array()) flat.push_back(x.to_number<int64_t>());
  }
  return torch::tensor(flat, torch::kInt64).reshape({rows, -1});
}

inline std::vector<ReferenceCase> LoadReference(const std::string& dir) {
  std::ifstream in(dir + "/reference.json");
  std::stringstream text;
  text << in.rdbuf();
  json::value root = json::parse(text.str());
  std::vector<ReferenceCase> out;
  for (const auto& c : root.at("cases").as_array()) {
    const json::object& o = c.as_object();
    ReferenceCase r;
    r.input_ids = Int64Matrix(o.at("input_ids"));
    if (o.contains("position_ids")) r.position_ids = Int64Matrix(o.at("position_ids"));
    r.labels = Int64Matrix(o.at("labels"));
    std::vector<float> logits;
    for (const auto& x : o.at("logits").as_array()) logits.push_back(x.to_number<float>());
    std::vector<int64_t> shape;
    for (const auto& x : o.at("logits_shape").as_array()) shape.push_back(x.to_number<int64_t>());
    r.logits = torch::tensor(logits, torch::kFloat32).reshape(shape);
    r.loss = o.at("loss").to_number<double>();
    out.push_back(std::move(r));
  }
  return out;
}

inline double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// transformers' causal-LM loss: logits at t predict labels at t + 1; -100 is ignored.
inline double ShiftedLoss(const torch::Tensor& logits, const torch::Tensor& labels) {
  int64_t t = logits.size(1);
  torch::Tensor l = logits.narrow(1, 0, t - 1).reshape({-1, logits.size(-1)});
  torch::Tensor y = labels.narrow(1, 1, t - 1).reshape({-1});
  return torch::nn::functional::cross_entropy(
             l, y, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100))
      .item<double>();
}

}  // namespace trainyard::model::testutil
