// Mutex, MutexLock and CondVar: a mutex whose contract the compiler checks.
//
// Members a mutex protects are declared `TY_GUARDED_BY(mu_)`; methods that expect the
// caller to hold it are declared `TY_REQUIRES(mu_)`. Clang's -Wthread-safety (the
// `scripts/test` thread-safety build) then rejects any access without the lock. Under GCC
// the annotations compile to nothing and the types cost exactly what std::mutex does.
//
// Waiting on a condition: write the loop, so the analysis sees the lock held while the
// predicate reads guarded state:
//
//   MutexLock lock(mu_);
//   while (!done_) cv_.Wait(mu_);
//
// All types here are thread-safe (that is their point) and neither copyable nor movable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TY_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TY_THREAD_ANNOTATION(x)
#endif

#define TY_CAPABILITY(x) TY_THREAD_ANNOTATION(capability(x))
#define TY_SCOPED_CAPABILITY TY_THREAD_ANNOTATION(scoped_lockable)
#define TY_GUARDED_BY(x) TY_THREAD_ANNOTATION(guarded_by(x))
#define TY_PT_GUARDED_BY(x) TY_THREAD_ANNOTATION(pt_guarded_by(x))
#define TY_ACQUIRED_BEFORE(...) TY_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define TY_ACQUIRED_AFTER(...) TY_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define TY_REQUIRES(...) TY_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TY_ACQUIRE(...) TY_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TY_RELEASE(...) TY_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TY_TRY_ACQUIRE(...) TY_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TY_EXCLUDES(...) TY_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TY_ASSERT_HELD(x) TY_THREAD_ANNOTATION(assert_capability(x))
#define TY_RETURN_CAPABILITY(x) TY_THREAD_ANNOTATION(lock_returned(x))
// For the rare function the analysis cannot follow; say why next to it.
#define TY_NO_THREAD_SAFETY_ANALYSIS TY_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace trainyard {

class TY_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() TY_ACQUIRE() { mu_.lock(); }
  void Unlock() TY_RELEASE() { mu_.unlock(); }
  bool TryLock() TY_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the lock (for callbacks it cannot follow).
  void AssertHeld() const TY_ASSERT_HELD(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class TY_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TY_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() TY_RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds a Mutex for its scope, with the option of letting go early (Unlock) and taking
// it back (Lock): for code that must call out without the lock held.
class TY_SCOPED_CAPABILITY ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex& mu) TY_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~ReleasableMutexLock() TY_RELEASE() {
    if (held_) mu_.Unlock();
  }
  void Unlock() TY_RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() TY_ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable used with a Mutex the caller holds.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu`, waits for a notification (or a spurious wake-up), takes `mu` back.
  void Wait(Mutex& mu) TY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, giving up after `timeout`. Returns false when the time ran out.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout) TY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool notified = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  // As Wait, giving up at `deadline`. Returns false when the time ran out.
  template <typename ClockT, typename Duration>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<ClockT, Duration> deadline) TY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace trainyard
