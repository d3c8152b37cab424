#include "trainyard/checkpoints/checkpoint_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "trainyard/checkpoints/retention.h"
#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::checkpoints {
namespace {

namespace fs = std::filesystem;

// A BlobStore that forwards to another, calling hooks around each operation. A `before`
// hook that returns an error fails the operation without forwarding it.
class HookedBlobStore : public blob::BlobStore {
 public:
  using Hook = std::function<Status(std::string_view op, std::string_view key)>;
  explicit HookedBlobStore(std::shared_ptr<blob::BlobStore> inner) : inner_(std::move(inner)) {}

  Hook before = [](std::string_view, std::string_view) { return Status::Ok(); };
  Hook after = [](std::string_view, std::string_view) { return Status::Ok(); };

  Status PutBytes(std::string_view key, std::string_view data) override {
    TY_RETURN_IF_ERROR(before("put", key));
    TY_RETURN_IF_ERROR(inner_->PutBytes(key, data));
    return after("put", key);
  }
  Status PutFile(std::string_view key, const std::string& path) override {
    TY_RETURN_IF_ERROR(before("put", key));
    return inner_->PutFile(key, path);
  }
  Result<std::string> LocalPathForRead(std::string_view key) override {
    return inner_->LocalPathForRead(key);
  }
  Result<std::string> GetBytes(std::string_view key) override { return inner_->GetBytes(key); }
  Result<std::vector<blob::BlobEntry>> List(std::string_view prefix) override {
    TY_RETURN_IF_ERROR(before("list", prefix));
    return inner_->List(prefix);
  }
  Status Delete(std::string_view key) override {
    TY_RETURN_IF_ERROR(before("delete", key));
    return inner_->Delete(key);
  }
  Result<bool> IsDirectory(std::string_view key) override { return inner_->IsDirectory(key); }
  Result<bool> Exists(std::string_view key) override { return inner_->Exists(key); }
  Result<size_t> ReadInto(std::string_view key, char* dst, size_t capacity) override {
    return inner_->ReadInto(key, dst, capacity);
  }
  Status SyncDirectory(std::string_view dir) override {
    TY_RETURN_IF_ERROR(before("sync", dir));
    return inner_->SyncDirectory(dir);
  }

 private:
  std::shared_ptr<blob::BlobStore> inner_;
};

std::string TestRoot() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path root =
      fs::temp_directory_path() / ("ty-ckpt-" + std::string(info->test_suite_name()) + "-" +
                                   info->name() + "-" + std::to_string(::getpid()));
  fs::remove_all(root);
  return root.string();
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& f : v) f = dist(gen);
  return v;
}

CheckpointStoreOptions SmallChunks() {
  CheckpointStoreOptions o;
  o.chunk_size = 64 << 10;
  o.io_threads = 4;
  o.gc_poll_interval_ms = 1;
  return o;
}

CheckpointRef Ref(int64_t step, std::string job = "job1", int rank = 0, int world = 1,
                  int64_t attempt = 0) {
  CheckpointRef r;
  r.project = "proj";
  r.job = std::move(job);
  r.step = step;
  r.rank = rank;
  r.world_size = world;
  r.attempt = attempt;
  return r;
}

CheckpointData Tensors(const std::vector<std::vector<float>>& tensors) {
  CheckpointData d;
  for (size_t i = 0; i < tensors.size(); ++i) {
    d.blobs.push_back(Blob::Tensor("t" + std::to_string(i), DType::kF32,
                                   {static_cast<int64_t>(tensors[i].size())}, tensors[i].data(),
                                   tensors[i].size() * sizeof(float)));
  }
  return d;
}

std::string AsString(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = TestRoot();
    local_ = std::shared_ptr<blob::BlobStore>(std::move(blob::OpenLocalBlobStore(root_)).value());
    hooked_ = std::make_shared<HookedBlobStore>(local_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<CheckpointStore> Open(CheckpointStoreOptions o = SmallChunks()) {
    return std::make_unique<CheckpointStore>(hooked_, clock_, random_, std::move(o));
  }

  fs::path ChunkPath(const ChunkRef& c) const {
    return fs::path(root_) / "checkpoints/proj/chunks" / c.hash.substr(0, 2) /
           (c.hash + (c.compressed ? ".zst" : ""));
  }

  std::string root_;
  std::shared_ptr<blob::BlobStore> local_;
  std::shared_ptr<HookedBlobStore> hooked_;
  // Shared by every store of a test, as processes share the system's clock; leases and
  // intents expire only when a test advances it.
  FakeClock clock_;
  SeededRandom random_{42};
};

TEST_F(CheckpointStoreTest, RoundTripsTensorsFilesAndMetadata) {
  auto store = Open();
  std::vector<float> a = RandomFloats(100'000, 1);  // several chunks, the last one short
  std::vector<float> empty;
  std::string config = "{\"lr\": 0.001}";
  CheckpointData d;
  d.blobs.push_back(
      Blob::Tensor("model.weight", DType::kF32, {250, 400}, a.data(), AsString(a).size()));
  d.blobs.push_back(Blob::Tensor("empty", DType::kBF16, {0, 3}, empty.data(), 0));
  d.blobs.push_back(Blob::OwnedFile("config.json", checkpoints::Bytes::CopyOf(config)));
  d.metrics = {{"loss", 1.25}, {"acc", 0.5}};
  d.rng_state = std::string("\0\1\2\xff", 4);
  d.user_metadata = "{\"epoch\": 3}";
  Result<Manifest> m = store->Save(Ref(100), std::move(d));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->total_bytes, a.size() * 4 + config.size());
  EXPECT_EQ(m->blobs[0].chunks.size(), (a.size() * 4 + (64 << 10) - 1) / (64 << 10));

  Result<std::optional<CheckpointInfo>> latest = store->Latest("proj", "job1");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 100);

  Result<CheckpointData> back = store->Load("proj", "job1", 100);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->blobs.size(), 3u);
  const Blob* w = back->Find("model.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->kind, BlobKind::kTensor);
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{250, 400}));
  EXPECT_EQ(w->view(), AsString(a));
  EXPECT_EQ(back->Find("empty")->size(), 0u);
  EXPECT_EQ(back->Find("empty")->dtype, DType::kBF16);
  EXPECT_EQ(back->Find("config.json")->kind, BlobKind::kFile);
  EXPECT_EQ(back->Find("config.json")->view(), config);
  EXPECT_EQ(back->metrics.at("loss"), 1.25);
  EXPECT_EQ(back->rng_state, std::string("\0\1\2\xff", 4));
  EXPECT_EQ(back->user_metadata, "{\"epoch\": 3}");
  EXPECT_TRUE(store->Verify("proj", "job1", 100).ok());
}

