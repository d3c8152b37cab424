#include "trainyard/model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace trainyard::model {
namespace {

std::vector<std::byte> FileBytes(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> out(8 + header.size() + data_bytes);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = std::byte(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("safetensors_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(SafetensorsTest, WriteThenOpenRoundTrips) {
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
  std::vector<uint16_t> b = {0x3f80, 0x4000};
  std::vector<TensorToWrite> ts = {
      {"z.weight", "F32", {2, 3}, std::as_bytes(std::span(a))},
      {"a.bias", "BF16", {2}, std::as_bytes(std::span(b))},
      {"empty", "F32", {0, 4}, {}},
  };
  std::string path = (dir_ / "model.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(path, ts, {{"format", "pt"}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto& h = (*f)->header();
  EXPECT_EQ(h.data_offset % 8, 0u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  ASSERT_EQ(h.tensors.size(), 3u);
  std::map<std::string, const SafetensorsEntry*> by_name;
  for (const auto& e : h.tensors) by_name[e.name] = &e;
  const SafetensorsEntry& z = *by_name.at("z.weight");
  EXPECT_EQ(z.shape, (std::vector<int64_t>{2, 3}));
  auto data = (*f)->Data(z);
  ASSERT_EQ(data.size(), 24u);
  EXPECT_EQ(std::memcmp(data.data(), a.data(), 24), 0);
  EXPECT_EQ((*f)->Data(*by_name.at("a.bias")).size(), 4u);
  auto map = ResolveSafetensorsWeightMap(dir_.string());
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->size(), 3u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST_F(SafetensorsTest, WriteRejectsWrongSizes) {
  std::vector<float> a = {1, 2, 3};
  Status s = WriteSafetensors((dir_ / "x.safetensors").string(),
                              {{"w", "F32", {2, 2}, std::as_bytes(std::span(a))}});
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("w"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.safetensors"));
}

TEST_F(SafetensorsTest, RejectsHostileHeaders) {
  struct Case {
    std::string header;
    size_t data;
    const char* what;
  };
  const Case cases[] = {
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "past the end"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "different size"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlaps"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "no tensor"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "twice"},
      {R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1, "unknown dtype"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative"},
      {R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],)"
       R"("data_offsets":[0,0]}})",
       0, "different size"},
      {R"({"__metadata__":{"k":1}})", 0, "__metadata__"},
      {R"([1,2])", 0, "'{'"},
      {R"({"a":)", 0, "JSON"},
  };
  for (const Case& c : cases) {
    auto bytes = FileBytes(c.header, c.data);
    auto r = ParseSafetensors(bytes);
    ASSERT_FALSE(r.ok()) << c.header;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(c.what), std::string::npos) << r.status().ToString();
  }
  std::vector<std::byte> huge(16);
  huge[5] = std::byte{0x10};  // header length 2^40
  EXPECT_NE(ParseSafetensors(huge).status().message().find("100 MB"), std::string::npos);
  EXPECT_FALSE(ParseSafetensors(std::vector<std::byte>(3)).ok());
}

TEST_F(SafetensorsTest, ResolvesShardedIndexAndRejectsEscapes) {
  std::string fixture = std::string(TRAINYARD_SOURCE_DIR) + "/tests/fixtures/train/models/llama";
  auto map = ResolveSafetensorsWeightMap(fixture);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_TRUE(map->count("model.embed_tokens.weight"));
  EXPECT_TRUE(map->count("lm_head.weight"));
  std::set<std::string> files;
  for (const auto& [name, file] : *map) files.insert(file);
  EXPECT_GT(files.size(), 1u);

  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map":{"w":"../../etc/passwd"}})";
  auto bad = ResolveSafetensorsWeightMap(dir_.string());
  EXPECT_TRUE(bad.status().IsInvalidArgument());
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map":{"w":"missing.safetensors"}})";
  EXPECT_TRUE(ResolveSafetensorsWeightMap(dir_.string()).status().IsNotFound());
  EXPECT_TRUE(ResolveSafetensorsWeightMap((dir_ / "nope").string()).status().IsNotFound());
}

}  // namespace
}  // namespace trainyard::model
