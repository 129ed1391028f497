// ClaimGuard: renewal, record, abandon on scope exit.
#include <chrono>
#include <thread>

#include "absl/time/clock.h"
#include "proto/proto_time.h"
#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

// The live claims the daemon reports.
int LiveClaims(Client& client) {
  absl::StatusOr<v1::GetStatusResponse> s = client.GetStatus();
  REQUIRE(s.ok());
  return s->claims_size();
}

TEST_CASE("a claim guard abandons its claim on scope exit") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const v1::Key key = CustomKey("scope=1");
  {
    absl::StatusOr<ClaimGuard> guard = client->Claim(key);
    REQUIRE(guard.ok());
    REQUIRE(guard->granted());
    REQUIRE(guard->claim_id() > 0);
    REQUIRE(client->Lookup(key)->state() == v1::KEY_STATE_PENDING);
    REQUIRE(LiveClaims(*client) == 1);
  }
  // Released at once, not when the 30 s lease runs out.
  REQUIRE(client->Lookup(key)->state() == v1::KEY_STATE_MISS);
  REQUIRE(LiveClaims(*client) == 0);
  REQUIRE(daemon.Log().find("released without record") != std::string::npos);
}

TEST_CASE("a claim guard renews its lease past one TTL") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  // Renewed every third of the lease: a renewal may be 1.3 s late (a
  // loaded machine) before the claim is lost.
  options.lease_ttl = absl::Seconds(2);
  auto client = ClientOf(daemon, options);
  auto rival = ClientOf(daemon);
  const v1::Key key = CustomKey("renew=1");

  absl::StatusOr<ClaimGuard> guard = client->Claim(key);
  REQUIRE(guard->granted());
  const absl::Time first_deadline =
      FromProto(guard->response().claim().lease_deadline());
  // Past the end of the first lease (by the daemon's clock, which is this
  // machine's) the key is still ours, under a later deadline...
  absl::SleepFor(first_deadline + absl::Milliseconds(500) - absl::Now());
  REQUIRE_FALSE(guard->lost());
  absl::StatusOr<ClaimGuard> other = rival->Claim(key);
  REQUIRE(other.ok());
  REQUIRE(other->outcome() == v1::CLAIM_OUTCOME_PENDING);
  REQUIRE(other->response().claim().claim_id() == guard->claim_id());
  REQUIRE(FromProto(other->response().claim().lease_deadline()) >
          first_deadline);
  // ...and the record is accepted.
  v1::RecordRequest result;
  result.mutable_execution()->set_kernel("k.renewed");
  absl::StatusOr<v1::Entry> entry = guard->Record(result);
  REQUIRE(entry.ok());
  REQUIRE(entry->execution().kernel() == "k.renewed");
  REQUIRE_FALSE(guard->granted());
}

TEST_CASE("without renewal the lease runs out and another client takes over") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.lease_ttl = absl::Milliseconds(200);
  auto client = ClientOf(daemon, options);
  const v1::Key key = CustomKey("expire=1");
  absl::StatusOr<ClaimGuard> guard = client->Claim(key);
  REQUIRE(guard->granted());
  const uint64_t id = guard->Release();  // stops renewing, keeps the claim
  REQUIRE(id > 0);
  REQUIRE_FALSE(guard->granted());
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  absl::StatusOr<ClaimGuard> next = ClientOf(daemon)->Claim(key);
  REQUIRE(next->granted());
  REQUIRE(next->claim_id() > id);  // a fencing token, never reused
}

TEST_CASE("a record commits: the key is a hit, memoised, for every client") {
  DaemonProcess daemon({"--backend=none"});
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  const v1::Key key = CustomKey("record=1");
  const v1::Entry entry = MakeHit(*client, key, "k.rec");
  REQUIRE(entry.source() == v1::SOURCE_CLIENT_MEASURED);
  REQUIRE(entry.measurements_size() == 2);
  const int before = counter.of("Lookup");
  REQUIRE(client->Lookup(key)->from_memo());
  REQUIRE(counter.of("Lookup") == before);
  REQUIRE(ClientOf(daemon)->Lookup(key)->entry().execution().kernel() ==
          "k.rec");
  // Claiming a HIT returns the entry, no claim.
  absl::StatusOr<ClaimGuard> again = ClientOf(daemon)->Claim(key);
  REQUIRE(again->outcome() == v1::CLAIM_OUTCOME_HIT);
  REQUIRE_FALSE(again->granted());
  REQUIRE(again->response().entry().execution().kernel() == "k.rec");
}

TEST_CASE("a guard whose claim was voided by a daemon restart is lost") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.lease_ttl = absl::Milliseconds(300);
  auto client = ClientOf(daemon, options);
  const v1::Key key = CustomKey("restart=1");
  absl::StatusOr<ClaimGuard> guard = client->Claim(key);
  REQUIRE(guard->granted());
  daemon.Kill();
  daemon.Start();  // claims are in memory only
  REQUIRE(Eventually([&] { return guard->lost(); }));
  v1::RecordRequest result;
  result.mutable_execution()->set_kernel("k.late");
  REQUIRE(guard->Record(result).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  REQUIRE(client->Lookup(key)->state() == v1::KEY_STATE_MISS);
}

TEST_CASE("an explicit abandon releases the claim, a moved guard moves it") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const v1::Key key = CustomKey("abandon=1");
  absl::StatusOr<ClaimGuard> guard = client->Claim(key);
  ClaimGuard moved = std::move(*guard);
  REQUIRE(moved.granted());
  REQUIRE(moved.Abandon("gave up").ok());
  REQUIRE_FALSE(moved.granted());
  REQUIRE(client->Lookup(key)->state() == v1::KEY_STATE_MISS);
  REQUIRE(moved.Abandon("twice").code() ==
          absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gputune::testing
