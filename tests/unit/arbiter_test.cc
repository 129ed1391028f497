// The arbiter's state machine: docs/design.md, "Key states and arbitration".
#include "daemon/arbiter.h"

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "proto/entry_summary.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune {
namespace {

using testing::DenseKey;

// An arbiter on a fake clock whose claim ids come from a counter that
// survives "restarts" (like the store's meta table).
struct Fixture {
  FakeClock clock;
  uint64_t next_block = 1;
  ArbiterOptions options;
  std::optional<std::string> digest = std::string("fp-current");

  std::unique_ptr<Arbiter> Make() {
    return std::make_unique<Arbiter>(
        options, &clock,
        [this](uint64_t n) -> absl::StatusOr<uint64_t> {
          const uint64_t first = next_block;
          next_block += n;
          return first;
        },
        digest);
  }
};

v1::Fingerprint Fp(const std::string& device) {
  v1::Fingerprint fp;
  fp.set_backend("host");
  fp.set_device_name(device);
  return fp;
}

v1::Entry EntryFor(const v1::Key& key, const v1::Fingerprint& fp) {
  v1::Entry e;
  *e.mutable_key() = key;
  e.mutable_execution()->set_kernel("k");
  (*e.mutable_execution()->mutable_params())["tile"] = 64;
  e.add_measurements()->mutable_execution()->set_kernel("k");
  *e.mutable_fingerprint() = fp;
  e.set_source(v1::SOURCE_CLIENT_MEASURED);
  return e;
}

uint64_t Grant(Arbiter& a, const v1::Key& key, const std::string& holder,
               absl::Duration ttl = absl::ZeroDuration()) {
  absl::StatusOr<v1::ClaimResponse> r = a.Claim(key, holder, ttl);
  REQUIRE(r.ok());
  REQUIRE(r->outcome() == v1::CLAIM_OUTCOME_GRANTED);
  return r->claim().claim_id();
}

absl::Status RecordNow(Arbiter& a, uint64_t claim, const v1::Fingerprint& fp) {
  absl::StatusOr<Arbiter::RecordTicket> t = a.BeginRecord(claim);
  if (!t.ok()) return t.status();
  a.CommitRecord(*t, EntryFor(t->key, fp));
  return absl::OkStatus();
}

}  // namespace

TEST_CASE("an unknown key is a MISS and a claim on it is GRANTED") {
  Fixture f;
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  CHECK(a->Lookup(key).state() == v1::KEY_STATE_MISS);
  auto r = a->Claim(key, "p1", absl::ZeroDuration());
  REQUIRE(r.ok());
  CHECK(r->outcome() == v1::CLAIM_OUTCOME_GRANTED);
  CHECK(r->claim().claim_id() > 0);
  CHECK(FromProto(r->claim().lease_deadline()) ==
        f.clock.Now() + f.options.default_ttl);
}

TEST_CASE("a second claim on a live claim is PENDING with the holder") {
  Fixture f;
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  const uint64_t id = Grant(*a, key, "p1");
  auto r = a->Claim(key, "p2", absl::ZeroDuration());
  REQUIRE(r.ok());
  CHECK(r->outcome() == v1::CLAIM_OUTCOME_PENDING);
  CHECK(r->claim().holder() == "p1");
  CHECK(r->claim().claim_id() == id);
  CHECK(a->Lookup(key).state() == v1::KEY_STATE_PENDING);
}

