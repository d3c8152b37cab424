#include "trainyard/checkpoints/manifest_codec.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "trainyard/checkpoints/xxh3_avx2.h"

namespace trainyard::checkpoints {
namespace {

std::string LibraryHex(const void* data, size_t size) {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits(data, size));
  std::string out;
  char buf[3];
  for (unsigned char b : canon.digest) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    out += buf;
  }
  return out;
}

// Chunk names must not depend on which XXH3 build hashed them (the AVX2 one here, the
// library's elsewhere): stores are shared between machines.
TEST(ChunkHashTest, EqualsTheLibrarysXxh3AtEverySizeClassAndAlignment) {
  std::vector<unsigned char> bytes((1u << 20) + 4096);
  std::mt19937_64 rng(7);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
  // XXH3 has separate paths for 0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes and long inputs
  // (stripes of 64 and blocks of 1024), so cover each boundary.
  std::vector<size_t> sizes = {0,   1,   3,    4,    8,    9,    16,   17,    128,     129,
                               240, 241, 1023, 1024, 1025, 4096, 4159, 65536, 1u << 20};
  for (size_t size : sizes) {
    for (size_t offset : {0, 1, 7, 64}) {
      const unsigned char* p = bytes.data() + offset;
      EXPECT_EQ(ChunkHash(p, size), LibraryHex(p, size)) << "size " << size << " offset " << offset;
    }
  }
  if (internal::Xxh3Avx2Usable()) {
    uint64_t lo = 0, hi = 0;
    internal::Xxh3Avx2(bytes.data(), 5000, &lo, &hi);
    XXH128_hash_t h = XXH3_128bits(bytes.data(), 5000);
    EXPECT_EQ(lo, h.low64);
    EXPECT_EQ(hi, h.high64);
  }
}

// Issue 13: dtype x shape overflowed, so a tensor of an impossible shape with a few bytes
// verified OK. The decoder now checks the product, without overflow, against the size.
TEST(ManifestCodecTest, TensorShapeMustAccountForItsBytesWithoutOverflow) {
  Manifest m;
  m.ref = CheckpointRef{"p", "j", 1, 0, 1, 1};
  BlobManifest b;
  b.name = "w";
  b.kind = BlobKind::kTensor;
  b.dtype = DType::kF32;
  b.shape = {int64_t{1} << 62, 4};  // 2^64 * 4 bytes wraps to 0
  b.size = 0;
  m.blobs.push_back(b);
  auto decoded = DecodeManifest(EncodeManifest(m), "rank-00000.json");
  ASSERT_FALSE(decoded.ok());  // a stored manifest: corrupt, never verified OK
  EXPECT_NE(decoded.status().message().find("too large"), std::string::npos)
      << decoded.status().message();

  m.blobs[0].shape = {3};
  decoded = DecodeManifest(EncodeManifest(m), "rank-00000.json");
  ASSERT_FALSE(decoded.ok());  // 12 bytes needed, 0 stored
  EXPECT_NE(decoded.status().message().find("need 12"), std::string::npos);

  m.blobs[0].shape = {0, 7};
  EXPECT_TRUE(DecodeManifest(EncodeManifest(m), "rank-00000.json").ok());
}

}  // namespace
}  // namespace trainyard::checkpoints
