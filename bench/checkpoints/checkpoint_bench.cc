// checkpoint_bench: the checkpoint store against the raw bandwidth of the same disk
// (O_DIRECT sequential write and read) and against torch.save/torch.load of the same
// tensors, plus the blocking part of an async save and the bytes a 1%-changed checkpoint
// writes. Prints a table on stderr and one JSON line per figure on stdout. See README.md.
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/blob/blob_store.h"
#include "trainyard/checkpoints/checkpoint_store.h"
#include "trainyard/common/json.h"

namespace fs = std::filesystem;
namespace ck = trainyard::checkpoints;
using trainyard::Result;
using trainyard::Status;

namespace {

struct Args {
  bool quick = false;
  bool study = false;
  uint64_t size_mb = 2048;
  uint64_t tensor_mb = 64;
  uint64_t chunk_mib = 4;
  int threads = 8;
  int rounds = 5;
  std::string dir;
  std::string python;
  bool keep = false;
  bool io_only = false;  // save/restore rounds only: no torch, async or 1% figures
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fflush(stderr);
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "checkpoint_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform floats in [-1, 1): what freshly initialised weights look like to the disk.
void FillRandomFloats(float* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i + 1 < n; i += 2) {
    uint64_t r = SplitMix(seed);
    p[i] = static_cast<float>(static_cast<uint32_t>(r) >> 8) * (2.0f / 16777216.0f) - 1.0f;
    p[i + 1] =
        static_cast<float>(static_cast<uint32_t>(r >> 32) >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  if (n % 2 == 1) p[n - 1] = 0.5f;
}

// Drops the page cache of every file under `dir` (their pages are clean: they were fsynced).
void DropCache(const fs::path& dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    int fd = ::open(it->path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

struct RawResult {
  double write_s = 0, read_s = 0;
  bool direct = true;
};

// Sequential write of the tensors, in 16 MiB requests, then a sequential read of the file
// into `read_into` (memory of the same size, like the tensors a restore fills: reading the
// whole file into one reused 16 MiB buffer instead measured 40% faster on the development VM,
// 2,191 vs 1,536 MB/s, a speed no restore can reach because its bytes must land in distinct
// memory).
RawResult RawDisk(const fs::path& file, const std::vector<ck::Bytes>& tensors,
                  std::vector<ck::Bytes>& read_into) {
  RawResult r;
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {
    r.direct = false;
    fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  if (fd < 0) Die("cannot create " + file.string() + ": " + std::strerror(errno));
  constexpr size_t kReq = 16u << 20;
  double t0 = Now();
  for (const ck::Bytes& t : tensors) {
    for (size_t off = 0; off < t.size(); off += kReq) {
      size_t n = std::min(kReq, t.size() - off);
      ssize_t w = ::write(fd, t.data() + off, n);
      if (w != static_cast<ssize_t>(n)) {
        if (r.direct && w < 0 && errno == EINVAL) Die("O_DIRECT write refused (alignment)");
        Die("raw write failed: " + std::string(std::strerror(errno)));
      }
    }
  }
  ::fsync(fd);
  r.write_s = Now() - t0;
  ::close(fd);
  DropCache(file.parent_path());

  fd = ::open(file.c_str(), O_RDONLY | (r.direct ? O_DIRECT : 0));
  if (fd < 0) Die("cannot open " + file.string());
  t0 = Now();
  for (ck::Bytes& t : read_into) {
    for (size_t off = 0; off < t.size(); off += kReq) {
      size_t want = std::min(kReq, t.size() - off);
      ssize_t n = ::read(fd, t.data() + off, want);
      if (n != static_cast<ssize_t>(want)) {
        Die("raw read failed: " + std::string(n < 0 ? std::strerror(errno) : "short read"));
      }
    }
  }
  r.read_s = Now() - t0;
  ::close(fd);
  fs::remove(file);
  return r;
}

std::vector<ck::Bytes> MakeTensors(uint64_t total, uint64_t tensor_bytes, uint64_t seed) {
  std::vector<ck::Bytes> out;
  for (uint64_t done = 0; done < total; done += tensor_bytes) {
    uint64_t n = std::min(tensor_bytes, total - done);
    ck::Bytes b(n);
    FillRandomFloats(reinterpret_cast<float*>(b.data()), n / 4, seed++);
    out.push_back(std::move(b));
  }
  return out;
}

std::string TensorName(size_t i) { return "layers." + std::to_string(i) + ".weight"; }

ck::CheckpointData Borrow(const std::vector<ck::Bytes>& tensors) {
  ck::CheckpointData d;
  for (size_t i = 0; i < tensors.size(); ++i) {
    d.blobs.push_back(ck::Blob::Tensor(TensorName(i), ck::DType::kF32,
                                       {static_cast<int64_t>(tensors[i].size() / 4)},
                                       tensors[i].data(), tensors[i].size()));
  }
  d.metrics["loss"] = 1.0;
  return d;
}

ck::CheckpointData HandOver(const std::vector<ck::Bytes>& tensors) {
  ck::CheckpointData d;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ck::Bytes copy(tensors[i].size());
    std::memcpy(copy.data(), tensors[i].data(), tensors[i].size());
    d.blobs.push_back(ck::Blob::OwnedTensor(TensorName(i), ck::DType::kF32,
                                            {static_cast<int64_t>(tensors[i].size() / 4)},
                                            std::move(copy)));
  }
  return d;
}

ck::CheckpointRef Ref(const std::string& job, int64_t step) {
  ck::CheckpointRef r;
  r.project = "bench";
  r.job = job;
  r.step = step;
  return r;
}

std::shared_ptr<trainyard::blob::BlobStore> OpenBlobs(const fs::path& root) {
  auto b = trainyard::blob::OpenLocalBlobStore(root.string());
  if (!b.ok()) Die(b.status().ToString());
  return std::shared_ptr<trainyard::blob::BlobStore>(std::move(*b));
}

// The store's time and randomness: the system's, as the server's.
trainyard::SystemClock system_clock;
trainyard::SecureRandom secure_random;

ck::CheckpointStoreOptions StoreOptions(const Args& a) {
  ck::CheckpointStoreOptions o;
  o.chunk_size = a.chunk_mib << 20;
  o.io_threads = a.threads;
  return o;
}

std::string FindTorchPython(const Args& a) {
  std::vector<std::string> candidates;
  if (!a.python.empty()) candidates.push_back(a.python);
  if (const char* env = std::getenv("TRAINYARD_TORCH_PYTHON")) candidates.push_back(env);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  for (const std::string& py : candidates) {
    std::string cmd = py + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

void PrintJson(const std::string& bench, double value, const std::string& unit,
               const std::string& anchor, double anchor_value, double ratio,
               const std::string& target, const std::string& note = "") {
  auto str = [](const std::string& v) {
    return trainyard::json::serialize(trainyard::json::value(v));
  };
  auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3f", std::isfinite(v) ? v : 0.0);
    std::string s = buf;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  };
  std::string line = "{\"bench\": " + str(bench) + ", \"value\": " + num(value) +
                     ", \"unit\": " + str(unit) + ", \"anchor\": " + str(anchor) +
                     ", \"anchor_value\": " + num(anchor_value) + ", \"ratio\": " + num(ratio) +
                     ", \"target\": " + str(target);
  if (!note.empty()) line += ", \"note\": " + str(note);
  std::printf("%s}\n", line.c_str());
}

// ---- Chunking and hash study (numbers for docs/decisions/0003) ----

// Content-defined chunking with a gear rolling hash (as in FastCDC, without normalization).
std::vector<size_t> CdcBoundaries(const uint8_t* p, size_t n, size_t avg) {
  static uint64_t gear[256];
  static bool init = false;
  if (!init) {
    uint64_t s = 42;
    for (uint64_t& g : gear) g = SplitMix(s);
    init = true;
  }
  uint64_t mask = avg - 1;  // avg is a power of two
  size_t min = avg / 4, max = avg * 4;
  std::vector<size_t> cuts;
  size_t start = 0;
  while (start < n) {
    size_t end = std::min(n, start + max);
    size_t i = std::min(n, start + min);
    uint64_t h = 0;
    for (; i < end; ++i) {
      h = (h << 1) + gear[p[i]];
      if ((h & (mask << 16)) == 0) break;
    }
    size_t cut = std::min(i + 1, end);
    if (i >= end) cut = end;
    cuts.push_back(cut);
    start = cut;
  }
  return cuts;
}

std::vector<std::string> HashPieces(const uint8_t* p, const std::vector<size_t>& cuts) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t c : cuts) {
    XXH128_hash_t h = XXH3_128bits(p + start, c - start);
    out.push_back(std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
    start = c;
  }
  return out;
}

std::vector<size_t> FixedBoundaries(size_t n, size_t size) {
  std::vector<size_t> cuts;
  for (size_t off = size; off < n + size; off += size) cuts.push_back(std::min(off, n));
  return cuts;
}

// Bytes in pieces of `b` whose hash is not among `a`'s.
uint64_t NewBytes(const uint8_t* pa, const std::vector<size_t>& ca, const uint8_t* pb,
                  const std::vector<size_t>& cb) {
  std::vector<std::string> ha = HashPieces(pa, ca), hb = HashPieces(pb, cb);
  std::sort(ha.begin(), ha.end());
  uint64_t bytes = 0;
  size_t start = 0;
  for (size_t i = 0; i < cb.size(); ++i) {
    if (!std::binary_search(ha.begin(), ha.end(), hb[i])) bytes += cb[i] - start;
    start = cb[i];
  }
  return bytes;
}

void Study(const Args& a) {
  const size_t n = (a.quick ? 64ull : 256ull) << 20;
  std::vector<ck::Bytes> t = MakeTensors(n, n, 7);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(t[0].data());
  auto rate = [&](auto&& fn) {
    fn();  // warm
    double t0 = Now();
    int reps = 3;
    for (int i = 0; i < reps; ++i) fn();
    return n * reps / (Now() - t0) / 1e6;
  };
  volatile uint64_t sink = 0;
  double xxh = rate([&] {
    for (size_t off = 0; off < n; off += 4u << 20)
      sink = sink + XXH3_128bits(p + off, 4u << 20).low64;
  });
  double sha = rate([&] {
    unsigned char md[32];
    unsigned int len = 0;
    for (size_t off = 0; off < n; off += 4u << 20) {
      EVP_Digest(p + off, 4u << 20, md, &len, EVP_sha256(), nullptr);
      sink = sink + md[0];
    }
  });
  double cdc = rate([&] { sink = sink + CdcBoundaries(p, n, 1u << 20).size(); });
  double copy = rate([&] {
    static ck::Bytes dst(n);
    std::memcpy(dst.data(), p, n);
  });
  Log("single-thread MB/s: memcpy %.0f, XXH3-128 %.0f, SHA-256 (OpenSSL) %.0f, gear CDC "
      "boundaries %.0f\n",
      copy, xxh, sha, cdc);

  // Dedup: (1) 1% of the bytes changed in place (a contiguous run, unaligned);
  // (2) 100 bytes inserted at the front (only files can change like this, never tensors).
  std::vector<uint8_t> changed(p, p + n);
  size_t run = n / 100, at = n / 3 + 12345;
  for (size_t i = at; i < at + run; ++i) changed[i] ^= 0x5a;
  std::vector<uint8_t> inserted(n + 100, 7);
  std::memcpy(inserted.data() + 100, p, n);
  for (size_t size : {1u << 20, 4u << 20}) {
    auto f0 = FixedBoundaries(n, size);
    auto c0 = CdcBoundaries(p, n, size);
    uint64_t fixed_inplace = NewBytes(p, f0, changed.data(), FixedBoundaries(n, size));
    uint64_t cdc_inplace = NewBytes(p, c0, changed.data(), CdcBoundaries(changed.data(), n, size));
    uint64_t fixed_ins = NewBytes(p, f0, inserted.data(), FixedBoundaries(inserted.size(), size));
    uint64_t cdc_ins =
        NewBytes(p, c0, inserted.data(), CdcBoundaries(inserted.data(), inserted.size(), size));
    Log("chunk %zu MiB: 1%% changed in place -> fixed writes %.2f%%, CDC %.2f%% (%zu chunks); "
        "100 B inserted at the front -> fixed %.1f%%, CDC %.2f%%\n",
        size >> 20, 100.0 * fixed_inplace / n, 100.0 * cdc_inplace / n, c0.size(),
        100.0 * fixed_ins / n, 100.0 * cdc_ins / n);
  }
}

// ---- The benchmark ----

void Run(const Args& a) {
  const uint64_t total = a.size_mb << 20;
  const uint64_t tensor_bytes = std::min<uint64_t>(a.tensor_mb << 20, total);
  fs::path dir = a.dir.empty()
                     ? fs::temp_directory_path() / ("ty-ckpt-bench-" + std::to_string(::getpid()))
                     : fs::path(a.dir);
  fs::remove_all(dir);
  fs::create_directories(dir);
  Log("checkpoint_bench: %llu MiB of float32 tensors (%llu MiB each), chunks %llu MiB, %d I/O "
      "threads, %d rounds, in %s\n",
      (unsigned long long)a.size_mb, (unsigned long long)(tensor_bytes >> 20),
      (unsigned long long)a.chunk_mib, a.threads, a.rounds, dir.c_str());
  std::vector<ck::Bytes> tensors = MakeTensors(total, tensor_bytes, 1);

  std::vector<double> raw_w, raw_r, save_s, save_snap_s, load_s, load_into_s;
  // The tensors a resuming trainer already has (its model and optimizer): LoadInto's target.
  std::vector<ck::Bytes> existing;
  for (const ck::Bytes& t : tensors) {
    existing.emplace_back(t.size());
    std::memset(existing.back().data(), 0, t.size());
  }
  bool direct = true;
  for (int round = 0; round < a.rounds; ++round) {
    // Alternate which side goes first: the disk's state drifts over a run.
    auto run_raw = [&] {
      RawResult r = RawDisk(dir / "raw.bin", tensors, existing);
      direct = r.direct;
      raw_w.push_back(r.write_s);
      raw_r.push_back(r.read_s);
    };
    auto run_ours = [&] {
      fs::path root = dir / "store";
      fs::remove_all(root);
      ::sync();
      {
        ck::CheckpointStore store(OpenBlobs(root), system_clock, secure_random, StoreOptions(a));
        ck::CheckpointData handed = HandOver(tensors);  // untimed: the caller's own buffers
        double t0 = Now();
        Result<ck::Manifest> m = store.Save(Ref("job", 1), std::move(handed));
        save_s.push_back(Now() - t0);
        if (!m.ok()) Die(m.status().ToString());
        if (m->written_bytes != total) Die("first save did not write every byte");
      }
      DropCache(root);
      {
        ck::CheckpointStore store(OpenBlobs(root), system_clock, secure_random, StoreOptions(a));
        double t0 = Now();
        Result<ck::CheckpointData> d = store.Load("bench", "job", 1);
        load_s.push_back(Now() - t0);
        if (!d.ok()) Die(d.status().ToString());
        if (round == 0) {
          for (size_t i = 0; i < tensors.size(); ++i) {
            if (d->blobs[i].size() != tensors[i].size() ||
                std::memcmp(d->blobs[i].data(), tensors[i].data(), tensors[i].size()) != 0) {
              Die("restored bytes differ from the saved ones");
            }
          }
        }
      }
      DropCache(root);
      {
        ck::CheckpointStore store(OpenBlobs(root), system_clock, secure_random, StoreOptions(a));
        // The raw read may have left the same bytes there: clear them so the check below
        // sees what LoadInto wrote (untimed; the memory stays warm).
        for (ck::Bytes& e : existing) std::memset(e.data(), 0, e.size());
        std::vector<ck::LoadTarget> targets;
        for (size_t i = 0; i < existing.size(); ++i) {
          targets.push_back({TensorName(i), existing[i].data(), existing[i].size()});
        }
        double t0 = Now();
        Result<ck::Manifest> m = store.LoadInto("bench", "job", 1, 0, targets);
        load_into_s.push_back(Now() - t0);
        if (!m.ok()) Die(m.status().ToString());
        if (round == 0) {
          for (size_t i = 0; i < tensors.size(); ++i) {
            if (std::memcmp(existing[i].data(), tensors[i].data(), tensors[i].size()) != 0) {
              Die("bytes restored into existing tensors differ from the saved ones");
            }
          }
        }
      }
      // The same with borrowed buffers: the save includes the snapshot copy.
      fs::remove_all(root);
      ::sync();
      {
        ck::CheckpointStore store(OpenBlobs(root), system_clock, secure_random, StoreOptions(a));
        double t0 = Now();
        Result<ck::Manifest> m = store.Save(Ref("job", 1), Borrow(tensors));
        save_snap_s.push_back(Now() - t0);
        if (!m.ok()) Die(m.status().ToString());
      }
      fs::remove_all(root);
    };
    if (round % 2 == 0) {
      run_raw();
      run_ours();
    } else {
      run_ours();
      run_raw();
    }
    Log("round %d: raw write %.2fs read %.2fs | save %.2fs (with snapshot %.2fs) load %.2fs "
        "(into existing tensors %.2fs)\n",
        round + 1, raw_w.back(), raw_r.back(), save_s.back(), save_snap_s.back(), load_s.back(),
        load_into_s.back());
  }
  const double mb = total / 1e6;
  double raw_w_bw = mb / Median(raw_w), raw_r_bw = mb / Median(raw_r);
  double save_bw = mb / Median(save_s), snap_bw = mb / Median(save_snap_s);
  double load_bw = mb / Median(load_s), load_into_bw = mb / Median(load_into_s);
  if (a.io_only) {
    Log("\n%-44s %10s\n", "figure", "MB/s");
    Log("%-44s %10.0f\n", "raw sequential write", raw_w_bw);
    Log("%-44s %10.0f  (%.0f%%)\n", "checkpoint save", save_bw, 100 * save_bw / raw_w_bw);
    Log("%-44s %10.0f  (%.0f%%)\n", "checkpoint save + snapshot", snap_bw,
        100 * snap_bw / raw_w_bw);
    Log("%-44s %10.0f\n", "raw sequential read", raw_r_bw);
    Log("%-44s %10.0f  (%.0f%%)\n", "restore into existing tensors", load_into_bw,
        100 * load_into_bw / raw_r_bw);
    Log("%-44s %10.0f  (%.0f%%)\n", "restore into new memory", load_bw, 100 * load_bw / raw_r_bw);
    if (!a.keep) fs::remove_all(dir);
    return;
  }

  // Blocking part of an async save (steady state: the previous save's buffers are reused)
  // vs one plain memcpy of the state into warm memory.
  double blocked_ms = 0, memcpy_ms = 0;
  {
    fs::path root = dir / "async";
    ck::CheckpointStore store(OpenBlobs(root), system_clock, secure_random, StoreOptions(a));
    Result<ck::Manifest> warm = store.Save(Ref("job", 1), Borrow(tensors));
    if (!warm.ok()) Die(warm.status().ToString());
    std::vector<double> blocked, copies;
    std::vector<ck::Bytes> dst;
    for (const ck::Bytes& t : tensors) {
      dst.emplace_back(t.size());
      std::memset(dst.back().data(), 0, t.size());  // warm, as the reused snapshot buffers are
    }
    for (int i = 0; i < 3; ++i) {
      double t0 = Now();
      for (size_t k = 0; k < tensors.size(); ++k) {
        std::memcpy(dst[k].data(), tensors[k].data(), tensors[k].size());
      }
      copies.push_back(Now() - t0);
      Result<ck::SaveHandle> h = store.SaveAsync(Ref("job", 2 + i), Borrow(tensors));
      if (!h.ok()) Die(h.status().ToString());
      blocked.push_back(h->BlockedMicros() / 1e6);
      if (!h->Wait().ok()) Die("async save failed");
    }
    blocked_ms = Median(blocked) * 1e3;
    memcpy_ms = Median(copies) * 1e3;
    fs::remove_all(root);
  }

  // 1% of the bytes changed: one contiguous run at an unaligned offset; and LoRA-like, whole
  // tensors adding up to 1% replaced.
  double changed_pct = 0, lora_pct = 0;
  {
    fs::path root = dir / "dedup";
    ck::CheckpointStore store(OpenBlobs(root), system_clock, secure_random, StoreOptions(a));
    Check(store.Save(Ref("job", 1), Borrow(tensors)).status(), "save");
    std::vector<ck::Bytes> changed;
    for (const ck::Bytes& t : tensors) {
      changed.emplace_back(t.size());
      std::memcpy(changed.back().data(), t.data(), t.size());
    }
    uint64_t run = total / 100, at = total / 3 + 12345, done = 0;
    for (ck::Bytes& t : changed) {  // the run may cross a tensor boundary
      for (uint64_t i = 0; i < t.size(); ++i, ++done) {
        if (done >= at && done < at + run) t.data()[i] ^= std::byte{0x5a};
        if (done >= at + run) break;
      }
    }
    Result<ck::Manifest> m = store.Save(Ref("job", 2), Borrow(changed));
    if (!m.ok()) Die(m.status().ToString());
    changed_pct = 100.0 * m->written_bytes / total;

    // LoRA-like: many small adapter tensors next to a frozen base; the adapters change.
    std::vector<ck::Bytes> lora;
    for (const ck::Bytes& t : tensors) {
      lora.emplace_back(t.size());
      std::memcpy(lora.back().data(), t.data(), t.size());
    }
    std::vector<ck::Bytes> adapters = MakeTensors(
        total / 100 / 4096 * 4096, std::max<uint64_t>(total / 1600 / 4096 * 4096, 4096), 500);
    std::vector<ck::Bytes> all;
    for (ck::Bytes& b : lora) all.push_back(std::move(b));
    for (ck::Bytes& b : adapters) all.push_back(std::move(b));
    Check(store.Save(Ref("lora", 1), Borrow(all)).status(), "save");
    for (size_t i = tensors.size(); i < all.size(); ++i) {
      FillRandomFloats(reinterpret_cast<float*>(all[i].data()), all[i].size() / 4, 9000 + i);
    }
    Result<ck::Manifest> l = store.Save(Ref("lora", 2), Borrow(all));
    if (!l.ok()) Die(l.status().ToString());
    lora_pct = 100.0 * l->written_bytes / l->total_bytes;
    fs::remove_all(root);
  }

  // torch.save / torch.load of the same tensors, in a Python process of its own.
  std::optional<double> torch_save, torch_load;
  std::string torch_version, torch_note;
  std::string py = FindTorchPython(a);
  if (py.empty()) {
    torch_note = "skipped: no python3 here can import torch (apt-get install python3-torch)";
  } else {
    fs::path script = fs::path(__FILE__).parent_path() / "torch_side.py";
    if (!fs::exists(script)) script = fs::current_path() / "bench/checkpoints/torch_side.py";
    std::string cmd = py + " " + script.string() + " --dir " + (dir / "torch").string() +
                      " --size-mb " + std::to_string(a.size_mb) + " --tensor-mb " +
                      std::to_string(tensor_bytes >> 20) + " --rounds " + std::to_string(a.rounds);
    FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (f != nullptr && std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
    int rc = f == nullptr ? -1 : ::pclose(f);
    Result<trainyard::json::object> o = trainyard::ParseJsonObject(out);
    if (rc != 0 || !o.ok()) {
      torch_note = "skipped: torch_side.py failed (rc " + std::to_string(rc) + ")";
    } else {
      torch_save = o->at("save_s").to_number<double>();
      torch_load = o->at("load_s").to_number<double>();
      torch_version = std::string(o->at("torch").as_string());
    }
  }
  if (!a.keep) fs::remove_all(dir);

  const char* raw_kind = direct ? "O_DIRECT" : "buffered+fsync (O_DIRECT refused)";
  Log("\n%-44s %10s\n", "figure", "MB/s");
  Log("%-44s %10.0f\n", (std::string("raw sequential write, ") + raw_kind).c_str(), raw_w_bw);
  Log("%-44s %10.0f\n", (std::string("raw sequential read, ") + raw_kind).c_str(), raw_r_bw);
  Log("%-44s %10.0f\n", "checkpoint save (handed-over buffers)", save_bw);
  Log("%-44s %10.0f\n", "checkpoint save (borrowed: + snapshot copy)", snap_bw);
  Log("%-44s %10.0f\n", "checkpoint restore into existing tensors", load_into_bw);
  Log("%-44s %10.0f\n", "checkpoint restore into new memory", load_bw);
  if (torch_save) {
    Log("%-44s %10.0f\n", ("torch.save " + torch_version + " (+fsync)").c_str(), mb / *torch_save);
    Log("%-44s %10.0f\n", ("torch.load " + torch_version + " (cache dropped)").c_str(),
        mb / *torch_load);
  } else {
    Log("torch: %s\n", torch_note.c_str());
  }
  Log("async save blocked %.1f ms vs memcpy of the state %.1f ms\n", blocked_ms, memcpy_ms);
  Log("1%% changed (contiguous) wrote %.2f%% of the checkpoint; LoRA-like 1%% wrote %.2f%%\n\n",
      changed_pct, lora_pct);

  std::string raw_anchor = std::string("raw sequential write, same disk, ") + raw_kind;
  PrintJson(
      "checkpoint_save_bandwidth", save_bw, "MB/s", raw_anchor, raw_w_bw, save_bw / raw_w_bw,
      ">= 0.9",
      "time to the committed manifest (chunks and manifest fsynced), from handed-over buffers");
  PrintJson("checkpoint_restore_bandwidth", load_into_bw, "MB/s",
            std::string("raw sequential read, same disk, ") + raw_kind, raw_r_bw,
            load_into_bw / raw_r_bw, ">= 0.9",
            "LoadInto the tensors a resuming trainer has; posix_fadvise(DONTNEED) on every chunk "
            "first");
  PrintJson("checkpoint_restore_new_memory_bandwidth", load_bw, "MB/s",
            std::string("raw sequential read, same disk, ") + raw_kind, raw_r_bw,
            load_bw / raw_r_bw, "report",
            "Load into freshly allocated memory: includes the kernel zeroing every new page");
  PrintJson("checkpoint_save_with_snapshot_bandwidth", snap_bw, "MB/s", raw_anchor, raw_w_bw,
            snap_bw / raw_w_bw, "report");
  if (torch_save) {
    char ceiling[160];
    std::snprintf(ceiling, sizeof(ceiling),
                  "the raw disk itself is %.2fx torch.save here: no writer can exceed that",
                  raw_w_bw / (mb / *torch_save));
    PrintJson("checkpoint_save_vs_torch", save_bw, "MB/s",
              "torch.save " + torch_version + " + fsync", mb / *torch_save,
              save_bw / (mb / *torch_save), ">= 3x", ceiling);
    PrintJson("checkpoint_restore_vs_torch", load_bw, "MB/s",
              "torch.load " + torch_version + " (cache dropped)", mb / *torch_load,
              load_bw / (mb / *torch_load), "report");
  } else {
    PrintJson("checkpoint_save_vs_torch", save_bw, "MB/s", "torch.save", 0, 0, ">= 3x", torch_note);
  }
  PrintJson("checkpoint_async_blocking", blocked_ms, "ms", "memcpy of the state into warm memory",
            memcpy_ms, memcpy_ms / blocked_ms, ">= 0.667 (blocking <= 1.5x a memcpy)");
  PrintJson("checkpoint_changed_1pct_written", changed_pct, "% of checkpoint",
            "bytes changed (contiguous run, unaligned)", 1.0, changed_pct / 1.0, "<= 2%");
  PrintJson("checkpoint_lora_1pct_written", lora_pct, "% of checkpoint",
            "bytes changed (adapter tensors)", 1.0, lora_pct / 1.0, "<= 2%");
}

Args Parse(int argc, char** argv) {
  Args a;
  bool size_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("option " + s + " needs a value");
      return argv[++i];
    };
    if (s == "--quick") {
      a.quick = true;
    } else if (s == "--study") {
      a.study = true;
    } else if (s == "--size-mb") {
      a.size_mb = std::stoull(next());
      size_given = true;
    } else if (s == "--tensor-mb") {
      a.tensor_mb = std::stoull(next());
    } else if (s == "--chunk-mib") {
      a.chunk_mib = std::stoull(next());
    } else if (s == "--threads") {
      a.threads = std::stoi(next());
    } else if (s == "--rounds") {
      a.rounds = std::stoi(next());
    } else if (s == "--dir") {
      a.dir = next();
    } else if (s == "--python") {
      a.python = next();
    } else if (s == "--keep") {
      a.keep = true;
    } else if (s == "--io-only") {
      a.io_only = true;
    } else {
      Die("unknown option " + s +
          " (options: --quick --study --size-mb N --tensor-mb N --chunk-mib N --threads N "
          "--rounds N --dir D --python P --keep --io-only)");
    }
  }
  if (a.quick && !size_given) a.size_mb = 256;
  if (a.quick) a.rounds = std::min(a.rounds, 2);
  if (a.size_mb == 0 || a.chunk_mib == 0 || a.tensor_mb == 0 || a.rounds < 1) {
    Die("sizes and rounds must be positive");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  if (a.study) {
    Study(a);
  } else {
    Run(a);
  }
  return 0;
}
