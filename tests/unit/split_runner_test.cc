// daemon/split_runner.h: both halves run, each once, and no caller waits on
// another caller's work.
#include "daemon/split_runner.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/support/catch.h"

namespace gputune {

TEST_CASE("Run calls each half once and returns after both") {
  SplitRunner runner;
  for (int i = 0; i < 200; ++i) {
    std::atomic<int> calls[2] = {0, 0};
    runner.Run([&](int half) {
      if (half == 1 && i % 2 == 0) absl::SleepFor(absl::Microseconds(50));
      calls[half].fetch_add(1);
    });
    // Read after Run returned: the helper's half is done too.
    REQUIRE(calls[0].load() == 1);
    REQUIRE(calls[1].load() == 1);
  }
}

TEST_CASE("the second half runs on the helper thread when it is free") {
  SplitRunner runner;
  const std::thread::id caller = std::this_thread::get_id();
  bool elsewhere = false;
  // The first half waits (boundedly) for the second to start elsewhere.
  for (int i = 0; i < 20 && !elsewhere; ++i) {
    std::atomic<bool> second_started{false};
    std::thread::id second_ran_on;
    runner.Run([&](int half) {
      if (half == 1) {
        second_ran_on = std::this_thread::get_id();
        second_started.store(true);
        return;
      }
      const absl::Time give_up = absl::Now() + absl::Milliseconds(200);
      while (!second_started.load() && absl::Now() < give_up) {
        std::this_thread::yield();
      }
    });
    elsewhere = second_ran_on != caller;
  }
  CHECK(elsewhere);
}

TEST_CASE("a caller runs both halves itself while the helper is busy") {
  SplitRunner runner;
  absl::Notification release, helper_busy;
  std::thread first([&] {
    runner.Run([&](int half) {
      if (half == 1) {  // on the helper: this caller waits in half 0
        helper_busy.Notify();
        release.WaitForNotification();
      } else {
        helper_busy.WaitForNotification();
      }
    });
  });
  helper_busy.WaitForNotification();
  // The helper is inside the first caller's half 1: this caller must not
  // wait for it.
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id ran_on[2];
  runner.Run([&](int half) { ran_on[half] = std::this_thread::get_id(); });
  CHECK(ran_on[0] == me);
  CHECK(ran_on[1] == me);
  release.Notify();
  first.join();
}

TEST_CASE("many callers at once each get both halves run") {
  SplitRunner runner;
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  std::atomic<bool> wrong{false};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        std::atomic<int> halves{0};
        runner.Run([&](int half) { halves.fetch_add(half + 1); });
        if (halves.load() != 3) wrong.store(true);
        total.fetch_add(1);
      }
    });
  }
  for (auto& c : callers) c.join();
  CHECK_FALSE(wrong.load());
  CHECK(total.load() == 2000);
}

}  // namespace gputune
