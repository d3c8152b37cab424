// The seam between Arrow C++ (decision 0010) and the rest of Trainyard: Arrow's Status and
// Result become ours, so that no arrow:: error type leaves tables/.
#pragma once

#include <arrow/result.h>
#include <arrow/status.h>

#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::tables {

// Ok for an ok Arrow status; otherwise ours, with `context` ("reading part-0001.parquet")
// in front of Arrow's message. Invalid/TypeError/KeyError/IndexError become InvalidArgument,
// OutOfMemory ResourceExhausted, IOError IOError, NotImplemented NotImplemented, the rest
// Internal.
Status FromArrow(const arrow::Status& status, std::string_view context);

// Registers Arrow's compute kernels (Arrow >= 21 keeps them in libarrow_compute, registered
// on demand). Idempotent and thread-safe; every tables/ entry point that computes calls it.
void InitializeArrowCompute();

template <typename T>
Result<T> FromArrow(arrow::Result<T> result, std::string_view context) {
  if (!result.ok()) return FromArrow(result.status(), context);
  return std::move(result).ValueOrDie();
}

}  // namespace trainyard::tables
