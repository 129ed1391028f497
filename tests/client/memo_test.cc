#include "client/src/memo.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/src/lookup_cell.h"
#include "google/protobuf/arena.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune::client_internal {
namespace {

using gputune::testing::DenseKey;

std::shared_ptr<const LookupCell> Status(const v1::Key& key, v1::KeyState state,
                                         const std::string& kernel) {
  v1::KeyStatus s;
  s.set_state(state);
  s.mutable_entry()->mutable_execution()->set_kernel(kernel);
  return std::make_shared<const LookupCell>(key, std::move(s));
}

TEST_CASE("the memo keeps HITs and finds them by every key field") {
  Memo memo(100, absl::InfiniteDuration());
  memo.Put(Status(DenseKey(1, 256, 512), v1::KEY_STATE_HIT, "a"));
  bool due = true;
  auto found = memo.Find(DenseKey(1, 256, 512), &due);
  REQUIRE(found != nullptr);
  REQUIRE(found->status().entry().execution().kernel() == "a");
  REQUIRE_FALSE(due);
  // Any differing field is another key: shape, role, phase, candidate set.
  REQUIRE(memo.Find(DenseKey(2, 256, 512), &due) == nullptr);
  REQUIRE(memo.Find(DenseKey(1, 512, 256), &due) == nullptr);
  REQUIRE(memo.Find(DenseKey(1, 256, 512, "cs2"), &due) == nullptr);
  REQUIRE(memo.Find(DenseKey(1, 256, 512, "cs1", "other"), &due) == nullptr);
  v1::Key prefill = DenseKey(1, 256, 512);
  prefill.mutable_dense_bf16()->set_phase(v1::PHASE_PREFILL);
  REQUIRE(memo.Find(prefill, &due) == nullptr);
}

TEST_CASE("a new HIT for a memoised key replaces the old one") {
  Memo memo(100, absl::InfiniteDuration());
  memo.Put(Status(DenseKey(3), v1::KEY_STATE_HIT, "old"));
  memo.Put(Status(DenseKey(3), v1::KEY_STATE_HIT, "new"));
  REQUIRE(memo.size() == 1);
  bool due = false;
  auto found = memo.Find(DenseKey(3), &due);
  REQUIRE(found != nullptr);
  CHECK(found->entry().execution().kernel() == "new");
}

TEST_CASE("the memo's hash spreads keys that differ in any one field") {
  // Shapes, roles and custom params as an inference server has them: a
  // poor hash (one that drops a field or a string's tail) collides here.
  absl::flat_hash_set<size_t> hashes;
  size_t keys = 0;
  const std::string long_params = "batch=8,heads=32,seq=4096,window=";
  for (uint32_t m = 1; m <= 64; ++m) {
    for (const char* role : {"attn.qkv", "attn.out", "mlp.up", "x"}) {
      for (int phase : {1, 2}) {
        v1::Key key = DenseKey(m, 1024, 4096, "cs1", role);
        key.mutable_dense_bf16()->set_phase(static_cast<v1::Phase>(phase));
        hashes.insert(HashKey(KeyView::Of(key)));
        ++keys;
      }
    }
    v1::Key custom;
    custom.mutable_custom()->set_op("attn");
    custom.mutable_custom()->set_params(long_params + std::to_string(m));
    hashes.insert(HashKey(KeyView::Of(custom)));
    custom.set_candidate_set("cs" + std::to_string(m));
    hashes.insert(HashKey(KeyView::Of(custom)));
    keys += 2;
  }
  CHECK(hashes.size() == keys);
}

TEST_CASE("the memo ignores anything but a HIT") {
  Memo memo(100, absl::InfiniteDuration());
  for (v1::KeyState s : {v1::KEY_STATE_MISS, v1::KEY_STATE_PENDING,
                         v1::KEY_STATE_STALE, v1::KEY_STATE_BACKOFF}) {
    memo.Put(Status(DenseKey(1), s, "x"));
  }
  REQUIRE(memo.size() == 0);
}

TEST_CASE("custom keys differ by op and params") {
  Memo memo(100, absl::InfiniteDuration());
  v1::Key a;
  a.mutable_custom()->set_op("attn");
  a.mutable_custom()->set_params("b=1");
  a.set_candidate_set("v1");
  v1::Key b = a;
  b.mutable_custom()->set_params("b=2");
  memo.Put(Status(a, v1::KEY_STATE_HIT, "a"));
  bool due = false;
  REQUIRE(memo.Find(a, &due) != nullptr);
  REQUIRE(memo.Find(b, &due) == nullptr);
}

TEST_CASE("a full memo makes room, capacity 0 disables it") {
  Memo memo(32, absl::InfiniteDuration());
  for (uint32_t m = 1; m <= 1000; ++m) {
    memo.Put(Status(DenseKey(m), v1::KEY_STATE_HIT, "k"));
  }
  REQUIRE(memo.size() <= 32);
  REQUIRE(memo.size() > 0);

  Memo off(0, absl::InfiniteDuration());
  off.Put(Status(DenseKey(1), v1::KEY_STATE_HIT, "k"));
  bool due = false;
  REQUIRE(off.Find(DenseKey(1), &due) == nullptr);
  REQUIRE_FALSE(off.enabled());
}

// The memo's clock in the test below: moved by hand.
std::atomic<int64_t> test_now_ns{1000};
int64_t TestNowNs() { return test_now_ns.load(); }

TEST_CASE("a memoised entry older than the ttl is due, and still served") {
  Memo memo(100, absl::Milliseconds(50), &TestNowNs);
  memo.Put(Status(DenseKey(1), v1::KEY_STATE_HIT, "k"));
  bool due = true;
  test_now_ns += 49'999'999;  // just inside the ttl
  REQUIRE(memo.Find(DenseKey(1), &due) != nullptr);
  REQUIRE_FALSE(due);
  test_now_ns += 1;
  REQUIRE(memo.Find(DenseKey(1), &due) != nullptr);
  REQUIRE(due);
  memo.Erase(DenseKey(1));
  REQUIRE(memo.Find(DenseKey(1), &due) == nullptr);
}

TEST_CASE("a cell parses the answer's entry on its first read, once") {
  auto arena = std::make_shared<google::protobuf::Arena>();
  auto* key = google::protobuf::Arena::CreateMessage<v1::Key>(arena.get());
  *key = DenseKey(7);
  v1::Entry entry;
  *entry.mutable_key() = *key;
  entry.mutable_execution()->set_kernel("k.cell");
  (*entry.mutable_execution()->mutable_params())["tile"] = 128;
  auto* answer =
      google::protobuf::Arena::CreateMessage<v1::LookupStatus>(arena.get());
  answer->set_state(v1::KEY_STATE_HIT);
  answer->set_entry(entry.SerializeAsString());
  const LookupCell cell(arena, key, answer);
  CHECK(cell.state() == v1::KEY_STATE_HIT);
  const v1::KeyStatus& status = cell.status();
  CHECK(&status == &cell.status());  // parsed once
  CHECK(status.state() == v1::KEY_STATE_HIT);
  CHECK(status.key().dense_bf16().tokens() == 7);
  CHECK(status.entry().execution().kernel() == "k.cell");
  CHECK(status.entry().execution().params().at("tile") == 128);
  CHECK(status.GetArena() == arena.get());
}

TEST_CASE("a cell carries PENDING's claim and an unparseable entry as none") {
  auto arena = std::make_shared<google::protobuf::Arena>();
  const v1::Key key = DenseKey(8);
  auto* answer =
      google::protobuf::Arena::CreateMessage<v1::LookupStatus>(arena.get());
  answer->set_state(v1::KEY_STATE_PENDING);
  answer->mutable_claim()->set_holder("someone");
  answer->set_entry("\xff\xff not an entry");
  const LookupCell cell(arena, &key, answer);
  CHECK(cell.status().claim().holder() == "someone");
  CHECK(!cell.status().has_entry());
}

TEST_CASE("ParseAll parses every cell of a large answer, as a read would") {
  // More cells than one thread takes, so that several parse at once on
  // one arena; a repeated cell and an unparseable entry among them.
  constexpr int kCells = 3 * kCellsPerParseThread + 17;
  auto arena = std::make_shared<google::protobuf::Arena>();
  std::vector<std::shared_ptr<const LookupCell>> cells;
  for (int i = 0; i < kCells; ++i) {
    auto* key = google::protobuf::Arena::CreateMessage<v1::Key>(arena.get());
    *key = DenseKey(1 + i);
    v1::Entry entry;
    *entry.mutable_key() = *key;
    entry.mutable_execution()->set_kernel(absl::StrCat("k.", i));
    (*entry.mutable_execution()->mutable_params())["algo_id"] = i;
    auto* answer =
        google::protobuf::Arena::CreateMessage<v1::LookupStatus>(arena.get());
    answer->set_state(v1::KEY_STATE_HIT);
    answer->set_entry(i == 5 ? std::string("\xff\xff not an entry")
                             : entry.SerializeAsString());
    cells.push_back(std::make_shared<const LookupCell>(arena, key, answer));
  }
  std::vector<const LookupCell*> all;
  for (const auto& c : cells) all.push_back(c.get());
  all.push_back(cells[3].get());  // parsed once, however often named
  cells[7]->ParseNow();           // one parsed already
  ParseAll({});
  ParseAll(all);
  for (int i = 0; i < kCells; ++i) {
    INFO("cell " << i);
    REQUIRE(cells[i]->parsed());
    if (i == 5) {
      CHECK(!cells[i]->status().has_entry());
      continue;
    }
    const v1::Entry& entry = cells[i]->entry();
    CHECK(&entry == &cells[i]->status().entry());
    CHECK(entry.execution().kernel() == absl::StrCat("k.", i));
    CHECK(entry.execution().params().at("algo_id") == i);
    CHECK(cells[i]->status().key().dense_bf16().tokens() ==
          static_cast<uint32_t>(1 + i));
  }
}

TEST_CASE("a cell is parsed only when read or ParseAll asks") {
  auto arena = std::make_shared<google::protobuf::Arena>();
  const v1::Key key = DenseKey(9);
  auto* answer =
      google::protobuf::Arena::CreateMessage<v1::LookupStatus>(arena.get());
  answer->set_state(v1::KEY_STATE_HIT);
  answer->set_entry(v1::Entry().SerializeAsString());
  const LookupCell cell(arena, &key, answer);
  CHECK(cell.state() == v1::KEY_STATE_HIT);
  CHECK(!cell.parsed());
  (void)cell.entry();
  CHECK(cell.parsed());
}

}  // namespace
}  // namespace gputune::client_internal
