#include "client/src/lookup_cell.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace gputune::client_internal {

using google::protobuf::Arena;

LookupCell::LookupCell(const v1::Key& key, v1::KeyStatus status)
    : state_(status.state()),
      stale_usable_(status.stale_usable()),
      memo_key_(KeyView::Of(key)),
      arena_(std::make_shared<Arena>()) {
  status_ = Arena::CreateMessage<v1::KeyStatus>(arena_.get());
  *status_ = std::move(status);
  Publish();
}

LookupCell::LookupCell(std::shared_ptr<Arena> arena, const v1::Key* key,
                       const v1::LookupStatus* answer)
    : state_(answer->state()),
      stale_usable_(answer->stale_usable()),
      memo_key_(KeyView::Of(*key)),
      arena_(std::move(arena)),
      key_(key),
      answer_(answer) {}

const v1::KeyStatus& LookupCell::status() const {
  Parse();
  return *status_;
}

void LookupCell::Parse() const {
  absl::call_once(parsed_, [this] {
    if (answer_ == nullptr) return;  // parsed already
    auto* status = Arena::CreateMessage<v1::KeyStatus>(arena_.get());
    *status->mutable_key() = *key_;
    status->set_state(answer_->state());
    if (!answer_->entry().empty() &&
        !status->mutable_entry()->ParseFromString(answer_->entry())) {
      status->clear_entry();
    }
    if (answer_->has_claim()) *status->mutable_claim() = answer_->claim();
    if (answer_->has_retry_after()) {
      *status->mutable_retry_after() = answer_->retry_after();
    }
    status->set_stale_reason(answer_->stale_reason());
    status->set_stale_usable(answer_->stale_usable());
    status_ = status;
    Publish();
  });
}

void LookupCell::Publish() const {
  entry_.store(&status_->entry(), std::memory_order_release);
}

void ParseAll(absl::Span<const LookupCell* const> cells) {
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t parts =
      std::min({kMaxParseThreads, hardware,
                std::max<size_t>(1, cells.size() / kCellsPerParseThread)});
  auto parse = [cells, parts](size_t part) {
    const size_t end = cells.size() * (part + 1) / parts;
    for (size_t i = cells.size() * part / parts; i < end; ++i) {
      cells[i]->ParseNow();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(parts - 1);
  for (size_t part = 1; part < parts; ++part) {
    try {
      threads.emplace_back(parse, part);
    } catch (const std::system_error&) {
      break;  // those left are parsed below, on this thread
    }
  }
  parse(0);
  for (std::thread& t : threads) t.join();
  // Parts whose thread did not start (a cell parses once: parsing one
  // again returns at once).
  for (size_t part = threads.size() + 1; part < parts; ++part) parse(part);
}

}  // namespace gputune::client_internal
