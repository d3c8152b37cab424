// BlobStore: where artifacts and checkpoint chunks live. Keys are relative,
// '/'-separated paths ("3/abc/artifacts/model/MLmodel"); ValidateKey() rejects
// anything that could escape the store ("..", absolute paths, backslashes, NUL).
//
// Implementations are thread-safe. Writes are atomic: a reader sees the whole
// object or none of it. When a Put returns ok, the object's bytes are durable; that
// its name survives a crash may additionally need SyncDirectory() (local files).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::blob {

struct BlobEntry {
  std::string name;  // the last path segment
  bool is_dir = false;
  int64_t size = 0;  // files only
  // When the object was last written, in ms since the epoch (files only): the file's mtime
  // for a local store, ListObjectsV2's LastModified (second precision on some servers) for S3.
  int64_t modified_ms = 0;
};

// Ok when `key` is a safe relative path; `allow_empty` accepts "" (the root, for listing).
Status ValidateKey(std::string_view key, bool allow_empty = false);

class BlobStore {
 public:
  virtual ~BlobStore() = default;

  virtual Status PutBytes(std::string_view key, std::string_view data) = 0;
  // Writes the object only if no object exists at `key`, atomically: of any number of callers
  // racing for one key, exactly one gets ok and the others AlreadyExists; the winner's bytes are
  // never replaced by this call. Durable like PutBytes when it returns ok; the local backend
  // also syncs the key's directory, so the name survives a crash too. Unavailable means the
  // outcome is unknown (the write may still land): re-read the key and compare the bytes.
  // The building block of Delta log commits (docs/decisions/0011). Stores that cannot do it
  // atomically answer NotImplemented.
  virtual Status PutIfAbsent(std::string_view key, std::string_view data);
  // Takes the file at `local_path` (moved when possible, else copied).
  virtual Status PutFile(std::string_view key, const std::string& local_path) = 0;
  // A local file holding the object's bytes, for streaming to a client.
  virtual Result<std::string> LocalPathForRead(std::string_view key) = 0;
  virtual Result<std::string> GetBytes(std::string_view key) = 0;
  // Immediate children of the directory `prefix` ("" is the root); sorted by name.
  // An absent directory lists as empty.
  virtual Result<std::vector<BlobEntry>> List(std::string_view prefix) = 0;
  // Deletes an object or, recursively, a directory. Absent keys are NotFound.
  virtual Status Delete(std::string_view key) = 0;
  virtual Result<bool> IsDirectory(std::string_view key) = 0;

  // Whether an object (not a directory) exists at `key`.
  virtual Result<bool> Exists(std::string_view key) = 0;
  // Reads the whole object into `dst` (owned by the caller) and returns its size, so that
  // large objects land in their final buffer without a copy. FailedPrecondition when the
  // object is larger than `capacity`. The default goes through GetBytes.
  virtual Result<size_t> ReadInto(std::string_view key, char* dst, size_t capacity);
  // Makes durable the names of the objects put into or deleted from directory `dir` so
  // far. A no-op where a Put is durable by itself (object stores).
  virtual Status SyncDirectory(std::string_view dir) { return Status::Ok(); }
};

// Files under `root`, written to a temporary name, fsynced, then renamed into place.
Result<std::unique_ptr<BlobStore>> OpenLocalBlobStore(const std::string& root);
// Removes the temporary files of writes a crashed process left under a local store's `root`
// (call it while nothing writes there); returns how many.
int64_t RemoveLocalTemporaryFiles(const std::string& root);

// The store a location names: "s3://bucket[/prefix]" is S3 (see s3_blob_store.h for the
// environment variables it reads; downloads for LocalPathForRead are cached in `cache_dir`,
// "" for a temporary directory), anything else a local directory.
Result<std::unique_ptr<BlobStore>> OpenBlobStore(const std::string& location,
                                                 const std::string& cache_dir = "");

}  // namespace trainyard::blob
