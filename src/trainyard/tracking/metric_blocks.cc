#include "trainyard/tracking/metric_blocks.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"

namespace trainyard::tracking {
namespace {

constexpr char kFormat = 1;
constexpr std::string_view kCursorPrefix = "h1:";

static_assert(std::endian::native == std::endian::little ||
              std::endian::native == std::endian::big);

uint64_t ToLittle(uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
  return v;
}

void Put(char* p, uint64_t v) {
  v = ToLittle(v);
  std::memcpy(p, &v, 8);
}

uint64_t Get(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return ToLittle(v);
}

uint64_t ValueBits(double v) {
  if (std::isnan(v)) v = std::numeric_limits<double>::quiet_NaN();
  return std::bit_cast<uint64_t>(v);
}

}  // namespace

bool PointLess(const MetricPoint& a, const MetricPoint& b) {
  if (a.step != b.step) return a.step < b.step;
  if (a.timestamp != b.timestamp) return a.timestamp < b.timestamp;
  bool an = std::isnan(a.value), bn = std::isnan(b.value);
  if (an || bn) return !an && bn;
  return a.value < b.value;
}

bool SamePoint(const MetricPoint& a, const MetricPoint& b) {
  if (a.step != b.step || a.timestamp != b.timestamp) return false;
  bool an = std::isnan(a.value), bn = std::isnan(b.value);
  return an || bn ? an && bn : a.value == b.value;
}

void SortAndDedup(std::vector<MetricPoint>& points) {
  if (!std::is_sorted(points.begin(), points.end(), PointLess)) {
    std::stable_sort(points.begin(), points.end(), PointLess);
  }
  points.erase(std::unique(points.begin(), points.end(), SamePoint), points.end());
}

std::string EncodeMetricBlock(const MetricPoint* points, size_t n) {
  std::string out(1 + n * kBlockPointBytes, '\0');
  out[0] = kFormat;
  char* p = out.data() + 1;
  for (size_t i = 0; i < n; ++i, p += kBlockPointBytes) {
    Put(p, static_cast<uint64_t>(points[i].step));
    Put(p + 8, static_cast<uint64_t>(points[i].timestamp));
    Put(p + 16, ValueBits(points[i].value));
  }
  return out;
}

Result<size_t> MetricBlockSize(std::string_view bytes) {
  if (bytes.empty() || bytes[0] != kFormat || (bytes.size() - 1) % kBlockPointBytes != 0) {
    return Status::Internal("a stored metric block is damaged (" + std::to_string(bytes.size()) +
                            " bytes, format " +
                            std::to_string(bytes.empty() ? -1 : static_cast<int>(bytes[0])) + ")");
  }
  return (bytes.size() - 1) / kBlockPointBytes;
}

Status DecodeMetricBlock(std::string_view bytes, int64_t from_step, int64_t to_step,
                         std::vector<MetricPoint>& out) {
  TY_ASSIGN_OR_RETURN(size_t n, MetricBlockSize(bytes));
  // Room without value-initializing it (resize would write every point twice), growing
  // geometrically for callers that append many blocks.
  if (out.capacity() - out.size() < n) out.reserve(std::max(out.size() + n, 2 * out.capacity()));
  const char* p = bytes.data() + 1;
  for (size_t i = 0; i < n; ++i, p += kBlockPointBytes) {
    int64_t step = static_cast<int64_t>(Get(p));
    if (step < from_step || step > to_step) continue;
    out.push_back(
        MetricPoint{step, static_cast<int64_t>(Get(p + 8)), std::bit_cast<double>(Get(p + 16))});
  }
  return Status::Ok();
}

Status HistoryAssembler::Add(std::string_view block) {
  size_t before = points_.size();
  TY_RETURN_IF_ERROR(DecodeMetricBlock(block, from_, to_, points_));
  // A block is in order inside; the history stays in order (and free of repeats) while
  // each block starts after the previous one ends.
  if (sorted_ && before > 0 && before < points_.size() &&
      !PointLess(points_[before - 1], points_[before])) {
    sorted_ = false;
  }
  return Status::Ok();
}

std::vector<MetricPoint> HistoryAssembler::Finish() {
  if (!sorted_) SortAndDedup(points_);
  return std::move(points_);
}

std::string EncodeHistoryCursor(const MetricPoint& last) {
  std::string text(kCursorPrefix);
  text += std::to_string(last.step);
  text += ':';
  text += std::to_string(last.timestamp);
  text += ':';
  text += std::to_string(ValueBits(last.value));
  return Base64Encode(text);
}

Result<MetricPoint> DecodeHistoryCursor(std::string_view token) {
  auto bad = [] {
    return Status::InvalidArgument(
        "page_token is not a token of this metric history; pass the next_page_token of the "
        "previous page, or none for the first page");
  };
  auto text = Base64Decode(token);
  if (!text.ok() || !StartsWith(*text, kCursorPrefix)) return bad();
  std::string_view rest = std::string_view(*text).substr(kCursorPrefix.size());
  int64_t step = 0, timestamp = 0;
  uint64_t bits = 0;
  const char* p = rest.data();
  const char* end = rest.data() + rest.size();
  auto r1 = std::from_chars(p, end, step);
  if (r1.ec != std::errc() || r1.ptr == end || *r1.ptr != ':') return bad();
  auto r2 = std::from_chars(r1.ptr + 1, end, timestamp);
  if (r2.ec != std::errc() || r2.ptr == end || *r2.ptr != ':') return bad();
  auto r3 = std::from_chars(r2.ptr + 1, end, bits);
  if (r3.ec != std::errc() || r3.ptr != end) return bad();
  return MetricPoint{step, timestamp, std::bit_cast<double>(bits)};
}

}  // namespace trainyard::tracking
