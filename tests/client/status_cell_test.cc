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
      s->mutable_entry()->mutable_execution()->set_kernel("k" +
                                                          std::to_string(i));
      (*s->mutable_entry()->mutable_execution()->mutable_params())["tile"] = i;
    }
    if (state == v1::KEY_STATE_STALE) s->set_stale_reason("other set");
    if (state == v1::KEY_STATE_PENDING) s->mutable_claim()->set_claim_id(9);
  }
  return answer;
}

}  // namespace

TEST_CASE("cells of a batch answer have each state and parse to the status") {
  const v1::BatchLookupResponse answer = Answer();
  auto cells = CellsFromBatchAnswer(answer.SerializeAsString());
  REQUIRE(cells.ok());
  REQUIRE(cells->size() == 4);
  std::shared_ptr<const StatusCell> kept = (*cells)[2];
  for (size_t i = 0; i < cells->size(); ++i) {
    CHECK((*cells)[i]->state() == answer.statuses(i).state());
  }
  cells->clear();  // the kept cell holds the answer's bytes alive
  CHECK(MessageDifferencer::Equals(kept->status(), answer.statuses(2)));
}

TEST_CASE("threads reading one cell at once all see the whole parsed status") {
  const v1::BatchLookupResponse answer = Answer();
  auto cells = CellsFromBatchAnswer(answer.SerializeAsString());
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
  CHECK_FALSE(CellsFromBatchAnswer(std::string("\xff\xff\xff", 3)).ok());
  // A status whose state is not a varint.
  std::string bad_state = "\x0a\x03\x12\x01x";
  CHECK_FALSE(CellsFromBatchAnswer(bad_state).ok());
  // No statuses at all: no cells.
  auto none = CellsFromBatchAnswer("");
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("a Lookup answer becomes one cell, parsed on first use") {
  v1::LookupResponse answer;
  *answer.mutable_status() = Answer().statuses(2);  // a STALE with an entry
  auto cell = CellFromLookupAnswer(answer.SerializeAsString());
  REQUIRE(cell.ok());
  CHECK((*cell)->state() == v1::KEY_STATE_STALE);
  CHECK(MessageDifferencer::Equals((*cell)->status(), answer.status()));
  // A status sent in two parts merges, as protobuf says.
  v1::LookupResponse first, second;
  first.mutable_status()->set_state(v1::KEY_STATE_HIT);
  second.mutable_status()->set_stale_reason("second part");
  cell = CellFromLookupAnswer(first.SerializeAsString() +
                              second.SerializeAsString());
  REQUIRE(cell.ok());
  CHECK((*cell)->state() == v1::KEY_STATE_HIT);
  CHECK((*cell)->status().stale_reason() == "second part");
  CHECK_FALSE(CellFromLookupAnswer(std::string("\xff\xff", 2)).ok());
}

TEST_CASE("a cell made from a parsed status needs no bytes") {
  v1::KeyStatus status = Answer().statuses(0);
  const StatusCell cell(status);
  CHECK(cell.state() == v1::KEY_STATE_HIT);
  CHECK(MessageDifferencer::Equals(cell.status(), status));
}

}  // namespace gputune::client_internal