TEST_CASE("a claim whose lease expired can be taken over with a new id") {
  Fixture f;
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  const uint64_t first = Grant(*a, key, "p1", absl::Seconds(1));
  f.clock.Advance(absl::Milliseconds(1001));
  CHECK(a->Lookup(key).state() == v1::KEY_STATE_MISS);
  const uint64_t second = Grant(*a, key, "p2");
  CHECK(second > first);
  SECTION("the stale holder's Record is refused and changes nothing") {
    absl::Status s = RecordNow(*a, first, Fp("gpu"));
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(a->Lookup(key).state() == v1::KEY_STATE_PENDING);
  }
  SECTION("the stale holder cannot renew either") {
    CHECK(a->Renew(first, absl::Seconds(10)).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }
}

TEST_CASE("an expired claim cannot Record even before anyone takes over") {
  Fixture f;
  auto a = f.Make();
  const uint64_t id = Grant(*a, DenseKey(1), "p1", absl::Seconds(1));
  f.clock.Advance(absl::Seconds(2));
  CHECK(a->BeginRecord(id).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE(
    "the daemon's job's and a Redis connection's claims are acted on only by "
    "their owner") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  for (const ClaimKind kind : {ClaimKind::kDaemon, ClaimKind::kRedis}) {
    absl::StatusOr<v1::ClaimResponse> r =
        a->Claim(DenseKey(kind == ClaimKind::kDaemon ? 1 : 2), "owner",
                 absl::ZeroDuration(), kind);
    REQUIRE(r.ok());
    REQUIRE(r->outcome() == v1::CLAIM_OUTCOME_GRANTED);
    const uint64_t id = r->claim().claim_id();
    // A client that read the id from GetStatus plants nothing.
    CHECK(a->BeginRecord(id).status().code() ==
          absl::StatusCode::kPermissionDenied);
    CHECK(a->Renew(id, absl::ZeroDuration()).status().code() ==
          absl::StatusCode::kPermissionDenied);
    CHECK(a->Abandon(id).status().code() ==
          absl::StatusCode::kPermissionDenied);
    // The claim is untouched by those refusals: its owner records it.
    absl::StatusOr<Arbiter::RecordTicket> t = a->BeginRecord(id, kind);
    REQUIRE(t.ok());
    a->CommitRecord(*t, EntryFor(t->key, Fp("gpu")));
    CHECK(a->Lookup(t->key).state() == v1::KEY_STATE_HIT);
  }
}

TEST_CASE("Renew extends a live lease past its first deadline") {
  Fixture f;
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  const uint64_t id = Grant(*a, key, "p1", absl::Seconds(1));
  f.clock.Advance(absl::Milliseconds(900));
  REQUIRE(a->Renew(id, absl::Seconds(1)).ok());
  f.clock.Advance(absl::Milliseconds(900));
  CHECK(a->Lookup(key).state() == v1::KEY_STATE_PENDING);
  CHECK(RecordNow(*a, id, Fp("gpu")).ok());
}

TEST_CASE("Record turns the key HIT and releases the claim") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  const uint64_t id = Grant(*a, key, "p1");
  REQUIRE(RecordNow(*a, id, Fp("gpu")).ok());
  v1::KeyStatus s = a->Lookup(key);
  CHECK(s.state() == v1::KEY_STATE_HIT);
  CHECK(s.entry().execution().kernel() == "k");
  CHECK(s.entry().measurements_size() == 0);  // lookups carry a summary
  CHECK(a->GetStats().claims.empty());
  auto again = a->Claim(key, "p2", absl::ZeroDuration());
  REQUIRE(again.ok());
  CHECK(again->outcome() == v1::CLAIM_OUTCOME_HIT);
  CHECK(RecordNow(*a, id, Fp("gpu")).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a claim being recorded cannot expire or be taken over") {
  Fixture f;
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  const uint64_t id = Grant(*a, key, "p1", absl::Seconds(1));
  auto ticket = a->BeginRecord(id);
  REQUIRE(ticket.ok());
  f.clock.Advance(absl::Seconds(5));
  a->Sweep();
  auto other = a->Claim(key, "p2", absl::ZeroDuration());
  REQUIRE(other.ok());
  CHECK(other->outcome() == v1::CLAIM_OUTCOME_PENDING);
  SECTION("and after a failed write the lease runs on (and has expired)") {
    a->CancelRecord(*ticket);
    CHECK(a->Lookup(key).state() == v1::KEY_STATE_MISS);
  }
}

TEST_CASE("a candidate-set mismatch is STALE, never a hit, and re-tunable") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  REQUIRE(RecordNow(*a, Grant(*a, DenseKey(1, 256, 256, "old"), "p"), Fp("gpu"))
              .ok());
  const v1::Key asked = DenseKey(1, 256, 256, "new");
  v1::KeyStatus s = a->Lookup(asked);
  CHECK(s.state() == v1::KEY_STATE_STALE);
  CHECK(s.stale_reason().find("candidate set") != std::string::npos);
  CHECK(s.entry().key().candidate_set() == "old");  // kept for inspection
  const uint64_t id = Grant(*a, asked, "p2");
  REQUIRE(RecordNow(*a, id, Fp("gpu")).ok());
  CHECK(a->Lookup(asked).state() == v1::KEY_STATE_HIT);
  CHECK(a->Lookup(DenseKey(1, 256, 256, "old")).state() == v1::KEY_STATE_STALE);
}

TEST_CASE("an entry from another fingerprint is STALE") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu-B"));
  auto a = f.Make();
  a->Install({EntryFor(DenseKey(1), Fp("gpu-A"))});
  v1::KeyStatus s = a->Lookup(DenseKey(1));
  CHECK(s.state() == v1::KEY_STATE_STALE);
  CHECK(s.stale_reason().find("fingerprint") != std::string::npos);
  CHECK(a->GetStats().stale_entries == 1);
  CHECK(a->Claim(DenseKey(1), "p", absl::ZeroDuration())->outcome() ==
        v1::CLAIM_OUTCOME_GRANTED);
}

