// The fleet tier's PostgreSQL side (daemon/fleet/fleet_store.h) against a
// real PostgreSQL 15 server: schema, claims and fencing, canonical publishes,
// the change feed and NOTIFY.
#include "daemon/fleet/fleet_store.h"

#include <thread>

#include "tests/fleet/fleet_test_support.h"
#include "tests/support/catch.h"

namespace gputune::fleet {
namespace {

using testing::PostgresServer;

constexpr char kFp[] = "00112233aabbccdd";
const FleetIdentity kA = {"host-a", "GPU A", "a/1"};
const FleetIdentity kB = {"host-b", "GPU B", "b/1"};

std::unique_ptr<FleetConnection> Connect(const std::string& conninfo) {
  absl::StatusOr<std::unique_ptr<FleetConnection>> c =
      FleetConnection::Connect(conninfo, absl::Seconds(5));
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  absl::StatusOr<std::string> schema = (*c)->PrepareSchema();
  INFO(schema.status().ToString());
  REQUIRE(schema.ok());
  return std::move(*c);
}

}  // namespace

TEST_CASE("the fleet schema is made once, kept, and a newer one is refused") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string conninfo = pg.CreateDatabase("schema");
  auto a = FleetConnection::Connect(conninfo, absl::Seconds(5));
  REQUIRE(a.ok());
  absl::StatusOr<std::string> id = (*a)->PrepareSchema();
  REQUIRE(id.ok());
  CHECK(id->size() == 36);  // a UUID
  absl::StatusOr<std::string> again = (*a)->PrepareSchema();
  REQUIRE(again.ok());
  CHECK(*again == *id);
  CHECK(pg.QueryNumber("schema",
                       "SELECT value::int FROM fleet_meta WHERE "
                       "name = 'schema_version'") == kFleetSchemaVersion);

  const int next = kFleetSchemaVersion + 1;
  pg.Query("schema", "UPDATE fleet_meta SET value = '" + std::to_string(next) +
                         "' WHERE name = 'schema_version'");
  absl::StatusOr<std::string> newer = (*a)->PrepareSchema();
  REQUIRE(!newer.ok());
  CHECK(newer.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(newer.status().message())
            .find("fleet schema version " + std::to_string(next) +
                  " is newer") != std::string::npos);
  CHECK(pg.QueryNumber("schema",
                       "SELECT value::int FROM fleet_meta WHERE "
                       "name = 'schema_version'") == next);
}

