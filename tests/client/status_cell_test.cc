// StatusCell: a BatchLookup answer split into statuses parsed on first use.
#include "client/src/status_cell.h"

#include <thread>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune::client_internal {
namespace {

using google::protobuf::util::MessageDifferencer;
using gputune::testing::DenseKey;

v1::BatchLookupResponse Answer() {
  v1::BatchLookupResponse answer;
  const v1::KeyState states[] = {v1::KEY_STATE_HIT, v1::KEY_STATE_MISS,
                                 v1::KEY_STATE_STALE, v1::KEY_STATE_PENDING};
  int i = 0;
  for (v1::KeyState state : states) {
    v1::KeyStatus* s = answer.add_statuses();
    *s->mutable_key() = DenseKey(++i);
    s->set_state(state);
    if (state == v1::KEY_STATE_HIT || state == v1::KEY_STATE_STALE) {
      *s->mutable_entry()->mutable_key() = s->key();
      s->mutable_entry()->mutable_execution()->set_kernel("k" +
                                                          std::to_string(i));
      (*s->mutable_entry()->mutable_execution()->mutable_params())["tile"] = i;
    }
    if (state == v1::KEY_STATE_STALE) s->set_stale_reason("other set");
    if (state == v1::KEY_STATE_PENDING) s->mutable_claim()->set_claim_id(9);
  }
  return answer;
}

// `bytes` as gRPC may hand them over: in slices of `slice_size` bytes (0:
// one slice).
grpc::ByteBuffer Received(const std::string& bytes, size_t slice_size = 0) {
  std::vector<grpc::Slice> slices;
  if (slice_size == 0) slice_size = std::max<size_t>(bytes.size(), 1);
  for (size_t at = 0; at < bytes.size(); at += slice_size) {
    const std::string part = bytes.substr(at, slice_size);
    slices.emplace_back(part.data(), part.size());
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The cells of an answer of `count` statuses, with no asked keys.
absl::StatusOr<std::vector<std::shared_ptr<const StatusCell>>> Cells(
    const std::string& bytes, size_t count, size_t slice_size = 0) {
  std::vector<absl::string_view> no_keys(count);
  return CellsFromBatchAnswer(Received(bytes, slice_size),
                              std::make_shared<CallBytes>(), no_keys);
}

}  // namespace

TEST_CASE("cells of a batch answer have each state and parse to the status") {
  const v1::BatchLookupResponse answer = Answer();
  // In one slice, and cut anywhere as a large answer arrives: statuses that
  // straddle two slices read the same.
  for (size_t slice_size : {0, 1, 3, 7, 64}) {
    INFO("slices of " << slice_size);
    auto cells = Cells(answer.SerializeAsString(), 4, slice_size);
    REQUIRE(cells.ok());
    REQUIRE(cells->size() == 4);
    std::shared_ptr<const StatusCell> kept = (*cells)[2];
    for (size_t i = 0; i < cells->size(); ++i) {
      CHECK((*cells)[i]->state() == answer.statuses(i).state());
      CHECK(MessageDifferencer::Equals((*cells)[i]->status(),
                                       answer.statuses(i)));
    }
    cells->clear();  // the kept cell holds the answer's bytes alive
    CHECK(MessageDifferencer::Equals(kept->status(), answer.statuses(2)));
  }
}

TEST_CASE("statuses sent without keys get the asked keys back") {
  // What gputuned sends for omit_keys: no status key, no HIT entry key (a
  // STALE entry keeps its own: it differs from the asked one).
  const v1::BatchLookupResponse full = Answer();
  v1::BatchLookupResponse sent = full;
  for (v1::KeyStatus& s : *sent.mutable_statuses()) {
    s.clear_key();
    if (s.state() == v1::KEY_STATE_HIT) s.mutable_entry()->clear_key();
  }
  for (size_t slice_size : {0, 5}) {
    INFO("slices of " << slice_size);
    auto call = std::make_shared<CallBytes>();
    std::vector<std::pair<size_t, size_t>> spans;
    for (const v1::KeyStatus& s : full.statuses()) {
      const size_t at = call->request.size();
      s.key().AppendToString(&call->request);
      spans.emplace_back(at, call->request.size() - at);
    }
    std::vector<absl::string_view> asked;
    for (auto [at, size] : spans) {
      asked.push_back(absl::string_view(call->request).substr(at, size));
    }
    auto cells = CellsFromBatchAnswer(
        Received(sent.SerializeAsString(), slice_size), call, asked);
    call.reset();  // the cells keep the request
    REQUIRE(cells.ok());
    REQUIRE(cells->size() == 4);
    for (int i = 0; i < 4; ++i) {
      INFO(i);
      CHECK(
          MessageDifferencer::Equals((*cells)[i]->status(), full.statuses(i)));
    }
  }
}

TEST_CASE("statuses from a daemon that ignores omit_keys keep their keys") {
  // An older gputuned sends each status with its key: the asked keys are
  // not needed, and must not change anything.
  const v1::BatchLookupResponse full = Answer();
  auto call = std::make_shared<CallBytes>();
  v1::Key other = DenseKey(99);
  other.SerializeToString(&call->request);
  std::vector<absl::string_view> asked(4, call->request);
  for (size_t slice_size : {0, 6}) {
    INFO("slices of " << slice_size);
    auto cells = CellsFromBatchAnswer(
        Received(full.SerializeAsString(), slice_size), call, asked);
    REQUIRE(cells.ok());
    for (int i = 0; i < 4; ++i) {
      CHECK(
          MessageDifferencer::Equals((*cells)[i]->status(), full.statuses(i)));
    }
  }
}

TEST_CASE("statuses sent without their execution take it from the named one") {
  // What gputuned sends for share_executions: statuses 5 and 6 are HITs
  // with the execution of status 1, the first HIT; status 7 is a HIT with
  // the execution of status 3, a STALE one.
  v1::BatchLookupResponse full = Answer();
  for (int from : {0, 0, 2}) {
    v1::KeyStatus* s = full.add_statuses();
    *s = full.statuses(0);
    *s->mutable_key() = DenseKey(full.statuses_size());
    *s->mutable_entry()->mutable_key() = s->key();
    *s->mutable_entry()->mutable_execution() =
        full.statuses(from).entry().execution();
    s->mutable_entry()->set_recorded_by("r" + std::to_string(from));
  }
  v1::BatchLookupResponse sent = full;
  const int refs[] = {0, 0, 0, 0, 1, 1, 3};
  for (int i = 0; i < sent.statuses_size(); ++i) {
    if (refs[i] == 0) continue;
    sent.mutable_statuses(i)->mutable_entry()->clear_execution();
    sent.mutable_statuses(i)->set_execution_ref(refs[i]);
  }
  for (size_t slice_size : {0, 4}) {
    INFO("slices of " << slice_size);
    auto cells = Cells(sent.SerializeAsString(), 7, slice_size);
    REQUIRE(cells.ok());
    // Read last first: a cell parses the one it names when it needs it.
    for (int i = 6; i >= 0; --i) {
      INFO(i);
      CHECK(
          MessageDifferencer::Equals((*cells)[i]->status(), full.statuses(i)));
    }
    // A cell kept alone still has what it needs.
    cells = Cells(sent.SerializeAsString(), 7, slice_size);
    REQUIRE(cells.ok());
    const std::shared_ptr<const StatusCell> kept = (*cells)[6];
    cells->clear();
    CHECK(MessageDifferencer::Equals(kept->status(), full.statuses(6)));
  }
  // Each bad reference: to itself, to a later status, to one with no entry
  // (a MISS, a PENDING), to one that refers on itself.
  for (auto [status, ref] : std::vector<std::pair<int, int>>{
           {4, 5}, {4, 6}, {4, 2}, {4, 4}, {5, 5}}) {
    INFO("status " << status + 1 << " refers to " << ref);
    v1::BatchLookupResponse bad = sent;
    bad.mutable_statuses(status)->set_execution_ref(ref);
    auto cells = Cells(bad.SerializeAsString(), 7);
    REQUIRE_FALSE(cells.ok());
    CHECK_THAT(std::string(cells.status().message()),
               Catch::Contains("which has no execution to share"));
  }
}

TEST_CASE("threads reading one cell at once all see the whole parsed status") {
  const v1::BatchLookupResponse answer = Answer();
  auto cells = Cells(answer.SerializeAsString(), 4);
  REQUIRE(cells.ok());
  const std::shared_ptr<const StatusCell> cell = (*cells)[0];
  // What each thread read, copied as soon as status() returned: a thread
  // that got a status another was still parsing would copy part of it.
  std::vector<v1::KeyStatus> seen(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { seen[t] = cell->status(); });
  }
  for (auto& t : threads) t.join();
  for (const v1::KeyStatus& s : seen) {
    CHECK(MessageDifferencer::Equals(s, answer.statuses(0)));
  }
}

TEST_CASE("an answer that is not a BatchLookupResponse is an error") {
  for (size_t slice_size : {0, 1}) {
    INFO("slices of " << slice_size);
    CHECK_FALSE(Cells(std::string("\xff\xff\xff", 3), 0, slice_size).ok());
    // A status whose state is not a varint.
    CHECK_FALSE(Cells("\x0a\x03\x12\x01x", 1, slice_size).ok());
    // A status cut short.
    const std::string whole = Answer().SerializeAsString();
    CHECK_FALSE(Cells(whole.substr(0, whole.size() - 1), 4, slice_size).ok());
    // Another number of statuses than keys asked.
    CHECK_FALSE(Cells(whole, 5, slice_size).ok());
  }
  // A length far beyond the answer, in one slice or several: refused
  // before anything is read or reserved.
  for (size_t slice_size : {0, 2}) {
    INFO("slices of " << slice_size);
    CHECK_FALSE(
        Cells(std::string("\x0a\xff\xff\xff\xff\x0fxyz", 9), 1, slice_size)
            .ok());
  }
  // No statuses at all: no cells.
  auto none = Cells("", 0);
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("fields a newer daemon might add are skipped, in any slicing") {
  const v1::BatchLookupResponse answer = Answer();
  std::string bytes = answer.SerializeAsString();
  bytes += std::string("\x10\x96\x01", 3);                 // field 2, a varint
  bytes += std::string("\x1a\x02hi", 4);                   // field 3, bytes
  bytes += std::string("\x21", 1) + std::string(8, '\1');  // 4, fixed64
  bytes += std::string("\x2b\x08\x01\x2c", 4);  // 5, a group holding a varint
  for (size_t slice_size : {0, 1, 4}) {
    INFO("slices of " << slice_size);
    auto cells = Cells(bytes, 4, slice_size);
    REQUIRE(cells.ok());
    for (int i = 0; i < 4; ++i) {
      CHECK(MessageDifferencer::Equals((*cells)[i]->status(),
                                       answer.statuses(i)));
    }
  }
}

TEST_CASE("a Lookup answer becomes one cell, parsed on first use") {
  v1::LookupResponse answer;
  *answer.mutable_status() = Answer().statuses(2);  // a STALE with an entry
  auto cell = CellFromLookupAnswer(Received(answer.SerializeAsString()));
  REQUIRE(cell.ok());
  CHECK((*cell)->state() == v1::KEY_STATE_STALE);
  CHECK(MessageDifferencer::Equals((*cell)->status(), answer.status()));
  // A status sent in two parts merges, as protobuf says.
  v1::LookupResponse first, second;
  first.mutable_status()->set_state(v1::KEY_STATE_HIT);
  second.mutable_status()->set_stale_reason("second part");
  cell = CellFromLookupAnswer(
      Received(first.SerializeAsString() + second.SerializeAsString(), 3));
  REQUIRE(cell.ok());
  CHECK((*cell)->state() == v1::KEY_STATE_HIT);
  CHECK((*cell)->status().stale_reason() == "second part");
  CHECK_FALSE(CellFromLookupAnswer(Received(std::string("\xff\xff", 2))).ok());
}

TEST_CASE("a cell made from a parsed status needs no bytes") {
  v1::KeyStatus status = Answer().statuses(0);
  const StatusCell cell(status);
  CHECK(cell.state() == v1::KEY_STATE_HIT);
  CHECK(MessageDifferencer::Equals(cell.status(), status));
}

}  // namespace gputune::client_internal
