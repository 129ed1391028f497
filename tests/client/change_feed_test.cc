// The change feed reaching a live client's memo: deletes, re-tunes and
// imports from another client, also across a daemon restart; and how the
// client applies the feed's messages (ChangeStream::Apply).
#include "client/src/change_stream.h"
#include "proto/key_format.h"
#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

// A client that only the change feed can update: its memo never expires.
ClientOptions Following() {
  ClientOptions options;
  options.memo_ttl = absl::InfiniteDuration();
  return options;
}

v1::DeleteEntriesRequest DeleteOf(const v1::Key& key) {
  v1::DeleteEntriesRequest request;
  *request.add_keys() = key;
  return request;
}

// Memoises key's HIT in `client`; its kernel.
std::string Memoise(Client& client, const v1::Key& key) {
  // A change applied while the Lookup was in flight keeps its answer out of
  // the memo; the next one is memoised.
  REQUIRE(Eventually([&] {
    absl::StatusOr<LookupResult> r = client.Lookup(key);
    return r.ok() && r->hit() && r->from_memo();
  }));
  return client.Lookup(key)->entry().execution().kernel();
}

TEST_CASE("a delete and a re-tune reach a live client's memo at once") {
  DaemonProcess daemon({"--backend=none"});
  auto writer = ClientOf(daemon);
  auto reader = ClientOf(daemon, Following());
  const v1::Key key = CustomKey("feed=1");
  MakeHit(*writer, key, "k.old");
  REQUIRE(Memoise(*reader, key) == "k.old");

  SECTION("a delete drops the key: the next lookup asks the daemon") {
    REQUIRE(writer->DeleteEntries(DeleteOf(key)).value() == 1);
    REQUIRE(Eventually([&] { return reader->memo_size() == 0; },
                       std::chrono::milliseconds(2000)));
    absl::StatusOr<LookupResult> r = reader->Lookup(key);
    REQUIRE_FALSE(r->from_memo());
    REQUIRE(r->state() == v1::KEY_STATE_MISS);

    // A new Record for the key: the reader's next lookup finds it.
    MakeHit(*writer, key, "k.new");
    REQUIRE(Memoise(*reader, key) == "k.new");
  }

  SECTION("an import over the entry replaces it in the memo") {
    v1::Entry entry = writer->GetEntry(key)->entry();
    entry.clear_measurements();
    entry.mutable_execution()->set_kernel("k.imported");
    REQUIRE(writer->ImportEntries({entry}).value() == 1);
    REQUIRE(Eventually(
        [&] {
          absl::StatusOr<LookupResult> r = reader->Lookup(key);
          return r->from_memo() &&
                 r->entry().execution().kernel() == "k.imported";
        },
        std::chrono::milliseconds(2000)));
  }

  SECTION("an entry for another candidate set drops the memoised one") {
    v1::Entry entry = writer->GetEntry(key)->entry();
    entry.clear_measurements();
    entry.mutable_key()->set_candidate_set("cs2");
    REQUIRE(writer->ImportEntries({entry}).value() == 1);
    REQUIRE(Eventually([&] { return reader->memo_size() == 0; },
                       std::chrono::milliseconds(2000)));
    REQUIRE(reader->Lookup(key)->state() == v1::KEY_STATE_STALE);
  }
}

TEST_CASE("after a daemon restart the memo is reset, then follows again") {
  DaemonProcess daemon({"--backend=none"});
  auto reader = ClientOf(daemon, Following());
  const v1::Key key = CustomKey("restart=1");
  MakeHit(*ClientOf(daemon), key, "k.kept");
  REQUIRE(Memoise(*reader, key) == "k.kept");

  daemon.Kill();
  daemon.Start();
  // The new start's feed cannot say what changed meanwhile: reset.
  REQUIRE(Eventually([&] { return reader->memo_size() == 0; }));
  REQUIRE(Eventually([&] {
    absl::StatusOr<LookupResult> r = reader->Lookup(key);
    return r.ok() && r->hit();
  }));
  REQUIRE(reader->Lookup(key)->from_memo());

  auto writer = ClientOf(daemon);
  REQUIRE(writer->DeleteEntries(DeleteOf(key)).value() == 1);
  REQUIRE(Eventually([&] { return reader->memo_size() == 0; },
                     std::chrono::milliseconds(2000)));
  REQUIRE(reader->Lookup(key)->state() == v1::KEY_STATE_MISS);
}

TEST_CASE("without follow_changes the memo keeps a deleted entry until ttl") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options = Following();
  options.follow_changes = false;
  auto reader = ClientOf(daemon, options);
  auto writer = ClientOf(daemon);
  const v1::Key key = CustomKey("off=1");
  MakeHit(*writer, key);
  Memoise(*reader, key);
  REQUIRE(writer->DeleteEntries(DeleteOf(key)).value() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE(reader->Lookup(key)->from_memo());
}

}  // namespace
}  // namespace gputune::testing