TEST_CASE("Abandon frees the key, repeated abandons trip BACKOFF") {
  Fixture f;
  f.options.backoff_abandons = 3;
  f.options.backoff_window = absl::Minutes(1);
  f.options.backoff_cooldown = absl::Seconds(30);
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  for (int i = 0; i < 2; ++i) {
    auto r = a->Abandon(Grant(*a, key, "p"));
    REQUIRE(r.ok());
    CHECK(r->response.state() == v1::KEY_STATE_MISS);
  }
  auto third = a->Abandon(Grant(*a, key, "p"));
  REQUIRE(third.ok());
  CHECK(third->response.state() == v1::KEY_STATE_BACKOFF);
  CHECK(FromProto(third->response.retry_after()) ==
        f.clock.Now() + absl::Seconds(30));
  auto refused = a->Claim(key, "p", absl::ZeroDuration());
  REQUIRE(refused.ok());
  CHECK(refused->outcome() == v1::CLAIM_OUTCOME_BACKOFF);
  CHECK(a->Lookup(key).state() == v1::KEY_STATE_BACKOFF);
  f.clock.Advance(absl::Seconds(31));
  CHECK(a->Lookup(key).state() == v1::KEY_STATE_MISS);
  CHECK(a->Claim(key, "p", absl::ZeroDuration())->outcome() ==
        v1::CLAIM_OUTCOME_GRANTED);
}

TEST_CASE("abandons spread wider than the window do not trip BACKOFF") {
  Fixture f;
  f.options.backoff_abandons = 2;
  f.options.backoff_window = absl::Seconds(10);
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  REQUIRE(a->Abandon(Grant(*a, key, "p"))->response.state() ==
          v1::KEY_STATE_MISS);
  f.clock.Advance(absl::Seconds(11));
  CHECK(a->Abandon(Grant(*a, key, "p"))->response.state() ==
        v1::KEY_STATE_MISS);
}

TEST_CASE("claim ids are never reused, also across a restart") {
  Fixture f;
  f.options.claim_id_block = 4;
  std::vector<uint64_t> ids;
  for (int restart = 0; restart < 3; ++restart) {
    auto a = f.Make();  // a new process on the same database
    for (int i = 0; i < 6; ++i) {
      ids.push_back(Grant(*a, DenseKey(i + 1 + restart * 10), "p"));
    }
  }
  for (size_t i = 1; i < ids.size(); ++i) CHECK(ids[i] > ids[i - 1]);
}

