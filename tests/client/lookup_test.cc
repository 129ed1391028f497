// Lookup, TryLookup, BatchLookup and Preload against a real gputuned.
#include <chrono>
#include <thread>

#include "client/src/client_impl.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/key_format.h"
#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

TEST_CASE("a memoised hit is answered without an RPC") {
  DaemonProcess daemon({"--backend=none"});
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  const v1::Key key = CustomKey("memo=1");
  MakeHit(*client, key, "k.memo");

  const int before = counter.total();
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<LookupResult> r = client->Lookup(key);
    REQUIRE(r.ok());
    REQUIRE(r->hit());
    REQUIRE(r->from_memo());
    REQUIRE(r->entry().execution().kernel() == "k.memo");
  }
  REQUIRE(counter.total() == before);
  REQUIRE(counter.of("Lookup") == 0);
}

TEST_CASE("the first lookup of a hit asks the daemon once, then the memo") {
  DaemonProcess daemon({"--backend=none"});
  const v1::Key key = CustomKey("first=1");
  MakeHit(*ClientOf(daemon), key);  // recorded by another client

  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  absl::StatusOr<LookupResult> first = client->Lookup(key);
  REQUIRE(first.ok());
  REQUIRE(first->hit());
  REQUIRE_FALSE(first->from_memo());
  REQUIRE(client->Lookup(key)->from_memo());
  REQUIRE(counter.of("Lookup") == 1);
}

TEST_CASE("a miss is not memoised: the next lookup asks again") {
  DaemonProcess daemon({"--backend=none"});
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  const v1::Key key = CustomKey("miss=1");
  REQUIRE(client->Lookup(key)->state() == v1::KEY_STATE_MISS);
  REQUIRE(client->Lookup(key)->state() == v1::KEY_STATE_MISS);
  REQUIRE(counter.of("Lookup") == 2);
  REQUIRE(client->memo_size() == 0);
}

TEST_CASE("an invalid key is refused without I/O") {
  DaemonProcess daemon({"--backend=none"});
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  v1::Key bad = DenseKey(0);  // tokens must be >= 1
  absl::StatusOr<LookupResult> r = client->Lookup(bad);
  REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(r.status().message()).find("key.dense_bf16.tokens") !=
          std::string::npos);
  REQUIRE(counter.total() == 0);
}

TEST_CASE("TryLookup never waits and fills the memo in the background") {
  DaemonProcess daemon({"--backend=none"});
  const v1::Key key = CustomKey("try=1");
  MakeHit(*ClientOf(daemon), key, "k.try");

  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  LookupResult first = client->TryLookup(key);
  REQUIRE(first.state() == v1::KEY_STATE_UNSPECIFIED);  // nothing yet
  REQUIRE(Eventually([&] { return client->TryLookup(key).hit(); }));
  LookupResult later = client->TryLookup(key);
  REQUIRE(later.from_memo());
  REQUIRE(later.entry().execution().kernel() == "k.try");
  REQUIRE(counter.of("BatchLookup") == 1);
  REQUIRE(counter.of("Lookup") == 0);
}

