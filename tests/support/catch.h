// Include this, not <catch2/catch.hpp>: it picks Debian's Catch2 or the copy
// that travels in the tree (for the GPU machine).
#ifndef GPUTUNE_TESTS_SUPPORT_CATCH_H_
#define GPUTUNE_TESTS_SUPPORT_CATCH_H_
#if defined(GPUTUNE_VENDORED_CATCH2)
#include "catch.hpp"
#else
#include <catch2/catch.hpp>
#endif
#endif  // GPUTUNE_TESTS_SUPPORT_CATCH_H_
