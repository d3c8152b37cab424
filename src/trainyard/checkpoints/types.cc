#include "trainyard/checkpoints/types.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "trainyard/common/strings.h"

namespace trainyard::checkpoints {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kI64, "I64", 8},   {DType::kI32, "I32", 4},        {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},     {DType::kU8, "U8", 1},          {DType::kBool, "BOOL", 1},
};

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

size_t DTypeSize(DType dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 1;
}

void Bytes::Free::operator()(std::byte* p) const { std::free(p); }

Bytes::Bytes(size_t size) : size_(size) {
  if (size == 0) return;
  constexpr size_t kHuge = 2u << 20;
  size_t align = size >= kHuge ? kHuge : 64;
  size_t rounded = (size + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (align == kHuge) ::madvise(p, rounded, MADV_HUGEPAGE);
  data_.reset(static_cast<std::byte*>(p));
}

Bytes Bytes::CopyOf(std::string_view data) {
  Bytes b(data.size());
  if (!data.empty()) std::memcpy(b.data(), data.data(), data.size());
  return b;
}

Blob Blob::Tensor(std::string name, DType dtype, std::vector<int64_t> shape, const void* data,
                  size_t size) {
  Blob b;
  b.name = std::move(name);
  b.kind = BlobKind::kTensor;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.borrowed_ = static_cast<const std::byte*>(data);
  b.borrowed_size_ = size;
  return b;
}

Blob Blob::OwnedTensor(std::string name, DType dtype, std::vector<int64_t> shape, Bytes bytes) {
  Blob b;
  b.name = std::move(name);
  b.kind = BlobKind::kTensor;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.owned_ = std::move(bytes);
  return b;
}

Blob Blob::File(std::string name, const void* data, size_t size) {
  Blob b;
  b.name = std::move(name);
  b.kind = BlobKind::kFile;
  b.borrowed_ = static_cast<const std::byte*>(data);
  b.borrowed_size_ = size;
  return b;
}

Blob Blob::OwnedFile(std::string name, Bytes bytes) {
  Blob b;
  b.name = std::move(name);
  b.kind = BlobKind::kFile;
  b.owned_ = std::move(bytes);
  return b;
}

void Blob::AdoptOwned(Bytes owned) {
  owned_ = std::move(owned);
  borrowed_ = nullptr;
  borrowed_size_ = 0;
}

const Blob* CheckpointData::Find(std::string_view name) const {
  for (const Blob& b : blobs) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

uint64_t CheckpointInfo::total_bytes() const {
  uint64_t n = 0;
  for (const Manifest& m : ranks) n += m.total_bytes;
  return n;
}

std::string FormatShape(const std::vector<int64_t>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out;
}

Result<std::vector<int64_t>> ParseShape(std::string_view input) {
  std::string text = Trim(input);
  if (!text.empty() && text.front() == '[' && text.back() == ']') {
    text = Trim(text.substr(1, text.size() - 2));
  }
  std::vector<int64_t> shape;
  if (text.empty()) return shape;
  for (const std::string& part : SplitString(text, ',')) {
    auto d = ParseInt64(Trim(part));
    if (!d || *d < 0) {
      return Status::InvalidArgument("shape must be comma-separated non-negative integers (got '" +
                                     Abbreviate(text) + "')");
    }
    shape.push_back(*d);
  }
  return shape;
}

}  // namespace trainyard::checkpoints
