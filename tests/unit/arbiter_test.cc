// The arbiter's state machine: DESIGN.md "Key states and arbitration".
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

TEST_CASE("Abandon frees the key; repeated abandons trip BACKOFF") {
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

// What AppendLookups writes for `status` (what Lookup returns) in `form`:
// the keys left out with omit_keys; with share_executions, a HIT's
// execution replaced by the position of the first HIT in `first` (by
// execution bytes) that carried it, or noted there at `position`.
v1::KeyStatus AsWritten(v1::KeyStatus status, const Arbiter::AnswerForm& form,
                        uint32_t position,
                        std::map<std::string, uint32_t>* first) {
  if (form.omit_keys) {
    status.clear_key();
    if (status.state() == v1::KEY_STATE_HIT) {
      status.mutable_entry()->clear_key();
    }
  }
  if (form.share_executions && status.state() == v1::KEY_STATE_HIT) {
    const std::string bytes = DeterministicBytes(status.entry().execution());
    auto [it, added] = first->try_emplace(bytes, position);
    if (!added) {
      status.mutable_entry()->clear_execution();
      status.set_execution_ref(it->second);
    }
  }
  return status;
}

std::vector<Arbiter::AnswerForm> EveryForm(size_t first_status = 0) {
  std::vector<Arbiter::AnswerForm> forms;
  for (bool omit_keys : {false, true}) {
    for (bool share : {false, true}) {
      forms.push_back({omit_keys, share, first_status});
    }
  }
  return forms;
}

// What AppendLookups answers for `keys`, sent as protobuf serializes them,
// and which of them (their indices) it read with its ReadKeyFn.
struct BatchAnswer {
  v1::BatchLookupResponse answer;
  std::vector<size_t> read;
};
BatchAnswer AskBatch(const Arbiter& a, const std::vector<v1::Key>& keys,
                     const Arbiter::AnswerForm& form = {}) {
  std::vector<std::string> wires;
  for (const v1::Key& k : keys) wires.push_back(k.SerializeAsString());
  std::vector<Arbiter::Ask> asks;
  for (const std::string& wire : wires) asks.push_back({KeyView(), wire});
  BatchAnswer result;
  auto read_key = [&](size_t i, Arbiter::Ask* ask) {
    result.read.push_back(i);
    ask->key = KeyView::Of(keys[i]);
    return absl::OkStatus();
  };
  std::string bytes;
  REQUIRE(a.AppendLookups(absl::MakeSpan(asks),
                          v1::BatchLookupResponse::kStatusesFieldNumber, form,
                          read_key, &bytes)
              .ok());
  REQUIRE(result.answer.ParseFromString(bytes));
  REQUIRE(result.answer.statuses_size() == static_cast<int>(keys.size()));
  return result;
}

TEST_CASE("AppendLookups writes exactly what Lookup returns, in every state") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  f.options.backoff_abandons = 1;
  auto a = f.Make();
  // HIT, STALE (candidate set; fingerprint), PENDING, BACKOFF and MISS; and
  // more HITs: one with the first HIT's execution, two with another, its
  // params set in opposite orders (the daemon keeps them in key order).
  REQUIRE(RecordNow(*a, Grant(*a, DenseKey(1), "p"), Fp("gpu")).ok());
  a->Install({EntryFor(DenseKey(2), Fp("other-gpu"))});
  Grant(*a, DenseKey(3), "tuner");
  REQUIRE(a->Abandon(Grant(*a, DenseKey(4), "p")).ok());
  std::vector<v1::Entry> hits;
  for (int i = 0; i < 3; ++i) {
    v1::Entry e = EntryFor(DenseKey(6 + i), Fp("gpu"));
    if (i > 0) {
      auto& params = *e.mutable_execution()->mutable_params();
      params.clear();
      for (int p = 0; p < 8; ++p) {
        const int name = i == 1 ? p : 7 - p;
        params[absl::StrCat("p", name)] = name;
      }
    }
    e.set_recorded_by("installed");
    hits.push_back(e);
  }
  a->Install(hits);
  const std::vector<std::pair<v1::Key, v1::KeyState>> cases = {
      {DenseKey(1), v1::KEY_STATE_HIT},
      {DenseKey(1, 256, 256, "another-set"), v1::KEY_STATE_STALE},
      {DenseKey(2), v1::KEY_STATE_STALE},
      {DenseKey(3), v1::KEY_STATE_PENDING},
      {DenseKey(4), v1::KEY_STATE_BACKOFF},
      {DenseKey(5), v1::KEY_STATE_MISS},
      {DenseKey(6), v1::KEY_STATE_HIT},
      {DenseKey(7), v1::KEY_STATE_HIT},
      {DenseKey(8), v1::KEY_STATE_HIT},
  };
  for (const auto& [key, state] : cases) {
    INFO(KeyText(key));
    const v1::KeyStatus expected = a->Lookup(key);
    CHECK(expected.state() == state);
    const std::string wire = key.SerializeAsString();
    for (const Arbiter::AnswerForm& form : EveryForm()) {
      INFO("omit_keys " << form.omit_keys << " share_executions "
                        << form.share_executions);
      // One key, as a LookupResponse: nothing earlier to share with. A HIT
      // is found by its bytes; any other key is read.
      Arbiter::Ask one[] = {{KeyView(), wire}};
      int reads = 0;
      auto read_key = [&](size_t i, Arbiter::Ask* ask) {
        ++reads;
        CHECK(i == 0);
        ask->key = KeyView::Of(key);
        return absl::OkStatus();
      };
      std::string bytes = "prefix";  // appended, not overwritten
      REQUIRE(a->AppendLookups(one, v1::LookupResponse::kStatusFieldNumber,
                               form, read_key, &bytes)
                  .ok());
      CHECK(reads == (state == v1::KEY_STATE_HIT ? 0 : 1));
      REQUIRE(bytes.rfind("prefix", 0) == 0);
      v1::LookupResponse written;
      REQUIRE(written.ParseFromString(bytes.substr(6)));
      std::map<std::string, uint32_t> first;
      CHECK(google::protobuf::util::MessageDifferencer::Equals(
          written.status(), AsWritten(expected, form, 1, &first)));
    }
  }
  // All at once, as BatchLookup answers (more keys than one lock's chunk),
  // and as the second part of a larger answer.
  std::vector<v1::Key> keys;
  for (int i = 0; i < 300; ++i) keys.push_back(cases[i % cases.size()].first);
  const int hit_asks = 4 * 33 + 1;  // 4 HITs per 9 keys, 1 more in the last 3
  for (size_t first_status : {0, 5000}) {
    for (const Arbiter::AnswerForm& form : EveryForm(first_status)) {
      INFO("omit_keys " << form.omit_keys << " share_executions "
                        << form.share_executions << " first_status "
                        << first_status);
      const BatchAnswer batch = AskBatch(*a, keys, form);
      CHECK(batch.read.size() == 300 - hit_asks);
      const v1::BatchLookupResponse& answer = batch.answer;
      std::map<std::string, uint32_t> first;
      int refs = 0;
      for (int i = 0; i < 300; ++i) {
        INFO(i);
        const v1::KeyStatus expected =
            AsWritten(a->Lookup(keys[i]), form,
                      static_cast<uint32_t>(first_status + i + 1), &first);
        CHECK(google::protobuf::util::MessageDifferencer::Equals(
            answer.statuses(i), expected));
        refs += answer.statuses(i).execution_ref() != 0;
      }
      // 2 distinct executions among the HITs.
      CHECK(refs == (form.share_executions ? hit_asks - 2 : 0));
    }
  }
}

