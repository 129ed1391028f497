// Shared by the fleet suites: skip without PostgreSQL, and small helpers for
// talking to fleet daemons.
#ifndef GPUTUNE_TESTS_FLEET_FLEET_TEST_SUPPORT_H_
#define GPUTUNE_TESTS_FLEET_FLEET_TEST_SUPPORT_H_

#include <cstdio>

#include "tests/support/postgres_server.h"

// Passes (printing why) when the PostgreSQL binaries are not installed:
// Catch2 v2 has no SKIP.
#define GPUTUNE_REQUIRE_POSTGRES()                                        \
  do {                                                                    \
    if (!::gputune::testing::PostgresServer::Available()) {               \
      std::printf("%s\n",                                                 \
                  ::gputune::testing::PostgresServer::Missing().c_str()); \
      return;                                                             \
    }                                                                     \
  } while (false)

#endif  // GPUTUNE_TESTS_FLEET_FLEET_TEST_SUPPORT_H_