TEST_F(CheckpointStoreTest, RejectsBadInput) {
  auto store = Open();
  std::vector<float> a = RandomFloats(10, 1);
  CheckpointData d;
  d.blobs.push_back(Blob::Tensor("x", DType::kF32, {3, 4}, a.data(), 40));
  Result<Manifest> m = store->Save(Ref(1), std::move(d));
  EXPECT_TRUE(m.status().IsInvalidArgument());
  EXPECT_NE(m.status().message().find("tensor 'x' has 40 bytes"), std::string::npos);

  CheckpointData dup;
  dup.blobs.push_back(Blob::File("f", "a", 1));
  dup.blobs.push_back(Blob::File("f", "b", 1));
  EXPECT_TRUE(store->Save(Ref(1), std::move(dup)).status().IsInvalidArgument());
  CheckpointRef bad = Ref(1, "../escape");
  EXPECT_TRUE(store->Save(bad, CheckpointData()).status().IsInvalidArgument());
  EXPECT_TRUE(store->Save(Ref(1, "job1", 2, 2), CheckpointData()).status().IsInvalidArgument());
}

TEST_F(CheckpointStoreTest, SecondSaveOfSameBytesWritesNoChunks) {
  auto store = Open();
  std::vector<float> a = RandomFloats(200'000, 2), b = RandomFloats(50'000, 3);
  Result<Manifest> first = store->Save(Ref(1), Tensors({a, b}));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->written_bytes, first->total_bytes);
  EXPECT_EQ(first->reused_chunks, 0u);
  // Same bytes again, in another job of the same project.
  Result<Manifest> second = store->Save(Ref(1, "job2"), Tensors({a, b}));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->written_bytes, 0u);
  EXPECT_EQ(second->written_chunks, 0u);
  EXPECT_EQ(second->reused_chunks, first->written_chunks);
  EXPECT_TRUE(store->Verify("proj", "job2", 1).ok());
}