TEST_CASE("AppendLookups finds HITs by their key's bytes, and no others") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  const v1::Key key = DenseKey(1);
  const std::string wire = key.SerializeAsString();
  // The same key, its fields in another order: not the recorded bytes.
  v1::Key candidate_set_only;
  candidate_set_only.set_candidate_set(key.candidate_set());
  v1::Key op_only = key;
  op_only.clear_candidate_set();
  const std::string reordered =
      candidate_set_only.SerializeAsString() + op_only.SerializeAsString();
  v1::Key parsed;
  REQUIRE(parsed.ParseFromString(reordered));
  REQUIRE(google::protobuf::util::MessageDifferencer::Equals(parsed, key));
  REQUIRE(reordered != wire);

  // The state and execution kernel AppendLookups answers for `bytes`, and
  // whether it read the key.
  struct Answer {
    v1::KeyState state;
    std::string kernel;
    bool read;
  };
  auto lookup = [&](const std::string& bytes) {
    Arbiter::Ask ask[] = {{KeyView(), bytes}};
    bool read = false;
    auto read_key = [&](size_t, Arbiter::Ask* ask) {
      read = true;
      ask->key = KeyView::Of(key);
      return absl::OkStatus();
    };
    std::string out;
    REQUIRE(a->AppendLookups(ask, v1::LookupResponse::kStatusFieldNumber,
                             Arbiter::AnswerForm(), read_key, &out)
                .ok());
    v1::LookupResponse answer;
    REQUIRE(answer.ParseFromString(out));
    return Answer{answer.status().state(),
                  answer.status().entry().execution().kernel(), read};
  };
  auto entry = [&](const std::string& kernel, const std::string& device) {
    v1::Entry e = EntryFor(key, Fp(device));
    e.mutable_execution()->set_kernel(kernel);
    return e;
  };

  Answer r = lookup(wire);
  CHECK((r.state == v1::KEY_STATE_MISS && r.read));
  a->Install({entry("first", "gpu")});
  r = lookup(wire);
  CHECK((r.state == v1::KEY_STATE_HIT && r.kernel == "first" && !r.read));
  r = lookup(reordered);  // found by its fields
  CHECK((r.state == v1::KEY_STATE_HIT && r.kernel == "first" && r.read));
  // A new entry for the key replaces the old one in the index.
  a->Install({entry("second", "gpu")});
  r = lookup(wire);
  CHECK((r.state == v1::KEY_STATE_HIT && r.kernel == "second" && !r.read));
  // Measured elsewhere: STALE, whatever the bytes.
  a->Install({entry("elsewhere", "other-gpu")});
  r = lookup(wire);
  CHECK((r.state == v1::KEY_STATE_STALE && r.kernel == "elsewhere" && r.read));
  a->Install({entry("third", "gpu")});
  r = lookup(wire);
  CHECK((r.state == v1::KEY_STATE_HIT && r.kernel == "third" && !r.read));
  a->Erase({KeyId(key)});
  r = lookup(wire);
  CHECK((r.state == v1::KEY_STATE_MISS && r.read));
  r = lookup(reordered);
  CHECK((r.state == v1::KEY_STATE_MISS && r.read));
}

