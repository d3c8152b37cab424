// Paths named by users and jobs (artifact paths, checkpoint blob names), and writing them
// beneath a directory without escaping it.
//
// A safe relative path is: non-empty, at most `max_bytes` long, '/'-separated segments of at
// most 255 bytes, no leading '/', no empty, '.' or '..' segment (so no "a//b" or trailing '/'),
// no NUL, '\' or other control character.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard {

inline constexpr size_t kMaxRelativePathBytes = 4096;
inline constexpr size_t kMaxPathSegmentBytes = 255;

// Ok when `path` is a safe relative path; otherwise InvalidArgument naming `field`.
Status ValidateRelativePath(std::string_view path, std::string_view field,
                            size_t max_bytes = kMaxRelativePathBytes);

// Writes `data` to `rel` (a safe relative path) beneath the directory `root`, creating the
// directories between. Every component is opened with O_NOFOLLOW relative to its parent, so a
// symbolic link planted anywhere below `root` is refused (InvalidArgument), never followed out
// of it. The file is written to a temporary name and renamed into place (which replaces a link
// at the final name instead of writing through it).
Status WriteFileBeneath(const std::string& root, std::string_view rel, std::string_view data);

// Renames `from_rel` beneath `from_root` to `to_rel` beneath `to_root`, with the same rules.
Status RenameBeneath(const std::string& from_root, std::string_view from_rel,
                     const std::string& to_root, std::string_view to_rel);

// Removes `path` and, when it is a directory, everything below it, for trees another account
// may write into (a replica's directories, owned by its job's account). Nothing is followed:
// every directory below is opened with O_NOFOLLOW relative to its parent, so a symbolic link
// (at `path` itself or planted anywhere below, even swapped in while this runs) is removed as
// a link and its target is left alone. The directories above `path` must not be writable by
// others. Returns how many entries it removed (0 when `path` did not exist).
Result<int64_t> RemoveTreeSafely(const std::string& path);

// The last `max_bytes` of the file at `path`, for files a job controls (its logs): never
// follows a link, never blocks on a FIFO, reads only regular files, and reads at most
// `max_bytes`. "" when the file is missing, empty or not a regular file.
std::string ReadFileTailSafely(const std::string& path, size_t max_bytes);

// Up to `max_bytes` of the file at `path` from `offset` (clamped to its size), with the same
// care: one open that never follows a link nor blocks on a FIFO, so a job that swaps its file
// for a link between a check and the read cannot make the server read something else.
// NotFound when missing; FailedPrecondition when not a regular file.
struct FileRange {
  std::string data;
  int64_t offset = 0;  // where `data` starts: the requested offset, clamped to the size
  int64_t file_size = 0;
};
Result<FileRange> ReadFileRangeSafely(const std::string& path, int64_t offset, size_t max_bytes);

}  // namespace trainyard
