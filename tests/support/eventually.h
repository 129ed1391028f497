// Eventually: polls a condition until it holds or a time limit passes, for
// tests that wait on a daemon's or a client's background work.
#ifndef GPUTUNE_TESTS_SUPPORT_EVENTUALLY_H_
#define GPUTUNE_TESTS_SUPPORT_EVENTUALLY_H_

#include <chrono>
#include <thread>

namespace gputune::testing {

// Polls `cond` every 10 ms for up to `limit`; its last value.
template <typename F>
bool Eventually(
    F cond, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_SUPPORT_EVENTUALLY_H_
