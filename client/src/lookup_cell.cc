#include "client/src/lookup_cell.h"

#include <utility>

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
  const v1::Entry& entry = status_->entry();
  hot_[0] = &entry;
  hot_[1] = &entry.execution();
  hot_[2] = entry.execution().kernel().data();
  entry_.store(&entry, std::memory_order_release);
}

}  // namespace gputune::client_internal