TEST_CASE("a ttl outside the allowed range is INVALID_ARGUMENT") {
  Fixture f;
  auto a = f.Make();
  CHECK(a->Claim(DenseKey(1), "p", absl::Milliseconds(1)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(a->Claim(DenseKey(1), "p", absl::Hours(2)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(a->Lookup(DenseKey(1)).state() == v1::KEY_STATE_MISS);
}

TEST_CASE("watchers see the current state, then each change until HIT") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  std::vector<v1::KeyState> seen;
  const uint64_t w =
      a->Watch(key, [&](const v1::KeyStatus& s) { seen.push_back(s.state()); });
  const uint64_t id = Grant(*a, key, "p1", absl::Seconds(1));
  f.clock.Advance(absl::Seconds(2));
  a->Sweep();  // the lease expires: watchers hear MISS
  const uint64_t id2 = Grant(*a, key, "p2");
  REQUIRE(RecordNow(*a, id2, Fp("gpu")).ok());
  (void)id;
  CHECK(seen ==
        std::vector<v1::KeyState>{v1::KEY_STATE_MISS, v1::KEY_STATE_PENDING,
                                  v1::KEY_STATE_MISS, v1::KEY_STATE_PENDING,
                                  v1::KEY_STATE_HIT});
  a->Unwatch(w);
  a->Erase({"dense_bf16/decode/test.role/m=1/k=256/n=256"});
  CHECK(seen.size() == 5);  // unwatched: no more calls
}

TEST_CASE("Erase drops an entry and Install adds imported ones") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  a->Install(
      {EntryFor(DenseKey(1), Fp("gpu")), EntryFor(DenseKey(2), Fp("x"))});
  CHECK(a->Lookup(DenseKey(1)).state() == v1::KEY_STATE_HIT);
  CHECK(a->GetStats().entries == 2);
  CHECK(a->GetStats().stale_entries == 1);
  a->Erase({"dense_bf16/decode/test.role/m=1/k=256/n=256"});
  CHECK(a->Lookup(DenseKey(1)).state() == v1::KEY_STATE_MISS);
  CHECK(a->GetStats().entries == 1);
}

TEST_CASE("concurrent claimers of one key: exactly one is GRANTED") {
  Fixture f;
  auto a = f.Make();
  std::atomic<int> granted{0}, pending{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto r =
          a->Claim(DenseKey(7), "p" + std::to_string(i), absl::ZeroDuration());
      if (r.ok() && r->outcome() == v1::CLAIM_OUTCOME_GRANTED) ++granted;
      if (r.ok() && r->outcome() == v1::CLAIM_OUTCOME_PENDING) ++pending;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(granted == 1);
  CHECK(pending == 7);
}

TEST_CASE("the sweep ends a cool-down and tells the key's watchers") {
  Fixture f;
  f.options.backoff_abandons = 1;
  f.options.backoff_cooldown = absl::Seconds(10);
  auto a = f.Make();
  const v1::Key key = DenseKey(4);
  std::vector<v1::KeyState> seen;
  a->Watch(key, [&](const v1::KeyStatus& s) { seen.push_back(s.state()); });
  REQUIRE(a->Abandon(Grant(*a, key, "p"))->response.state() ==
          v1::KEY_STATE_BACKOFF);
  CHECK(a->GetStats().backoff_keys == 1);
  a->Sweep();  // still cooling down: nothing to tell
  f.clock.Advance(absl::Seconds(11));
  a->Sweep();
  CHECK(seen ==
        std::vector<v1::KeyState>{v1::KEY_STATE_MISS, v1::KEY_STATE_PENDING,
                                  v1::KEY_STATE_BACKOFF, v1::KEY_STATE_MISS});
  CHECK(a->GetStats().backoff_keys == 0);
}

// Find answers each key as Lookup does: the same state, the entry as its
// stored summary (which Lookup parses), the claim, retry_after and reason.
void CheckFoundIsLookup(const Arbiter::Found& found,
                        const v1::KeyStatus& expected) {
  INFO(v1::KeyState_Name(expected.state()));
  CHECK(found.state == expected.state());
  v1::Entry entry;
  if (found.entry) REQUIRE(entry.ParseFromString(*found.entry));
  CHECK((found.entry != nullptr) == expected.has_entry());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(entry,
                                                           expected.entry()));
  CHECK(found.claim.has_value() == expected.has_claim());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(
      found.claim.value_or(v1::ClaimInfo()), expected.claim()));
  if (expected.state() == v1::KEY_STATE_BACKOFF) {
    CHECK(ToProto(found.retry_after).seconds() ==
          expected.retry_after().seconds());
  }
  CHECK(found.stale_reason == expected.stale_reason());
}

TEST_CASE("Find answers every state as Lookup does, one key or many") {
  Fixture f;
  f.options.backoff_abandons = 1;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  const v1::Key hit = DenseKey(1), pending = DenseKey(2), backoff = DenseKey(3);
  const v1::Key miss = DenseKey(4);
  REQUIRE(RecordNow(*a, Grant(*a, hit, "h"), Fp("gpu")).ok());
  Grant(*a, pending, "holder-2");
  REQUIRE(a->Abandon(Grant(*a, backoff, "h")).ok());
  v1::Key stale = hit;
  stale.set_candidate_set("another-set");
  // More keys than one lock chunk (256), so the batch crosses chunks.
  std::vector<v1::Key> keys = {hit, pending, backoff, stale, miss};
  for (int i = 0; i < 600; ++i) keys.push_back(keys[i % 5]);
  std::vector<const v1::Key*> asked;
  for (const v1::Key& k : keys) asked.push_back(&k);
  const std::vector<Arbiter::Found> found = a->Find(asked);
  REQUIRE(found.size() == keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    CheckFoundIsLookup(found[i], a->Lookup(keys[i]));
    CheckFoundIsLookup(a->Find(keys[i]), a->Lookup(keys[i]));
  }
  CHECK(found[0].state == v1::KEY_STATE_HIT);
  CHECK(found[1].claim->holder() == "holder-2");
  CHECK(found[2].state == v1::KEY_STATE_BACKOFF);
  CHECK(found[3].stale_reason ==
        "tuned for candidate set 'cs1', asked for 'another-set'");
  CHECK(found[4].state == v1::KEY_STATE_MISS);
}

TEST_CASE("a found entry is the stored summary, shared with the index") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  const v1::Entry entry = EntryFor(key, Fp("gpu"));
  REQUIRE(RecordNow(*a, Grant(*a, key, "h"), Fp("gpu")).ok());
  const Arbiter::Found one = a->Find(key), two = a->Find(key);
  REQUIRE(one.entry != nullptr);
  CHECK(one.entry == two.entry);  // the same string: nothing copied
  CHECK(*one.entry == SerializedEntrySummary(entry));
  // Without measurements and fingerprint.
  v1::Entry parsed;
  REQUIRE(parsed.ParseFromString(*one.entry));
  CHECK(parsed.measurements_size() == 0);
  CHECK(!parsed.has_fingerprint());
}

