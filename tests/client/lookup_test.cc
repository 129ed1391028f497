// Lookup, TryLookup, BatchLookup and Preload against a real gputuned.
#include <chrono>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/util/message_differencer.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
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
    // Each memoised status was parsed from the batch answer.
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

  RpcCounter counter;
  auto counted = ClientOf(daemon, {}, &counter);
  // An invalid key is named by its index, as data too, and nothing is sent.
  std::vector<v1::Key> large(5000, hit);
  for (size_t bad : {1u, 4000u}) {
    INFO("bad key " << bad);
    large[bad] = DenseKey(0);
    absl::StatusOr<std::vector<LookupResult>> r = counted->BatchLookup(large);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(r.status().message())
                .rfind("keys[" + std::to_string(bad) + "].dense_bf16.tokens",
                       0) == 0);
    REQUIRE(InvalidKeyIndex(r.status()) == bad);
    large[bad] = hit;
  }
  CHECK(counter.total() == 0);
  CHECK(InvalidKeyIndex(absl::InvalidArgumentError("keys[3]: bad")) ==
        std::nullopt);
  REQUIRE(counted->BatchLookup(large).ok());
  CHECK(counter.of("BatchLookup") == 2);  // 5,000 keys: two parts
}

TEST_CASE("BatchLookup gives each entry whole, as Lookup does") {
  // 5,001 keys: two RPCs in flight together; a HIT in every third key, one
  // key asked twice.
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
  keys.push_back(keys[3]);
  ClientOptions no_memo;
  no_memo.memo_capacity = 0;
  auto single = ClientOf(daemon, no_memo);
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  absl::StatusOr<std::vector<LookupResult>> batch = client->BatchLookup(keys);
  REQUIRE(batch.ok());
  REQUIRE(batch->size() == keys.size());
  CHECK(counter.of("BatchLookup") == 2);
  for (size_t i = 0; i < keys.size(); ++i) {
    INFO(KeyText(keys[i]));
    absl::StatusOr<LookupResult> one = single->Lookup(keys[i]);
    REQUIRE(one.ok());
    REQUIRE((*batch)[i].state() == one->state());
    REQUIRE(google::protobuf::util::MessageDifferencer::Equals(
        (*batch)[i].status(), one->status()));
  }
}