namespace gputune::client_internal {
namespace {

using gputune::testing::CustomKey;

std::shared_ptr<const LookupCell> Hit(const v1::Key& key,
                                      const std::string& kernel) {
  v1::KeyStatus s;
  *s.mutable_key() = key;
  s.set_state(v1::KEY_STATE_HIT);
  *s.mutable_entry()->mutable_key() = key;
  s.mutable_entry()->mutable_execution()->set_kernel(kernel);
  return std::make_shared<const LookupCell>(key, std::move(s));
}

v1::Change* Add(v1::SubscribeChangesResponse* m, uint64_t seq,
                v1::ChangeKind kind, const v1::Key& key,
                const std::string& kernel) {
  v1::Change* c = m->add_changes();
  c->set_seq(seq);
  c->set_kind(kind);
  v1::Entry entry;
  *entry.mutable_key() = key;
  entry.mutable_execution()->set_kernel(kernel);
  c->set_entry(entry.SerializeAsString());
  return c;
}

TEST_CASE("the client applies the feed: replace, drop, reset on a new epoch") {
  Memo memo(100, absl::InfiniteDuration());
  const v1::Key a = CustomKey("a=1"), b = CustomKey("b=1"),
                c = CustomKey("c=1");
  uint64_t epoch = 0, seq = 0;
  v1::SubscribeChangesResponse first;
  first.set_epoch(7);
  first.set_reset(true);
  first.set_head_seq(10);
  memo.Put(Hit(a, "before"));
  ChangeStream::Apply(first, &memo, &epoch, &seq);
  REQUIRE(memo.size() == 1);  // the first stream: the memo is as new
  REQUIRE(epoch == 7);
  REQUIRE(seq == 10);

  memo.Put(Hit(a, "a.old"));
  memo.Put(Hit(b, "b.old"));
  const uint64_t before = memo.generation();
  v1::SubscribeChangesResponse next;
  next.set_epoch(7);
  Add(&next, 11, v1::CHANGE_KIND_RECORDED, a, "a.new");
  Add(&next, 12, v1::CHANGE_KIND_DELETED, b, "b.old");
  Add(&next, 13, v1::CHANGE_KIND_RECORDED, c, "c.new");  // not held: not added
  ChangeStream::Apply(next, &memo, &epoch, &seq);
  REQUIRE(seq == 13);
  bool due = false;
  REQUIRE(memo.Find(a, &due)->entry().execution().kernel() == "a.new");
  REQUIRE(memo.Find(b, &due) == nullptr);
  REQUIRE(memo.Find(c, &due) == nullptr);
  // An answer asked for before these changes is not memoised after them.
  memo.Put(Hit(b, "b.late"), before);
  REQUIRE(memo.Find(b, &due) == nullptr);

  SECTION("a stale entry, or one for another candidate set, drops the key") {
    v1::SubscribeChangesResponse m;
    m.set_epoch(7);
    Add(&m, 14, v1::CHANGE_KIND_RECORDED, a, "a.stale")->set_stale(true);
    ChangeStream::Apply(m, &memo, &epoch, &seq);
    REQUIRE(memo.Find(a, &due) == nullptr);
    memo.Put(Hit(a, "a.again"));
    v1::Key other = a;
    other.set_candidate_set("cs9");
    v1::SubscribeChangesResponse m2;
    m2.set_epoch(7);
    Add(&m2, 15, v1::CHANGE_KIND_RECORDED, other, "a.cs9")
        ->set_replaced_candidate_set(a.candidate_set());
    ChangeStream::Apply(m2, &memo, &epoch, &seq);
    REQUIRE(memo.Find(a, &due) == nullptr);
  }
  SECTION("another epoch, or a gap, clears the memo") {
    v1::SubscribeChangesResponse m;
    m.set_epoch(8);
    m.set_head_seq(3);
    ChangeStream::Apply(m, &memo, &epoch, &seq);
    REQUIRE(memo.size() == 0);
    REQUIRE(epoch == 8);
    REQUIRE(seq == 3);
    memo.Put(Hit(a, "x"));
    v1::SubscribeChangesResponse gap;
    gap.set_epoch(8);
    Add(&gap, 5, v1::CHANGE_KIND_RECORDED, c, "c");
    ChangeStream::Apply(gap, &memo, &epoch, &seq);
    REQUIRE(memo.size() == 0);
    REQUIRE(seq == 5);
  }
}

}  // namespace
}  // namespace gputune::client_internal