TEST_CASE(
    "a version 1 fleet database migrates to the current version: one live "
    "row per key (the newest), feed positions back inside the sequence, "
    "oversized rows kept but never fetched, claims stamped with their role") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string conninfo = pg.CreateDatabase("migrate");
  auto c = FleetConnection::Connect(conninfo, absl::Seconds(5));
  REQUIRE(c.ok());
  REQUIRE((*c)->PrepareSchema(/*up_to=*/1).ok());
  // What a version 1 fleet could hold: two live rows of one key, a row
  // with a forged position, one of 2 MiB.
  auto row = [](const std::string& key, const std::string& cs,
                const std::string& seq, const std::string& entry) {
    return "INSERT INTO fleet_entries (fingerprint, key_id, candidate_set, "
           "seq, fence, host, gpu, instance, entry) VALUES ('" +
           std::string(kFp) + "', '" + key + "', '" + cs + "', " + seq +
           ", 0, 'h', 'g', 'i', " + entry + ");";
  };
  pg.Query("migrate",
           row("k", "cs1", "nextval('fleet_feed')", "'\\x01'::bytea") +
               row("k", "cs2", "nextval('fleet_feed')", "'\\x02'::bytea") +
               row("forged", "cs1", "9000000000000000000", "'\\x03'::bytea") +
               row("big", "cs1", "nextval('fleet_feed')",
                   "decode(repeat('ab', 2 << 20), 'hex')") +
               "INSERT INTO fleet_claims (fingerprint, key_id, fence, host, "
               "gpu, instance, expires_at) VALUES ('" +
               kFp + "', 'old', 5, 'h', 'g', 'i', now());");
  REQUIRE((*c)->PrepareSchema().ok());
  CHECK(pg.QueryNumber("migrate",
                       "SELECT value::int FROM fleet_meta WHERE "
                       "name = 'schema_version'") == kFleetSchemaVersion);
  auto live = pg.Query("migrate",
                       "SELECT candidate_set FROM fleet_entries WHERE key_id "
                       "= 'k' AND NOT deleted");
  REQUIRE(live.size() == 1);
  CHECK(live[0][0] == "cs2");
  auto head = (*c)->FeedHead();
  REQUIRE(head.ok());
  auto feed = (*c)->ReadFeed(kFp, 0, 100);
  REQUIRE(feed.ok());
  REQUIRE(feed->size() == 4);  // the forged row too, inside the sequence
  for (const FleetConnection::FeedRow& r : *feed) {
    CHECK(r.seq <= *head);
    CHECK(r.role.empty());  // written before roles were recorded
    if (r.key_id == "big") {
      CHECK(r.oversized);
      CHECK(r.entry.empty());
      CHECK(r.entry_bytes == (2u << 20));
    } else {
      CHECK_FALSE(r.oversized);
    }
  }
  CHECK(feed->back().key_id == "forged");
  // And from now on the schema holds it so.
  CHECK_THROWS(pg.Query("migrate", row("k", "cs3", "1", "'\\x04'::bytea")));
  CHECK_THROWS(pg.Query(
      "migrate",
      row("big2", "cs1", "1", "decode(repeat('ab', 2 << 20), 'hex')")));
  // A claim from before has no role; a new one has the claiming role's, and
  // a fence from the sequence.
  CHECK(pg.QueryNumber("migrate",
                       "SELECT count(*) FROM fleet_claims WHERE key_id = "
                       "'old' AND claimer_role IS NULL") == 1);
  auto granted = (*c)->Claim(kFp, "new", "cs1", kA, absl::Seconds(30));
  REQUIRE(granted.ok());
  REQUIRE(granted->outcome == FleetConnection::ClaimResult::kGranted);
  CHECK(pg.QueryNumber("migrate",
                       "SELECT count(*) FROM fleet_claims WHERE key_id = "
                       "'new' AND claimer_role = current_user AND fence = " +
                           std::to_string(granted->fence)) == 1);
}

TEST_CASE(
    "connecting says what is wrong: no server, wrong password, bad string") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  pg.CreateDatabase("auth");
  auto bad_password =
      FleetConnection::Connect(pg.ConnInfo("auth", "wrong"), absl::Seconds(5));
  REQUIRE(!bad_password.ok());
  CHECK(bad_password.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(std::string(bad_password.status().message())
            .find("password authentication failed") != std::string::npos);

  auto no_server = FleetConnection::Connect(
      "host=/nonexistent-gputune dbname=x connect_timeout=2", absl::Seconds(5));
  REQUIRE(!no_server.ok());
  CHECK(no_server.status().code() == absl::StatusCode::kUnavailable);
  CHECK(
      std::string(no_server.status().message()).find("/nonexistent-gputune") !=
      std::string::npos);

  auto malformed =
      FleetConnection::Connect("host = 'unterminated", absl::Seconds(5));
  REQUIRE(!malformed.ok());
  CHECK(malformed.status().code() == absl::StatusCode::kInvalidArgument);

  CHECK(RedactConnInfo(pg.ConnInfo("auth")).find(PostgresServer::kPassword) ==
        std::string::npos);
  CHECK(RedactConnInfo(pg.ConnInfo("auth")).find("password=***") !=
        std::string::npos);
}

