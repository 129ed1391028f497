// AnsweredStatus: a daemon's GetStatus that must succeed (a Catch2 REQUIRE),
// for the suites that read the daemon's state. Header-only: it uses Catch2,
// which tests/support's libraries (linked by benchmarks too) do not.
#ifndef GPUTUNE_TESTS_SUPPORT_ANSWERED_STATUS_H_
#define GPUTUNE_TESTS_SUPPORT_ANSWERED_STATUS_H_

#include "gputune/v1/tune.grpc.pb.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune::testing {

inline v1::GetStatusResponse AnsweredStatus(v1::TuneService::Stub& stub) {
  v1::GetStatusResponse resp;
  const grpc::Status s =
      stub.GetStatus(Ctx().get(), v1::GetStatusRequest(), &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return resp;
}

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_SUPPORT_ANSWERED_STATUS_H_
