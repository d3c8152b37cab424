#include "trainyard/tables/serial_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

TEST(SerialWorkerTest, RunsTasksInOrderOnItsThread) {
  SerialWorker worker(1);
  std::vector<int> ran;  // only the worker's thread appends; read after Drain
  std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> elsewhere{true};
  for (int i = 0; i < 50; ++i) {
    TY_ASSERT_OK(worker.Submit([&, i] {
      ran.push_back(i);
      if (std::this_thread::get_id() == caller) elsewhere = false;
      return Status::Ok();
    }));
  }
  TY_ASSERT_OK(worker.Drain());
  ASSERT_EQ(ran.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ran[static_cast<size_t>(i)], i);
  EXPECT_TRUE(elsewhere);
}

// A task that fails stops the worker: what waits is dropped (its captures released, so files
// they own are cleaned up), and every later Submit and Drain answers the error.
TEST(SerialWorkerTest, TheFirstErrorStopsItAndDropsWhatWaits) {
  SerialWorker worker(4);
  Mutex gate_mu;
  CondVar gate_cv;
  bool open = false;
  auto token = std::make_shared<int>(0);
  std::atomic<int> ran{0};
  TY_ASSERT_OK(worker.Submit([&] {
    MutexLock lock(gate_mu);
    while (!open) gate_cv.Wait(gate_mu);
    return Status::IOError("disk full");
  }));
  TY_ASSERT_OK(worker.Submit([&, token] {
    ++ran;
    return Status::Ok();
  }));
  EXPECT_EQ(token.use_count(), 2);
  {
    MutexLock lock(gate_mu);
    open = true;
  }
  gate_cv.NotifyAll();
  TY_EXPECT_ERROR(worker.Drain(), StatusCode::kIOError, "disk full");
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(token.use_count(), 1);  // the dropped task is gone
  TY_EXPECT_ERROR(worker.Submit([&] {
    ++ran;
    return Status::Ok();
  }),
                  StatusCode::kIOError, "disk full");
  TY_EXPECT_ERROR(worker.Drain(), StatusCode::kIOError, "disk full");
  EXPECT_EQ(ran, 0);
}

TEST(SerialWorkerTest, DestroyingItDropsWaitingTasksAndWaitsForTheRunningOne) {
  auto token = std::make_shared<int>(0);
  std::atomic<bool> first_done{false};
  std::atomic<int> ran{0};
  Mutex gate_mu;
  CondVar gate_cv;
  bool started = false;
  {
    SerialWorker worker(2);
    TY_ASSERT_OK(worker.Submit([&] {
      {
        MutexLock lock(gate_mu);
        started = true;
      }
      gate_cv.NotifyAll();
      first_done = true;
      return Status::Ok();
    }));
    {
      MutexLock lock(gate_mu);
      while (!started) gate_cv.Wait(gate_mu);
    }
    TY_ASSERT_OK(worker.Submit([&, token] {
      ++ran;
      return Status::Ok();
    }));
  }
  EXPECT_TRUE(first_done);
  EXPECT_EQ(token.use_count(), 1);  // run or dropped, its captures are released
  EXPECT_LE(ran, 1);
}

}  // namespace
}  // namespace trainyard::tables