TEST_CASE(
    "a fleet claim is exclusive until its lease lapses, and fences never "
    "repeat") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  auto a = Connect(pg.CreateDatabase("claims"));
  auto b = Connect(pg.ConnInfo("claims"));

  auto first = a->Claim(kFp, "k1", "cs", kA, absl::Milliseconds(400));
  REQUIRE(first.ok());
  CHECK(first->outcome == FleetConnection::ClaimResult::kGranted);

  auto held = b->Claim(kFp, "k1", "cs", kB, absl::Seconds(30));
  REQUIRE(held.ok());
  CHECK(held->outcome == FleetConnection::ClaimResult::kHeld);
  CHECK(held->fence == first->fence);
  CHECK(held->holder.host == "host-a");
  CHECK(held->holder.gpu == "GPU A");
  CHECK(held->remaining > absl::ZeroDuration());
  CHECK(held->remaining <= absl::Milliseconds(400));

  // Another key is independent.
  auto other = b->Claim(kFp, "k2", "cs", kB, absl::Seconds(30));
  REQUIRE(other.ok());
  CHECK(other->outcome == FleetConnection::ClaimResult::kGranted);
  CHECK(other->fence > first->fence);

  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto takeover = b->Claim(kFp, "k1", "cs", kB, absl::Seconds(30));
  REQUIRE(takeover.ok());
  CHECK(takeover->outcome == FleetConnection::ClaimResult::kGranted);
  CHECK(takeover->fence > other->fence);

  // The old holder can no longer renew; the new one can, and can release.
  auto stale_renew = a->Renew(kFp, "k1", first->fence, absl::Seconds(30));
  REQUIRE(stale_renew.ok());
  CHECK_FALSE(*stale_renew);
  auto renew = b->Renew(kFp, "k1", takeover->fence, absl::Seconds(30));
  REQUIRE(renew.ok());
  CHECK(*renew);
  REQUIRE(b->Release(kFp, "k1", takeover->fence).ok());
  auto after_release = a->Claim(kFp, "k1", "cs", kA, absl::Seconds(30));
  REQUIRE(after_release.ok());
  CHECK(after_release->outcome == FleetConnection::ClaimResult::kGranted);
  CHECK(after_release->fence > takeover->fence);
}

TEST_CASE(
    "a superseded holder's publish is refused, and the first publish is "
    "canonical") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  auto a = Connect(pg.CreateDatabase("publish"));
  auto b = Connect(pg.ConnInfo("publish"));

  auto stale = a->Claim(kFp, "k1", "cs", kA, absl::Milliseconds(300));
  REQUIRE(stale.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto fresh = b->Claim(kFp, "k1", "cs", kB, absl::Seconds(30));
  REQUIRE(fresh.ok());
  REQUIRE(fresh->outcome == FleetConnection::ClaimResult::kGranted);

  auto refused = a->Publish(kFp, "k1", "cs", stale->fence, "entry-a", kA);
  REQUIRE(refused.ok());
  CHECK(refused->outcome == FleetConnection::PublishResult::kSuperseded);
  CHECK(refused->reason.find("superseded by claim") != std::string::npos);
  CHECK_FALSE(refused->canonical.has_value());

  auto accepted = b->Publish(kFp, "k1", "cs", fresh->fence, "entry-b", kB);
  REQUIRE(accepted.ok());
  CHECK(accepted->outcome == FleetConnection::PublishResult::kAccepted);
  CHECK(accepted->seq > 0);
  // A retry of the same publish (a lost answer) is accepted again.
  auto retry = b->Publish(kFp, "k1", "cs", fresh->fence, "entry-b", kB);
  REQUIRE(retry.ok());
  CHECK(retry->outcome == FleetConnection::PublishResult::kAccepted);

  // Unfenced (recorded while the fleet was away): the canonical one stands.
  auto late = a->Publish(kFp, "k1", "cs", 0, "entry-a2", kA);
  REQUIRE(late.ok());
  CHECK(late->outcome == FleetConnection::PublishResult::kCanonical);
  REQUIRE(late->canonical.has_value());
  CHECK(late->canonical->entry == "entry-b");
  CHECK(late->canonical->publisher.host == "host-b");

  // A claim of a key with a canonical entry returns it and takes nothing.
  auto claim = a->Claim(kFp, "k1", "cs", kA, absl::Seconds(30));
  REQUIRE(claim.ok());
  CHECK(claim->outcome == FleetConnection::ClaimResult::kCanonical);
  CHECK(claim->canonical.entry == "entry-b");
  // Another candidate set of the key is another entry.
  auto other_cs = a->Claim(kFp, "k1", "cs2", kA, absl::Seconds(30));
  REQUIRE(other_cs.ok());
  CHECK(other_cs->outcome == FleetConnection::ClaimResult::kGranted);

  CHECK(pg.QueryNumber("publish", "SELECT count(*) FROM fleet_entries") == 1);
}

