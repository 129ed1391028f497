#include "daemon/change_feed.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/parsed_call.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

uint64_t NewEpoch() {
  std::random_device device;
  uint64_t epoch = 0;
  while (epoch == 0) {
    epoch = (uint64_t{device()} << 32) ^ device();
  }
  return epoch;
}

}  // namespace

// One subscriber's state. Everything but `reactor` is guarded by the feed's
// mu_ (not expressible in annotations).
struct ChangeFeed::Subscriber {
  grpc::CallbackServerContext* ctx = nullptr;
  uint64_t next_seq = 1;    // the first change not yet taken for a message
  bool reset = false;       // the first message says reset
  bool sent_first = false;  // a message was taken (the first one, at least)
  bool writing = false;     // a message is being written
  bool ending = false;      // EndLocked ran: no more messages
  bool finish_started = false;
  grpc::Status end_status;  // what EndLocked finishes with

  // `reactor` is null once OnDone ran. Held across StartWrite, Finish and
  // TryCancel from outside the reactor's own reactions, none of which runs
  // OnDone inline; the reactions never take it.
  absl::Mutex alive_mu;
  Reactor* reactor ABSL_GUARDED_BY(alive_mu) = nullptr;
};

// Writes messages as ChangeFeed hands them over; at most one in flight.
class ChangeFeed::Reactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Reactor(ChangeFeed* feed, std::shared_ptr<Subscriber> sub)
      : feed_(feed), sub_(std::move(sub)) {}

  void Write(const Batch& batch, uint64_t epoch) {
    message_.Clear();
    message_.set_epoch(epoch);
    message_.set_reset(batch.reset);
    message_.set_head_seq(batch.head_seq);
    for (const Kept& kept : batch.changes) {
      v1::Change* change = message_.add_changes();
      change->set_seq(kept.seq);
      change->set_kind(kept.kind);
      if (kept.entry) change->set_entry(*kept.entry);
      change->set_replaced_candidate_set(kept.replaced_candidate_set);
      change->set_stale(kept.stale);
    }
    bytes_.Clear();  // the writer wants an empty buffer
    (void)SerializeTo(message_, &bytes_);
    StartWrite(&bytes_);
  }

  void OnWriteDone(bool ok) override {
    Batch batch;
    bool write = false;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&feed_->mu_);
      sub_->writing = false;
      if (!ok) {
        feed_->EndLocked(sub_.get(),
                         grpc::Status(grpc::StatusCode::CANCELLED,
                                      "the change stream was closed"));
      }
      if (sub_->ending) {
        if (!sub_->finish_started) {
          sub_->finish_started = true;
          finish = sub_->end_status;
        }
      } else {
        write = feed_->TakeBatchLocked(sub_.get(), &batch);
      }
    }
    if (finish) {
      Finish(*finish);
    } else if (write) {
      Write(batch, feed_->epoch_);
    }
  }

  void OnCancel() override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&feed_->mu_);
      feed_->EndLocked(sub_.get(),
                       grpc::Status(grpc::StatusCode::CANCELLED,
                                    "the change stream was cancelled"));
      if (!sub_->writing && !sub_->finish_started) {
        sub_->finish_started = true;
        finish = sub_->end_status;
      }
    }
    if (finish) Finish(*finish);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&sub_->alive_mu);
      sub_->reactor = nullptr;
    }
    feed_->Remove(sub_.get());
    delete this;
  }

 private:
  ChangeFeed* const feed_;
  const std::shared_ptr<Subscriber> sub_;
  // The message in flight and its bytes: changed only while no write is.
  v1::SubscribeChangesResponse message_;
  grpc::ByteBuffer bytes_;
};

ChangeFeed::ChangeFeed(const ChangeFeedOptions& options)
    : options_(options), epoch_(NewEpoch()) {}

ChangeFeed::~ChangeFeed() = default;

void ChangeFeed::Publish(v1::ChangeKind kind,
                         std::shared_ptr<const std::string> entry,
                         std::string replaced_candidate_set, bool stale) {
  absl::MutexLock lock(&mu_);
  const size_t bytes = (entry ? entry->size() : 0) +
                       replaced_candidate_set.size() + sizeof(Kept);
  kept_.push_back(Kept{++head_seq_, kind, std::move(entry),
                       std::move(replaced_candidate_set), stale});
  kept_bytes_ += bytes;
  bool dropped = false;
  while (kept_.size() > 1 && (kept_.size() > options_.max_lag ||
                              kept_bytes_ > options_.max_kept_bytes)) {
    const Kept& oldest = kept_.front();
    kept_bytes_ -= (oldest.entry ? oldest.entry->size() : 0) +
                   oldest.replaced_candidate_set.size() + sizeof(Kept);
    kept_.pop_front();
    dropped = true;
  }
  if (!dropped || subscribers_.empty()) return;
  // Subscribers whose next change is no longer kept fell too far behind.
  const uint64_t first = kept_.front().seq;
  std::vector<Subscriber*> behind;
  for (const auto& sub : subscribers_) {
    if (sub->next_seq < first) behind.push_back(sub.get());
  }
  for (Subscriber* sub : behind) {
    ++cut_off_;
    EndLocked(sub,
              grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           absl::StrCat("this subscriber fell more than ",
                                        options_.max_lag,
                                        " changes behind (gputuned "
                                        "--subscriber_max_lag): resubscribe, "
                                        "after a reset")));
  }
}