TEST_F(CheckpointStoreTest, OnePercentChangedWritesAtMostTwoPercent) {
  auto store = Open();
  std::vector<float> a = RandomFloats(2'000'000, 4);  // 8 MB, 123 chunks of 64 KiB
  ASSERT_TRUE(store->Save(Ref(1), Tensors({a})).ok());
  // 1% of the bytes, one contiguous run at an offset that is not chunk-aligned.
  size_t n = a.size() / 100, start = 777'777;
  for (size_t i = start; i < start + n; ++i) a[i] += 1.0f;
  Result<Manifest> m = store->Save(Ref(2), Tensors({a}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->written_bytes, m->total_bytes / 100);
  EXPECT_LE(m->written_bytes, m->total_bytes * 2 / 100);
  Result<CheckpointData> back = store->Load("proj", "job1", 2);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->blobs[0].view(), AsString(a));

  // LoRA-like: one tensor of 100 changes entirely; exactly its bytes are written.
  std::vector<std::vector<float>> many;
  for (int i = 0; i < 100; ++i) many.push_back(RandomFloats(10'000, 100 + i));
  ASSERT_TRUE(store->Save(Ref(3), Tensors(many)).ok());
  many[42] = RandomFloats(10'000, 999);
  Result<Manifest> lora = store->Save(Ref(4), Tensors(many));
  ASSERT_TRUE(lora.ok());
  EXPECT_EQ(lora->written_bytes, 40'000u);
}

TEST_F(CheckpointStoreTest, CompressedChunksRoundTripAndDeduplicateWithRawOnes) {
  CheckpointStoreOptions o = SmallChunks();
  o.compression = Compression::kZstd;
  auto store = Open(o);
  std::vector<float> zeros(100'000, 0.0f), random = RandomFloats(100'000, 5);
  Result<Manifest> m = store->Save(Ref(1), Tensors({zeros, random}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->blobs[0].chunks[0].compressed);   // zeros compress
  EXPECT_FALSE(m->blobs[1].chunks[0].compressed);  // random floats do not: stored raw
  EXPECT_LT(m->written_bytes, m->total_bytes * 6 / 10);
  // A store without compression reuses the compressed chunks.
  auto plain = Open();
  Result<Manifest> again = plain->Save(Ref(2), Tensors({zeros, random}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->written_bytes, 0u);
  Result<CheckpointData> back = plain->Load("proj", "job1", 2);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->blobs[0].view(), AsString(zeros));
  EXPECT_EQ(back->blobs[1].view(), AsString(random));
}

TEST_F(CheckpointStoreTest, FlippedByteIsNamedByVerifyAndLoad) {
  auto store = Open();
  std::vector<float> a = RandomFloats(50'000, 6), b = RandomFloats(100'000, 7);
  Result<Manifest> m = store->Save(Ref(5), Tensors({a, b}));
  ASSERT_TRUE(m.ok());
  const ChunkRef& victim = m->blobs[1].chunks[3];
  {
    std::fstream f(ChunkPath(victim), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(1234);
    char c = static_cast<char>(f.get());
    f.seekp(1234);
    f.put(static_cast<char>(c ^ 0x10));
  }
  Status v = store->Verify("proj", "job1", 5);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("blob 't1' chunk 3 "), std::string::npos) << v.message();
  EXPECT_NE(v.message().find("corrupt"), std::string::npos) << v.message();
  EXPECT_NE(v.message().find(victim.hash), std::string::npos) << v.message();
  Result<CheckpointData> l = store->Load("proj", "job1", 5);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("blob 't1' chunk 3 "), std::string::npos);

  Result<Blob> bad = store->LoadBlob("proj", "job1", 5, 0, "t1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("blob 't1' chunk 3 "), std::string::npos);
  // The undamaged blob still loads on its own.
  Result<Blob> good = store->LoadBlob("proj", "job1", 5, 0, "t0");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->view(), AsString(a));
  EXPECT_EQ(good->kind, BlobKind::kTensor);
  EXPECT_EQ(good->shape, std::vector<int64_t>{50'000});
  EXPECT_TRUE(store->LoadBlob("proj", "job1", 5, 0, "nope").status().IsNotFound());
  EXPECT_TRUE(store->LoadBlob("proj", "job1", 5, 1, "t0").status().IsNotFound());

  // A missing chunk is named too.
  fs::remove(ChunkPath(m->blobs[0].chunks[0]));
  Status missing = store->Verify("proj", "job1", 5);
  EXPECT_NE(missing.message().find("blob 't0' chunk 0 "), std::string::npos) << missing.message();
  EXPECT_NE(missing.message().find("missing"), std::string::npos) << missing.message();
}

// Repeated chunks inside one save land in different batches of the save's pipeline: each
// is written once, and every reference gets the stored copy's codec.
TEST_F(CheckpointStoreTest, RepeatsInsideOneSaveAreWrittenOnceAcrossBatches) {
  CheckpointStoreOptions o = SmallChunks();
  o.compression = Compression::kZstd;
  auto store = Open(o);
  std::vector<float> noise = RandomFloats(16'384, 21);  // one 64 KiB chunk, incompressible
  std::vector<float> zeros(16'384, 0.f);                // one chunk, compresses
  std::vector<std::vector<float>> tensors;
  for (int i = 0; i < 120; ++i) tensors.push_back(i % 2 == 0 ? noise : zeros);
  tensors.push_back(RandomFloats(40'000, 22));  // 3 distinct chunks
  Result<Manifest> m = store->Save(Ref(1), Tensors(tensors));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->written_chunks, 5u);
  EXPECT_EQ(m->reused_chunks, 0u);
  for (size_t i = 0; i < 120; ++i) {
    ASSERT_EQ(m->blobs[i].chunks.size(), 1u);
    EXPECT_EQ(m->blobs[i].chunks[0].compressed, i % 2 == 1) << i;
  }
  Result<CheckpointData> d = store->Load("proj", "job1", 1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(d->blobs[i].view(), AsString(tensors[i]));
}

TEST_F(CheckpointStoreTest, LoadIntoFillsTheCallersMemoryAndChecksTargets) {
  auto store = Open();
  std::vector<float> a = RandomFloats(50'000, 11), b = RandomFloats(100'000, 12);
  std::vector<std::vector<float>> both = {a, b};  // Tensors() borrows: keep them alive
  CheckpointData d = Tensors(both);
  d.metrics["loss"] = 0.25;
  ASSERT_TRUE(store->Save(Ref(7), std::move(d)).ok());

  std::vector<float> got_a(a.size(), 0.f), got_b(b.size(), 0.f);
  Result<Manifest> m = store->LoadInto(
      "proj", "job1", 7, 0,
      {{"t0", got_a.data(), got_a.size() * 4}, {"t1", got_b.data(), got_b.size() * 4}});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(got_a, a);
  EXPECT_EQ(got_b, b);
  EXPECT_EQ(m->metrics.at("loss"), 0.25);

  // Only the blobs asked for are read.
  std::vector<float> only_b(b.size(), 0.f);
  ASSERT_TRUE(
      store->LoadInto("proj", "job1", 7, 0, {{"t1", only_b.data(), only_b.size() * 4}}).ok());
  EXPECT_EQ(only_b, b);

  // Targets that do not fit are refused before anything is written into them.
  std::vector<float> small(10, 9.f);
  Result<Manifest> wrong_size =
      store->LoadInto("proj", "job1", 7, 0, {{"t0", small.data(), small.size() * 4}});
  ASSERT_TRUE(wrong_size.status().IsInvalidArgument());
  EXPECT_NE(wrong_size.status().message().find("blob 't0' has 200000 bytes; the target has 40"),
            std::string::npos)
      << wrong_size.status().message();
  EXPECT_EQ(small, std::vector<float>(10, 9.f));
  Result<Manifest> unknown =
      store->LoadInto("proj", "job1", 7, 0, {{"nope", small.data(), small.size() * 4}});
  ASSERT_TRUE(unknown.status().IsInvalidArgument());
  EXPECT_NE(unknown.status().message().find("'nope' is not in the checkpoint"), std::string::npos);
  EXPECT_TRUE(store
                  ->LoadInto("proj", "job1", 7, 0,
                             {{"t1", only_b.data(), only_b.size() * 4},
                              {"t1", only_b.data(), only_b.size() * 4}})
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(store->LoadInto("proj", "job1", 7, 0, {{"t0", nullptr, a.size() * 4}})
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(store->LoadInto("proj", "job1", 8, 0, {}).status().IsNotFound());
  EXPECT_TRUE(store->LoadInto("proj", "job1", 7, 3, {}).status().IsNotFound());

  // A damaged chunk is named, as by Load.
  const ChunkRef& victim = m->blobs[1].chunks[2];
  {
    std::fstream f(ChunkPath(victim), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(10);
    f.put('\x7f');
  }
  Result<Manifest> bad =
      store->LoadInto("proj", "job1", 7, 0, {{"t1", got_b.data(), got_b.size() * 4}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("blob 't1' chunk 2 "), std::string::npos)
      << bad.status().message();
}

TEST_F(CheckpointStoreTest, PartialSavesAreInvisibleAndLatestStaysCommitted) {
  auto store = Open();
  std::vector<float> a = RandomFloats(100'000, 8), b = RandomFloats(100'000, 9);
  ASSERT_TRUE(store->Save(Ref(1), Tensors({a})).ok());

  // Crash after the chunks, before the manifest: the manifest write never happens.
  hooked_->before = [](std::string_view op, std::string_view key) {
    if (op == "put" && EndsWith(key, "rank-00000.json")) return Status::IOError("killed");
    return Status::Ok();
  };
  Result<Manifest> failed = store->Save(Ref(2), Tensors({b}));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("nothing was committed"), std::string::npos);
  hooked_->before = [](std::string_view, std::string_view) { return Status::Ok(); };
  // ... and a manifest left as a temporary file by a writer that died before its rename.
  fs::path step2 = fs::path(root_) / "checkpoints/proj/jobs/job1/steps/00000000000000000002";
  fs::create_directories(step2);
  std::ofstream(step2 / ".tmp-rank-00000.json-999-0") << "{\"format\": \"trunc";

  // Rank 0 of 2 committed; rank 1 never did.
  ASSERT_TRUE(store->Save(Ref(3, "job1", 0, 2), Tensors({b})).ok());
  // Ranks of two different attempts do not make a checkpoint.
  ASSERT_TRUE(store->Save(Ref(4, "job1", 0, 2, /*attempt=*/0), Tensors({b})).ok());
  ASSERT_TRUE(store->Save(Ref(4, "job1", 1, 2, /*attempt=*/1), Tensors({b})).ok());

  Result<std::optional<CheckpointInfo>> latest = store->Latest("proj", "job1");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 1);
  Result<std::vector<CheckpointInfo>> list = store->List("proj", "job1");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(*store->ListIncomplete("proj", "job1"), (std::vector<int64_t>{2, 3, 4}));
  Result<CheckpointData> partial = store->Load("proj", "job1", 3);
  EXPECT_TRUE(partial.status().IsNotFound());
  EXPECT_NE(partial.status().message().find("incomplete"), std::string::npos);
  Result<CheckpointData> back = store->Load("proj", "job1", 1);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->blobs[0].view(), AsString(a));

  // The last rank completes step 3: it becomes the latest.
  ASSERT_TRUE(store->Save(Ref(3, "job1", 1, 2), Tensors({a})).ok());
  EXPECT_EQ((*store->Latest("proj", "job1"))->step, 3);
  EXPECT_EQ((*store->Latest("proj", "job1"))->world_size, 2);
  Result<CheckpointData> rank1 = store->Load("proj", "job1", 3, 1);
  ASSERT_TRUE(rank1.ok());
  EXPECT_EQ(rank1->blobs[0].view(), AsString(a));
  // A complete checkpoint is immutable.
  EXPECT_TRUE(store->Save(Ref(3, "job1", 0, 2), Tensors({a})).status().IsAlreadyExists());
}

TEST_F(CheckpointStoreTest, FailedWriteGivesClearErrorAndCommitsNothing) {
  auto store = Open();
  std::vector<float> a = RandomFloats(100'000, 10), b = RandomFloats(100'000, 11);
  ASSERT_TRUE(store->Save(Ref(1), Tensors({a})).ok());
  std::atomic<int> chunk_puts{0};
  hooked_->before = [&](std::string_view op, std::string_view key) {
    if (op == "put" && key.find("/chunks/") != std::string_view::npos && ++chunk_puts == 3) {
      return Status::ResourceExhausted("disk full: cannot write " + std::string(key) +
                                       ": No space left on device");
    }
    return Status::Ok();
  };
  Result<Manifest> m = store->Save(Ref(2), Tensors({b}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("disk full"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("job1 step 2"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("blob 't0'"), std::string::npos) << m.status().message();
  hooked_->before = [](std::string_view, std::string_view) { return Status::Ok(); };

  EXPECT_EQ((*store->Latest("proj", "job1"))->step, 1);
  EXPECT_TRUE(store->ListIncomplete("proj", "job1")->empty());
  EXPECT_TRUE(store->Get("proj", "job1", 2).status().IsNotFound());
  EXPECT_TRUE(local_->List("checkpoints/proj/intents")->empty());  // the intent was dropped
  // The orphaned chunks go at the next collection; step 1 is untouched.
  Result<GcStats> gc = store->CollectGarbage("proj");
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_GE(gc->chunks_deleted, 2u);
  EXPECT_TRUE(store->Verify("proj", "job1", 1).ok());
  // The same save succeeds once there is space again.
  ASSERT_TRUE(store->Save(Ref(2), Tensors({b})).ok());
  EXPECT_TRUE(store->Verify("proj", "job1", 2).ok());
}

TEST_F(CheckpointStoreTest, AsyncSaveBlocksOnlyForTheSnapshot) {
  auto store = Open();
  std::vector<float> a = RandomFloats(200'000, 12);
  const std::string original = AsString(a);
  // Every chunk write waits until the test lets it go: SaveAsync must return anyway.
  Mutex mu;
  CondVar cv;
  bool released = false;  // read and written under mu
  hooked_->before = [&](std::string_view op, std::string_view key) {
    if (op == "put" && key.find("/chunks/") != std::string_view::npos) {
      MutexLock lock(mu);
      while (!released) cv.Wait(mu);
    }
    return Status::Ok();
  };
  Result<SaveHandle> h = store->SaveAsync(Ref(1), Tensors({a}));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_FALSE(h->Done());
  // Training goes on and changes its tensors; the checkpoint has the snapshot.
  std::fill(a.begin(), a.end(), 7.0f);

  // A second save waits for the first before it returns (saves do not coalesce).
  std::atomic<bool> first_done_when_second_returned{false};
  std::vector<float> b = RandomFloats(1000, 13);
  std::thread second([&] {
    Result<SaveHandle> h2 = store->SaveAsync(Ref(2), Tensors({b}));
    first_done_when_second_returned = h->Done();
    ASSERT_TRUE(h2.ok());
    EXPECT_TRUE(h2->Wait().ok());
  });
  {
    MutexLock lock(mu);
    released = true;
  }
  cv.NotifyAll();
  Result<Manifest> m = h->Wait();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(h->Done());
  EXPECT_GE(h->BlockedMicros(), 0);
  second.join();
  EXPECT_TRUE(first_done_when_second_returned.load());
  Result<CheckpointData> back = store->Load("proj", "job1", 1);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->blobs[0].view(), original);
  EXPECT_EQ((*store->Latest("proj", "job1"))->step, 2);
}

TEST_F(CheckpointStoreTest, HandedOverBuffersAreNotCopied) {
  auto store = Open();
  std::vector<float> a = RandomFloats(10'000, 14);
  checkpoints::Bytes owned = checkpoints::Bytes::CopyOf(AsString(a));
  const std::byte* before = owned.data();
  CheckpointData d;
  d.blobs.push_back(Blob::OwnedTensor("w", DType::kF32, {10'000}, std::move(owned)));
  EXPECT_EQ(d.blobs[0].data(), before);
  Result<Manifest> m = store->Save(Ref(1), std::move(d));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(store->Load("proj", "job1", 1)->blobs[0].view(), AsString(a));
}

TEST_F(CheckpointStoreTest, DeleteHidesThenRemoves) {
  auto store = Open();
  std::vector<float> a = RandomFloats(1000, 15);
  ASSERT_TRUE(store->Save(Ref(1), Tensors({a})).ok());
  ASSERT_TRUE(store->Save(Ref(2), Tensors({a})).ok());
  ASSERT_TRUE(store->Delete("proj", "job1", 2).ok());
  EXPECT_EQ((*store->Latest("proj", "job1"))->step, 1);
  EXPECT_TRUE(store->Delete("proj", "job1", 2).IsNotFound());
  EXPECT_EQ(*store->ListJobs("proj"), (std::vector<std::string>{"job1"}));
}

TEST_F(CheckpointStoreTest, ExportsSafetensorsThatParseBack) {
  auto store = Open();
  std::vector<float> w = RandomFloats(6, 16);
  std::vector<uint16_t> bf16 = {0x3f80, 0x4000, 0xbf80, 0x0000};
  std::vector<int64_t> ids = {42};
  CheckpointData d;
  d.blobs.push_back(Blob::Tensor("layer.weight", DType::kF32, {2, 3}, w.data(), 24));
  d.blobs.push_back(Blob::File("tokenizer.json", "{}", 2));  // files are not tensors: skipped
  d.blobs.push_back(Blob::Tensor("layer.bias", DType::kBF16, {4}, bf16.data(), 8));
  d.blobs.push_back(Blob::Tensor("step_ids", DType::kI64, {1}, ids.data(), 8));
  d.metrics = {{"loss", 0.5}};
  ASSERT_TRUE(store->Save(Ref(9), std::move(d)).ok());
  std::string path = root_ + "/model.safetensors";
  ASSERT_TRUE(store->ExportSafetensors("proj", "job1", 9, 0, path).ok());

  // A minimal safetensors reader.
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(file.size(), 8u);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(file[i]);
  EXPECT_EQ(header_len % 8, 0u);
  ASSERT_LE(8 + header_len, file.size());
  Result<json::object> header = ParseJsonObject(std::string_view(file).substr(8, header_len));
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  std::string_view data = std::string_view(file).substr(8 + header_len);
  EXPECT_EQ(header->size(), 4u);  // 3 tensors + __metadata__
  EXPECT_EQ(header->at("__metadata__").at("trainyard.step").as_string(), "9");
  auto tensor = [&](const char* name) {
    const json::object& t = header->at(name).as_object();
    const json::array& off = t.at("data_offsets").as_array();
    return std::make_tuple(
        std::string(t.at("dtype").as_string()), t.at("shape").as_array(),
        data.substr(off[0].to_number<uint64_t>(),
                    off[1].to_number<uint64_t>() - off[0].to_number<uint64_t>()));
  };
  auto [dt0, shape0, bytes0] = tensor("layer.weight");
  EXPECT_EQ(dt0, "F32");
  EXPECT_EQ(shape0, (json::array{2, 3}));
  EXPECT_EQ(bytes0, AsString(w));
  auto [dt1, shape1, bytes1] = tensor("layer.bias");
  EXPECT_EQ(dt1, "BF16");
  EXPECT_EQ(shape1, (json::array{4}));
  EXPECT_EQ(bytes1, std::string(reinterpret_cast<const char*>(bf16.data()), 8));
  auto [dt2, shape2, bytes2] = tensor("step_ids");
  EXPECT_EQ(dt2, "I64");
  EXPECT_EQ(bytes2, std::string(reinterpret_cast<const char*>(ids.data()), 8));
  EXPECT_EQ(data.size(), 24u + 8u + 8u);  // no holes, nothing after the last tensor
}

class CheckpointGcTest : public CheckpointStoreTest {};

TEST_F(CheckpointGcTest, DeletesOnlyUnreferencedChunks) {
  auto store = Open();
  std::vector<float> shared = RandomFloats(100'000, 20), only1 = RandomFloats(100'000, 21),
                     only2 = RandomFloats(100'000, 22);
  Result<Manifest> m1 = store->Save(Ref(1), Tensors({shared, only1}));
  ASSERT_TRUE(m1.ok());
  ASSERT_TRUE(store->Save(Ref(2), Tensors({shared, only2})).ok());
  ASSERT_TRUE(store->Save(Ref(1, "job2"), Tensors({only2})).ok());
  Result<GcStats> none = store->CollectGarbage("proj");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->chunks_deleted, 0u);
  EXPECT_EQ(none->manifests_read, 3u);

  ASSERT_TRUE(store->Delete("proj", "job1", 1).ok());
  Result<GcStats> gc = store->CollectGarbage("proj");
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->chunks_deleted, m1->blobs[1].chunks.size());  // only1's chunks
  EXPECT_EQ(gc->bytes_deleted, only1.size() * 4);
  EXPECT_TRUE(store->Verify("proj", "job1", 2).ok());
  EXPECT_TRUE(store->Verify("proj", "job2", 1).ok());
  EXPECT_TRUE(local_->List("checkpoints/proj/gc")->empty());  // the marker is gone
}

// A save that found its chunks already stored must not lose them to a collection that
// runs before the save commits: its intent protects them.
TEST_F(CheckpointGcTest, IntentProtectsChunksOfASaveInProgress) {
  auto store = Open();
  CheckpointStore collector(local_, clock_, random_, SmallChunks());
  std::vector<float> a = RandomFloats(100'000, 23);
  Result<Manifest> m1 = store->Save(Ref(1), Tensors({a}));
  ASSERT_TRUE(m1.ok());
  ASSERT_TRUE(store->Delete("proj", "job1", 1).ok());  // a's chunks are now unreferenced
  std::optional<Result<GcStats>> gc;
  hooked_->before = [&](std::string_view op, std::string_view key) {
    // After the save decided which chunks exist, before its manifest.
    if (op == "sync" && EndsWith(key, "/chunks") && !gc) gc = collector.CollectGarbage("proj");
    return Status::Ok();
  };
  Result<Manifest> m2 = store->Save(Ref(2), Tensors({a}));
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  EXPECT_EQ(m2->written_chunks, 0u);  // all reused
  ASSERT_TRUE(gc.has_value() && gc->ok());
  EXPECT_EQ((*gc)->chunks_deleted, 0u);
  EXPECT_EQ((*gc)->intents_live, 1u);
  EXPECT_TRUE(store->Verify("proj", "job1", 2).ok());
}

// A save that starts while a collection sweeps waits for it, then rewrites what it removed.
TEST_F(CheckpointGcTest, SaveWaitsForACollectionInProgress) {
  auto store = Open();
  CheckpointStore collector(hooked_, clock_, random_, SmallChunks());
  std::vector<float> a = RandomFloats(100'000, 24);
  Result<Manifest> m1 = store->Save(Ref(1), Tensors({a}));
  ASSERT_TRUE(m1.ok());
  ASSERT_TRUE(store->Delete("proj", "job1", 1).ok());
  std::atomic<int> gc_lists{0};
  std::atomic<bool> started{false};
  std::optional<Result<Manifest>> saved;
  std::thread saver;
  hooked_->before = [&](std::string_view op, std::string_view key) {
    if (op == "list" && EndsWith(key, "/gc")) ++gc_lists;
    if (op == "delete" && key.find("/chunks/") != std::string_view::npos &&
        !started.exchange(true)) {
      int seen = gc_lists.load();
      saver = std::thread([&] { saved = store->Save(Ref(2), Tensors({a})); });
      // Let the collection go on only once the save has looked for collections.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (gc_lists.load() == seen && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
    }
    return Status::Ok();
  };
  Result<GcStats> gc = collector.CollectGarbage("proj");
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, m1->written_chunks);
  ASSERT_TRUE(started.load());
  saver.join();
  ASSERT_TRUE(saved.has_value() && saved->ok()) << saved->status().ToString();
  EXPECT_EQ((*saved)->written_chunks, m1->written_chunks);  // it saw the sweep's result
  EXPECT_TRUE(store->Verify("proj", "job1", 2).ok());
}

// A save that died (here: its manifest write and the removal of its intent failed) leaves an
// intent that protects its chunks until intent_ttl_ms has passed; then a collection removes
// the intent and the chunks.
TEST_F(CheckpointGcTest, IntentOfADeadSaveProtectsItsChunksUntilItExpires) {
  CheckpointStoreOptions o = SmallChunks();
  auto store = Open(o);
  std::vector<float> a = RandomFloats(100'000, 25);
  hooked_->before = [](std::string_view op, std::string_view key) {
    if (op == "put" && EndsWith(key, "rank-00000.json")) return Status::IOError("killed");
    if (op == "delete" && key.find("/intents/") != std::string_view::npos) {
      return Status::IOError("killed");
    }
    return Status::Ok();
  };
  ASSERT_FALSE(store->Save(Ref(1), Tensors({a})).ok());
  hooked_->before = [](std::string_view, std::string_view) { return Status::Ok(); };
  ASSERT_FALSE(local_->List("checkpoints/proj/intents")->empty());

  clock_.AdvanceMillis(o.intent_ttl_ms);  // not older than the TTL yet
  Result<GcStats> kept = store->CollectGarbage("proj");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->intents_live, 1u);
  EXPECT_EQ(kept->intents_expired, 0u);
  EXPECT_EQ(kept->chunks_deleted, 0u);
  EXPECT_GT(kept->chunks_live, 0u);

  clock_.AdvanceMillis(1);
  Result<GcStats> expired = store->CollectGarbage("proj");
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  EXPECT_EQ(expired->intents_live, 0u);
  EXPECT_EQ(expired->intents_expired, 1u);
  EXPECT_EQ(expired->chunks_deleted, kept->chunks_live);
  EXPECT_TRUE(local_->List("checkpoints/proj/intents")->empty());
}

// A collection that died leaves its marker: saves wait for it until its lease has run out,
// and the next collection removes it.
TEST_F(CheckpointGcTest, SaveWaitsOutTheLeaseOfADeadCollection) {
  CheckpointStoreOptions o = SmallChunks();
  auto store = Open(o);
  json::object marker;
  marker["started_ms"] = clock_.NowMillis();
  marker["expires_ms"] = clock_.NowMillis() + o.gc_lease_ms;
  ASSERT_TRUE(local_->PutBytes("checkpoints/proj/gc/dead.json", json::serialize(marker)).ok());
  std::atomic<int> polls{0};
  hooked_->before = [&](std::string_view op, std::string_view key) {
    if (op == "list" && EndsWith(key, "/gc")) ++polls;
    return Status::Ok();
  };
  std::vector<float> a = RandomFloats(1000, 26);
  Result<SaveHandle> h = store->SaveAsync(Ref(1), Tensors({a}));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  // The save looks at the marker again and again and does not commit.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (polls.load() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_GE(polls.load(), 3);
  EXPECT_FALSE(h->Done());
  EXPECT_TRUE(store->ListIncomplete("proj", "job1")->empty());

  clock_.AdvanceMillis(o.gc_lease_ms);  // the lease has run out
  Result<Manifest> m = h->Wait();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*store->Latest("proj", "job1"))->step, 1);

  clock_.AdvanceMillis(1);  // past the lease: dead
  ASSERT_TRUE(store->CollectGarbage("proj").ok());
  EXPECT_TRUE(local_->List("checkpoints/proj/gc")->empty());
}

// A collection stops deleting when its lease runs out (savers no longer wait for it then).
TEST_F(CheckpointGcTest, CollectionStopsWhenItsLeaseRunsOut) {
  CheckpointStoreOptions o = SmallChunks();
  o.io_threads = 1;  // one sweeper: the deletions happen one after another
  auto store = Open(o);
  std::vector<float> a = RandomFloats(100'000, 27);
  Result<Manifest> m = store->Save(Ref(1), Tensors({a}));
  ASSERT_TRUE(m.ok());
  ASSERT_GE(m->written_chunks, 2u);
  ASSERT_TRUE(store->Delete("proj", "job1", 1).ok());
  int deletes = 0;
  hooked_->before = [&](std::string_view op, std::string_view key) {
    if (op == "delete" && key.find("/chunks/") != std::string_view::npos && ++deletes == 1) {
      clock_.AdvanceMillis(o.gc_lease_ms);
    }
    return Status::Ok();
  };
  Result<GcStats> gc = store->CollectGarbage("proj");
  ASSERT_FALSE(gc.ok());
  EXPECT_EQ(gc.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(gc.status().message().find("past its lease"), std::string::npos)
      << gc.status().message();
  EXPECT_EQ(deletes, 1);
  EXPECT_TRUE(local_->List("checkpoints/proj/gc")->empty());  // its marker is gone
  hooked_->before = [](std::string_view, std::string_view) { return Status::Ok(); };
  Result<GcStats> again = store->CollectGarbage("proj");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->chunks_deleted, m->written_chunks - 1);
}

TEST_F(CheckpointGcTest, ConcurrentSavesRetentionAndCollectionLoseNoLiveChunk) {
  std::vector<float> base = RandomFloats(150'000, 30);  // shared by every job: deduplicated
  std::atomic<bool> stop{false};
  std::atomic<int> collections{0};
  std::thread gc_thread([&] {
    CheckpointStore collector(local_, clock_, random_, SmallChunks());
    while (!stop.load()) {
      Result<GcStats> s = collector.CollectGarbage("proj");
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      ++collections;
    }
  });
  std::vector<std::thread> savers;
  for (int j = 0; j < 3; ++j) {
    savers.emplace_back([&, j] {
      CheckpointStore store(local_, clock_, random_, SmallChunks());
      std::string job = "job" + std::to_string(j);
      RetentionPolicy keep2;
      keep2.keep_last = 2;
      for (int step = 1; step <= 12; ++step) {
        std::vector<float> delta = RandomFloats(30'000, 1000 * j + step);
        // Every other step reuses the previous step's delta's bytes as well.
        std::vector<float> prev = RandomFloats(30'000, 1000 * j + step - (step % 2));
        Result<Manifest> m = store.Save(Ref(step, job), Tensors({base, delta, prev}));
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        Result<std::vector<CheckpointInfo>> all = store.List("proj", job);
        ASSERT_TRUE(all.ok());
        Result<std::vector<int64_t>> drop = StepsToDelete(*all, {}, keep2);
        ASSERT_TRUE(drop.ok());
        for (int64_t s : *drop) ASSERT_TRUE(store.Delete("proj", job, s).ok());
      }
    });
  }
  for (std::thread& t : savers) t.join();
  // At least one more full collection after all saves.
  int seen = collections.load();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (collections.load() < seen + 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  stop = true;
  gc_thread.join();
  EXPECT_GE(collections.load(), seen + 2);
  CheckpointStore store(local_, clock_, random_, SmallChunks());
  for (int j = 0; j < 3; ++j) {
    std::string job = "job" + std::to_string(j);
    Result<std::vector<CheckpointInfo>> all = store.List("proj", job);
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), 2u);
    for (const CheckpointInfo& c : *all) {
      Status v = store.Verify("proj", job, c.step);
      EXPECT_TRUE(v.ok()) << v.ToString();
    }
  }
}

TEST(CheckpointRetentionTest, KeepsLastBestAndEveryNth) {
  std::vector<CheckpointInfo> all;
  for (int64_t step = 100; step <= 1000; step += 100) {
    CheckpointInfo c;
    c.step = step;
    Manifest m;
    if (step != 300) m.metrics["eval_loss"] = step == 200 ? 0.1 : (step == 500 ? 0.2 : 1.0);
    c.ranks.push_back(m);
    all.push_back(c);
  }
  RetentionPolicy p;
  p.keep_last = 2;
  p.keep_best = 2;
  p.metric = "eval_loss";
  p.keep_every_steps = 400;
  Result<std::vector<int64_t>> del = StepsToDelete(all, {50, 1100}, p);
  ASSERT_TRUE(del.ok());
  // Kept: 900, 1000 (last), 200, 500 (best), 400, 800 (every 400th).
  EXPECT_EQ(*del, (std::vector<int64_t>{50, 100, 300, 600, 700}));

  p = RetentionPolicy();
  EXPECT_EQ(*StepsToDelete(all, {}, p), std::vector<int64_t>{});  // no rule: keep all
  p.keep_last = 1;
  EXPECT_EQ(StepsToDelete(all, {}, p)->size(), 9u);
  p.higher_is_better = true;
  p.keep_best = 1;
  EXPECT_TRUE(StepsToDelete(all, {}, p).status().IsInvalidArgument());  // no metric
  p.metric = "eval_loss";
  // Best when higher is better: 1.0 at several steps, the latest such (1000) wins; it is
  // also the last.
  EXPECT_EQ(StepsToDelete(all, {}, p)->size(), 9u);
}

// A real crash: a child process saves in a loop and is killed with SIGKILL; afterwards the
// latest checkpoint loads and verifies and holds exactly the data of its step.
TEST_F(CheckpointStoreTest, SigkillDuringSavesLeavesLatestLoadable) {
  auto data_for = [](int64_t step) {
    return std::vector<std::vector<float>>{RandomFloats(500'000, 5000 + step),
                                           RandomFloats(500'000, 7)};
  };
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto blobs = blob::OpenLocalBlobStore(root_);
    if (!blobs.ok()) ::_exit(2);
    SystemClock clock;  // the child's own: a real process, as a trainer is
    SecureRandom random;
    CheckpointStore store(std::shared_ptr<blob::BlobStore>(std::move(*blobs)), clock, random,
                          SmallChunks());
    for (int64_t step = 1;; ++step) {
      auto tensors = data_for(step);
      if (!store.Save(Ref(step), Tensors(tensors)).ok()) ::_exit(3);
    }
  }
  auto store = Open();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int64_t seen = 0;
  while (seen < 3 && std::chrono::steady_clock::now() < deadline) {
    Result<std::optional<CheckpointInfo>> l = store->Latest("proj", "job1");
    if (l.ok() && l->has_value()) seen = (*l)->step;
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the saving child exited early";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // poll interval
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_GE(seen, 3) << "the child did not commit 3 checkpoints in time";

  Result<std::optional<CheckpointInfo>> latest = store->Latest("proj", "job1");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  int64_t step = (*latest)->step;
  EXPECT_GE(step, seen);
  EXPECT_TRUE(store->Verify("proj", "job1", step).ok());
  Result<CheckpointData> back = store->Load("proj", "job1", step);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  auto expected = data_for(step);
  EXPECT_EQ(back->blobs[0].view(), AsString(expected[0]));
  EXPECT_EQ(back->blobs[1].view(), AsString(expected[1]));
  // Whatever the kill interrupted is not listed as complete.
  Result<std::vector<int64_t>> incomplete = store->ListIncomplete("proj", "job1");
  ASSERT_TRUE(incomplete.ok());
  for (int64_t s : *incomplete) EXPECT_GT(s, step);
  // The dead save's intent keeps its chunks until it expires; a collection keeps every
  // committed checkpoint intact.
  ASSERT_TRUE(store->CollectGarbage("proj").ok());
  EXPECT_TRUE(store->Verify("proj", "job1", step).ok());
}

}  // namespace
}  // namespace trainyard::checkpoints