TEST_CASE("an unfenced publish waits while another daemon holds the key") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  auto a = Connect(pg.CreateDatabase("held"));
  auto b = Connect(pg.ConnInfo("held"));
  auto claim = b->Claim(kFp, "k1", "cs", kB, absl::Seconds(30));
  REQUIRE(claim.ok());
  auto held = a->Publish(kFp, "k1", "cs", 0, "entry-a", kA);
  REQUIRE(held.ok());
  CHECK(held->outcome == FleetConnection::PublishResult::kHeld);
  CHECK(pg.QueryNumber("held", "SELECT count(*) FROM fleet_entries") == 0);
  REQUIRE(b->Release(kFp, "k1", claim->fence).ok());
  auto now_ok = a->Publish(kFp, "k1", "cs", 0, "entry-a", kA);
  REQUIRE(now_ok.ok());
  CHECK(now_ok->outcome == FleetConnection::PublishResult::kAccepted);
}

TEST_CASE(
    "the feed returns changes in order from any position, deletions too") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  auto a = Connect(pg.CreateDatabase("feed"));
  auto listener = Connect(pg.ConnInfo("feed"));
  REQUIRE(listener->Listen(kFp).ok());
  for (int i = 0; i < 5; ++i) {
    auto p = a->Publish(kFp, "k" + std::to_string(i), "cs", 0,
                        "e" + std::to_string(i), kA);
    REQUIRE(p.ok());
    REQUIRE(p->outcome == FleetConnection::PublishResult::kAccepted);
  }
  // Another fingerprint's entries are not in this feed.
  REQUIRE(a->Publish("ffff", "k0", "cs", 0, "other", kA).ok());

  absl::StatusOr<bool> woke = listener->WaitForNotify(absl::Seconds(5), -1);
  REQUIRE(woke.ok());
  CHECK(*woke);

  auto all = listener->ReadFeed(kFp, 0, 100);
  REQUIRE(all.ok());
  REQUIRE(all->size() == 5);
  for (size_t i = 1; i < all->size(); ++i) {
    CHECK((*all)[i].seq > (*all)[i - 1].seq);
  }
  CHECK((*all)[0].entry == "e0");
  CHECK((*all)[0].publisher.gpu == "GPU A");
  auto tail = listener->ReadFeed(kFp, (*all)[2].seq, 100);
  REQUIRE(tail.ok());
  REQUIRE(tail->size() == 2);
  CHECK((*tail)[0].key_id == "k3");

  auto deleted = a->Delete(kFp, {"k1"});
  REQUIRE(deleted.ok());
  CHECK(*deleted == 1);
  auto after = listener->ReadFeed(kFp, all->back().seq, 100);
  REQUIRE(after.ok());
  REQUIRE(after->size() == 1);
  CHECK(after->front().key_id == "k1");
  CHECK(after->front().deleted);
  // Deleted: the key may be tuned and published again.
  auto again = a->Publish(kFp, "k1", "cs", 0, "e1-new", kA);
  REQUIRE(again.ok());
  CHECK(again->outcome == FleetConnection::PublishResult::kAccepted);
  auto last = listener->LastSeq(kFp);
  REQUIRE(last.ok());
  CHECK(*last == again->seq);
}

}  // namespace gputune::fleet

namespace gputune::fleet {

TEST_CASE(
    "a publish for another candidate set than the key's live fleet entry is "
    "refused until the entry is deleted") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  auto a = Connect(pg.CreateDatabase("candidates"));
  auto first = a->Publish(kFp, "k", "cs1", 0, "entry-cs1", kA);
  REQUIRE(first.ok());
  REQUIRE(first->outcome == FleetConnection::PublishResult::kAccepted);
  auto other = a->Publish(kFp, "k", "cs2", 0, "entry-cs2", kB);
  REQUIRE(other.ok());
  CHECK(other->outcome == FleetConnection::PublishResult::kConflict);
  CHECK(other->reason.find("candidate set cs1 (published by role postgres)") !=
        std::string::npos);
  CHECK(pg.QueryNumber("candidates",
                       "SELECT count(*) FROM fleet_entries WHERE NOT "
                       "deleted") == 1);
  REQUIRE(a->Delete(kFp, {"k"}).ok());
  auto after = a->Publish(kFp, "k", "cs2", 0, "entry-cs2", kB);
  REQUIRE(after.ok());
  CHECK(after->outcome == FleetConnection::PublishResult::kAccepted);
  auto feed = a->ReadFeed(kFp, 0, 10);
  REQUIRE(feed.ok());
  REQUIRE(feed->size() == 2);  // the cs1 tombstone, then the cs2 entry
  CHECK(feed->front().deleted);
  CHECK(feed->back().candidate_set == "cs2");
  CHECK(feed->back().role == "postgres");
}

}  // namespace gputune::fleet