TEST_CASE("entries loaded at start-up are found") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  // As the store hands them over (TuneStore::ForEachSummary): a HIT, and
  // one measured on another device.
  const v1::Key hit = DenseKey(1), elsewhere = DenseKey(2);
  const std::string summary = SerializedEntrySummary(EntryFor(hit, Fp("gpu")));
  a->LoadSummary(KeyId(hit), summary, hit.candidate_set(),
                 FingerprintDigest(Fp("gpu")));
  a->LoadSummary(KeyId(elsewhere),
                 SerializedEntrySummary(EntryFor(elsewhere, Fp("gpu"))),
                 elsewhere.candidate_set(), FingerprintDigest(Fp("other")));
  const std::vector<const v1::Key*> keys = {&hit, &elsewhere};
  const std::vector<Arbiter::Found> found = a->Find(keys);
  CHECK(found[0].state == v1::KEY_STATE_HIT);
  REQUIRE(found[0].entry != nullptr);
  CHECK(*found[0].entry == summary);
  CHECK(found[1].state == v1::KEY_STATE_STALE);
  CHECK(found[1].stale_reason ==
        "measured on another device or software (fingerprint differs)");
  CHECK(a->Lookup(hit).entry().execution().kernel() == "k");
}

}  // namespace gputune

namespace gputune {
namespace {

// A fingerprint of the host model "cpu" with kernel library `version`.
v1::Fingerprint Versioned(const std::string& version,
                          const std::string& device = "cpu") {
  v1::Fingerprint fp = Fp(device);
  fp.set_processor_count(8);
  fp.set_kernel_version(version);
  return fp;
}

// Makes the fixture's daemon run kernel library "v2" on model "cpu".
void Upgrade(Fixture& f) {
  f.digest = FingerprintDigest(Versioned("v2"));
  f.options.device_model = DeviceModel(Versioned("v2"));
}

v1::Key CustomKey(const std::string& params) {
  v1::Key key;
  key.mutable_custom()->set_op("my_op");
  key.mutable_custom()->set_params(params);
  key.set_candidate_set("cs1");
  return key;
}

}  // namespace

TEST_CASE(
    "an entry of this device model from older software is stale-but-usable "
    "for its own candidate set only") {
  Fixture f;
  Upgrade(f);
  auto a = f.Make();
  a->Install({EntryFor(DenseKey(1), Versioned("v1")),
              EntryFor(DenseKey(2), Versioned("v1", "other-cpu"))});
  const v1::KeyStatus s = a->Lookup(DenseKey(1));
  CHECK(s.state() == v1::KEY_STATE_STALE);
  CHECK(s.stale_usable());
  CHECK(s.stale_reason().find("usable until re-tuned") != std::string::npos);
  CHECK(s.entry().execution().kernel() == "k");
  CHECK(a->GetStats().stale_entries == 2);
  CHECK(a->GetStats().stale_usable_entries == 1);
  SECTION("another candidate set never gets it as usable") {
    const v1::KeyStatus other = a->Lookup(DenseKey(1, 256, 256, "cs2"));
    CHECK(other.state() == v1::KEY_STATE_STALE);
    CHECK_FALSE(other.stale_usable());
  }
  SECTION("nor does another device model") {
    const v1::KeyStatus other = a->Lookup(DenseKey(2));
    CHECK(other.state() == v1::KEY_STATE_STALE);
    CHECK_FALSE(other.stale_usable());
    CHECK(other.stale_reason() ==
          "measured on another device or software (fingerprint differs)");
  }
  SECTION("it stays re-tunable: a claim is granted, a Record makes a HIT") {
    REQUIRE(RecordNow(*a, Grant(*a, DenseKey(1), "p"), Versioned("v2")).ok());
    const v1::KeyStatus hit = a->Lookup(DenseKey(1));
    CHECK(hit.state() == v1::KEY_STATE_HIT);
    CHECK_FALSE(hit.stale_usable());
    CHECK(a->GetStats().stale_usable_entries == 0);
  }
  SECTION("Judge (GetEntry) says the same") {
    const Arbiter::Verdict v =
        a->Judge(EntryFor(DenseKey(1), Versioned("v1")), "cs1");
    CHECK(v.stale_usable);
    CHECK_FALSE(
        a->Judge(EntryFor(DenseKey(1), Versioned("v1")), "cs2").stale_usable);
    CHECK(a->Judge(EntryFor(DenseKey(1), Versioned("v2")), "cs1")
              .stale_reason.empty());
  }
}

TEST_CASE("with stale_while_revalidate off an older entry is plainly STALE") {
  Fixture f;
  Upgrade(f);
  f.options.stale_while_revalidate = false;
  auto a = f.Make();
  a->Install({EntryFor(DenseKey(1), Versioned("v1"))});
  const v1::KeyStatus s = a->Lookup(DenseKey(1));
  CHECK(s.state() == v1::KEY_STATE_STALE);
  CHECK_FALSE(s.stale_usable());
  CHECK(a->GetStats().stale_usable_entries == 0);
  CHECK_FALSE(a->NextRevalidation().has_value());
}

TEST_CASE(
    "NextRevalidation offers stale-but-usable dense keys most looked-up "
    "first, each once, never a custom or claimed one") {
  Fixture f;
  Upgrade(f);
  auto a = f.Make();
  const v1::Key rare = DenseKey(1), popular = DenseKey(2),
                claimed = DenseKey(3), custom = CustomKey("x=1");
  a->Install(
      {EntryFor(rare, Versioned("v1")), EntryFor(popular, Versioned("v1")),
       EntryFor(claimed, Versioned("v1")), EntryFor(custom, Versioned("v1"))});
  CHECK(a->Lookup(custom).stale_usable());  // usable, but not re-tunable here
  CHECK(a->GetStats().stale_usable_entries == 4);
  (void)a->Find(rare);
  const std::vector<const v1::Key*> batch = {&popular, &popular, &custom};
  (void)a->Find(batch);
  (void)a->Find(popular);
  for (int i = 0; i < 5; ++i) (void)a->Find(claimed);
  (void)Grant(*a, claimed, "someone");
  // Lookups of another candidate set are not uses of the entry.
  for (int i = 0; i < 5; ++i) (void)a->Find(DenseKey(1, 256, 256, "cs2"));

  std::optional<Arbiter::Revalidation> first = a->NextRevalidation();
  REQUIRE(first.has_value());
  CHECK(KeyId(first->key) == KeyId(popular));
  CHECK(first->key.candidate_set() == "cs1");  // the entry's own
  CHECK(first->lookups == 3);
  std::optional<Arbiter::Revalidation> second = a->NextRevalidation();
  REQUIRE(second.has_value());
  CHECK(KeyId(second->key) == KeyId(rare));
  CHECK(second->lookups == 1);
  CHECK_FALSE(a->NextRevalidation().has_value());
}

TEST_CASE("a stale-but-usable entry loaded at start-up is found as one") {
  Fixture f;
  Upgrade(f);
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  a->LoadSummary(KeyId(key),
                 SerializedEntrySummary(EntryFor(key, Versioned("v1"))),
                 key.candidate_set(), FingerprintDigest(Versioned("v1")),
                 /*same_device_model=*/true);
  const Arbiter::Found found = a->Find(key);
  CHECK(found.state == v1::KEY_STATE_STALE);
  CHECK(found.stale_usable);
  REQUIRE(a->NextRevalidation().has_value());
}

}  // namespace gputune
