#include "trainyard/tables/arrow_util.h"

#include <arrow/compute/initialize.h>

#include <string>

namespace trainyard::tables {

Status FromArrow(const arrow::Status& status, std::string_view context) {
  if (status.ok()) return Status::Ok();
  std::string message =
      context.empty() ? status.message() : std::string(context) + ": " + status.message();
  switch (status.code()) {
    case arrow::StatusCode::Invalid:
    case arrow::StatusCode::TypeError:
    case arrow::StatusCode::KeyError:
    case arrow::StatusCode::IndexError:
      return Status::InvalidArgument(std::move(message));
    case arrow::StatusCode::OutOfMemory:
    case arrow::StatusCode::CapacityError:
      return Status::ResourceExhausted(std::move(message));
    case arrow::StatusCode::IOError:
      return Status::IOError(std::move(message));
    case arrow::StatusCode::NotImplemented:
      return Status::NotImplemented(std::move(message));
    default:
      return Status::Internal(std::move(message));
  }
}

void InitializeArrowCompute() {
  static const bool initialized = arrow::compute::Initialize().ok();
  (void)initialized;
}

}  // namespace trainyard::tables
