// Status: the result of an operation that returns no value, and Result<T>: a
// value or the Status that explains why there is none.
//
// Errors are values, never exceptions across module boundaries. A Status is
// cheap to copy when ok. Multiple threads may call const methods on a Status
// or Result without external synchronization.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace trainyard {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from the caller: 400, names the field
  kNotFound,            // the named object does not exist: 404
  kAlreadyExists,       // an object with that name/id exists: 400 RESOURCE_ALREADY_EXISTS
  kPermissionDenied,    // authenticated, but not allowed: 403
  kUnauthenticated,     // no or bad credentials: 401
  kFailedPrecondition,  // the object is in the wrong state for this call: 400 INVALID_STATE
  kResourceExhausted,   // the server ran out of room (disk full, out of memory): 507
  kNotImplemented,      // 501
  kUnavailable,         // transient; the caller may retry: 503
  kInternal,            // a real server fault: 500
  kIOError,             // the OS refused (disk full, permission): 500
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status NotImplemented(std::string m) {
    return {StatusCode::kNotImplemented, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsAlreadyExists() const { return code_ == StatusCode::kAlreadyExists; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }

  // "NOT_FOUND: message", for logs and tests.
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

namespace internal {
// Print what went wrong to stderr and abort: the contract violations of Result.
[[noreturn]] void DieOkStatusInResult();
[[noreturn]] void DieValueOfError(const Status& status);
}  // namespace internal

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  // Accepts anything T can be made from (e.g. a json::object for Result<json::value>).
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status>>>
  Result(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT: implicit by design
  // An error. An ok status has no value to go with it: that is a bug, and aborts.
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) internal::DieOkStatusInResult();
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // The value. Calling these on an error is a bug: it aborts with the error's message.
  T& value() & { return *Checked(); }
  const T& value() const& { return *Checked(); }
  T&& value() && { return std::move(*Checked()); }
  T* operator->() { return &*Checked(); }
  const T* operator->() const { return &*Checked(); }
  T& operator*() & { return *Checked(); }
  const T& operator*() const& { return *Checked(); }
  T&& operator*() && { return std::move(*Checked()); }

 private:
  std::optional<T>& Checked() {
    if (!value_.has_value()) internal::DieValueOfError(status_);
    return value_;
  }
  const std::optional<T>& Checked() const {
    if (!value_.has_value()) internal::DieValueOfError(status_);
    return value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace trainyard

#define TY_CONCAT_INNER(a, b) a##b
#define TY_CONCAT(a, b) TY_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define TY_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::trainyard::Status ty_status_ = (expr); \
    if (!ty_status_.ok()) return ty_status_; \
  } while (0)

// `TY_ASSIGN_OR_RETURN(auto x, ComputeX());` declares x from a Result, or returns its Status.
#define TY_ASSIGN_OR_RETURN(lhs, expr) \
  TY_ASSIGN_OR_RETURN_IMPL(TY_CONCAT(ty_result_, __LINE__), lhs, expr)
#define TY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