TEST_CASE("entries loaded at start-up are found by their key's bytes") {
  Fixture f;
  f.digest = FingerprintDigest(Fp("gpu"));
  auto a = f.Make();
  // As the store hands them over (TuneStore::ForEachSummary): a HIT, and
  // one measured on another device.
  const v1::Key hit = DenseKey(1), elsewhere = DenseKey(2);
  a->LoadSummary(KeyId(hit), SerializedEntrySummary(EntryFor(hit, Fp("gpu"))),
                 hit.candidate_set(), FingerprintDigest(Fp("gpu")));
  a->LoadSummary(KeyId(elsewhere),
                 SerializedEntrySummary(EntryFor(elsewhere, Fp("gpu"))),
                 elsewhere.candidate_set(), FingerprintDigest(Fp("other")));
  const BatchAnswer batch = AskBatch(*a, {hit, elsewhere});
  CHECK(batch.answer.statuses(0).state() == v1::KEY_STATE_HIT);
  CHECK(batch.answer.statuses(0).entry().execution().kernel() == "k");
  CHECK(batch.answer.statuses(1).state() == v1::KEY_STATE_STALE);
  CHECK(batch.read == std::vector<size_t>{1});
}

TEST_CASE("after a group of misses AppendLookups goes by ids for a while") {
  Fixture f;
  f.digest.reset();
  auto a = f.Make();
  // 16 misses (one group), then 64 HITs: the three groups after the misses
  // are read and found by their ids, the fourth by its bytes. Every status
  // is what Lookup says either way.
  std::vector<v1::Key> keys;
  std::vector<v1::Entry> entries;
  for (int i = 0; i < 80; ++i) {
    keys.push_back(DenseKey(i + 1));
    if (i >= 16) entries.push_back(EntryFor(keys.back(), Fp("x")));
  }
  a->Install(entries);
  const BatchAnswer batch = AskBatch(*a, keys);
  CHECK(batch.read.size() == 64);
  const v1::BatchLookupResponse& answer = batch.answer;
  for (int i = 0; i < 80; ++i) {
    INFO(i);
    CHECK(answer.statuses(i).state() ==
          (i < 16 ? v1::KEY_STATE_MISS : v1::KEY_STATE_HIT));
    CHECK(google::protobuf::util::MessageDifferencer::Equals(
        answer.statuses(i), a->Lookup(keys[i])));
  }
}

TEST_CASE("AppendLookups stops at the first key read_key refuses") {
  Fixture f;
  f.digest.reset();  // entries are not judged by fingerprint
  auto a = f.Make();
  std::vector<v1::Key> keys;
  std::vector<std::string> wires;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(DenseKey(i + 1));
    wires.push_back(keys.back().SerializeAsString());
  }
  // Keys 0..19 are HITs, found by their bytes; 20.. are read.
  std::vector<v1::Entry> entries;
  for (int i = 0; i < 20; ++i) entries.push_back(EntryFor(keys[i], Fp("x")));
  a->Install(entries);
  std::vector<Arbiter::Ask> asks;
  for (const std::string& wire : wires) asks.push_back({KeyView(), wire});
  std::vector<size_t> read;
  auto read_key = [&](size_t i, Arbiter::Ask* ask) {
    read.push_back(i);
    if (i == 25) return absl::InvalidArgumentError("keys[25]: bad");
    ask->key = KeyView::Of(keys[i]);
    return absl::OkStatus();
  };
  std::string out;
  const absl::Status s = a->AppendLookups(
      absl::MakeSpan(asks), v1::BatchLookupResponse::kStatusesFieldNumber,
      Arbiter::AnswerForm(), read_key, &out);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message() == "keys[25]: bad");
  CHECK(read == std::vector<size_t>{20, 21, 22, 23, 24, 25});
}

}  // namespace gputune