TEST_CASE("TryLookup on a missing key asks at most once per interval") {
  DaemonProcess daemon({"--backend=none"});
  RpcCounter counter;
  ClientOptions options;
  options.refresh_interval = absl::Seconds(30);
  auto client = ClientOf(daemon, options, &counter);
  const v1::Key key = CustomKey("try-miss=1");
  for (int i = 0; i < 10000; ++i) {
    REQUIRE_FALSE(client->TryLookup(key).hit());
  }
  REQUIRE(Eventually([&] { return counter.of("BatchLookup") == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(counter.of("BatchLookup") == 1);
}

TEST_CASE("Preload fills the memo with one RPC") {
  DaemonProcess daemon({"--backend=none"});
  std::vector<v1::Key> keys;
  {
    auto writer = ClientOf(daemon);
    for (int i = 0; i < 20; ++i) {
      keys.push_back(CustomKey("preload=" + std::to_string(i)));
      if (i % 2 == 0) MakeHit(*writer, keys.back());
    }
  }
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  absl::StatusOr<size_t> hits = client->Preload(keys);
  REQUIRE(hits.ok());
  REQUIRE(*hits == 10);
  REQUIRE(counter.total() == 1);
  for (int i = 0; i < 20; i += 2) {
    absl::StatusOr<LookupResult> r = client->Lookup(keys[i]);
    REQUIRE(r->from_memo());
    // Each memoised status is parsed from the batch answer on first read.
    REQUIRE(KeyText(r->entry().key()) == KeyText(keys[i]));
    REQUIRE(KeyText(r->status().key()) == KeyText(keys[i]));
    REQUIRE(!r->entry().execution().kernel().empty());
  }
  REQUIRE(counter.total() == 1);
}

TEST_CASE("BatchLookup answers in request order") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const v1::Key hit = CustomKey("batch=hit");
  MakeHit(*client, hit, "k.batch");
  const v1::Key miss = CustomKey("batch=miss");
  absl::StatusOr<std::vector<LookupResult>> r =
      client->BatchLookup({miss, hit, miss});
  REQUIRE(r.ok());
  REQUIRE(r->size() == 3);
  REQUIRE((*r)[0].state() == v1::KEY_STATE_MISS);
  REQUIRE((*r)[1].hit());
  REQUIRE((*r)[1].entry().execution().kernel() == "k.batch");
  REQUIRE((*r)[2].state() == v1::KEY_STATE_MISS);

  std::vector<v1::Key> with_bad = {hit, DenseKey(0)};
  REQUIRE(std::string(client->BatchLookup(with_bad).status().message())
              .find("keys[1]") != std::string::npos);
  // In a batch sent in two parts, a bad key in either part is named by its
  // index in the batch, and nothing is returned.
  std::vector<v1::Key> large(5000, hit);
  for (size_t bad : {10u, 4000u}) {
    INFO("bad key " << bad);
    large[bad] = DenseKey(0);
    absl::StatusOr<std::vector<LookupResult>> r = client->BatchLookup(large);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(r.status().message())
                .rfind("keys[" + std::to_string(bad) + "].dense_bf16.tokens",
                       0) == 0);
    large[bad] = hit;
  }
  REQUIRE(client->BatchLookup(large).ok());
}

TEST_CASE("BatchLookup gives each entry whole, as Lookup does") {
  // 5,000 keys: the client sends two RPCs of 2,500 at once, and the daemon
  // answers each in two halves. A HIT in every third key, with one of four
  // executions: the daemon sends each execution once a half, and the
  // client puts it back in every entry.
  DaemonProcess daemon({"--backend=none"});
  std::vector<v1::Key> keys;
  {
    auto writer = ClientOf(daemon);
    for (int i = 0; i < 5000; ++i) {
      keys.push_back(CustomKey("whole=" + std::to_string(i)));
      if (i % 3 == 0)
        MakeHit(*writer, keys.back(), "k" + std::to_string(i % 4));
    }
  }
  ClientOptions no_memo;
  no_memo.memo_capacity = 0;
  auto single = ClientOf(daemon, no_memo);
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  absl::StatusOr<std::vector<LookupResult>> batch = client->BatchLookup(keys);
  REQUIRE(batch.ok());
  REQUIRE(batch->size() == keys.size());
  CHECK(counter.of("BatchLookup") == 2);
  // Asked without keys in the statuses, and with each execution once: what
  // the daemon left out, the client put back (below).
  v1::BatchLookupRequest asked;
  REQUIRE(asked.ParseFromString(counter.last_request("BatchLookup")));
  CHECK(asked.keys_size() == 2500);
  CHECK(asked.omit_keys());
  CHECK(asked.share_executions());
  for (size_t i = 0; i < keys.size(); ++i) {
    INFO(KeyText(keys[i]));
    absl::StatusOr<LookupResult> one = single->Lookup(keys[i]);
    REQUIRE(one.ok());
    REQUIRE((*batch)[i].state() == one->state());
    REQUIRE(google::protobuf::util::MessageDifferencer::Equals(
        (*batch)[i].status(), one->status()));
  }
}

TEST_CASE("a daemon's key index in a later part becomes the batch's") {
  using client_internal::ShiftKeyIndex;
  const absl::Status bad = absl::InvalidArgumentError(
      "keys[12].dense_bf16.tokens: must be 1..1048576, got 0");
  CHECK(ShiftKeyIndex(bad, 5000).message() ==
        "keys[5012].dense_bf16.tokens: must be 1..1048576, got 0");
  CHECK(ShiftKeyIndex(bad, 5000).code() == absl::StatusCode::kInvalidArgument);
  CHECK(ShiftKeyIndex(bad, 0) == bad);
  CHECK(ShiftKeyIndex(absl::InvalidArgumentError("keys[3]: not a Key"), 10)
            .message() == "keys[13]: not a Key");
  // Anything else is left alone.
  for (const absl::Status& other :
       {absl::InvalidArgumentError("keys: must hold 1..100000 keys, got 0"),
        absl::InvalidArgumentError("keys[x]: odd"),
        absl::UnavailableError("cannot reach gputuned"), absl::OkStatus()}) {
    CHECK(ShiftKeyIndex(other, 7) == other);
  }
}

TEST_CASE("a memoised entry deleted in the daemon is dropped after memo_ttl") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.memo_ttl = absl::Milliseconds(100);
  auto client = ClientOf(daemon, options);
  const v1::Key key = CustomKey("ttl=1");
  MakeHit(*client, key);
  REQUIRE(client->Lookup(key)->from_memo());

  v1::DeleteEntriesRequest del;
  *del.add_keys() = key;
  auto other = ClientOf(daemon);
  REQUIRE(*other->DeleteEntries(del) == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  // Served once more from the memo while the background re-check runs...
  REQUIRE(client->Lookup(key)->hit());
  // ...which drops it.
  REQUIRE(Eventually([&] {
    absl::StatusOr<LookupResult> r = client->Lookup(key);
    return r.ok() && r->state() == v1::KEY_STATE_MISS;
  }));
}

TEST_CASE("one client is shared by many threads") {
  DaemonProcess daemon({"--backend=none"});
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  std::vector<v1::Key> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back(CustomKey("threads=" + std::to_string(i)));
    MakeHit(*client, keys.back());
  }
  client->ForgetAll();
  std::atomic<int> hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        absl::StatusOr<LookupResult> r = client->Lookup(keys[(t + i) % 8]);
        if (r.ok() && r->hit()) hits.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(hits.load() == 8 * 2000);
  // Each key went to the daemon a few times at most (threads racing on the
  // first lookup), not once per call.
  REQUIRE(counter.of("Lookup") <= 64);
}

}  // namespace
}  // namespace gputune::testing