bool ChangeFeed::TakeBatchLocked(Subscriber* sub, Batch* out) {
  if (sub->ending || sub->writing) return false;
  if (sub->sent_first && sub->next_seq > head_seq_) return false;
  out->reset = sub->reset;
  out->head_seq = head_seq_;
  out->changes.clear();
  if (sub->next_seq <= head_seq_) {
    // Publish cuts off a subscriber before its next change drops out.
    const uint64_t first = kept_.front().seq;
    size_t bytes = 0;
    for (size_t i = sub->next_seq - first;
         i < kept_.size() && out->changes.size() < options_.max_batch; ++i) {
      const Kept& kept = kept_[i];
      const size_t size = kept.entry ? kept.entry->size() : 0;
      if (!out->changes.empty() && bytes + size > options_.max_batch_bytes) {
        break;
      }
      bytes += size;
      out->changes.push_back(kept);
    }
    sub->next_seq += out->changes.size();
  }
  sub->reset = false;
  sub->sent_first = true;
  sub->writing = true;
  return true;
}

void ChangeFeed::EndLocked(Subscriber* sub, grpc::Status status) {
  if (sub->ending) return;
  sub->ending = true;
  sub->end_status = std::move(status);
  auto it = std::find_if(subscribers_.begin(), subscribers_.end(),
                         [sub](const auto& s) { return s.get() == sub; });
  if (it == subscribers_.end()) return;
  ending_.push_back(std::move(*it));
  subscribers_.erase(it);
}

void ChangeFeed::Flush() {
  std::vector<std::pair<std::shared_ptr<Subscriber>, Batch>> writes;
  // Ended subscribers: finished when idle, cancelled when a write to them is
  // stuck (its failure then finishes them).
  std::vector<std::pair<std::shared_ptr<Subscriber>, grpc::Status>> finishes;
  std::vector<std::shared_ptr<Subscriber>> cancels;
  {
    absl::MutexLock lock(&mu_);
    for (std::shared_ptr<Subscriber>& sub : ending_) {
      if (sub->finish_started) continue;
      if (sub->end_status.error_code() ==
          grpc::StatusCode::RESOURCE_EXHAUSTED) {
        spdlog::warn("change subscriber {} cut off: {}", sub->ctx->peer(),
                     sub->end_status.error_message());
      }
      if (sub->writing) {
        cancels.push_back(std::move(sub));
      } else {
        sub->finish_started = true;
        finishes.emplace_back(sub, sub->end_status);
      }
    }
    ending_.clear();
    for (const std::shared_ptr<Subscriber>& sub : subscribers_) {
      Batch batch;
      if (TakeBatchLocked(sub.get(), &batch)) {
        writes.emplace_back(sub, std::move(batch));
      }
    }
  }
  for (auto& [sub, status] : finishes) {
    absl::MutexLock lock(&sub->alive_mu);
    if (sub->reactor != nullptr) sub->reactor->Finish(status);
  }
  for (const auto& sub : cancels) {
    absl::MutexLock lock(&sub->alive_mu);
    if (sub->reactor != nullptr) sub->ctx->TryCancel();
  }
  for (const auto& [sub, batch] : writes) {
    absl::MutexLock lock(&sub->alive_mu);
    if (sub->reactor != nullptr) sub->reactor->Write(batch, epoch_);
  }
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ChangeFeed::Subscribe(
    grpc::CallbackServerContext* ctx,
    const v1::SubscribeChangesRequest& request, absl::Status* refused) {
  auto sub = std::make_shared<Subscriber>();
  sub->ctx = ctx;
  Reactor* reactor = nullptr;
  Batch batch;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      *refused = absl::UnavailableError("gputuned is shutting down");
      return nullptr;
    }
    if (subscribers_.size() >= options_.max_subscribers) {
      *refused = absl::ResourceExhaustedError(
          absl::StrCat("gputuned serves ", options_.max_subscribers,
                       " change streams already"));
      return nullptr;
    }
    reactor = new Reactor(this, sub);
    {
      absl::MutexLock alive(&sub->alive_mu);
      sub->reactor = reactor;
    }
    const uint64_t first = kept_.empty() ? head_seq_ + 1 : kept_.front().seq;
    const uint64_t after = request.after_seq();
    if (request.epoch() == epoch_ && after <= head_seq_ && after + 1 >= first) {
      sub->next_seq = after + 1;
    } else {
      // A first subscription, another start's, or one too far behind.
      sub->next_seq = head_seq_ + 1;
      sub->reset = true;
    }
    subscribers_.push_back(sub);
    TakeBatchLocked(sub.get(), &batch);  // the first message: always one
  }
  // A write started before the handler returns waits for gRPC to bind the
  // reactor.
  reactor->Write(batch, epoch_);
  return reactor;
}

void ChangeFeed::Close() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    while (!subscribers_.empty()) {
      EndLocked(subscribers_.back().get(),
                grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "gputuned is shutting down"));
    }
  }
  Flush();
}

void ChangeFeed::Remove(Subscriber* sub) {
  absl::MutexLock lock(&mu_);
  EndLocked(sub, grpc::Status::CANCELLED);
  ending_.erase(std::remove_if(ending_.begin(), ending_.end(),
                               [sub](const auto& s) { return s.get() == sub; }),
                ending_.end());
}

ChangeFeed::Stats ChangeFeed::GetStats() const {
  absl::MutexLock lock(&mu_);
  return Stats{head_seq_, subscribers_.size(), cut_off_};
}

}  // namespace gputune
