// GPUTUNE_SANITIZED: defined (1) when this translation unit is built with
// AddressSanitizer, ThreadSanitizer or MemorySanitizer, for the checks that
// only hold without instrumentation (speed comparisons, memory bounds in
// RSS: the sanitizers' allocators add redzones and quarantine to it).
#ifndef GPUTUNE_TESTS_SUPPORT_SANITIZED_H_
#define GPUTUNE_TESTS_SUPPORT_SANITIZED_H_

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GPUTUNE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define GPUTUNE_SANITIZED 1
#endif
#endif

namespace gputune::testing {

// How many times slower the instrumented build runs: the factor a test's
// generous deadline (a bound on waiting for work to finish, never a speed
// check) is scaled by, so it holds under the sanitizers on a loaded machine.
#ifdef GPUTUNE_SANITIZED
inline constexpr int kSlowdown = 3;
#else
inline constexpr int kSlowdown = 1;
#endif

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_SUPPORT_SANITIZED_H_
