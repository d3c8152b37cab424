// libFuzzer target for reading a checkpoint: the input is the bytes of
// `_delta_log/00000000000000000000.checkpoint.parquet` (pointed to by `_last_checkpoint`), and
// loading the table must return a snapshot or an error, never crash. The add column's fast
// decoder (delta_snapshot.cc) and the JSON path behind it both see these bytes.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "trainyard/blob/blob_store.h"
#include "trainyard/tables/delta_snapshot.h"

namespace {

// One store for the process (a fuzz target runs single-threaded).
trainyard::blob::BlobStore& Store() {
  static std::unique_ptr<trainyard::blob::BlobStore> store = [] {
    auto dir = std::filesystem::temp_directory_path() /
               ("ty_checkpoint_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return std::move(trainyard::blob::OpenLocalBlobStore(dir.string())).value();
  }();
  return *store;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& store = Store();
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!store.PutBytes("t/_delta_log/00000000000000000000.checkpoint.parquet", bytes).ok() ||
      !store.PutBytes("t/_delta_log/_last_checkpoint", "{\"version\":0,\"size\":1}").ok()) {
    return 0;
  }
  trainyard::tables::DeltaLog log(store, "t");
  auto snapshot = log.LoadLatest();
  if (snapshot.ok()) {
    for (const auto& [path, add] : (*snapshot)->files) (void)trainyard::tables::DecodePathUri(path);
  }
  return 0;
}