// What gputuned answers to `method` for `request`, sent as raw bytes: what
// any process on the socket may send.
struct RawAnswer {
  grpc::Status status;
  std::string bytes;
};
RawAnswer CallRaw(const DaemonProcess& daemon, const std::string& method,
                  const std::string& request) {
  grpc::GenericStub stub(grpc::CreateChannel(
      daemon.endpoint(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(request);
  const grpc::ByteBuffer sent(&slice, 1);
  grpc::ByteBuffer received;
  absl::Notification done;
  RawAnswer answer;
  stub.UnaryCall(&ctx, "/gputune.v1.TuneService/" + method, grpc::StubOptions(),
                 &sent, &received, [&](grpc::Status s) {
                   answer.status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  std::vector<grpc::Slice> slices;
  if (answer.status.ok() && received.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      answer.bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return answer;
}

TEST_CASE("a request protobuf rejects is INVALID_ARGUMENT, not an answer") {
  DaemonProcess daemon({"--backend=none"});
  // Issue 14's request: a key whose role is behind a 10-byte length prefix
  // (protobuf allows 5), which the hand-written reader took as a key.
  const std::string hostile = absl::HexStringToBytes(
      "0a240a94808080808080808000080212086174746e2e716b76180120802028803"
      "01a03637331");
  for (const std::string method : {"Lookup", "BatchLookup"}) {
    INFO(method);
    const RawAnswer answer = CallRaw(daemon, method, hostile);
    CHECK(answer.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(answer.status.error_message().find("could not be parsed") !=
          std::string::npos);
  }
  // What protobuf writes for the same request is answered.
  v1::LookupRequest good;
  *good.mutable_key() = DenseKey(1);
  const RawAnswer answer = CallRaw(daemon, "Lookup", good.SerializeAsString());
  REQUIRE(answer.status.ok());
  v1::LookupResponse response;
  REQUIRE(response.ParseFromString(answer.bytes));
  CHECK(response.status().state() == v1::KEY_STATE_MISS);
}

TEST_CASE("the daemon names a bad key of a batch in its trailing metadata") {
  DaemonProcess daemon({"--backend=none"});
  auto stub = v1::TuneService::NewStub(grpc::CreateChannel(
      daemon.endpoint(), grpc::InsecureChannelCredentials()));
  v1::BatchLookupRequest request;
  *request.add_keys() = DenseKey(1);
  *request.add_keys() = DenseKey(2);
  *request.add_keys() = DenseKey(0);
  grpc::ClientContext ctx;
  v1::BatchLookupResponse response;
  const grpc::Status s = stub->BatchLookup(&ctx, request, &response);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().rfind("keys[2].dense_bf16.tokens", 0) == 0);
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const auto index = trailers.find("gputune-key-index");
  REQUIRE(index != trailers.end());
  CHECK(std::string(index->second.data(), index->second.size()) == "2");
}

TEST_CASE("a key named many times in a batch is answered once") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const v1::Key hit = CustomKey("dup=1");
  MakeHit(*client, hit, "k.dup");
  auto stub = v1::TuneService::NewStub(grpc::CreateChannel(
      daemon.endpoint(), grpc::InsecureChannelCredentials()));
  v1::BatchLookupRequest request;
  *request.add_keys() = CustomKey("dup=miss");
  for (int i = 0; i < 900; ++i) *request.add_keys() = hit;
  grpc::ClientContext ctx;
  v1::BatchLookupResponse response;
  REQUIRE(stub->BatchLookup(&ctx, request, &response).ok());
  REQUIRE(response.statuses_size() == 901);
  CHECK(response.statuses(0).state() == v1::KEY_STATE_MISS);
  CHECK(response.statuses(1).state() == v1::KEY_STATE_HIT);
  CHECK(!response.statuses(1).entry().empty());
  for (int i = 2; i < 901; ++i) {
    REQUIRE(response.statuses(i).same_as() == 2);
    REQUIRE(response.statuses(i).entry().empty());
  }
  // The client puts the repeats back.
  absl::StatusOr<std::vector<LookupResult>> r =
      client->BatchLookup({hit, CustomKey("dup=miss"), hit});
  REQUIRE(r.ok());
  CHECK((*r)[0].entry().execution().kernel() == "k.dup");
  CHECK((*r)[1].state() == v1::KEY_STATE_MISS);
  CHECK((*r)[2].entry().execution().kernel() == "k.dup");
}

TEST_CASE("a BatchLookup answer past its bound says how to split the batch") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  // 800 entries of 64 KiB each: 50 MiB, more than one answer may hold.
  std::vector<v1::Key> keys;
  std::vector<v1::Entry> entries;
  for (int i = 0; i < 800; ++i) {
    v1::Entry e = MakeHit(*client, CustomKey("big=" + std::to_string(i)));
    e.mutable_execution()->set_data(std::string(64 << 10, 'x'));
    keys.push_back(e.key());
    entries.push_back(std::move(e));
    // 3 MiB per import: each call well inside the client's deadline, also
    // under the sanitizers on a loaded machine.
    if (entries.size() == 50) {
      const auto imported = client->ImportEntries(entries);
      INFO(imported.status().ToString());
      REQUIRE(imported.ok());
      entries.clear();
    }
  }
  absl::StatusOr<std::vector<LookupResult>> r = client->BatchLookup(keys);
  REQUIRE(r.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string message(r.status().message());
  CHECK(message.find("would exceed 48 MiB") != std::string::npos);
  CHECK(message.find("split the batch into BatchLookups of at most") !=
        std::string::npos);
  // Split as it says, the batch is answered.
  const std::vector<v1::Key> half(keys.begin(), keys.begin() + 300);
  absl::StatusOr<std::vector<LookupResult>> part = client->BatchLookup(half);
  REQUIRE(part.ok());
  CHECK((*part)[299].entry().execution().data().size() == (64u << 10));
}

TEST_CASE("a memoised entry deleted in the daemon is dropped after memo_ttl") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.memo_ttl = absl::Milliseconds(100);
  options.follow_changes = false;  // the ttl alone (change_feed_test.cc)
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

TEST_CASE(
    "a stale-but-usable entry is the execution to run, a plain STALE one "
    "is not") {
  // No background re-tune within the test (and a custom key is never one).
  DaemonProcess daemon({"--backend=host", "--revalidate_idle=1h"});
  auto client = ClientOf(daemon);
  const v1::Key dense = DenseKey(2, 128, 128), custom = CustomKey("old=1");
  ImportFromOlderSoftware(*daemon.Stub(), dense);
  ImportFromOlderSoftware(*daemon.Stub(), custom);
  for (const v1::Key* key : {&dense, &custom}) {
    absl::StatusOr<LookupResult> r = client->Lookup(*key);
    REQUIRE(r.ok());
    CHECK(r->state() == v1::KEY_STATE_STALE);
    CHECK(r->stale_usable());
    CHECK(r->status().stale_usable());
    CHECK(r->execution_to_run().kernel() == "older.kernel");
    CHECK(r->execution_to_run().params().at("tile") == 32);
    CHECK_FALSE(r->from_memo());
  }
  SECTION("another candidate set runs the default") {
    v1::Key other = dense;
    other.set_candidate_set("cs2");
    absl::StatusOr<LookupResult> r = client->Lookup(other);
    REQUIRE(r.ok());
    CHECK(r->state() == v1::KEY_STATE_STALE);
    CHECK_FALSE(r->stale_usable());
    CHECK(r->entry().execution().kernel() == "older.kernel");
    CHECK(r->execution_to_run().kernel().empty());
  }
  SECTION("a HIT runs its entry, a MISS and an empty result the default") {
    const v1::Key hit = CustomKey("new=1");
    MakeHit(*client, hit, "k.new");
    CHECK(client->Lookup(hit)->execution_to_run().kernel() == "k.new");
    CHECK(client->Lookup(CustomKey("none=1"))->execution_to_run().kernel() ==
          "");
    CHECK(LookupResult().execution_to_run().kernel().empty());
  }
  SECTION("BatchLookup says the same") {
    absl::StatusOr<std::vector<LookupResult>> rs =
        client->BatchLookup({dense, custom});
    REQUIRE(rs.ok());
    for (const LookupResult& r : *rs) {
      CHECK(r.stale_usable());
      CHECK(r.execution_to_run().kernel() == "older.kernel");
    }
  }
}

}  // namespace
}  // namespace gputune::testing
