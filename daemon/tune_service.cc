#include "daemon/tune_service.h"

#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/device_identity.h"
#include "daemon/logging.h"
#include "daemon/metrics.h"
#include "daemon/page_token.h"
#include "daemon/parsed_call.h"
#include "google/protobuf/arena.h"
#include "kernels/engine.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/key_view.h"
#include "proto/proto_time.h"
#include "proto/validation.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

constexpr uint32_t kDefaultPageSize = 100;
constexpr uint32_t kMaxPageSize = 1000;
// A ListEntries page's entries at most, in bytes (one larger entry is sent
// alone): well under the 64 MiB gRPC message clients accept.
constexpr size_t kMaxListAnswerBytes = 16 << 20;
constexpr int kMaxImportEntries = 100000;

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// Finishes a parsed call.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Done(UnaryCall<Request, Response>* call,
                               const absl::Status& status) {
  call->Reply(status);
  return call;
}

// Runs `work` on the store executor and finishes the call with its status.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* OnStore(SerialExecutor* executor,
                                  UnaryCall<Request, Response>* call,
                                  std::function<absl::Status()> work) {
  executor->Submit([call, work = std::move(work)] { call->Reply(work()); });
  return call;
}

// The opening of every parsed method: the call, or the answer to a request
// that did not parse.
#define GPUTUNE_PARSE(Request, Response)                    \
  auto* call = ParseCall<v1::Request, v1::Response>(        \
      ctx, request_bytes, response_bytes, answer_budget()); \
  if (call->answered()) return call;                        \
  const v1::Request* request = &call->request();            \
  v1::Response* response = call->response();                \
  (void)request, (void)response

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// A unary call's reactor that gives back the answer's reservation of `budget`
// when the call is done.
class CountedAnswer final : public grpc::ServerUnaryReactor {
 public:
  CountedAnswer(AnswerBudget* budget, size_t reserved)
      : budget_(budget), reserved_(reserved) {}
  void OnDone() override {
    budget_->Release(reserved_);
    delete this;
  }

 private:
  AnswerBudget* const budget_;
  const size_t reserved_;
};

// Finishes a raw method's call with `message`, serialized by protobuf, if it
// fits `budget` (daemon/answer_budget.h), where `reserved` bytes are already
// held for it; an answer too small to count takes the context's default
// reactor (nothing allocated).
template <typename Message>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx,
                                 const Message& message, grpc::ByteBuffer* out,
                                 AnswerBudget* budget, size_t reserved = 0) {
  grpc::Status status = SerializeTo(message, out);
  if (status.ok()) {
    status = budget->Admit(out, &reserved);
  } else {
    budget->Release(reserved);
    reserved = 0;
  }
  grpc::ServerUnaryReactor* reactor = reserved > 0
                                          ? new CountedAnswer(budget, reserved)
                                          : ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// About how many bytes a Found takes in the answers of Lookup and
// BatchLookup.
size_t LookupStatusSize(const Arbiter::Found& found) {
  size_t size = 8;
  if (found.entry) size += found.entry->size();
  switch (found.state) {
    case v1::KEY_STATE_PENDING:
      size += found.claim->holder().size() + 32;
      break;
    case v1::KEY_STATE_BACKOFF:
      size += 16;
      break;
    default:
      break;
  }
  // STALE, and a stale-but-usable entry in PENDING and BACKOFF.
  if (!found.stale_reason.empty()) size += found.stale_reason.size() + 2;
  return size;
}

// A Found as the answers of Lookup and BatchLookup carry it.
void ToLookupStatus(Arbiter::Found found, v1::LookupStatus* out) {
  out->set_state(found.state);
  if (found.entry) out->set_entry(*found.entry);
  switch (found.state) {
    case v1::KEY_STATE_PENDING:
      *out->mutable_claim() = std::move(*found.claim);
      break;
    case v1::KEY_STATE_BACKOFF:
      *out->mutable_retry_after() = ToProto(found.retry_after);
      break;
    default:
      break;
  }
  // STALE, and a stale-but-usable entry in PENDING and BACKOFF.
  if (!found.stale_reason.empty()) {
    out->set_stale_reason(std::move(found.stale_reason));
    out->set_stale_usable(found.stale_usable);
  }
}

absl::Status ValidateTtl(const google::protobuf::Duration& ttl) {
  return ValidateDuration(ttl, "ttl", /*non_negative=*/true);
}

absl::Status ValidateClaimId(uint64_t id) {
  return id == 0 ? Invalid("claim_id", "required (from ClaimResponse.claim)")
                 : absl::OkStatus();
}

// A stream refused before it began.
class Refuse final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit Refuse(const absl::Status& s) { Finish(ToGrpc(s)); }
  void OnDone() override { delete this; }
};

// Streams a key's status changes until HIT or cancellation.
//
// Two locks. `Alive::mu` keeps the reactor alive while the arbiter's
// callback uses it: the callback and OnDone share `Alive`, which outlives
// the reactor, so a notification racing with OnDone never touches a deleted
// reactor. `mu_` guards the stream's state and is never held while a gRPC
// operation starts: gRPC may run a reaction (OnWriteDone) inline from
// StartWrite on the caller's thread, and that reaction takes `mu_` again.
// (OnDone never runs inline: gRPC schedules it, so the callback may hold
// Alive::mu across StartWrite.)
//
// Each message of kCountedBytes or more is admitted to the answer budget
// before it is written and given back when the write is done; one that does
// not fit ends the stream with RESOURCE_EXHAUSTED. `open` counts the stream
// (kMaxWatchStreams) until OnDone.
class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchReactor(Arbiter* arbiter, const v1::Key& key, AnswerBudget* budget,
               std::atomic<size_t>* open)
      : arbiter_(arbiter),
        budget_(budget),
        open_(open),
        alive_(std::make_shared<Alive>()) {
    {
      absl::MutexLock lock(&alive_->mu);
      alive_->reactor = this;
    }
    // The first status arrives within Watch; a write started before the
    // handler returns this reactor waits for gRPC to bind it.
    watch_id_ =
        arbiter_->Watch(key, [alive = alive_](const v1::KeyStatus& status) {
          absl::MutexLock lock(&alive->mu);
          if (alive->reactor != nullptr) alive->reactor->OnStatus(status);
        });
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    const grpc::ByteBuffer* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      budget_->Release(reserved_);
      reserved_ = 0;
      if (deferred_) {
        finish = std::move(deferred_);
        deferred_.reset();
      } else if (!ok) {
        finish = FinishLocked(
            grpc::Status(grpc::StatusCode::CANCELLED, "watch stream closed"));
      } else if (last_state_ == v1::KEY_STATE_HIT) {
        finish = FinishLocked(grpc::Status::OK);
      } else {
        write = NextWriteLocked(&finish);
      }
    }
    if (finish) {
      Finish(*finish);
    } else if (write != nullptr) {
      StartWrite(write);
    }
  }

  void OnCancel() override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      finish = FinishLocked(
          grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
    }
    if (finish) Finish(*finish);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&alive_->mu);
      alive_->reactor = nullptr;
    }
    arbiter_->Unwatch(watch_id_);
    {
      absl::MutexLock lock(&mu_);
      budget_->Release(reserved_);  // a write that never completed
      reserved_ = 0;
    }
    open_->fetch_sub(1, std::memory_order_relaxed);
    delete this;
  }

 private:
  struct Alive {
    absl::Mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  // Keeps only the newest status while a write is in flight.
  void OnStatus(const v1::KeyStatus& status) ABSL_LOCKS_EXCLUDED(mu_) {
    const grpc::ByteBuffer* write = nullptr;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      pending_ = status;
      has_pending_ = true;
      if (!writing_) write = NextWriteLocked(&finish);
    }
    if (finish) {
      Finish(*finish);
    } else if (write != nullptr) {
      StartWrite(write);
    }
  }

  // The pending status, serialized, as the next message to write (null:
  // none); the caller starts the write once mu_ is released. A message the
  // answer budget cannot hold now sets *finish (RESOURCE_EXHAUSTED) instead.
  const grpc::ByteBuffer* NextWriteLocked(std::optional<grpc::Status>* finish)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!has_pending_ || finished_) return nullptr;
    last_state_ = pending_.state();
    has_pending_ = false;
    {
      // Only the bytes stay: a parsed HIT would double what an unread
      // stream holds.
      v1::WatchResponse message;
      *message.mutable_status() = std::move(pending_);
      current_bytes_.Clear();  // the writer wants an empty buffer
      (void)SerializeTo(message, &current_bytes_);
    }
    if (grpc::Status s = budget_->Admit(&current_bytes_, &reserved_); !s.ok()) {
      *finish = FinishLocked(std::move(s));
      return nullptr;
    }
    writing_ = true;
    return &current_bytes_;
  }

  // The status to finish with now, or none: already finished, or a write is
  // in flight (then OnWriteDone finishes with it).
  std::optional<grpc::Status> FinishLocked(grpc::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return std::nullopt;
    finished_ = true;
    if (writing_) {
      deferred_ = std::move(status);
      return std::nullopt;
    }
    return status;
  }

  Arbiter* const arbiter_;
  AnswerBudget* const budget_;
  std::atomic<size_t>* const open_;
  const std::shared_ptr<Alive> alive_;
  uint64_t watch_id_ = 0;  // set before gRPC can call OnDone

  absl::Mutex mu_;
  // The message being written: changed only under mu_ while !writing_,
  // read by gRPC while writing_.
  grpc::ByteBuffer current_bytes_;
  v1::KeyState last_state_ ABSL_GUARDED_BY(mu_) = v1::KEY_STATE_UNSPECIFIED;
  v1::KeyStatus pending_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Held in the answer budget for the write in flight (0: not counted).
  size_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  // The status to finish with once the write in flight is done.
  std::optional<grpc::Status> deferred_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

TuneServiceImpl::TuneServiceImpl(const DaemonInfo& info, Arbiter* arbiter,
                                 storage::TuneStore* store, JobQueue* jobs,
                                 SerialExecutor* store_executor,
                                 const Clock* clock, Authority* authority)
    : info_(info),
      arbiter_(arbiter),
      store_(store),
      jobs_(jobs),
      store_executor_(store_executor),
      clock_(clock),
      authority_(authority) {}

grpc::ServerUnaryReactor* TuneServiceImpl::Lookup(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  // Answered inline, so the messages live on this frame: a Lookup allocates
  // nothing but its answer's slice.
  char block[2048];
  google::protobuf::Arena arena(block, sizeof(block));
  const auto* request = ParseOn<v1::LookupRequest>(&arena, *request_bytes);
  if (request == nullptr) return Done(ctx, NotParsed<v1::LookupRequest>());
  if (absl::Status s = ValidateKey(request->key(), "key"); !s.ok()) {
    return Done(ctx, s);
  }
  auto* response =
      google::protobuf::Arena::CreateMessage<v1::LookupResponse>(&arena);
  ToLookupStatus(arbiter_->Find(request->key()), response->mutable_status());
  if (metrics_ != nullptr) metrics_->KeyLookedUp(response->status().state());
  return Answer(ctx, *response, response_bytes, &answer_budget_);
}

grpc::ServerUnaryReactor* TuneServiceImpl::BatchLookup(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  google::protobuf::Arena arena;
  const auto* request = ParseOn<v1::BatchLookupRequest>(&arena, *request_bytes);
  if (request == nullptr) return Done(ctx, NotParsed<v1::BatchLookupRequest>());
  const size_t count = request->keys_size();
  if (count == 0 || count > kMaxBatchKeys) {
    return Done(
        ctx, Invalid("keys",
                     absl::StrCat("must hold 1..", kMaxBatchKeys, " keys, got ",
                                  count, " (split the batch)")));
  }
  // Each key once: a repeated key is answered with the index of its first
  // occurrence, so that naming one key many times makes no larger answer.
  std::vector<const v1::Key*> distinct;
  distinct.reserve(count);
  std::vector<uint32_t> same_as(count, 0);
  absl::flat_hash_map<KeyView, uint32_t> first;
  first.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const KeyView view = KeyView::Of(request->keys(i));
    // The field's name is built only for an invalid key.
    if (!ValidateKey(view, "key").ok()) {
      ctx->AddTrailingMetadata(std::string(kKeyIndexTrailer),
                               std::to_string(i));
      return Done(ctx, ValidateKey(view, absl::StrCat("keys[", i, "]")));
    }
    auto [it, inserted] = first.try_emplace(view, static_cast<uint32_t>(i));
    if (inserted) {
      distinct.push_back(&request->keys(i));
    } else {
      same_as[i] = it->second + 1;
    }
  }
  std::vector<Arbiter::Found> found = arbiter_->Find(distinct);
  // The answer's size first: one too large is refused before it is built.
  size_t size = 0;
  for (size_t i = 0, next = 0; i < count; ++i) {
    size += same_as[i] != 0 ? 8 : LookupStatusSize(found[next++]);
    if (size > kMaxBatchAnswerBytes) {
      // Keys [0, i) fit.
      return Done(ctx, absl::ResourceExhaustedError(absl::StrCat(
                           "the answer to these ", count, " keys would exceed ",
                           kMaxBatchAnswerBytes >> 20, " MiB (the first ", i,
                           " fit): split the batch into BatchLookups of at "
                           "most ",
                           std::max<size_t>(i, 1), " keys")));
    }
  }
  size_t reserved = 0;
  if (!answer_budget_.Reserve(size, &reserved)) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(answer_budget_.Exhausted(size));
    return reactor;
  }
  auto* response =
      google::protobuf::Arena::CreateMessage<v1::BatchLookupResponse>(&arena);
  response->mutable_statuses()->Reserve(static_cast<int>(count));
  for (size_t i = 0, next = 0; i < count; ++i) {
    v1::LookupStatus* status = response->add_statuses();
    if (same_as[i] != 0) {
      status->set_same_as(same_as[i]);
    } else {
      ToLookupStatus(std::move(found[next++]), status);
    }
  }
  if (metrics_ != nullptr) {
    // Each distinct key once (moving a Found leaves its state).
    for (const Arbiter::Found& f : found) metrics_->KeyLookedUp(f.state);
  }
  return Answer(ctx, *response, response_bytes, &answer_budget_, reserved);
}

grpc::ServerUnaryReactor* TuneServiceImpl::Claim(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(ClaimRequest, ClaimResponse);
  if (auto s = ValidateKey(request->key(), "key"); !s.ok())
    return Done(call, s);
  if (auto s = ValidateHolder(request->holder(), "holder"); !s.ok()) {
    return Done(call, s);
  }
  if (auto s = ValidateTtl(request->ttl()); !s.ok()) return Done(call, s);
  // Runs here, or on the fleet tier's claim thread when the fleet is asked.
  auto answer = [this, call, response, owner = authority_->Owner(ctx->peer())](
                    absl::StatusOr<v1::ClaimResponse> result) {
    if (!result.ok()) {
      Done(call, result.status());
      return;
    }
    if (result->outcome() == v1::CLAIM_OUTCOME_GRANTED) {
      authority_->Bind(result->claim().claim_id(), owner);
      // Leases that ran out are forgotten now and then.
      std::optional<absl::flat_hash_set<uint64_t>> live;
      authority_->Prune(4096, [&](uint64_t id) {
        if (!live) {
          live.emplace();
          for (const auto& [key, claim] : arbiter_->GetStats().claims) {
            live->insert(claim.claim_id());
          }
        }
        return live->contains(id);
      });
      spdlog::debug("claim {} granted on {} to '{}'",
                    result->claim().claim_id(), KeyText(call->request().key()),
                    LogSafe(call->request().holder()));
    }
    if (metrics_ != nullptr) metrics_->ClaimAnswered(result->outcome());
    *response = std::move(*result);
    Done(call, absl::OkStatus());
  };
  const absl::Duration ttl = FromProto(request->ttl());
  if (fleet_ != nullptr) {
    // A client that gave up is granted nothing (FleetHooks::Claim).
    const absl::Time deadline =
        ctx->deadline() == std::chrono::system_clock::time_point::max()
            ? absl::InfiniteFuture()
            : absl::FromChrono(ctx->deadline());
    fleet_->Claim(request->key(), request->holder(), ttl, ClaimKind::kClient,
                  deadline, std::move(answer));
  } else {
    answer(arbiter_->Claim(request->key(), request->holder(), ttl));
  }
  return call;
}

grpc::ServerUnaryReactor* TuneServiceImpl::Renew(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(RenewRequest, RenewResponse);
  if (auto s = ValidateClaimId(request->claim_id()); !s.ok()) {
    return Done(call, s);
  }
  if (auto s = ValidateTtl(request->ttl()); !s.ok()) return Done(call, s);
  if (auto s = authority_->CheckClaim(request->claim_id(), ctx->peer());
      !s.ok()) {
    return Done(call, s);
  }
  absl::StatusOr<absl::Time> deadline =
      arbiter_->Renew(request->claim_id(), FromProto(request->ttl()));
  if (!deadline.ok()) return Done(call, deadline.status());
  *response->mutable_lease_deadline() = ToProto(*deadline);
  return Done(call, absl::OkStatus());
}

grpc::ServerUnaryReactor* TuneServiceImpl::Record(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(RecordRequest, RecordResponse);
  if (auto s = ValidateClaimId(request->claim_id()); !s.ok()) {
    return Done(call, s);
  }
  if (!request->has_execution()) {
    return Done(call, Invalid("execution", "required: the chosen execution"));
  }
  if (auto s = ValidateExecution(request->execution(), "execution"); !s.ok()) {
    return Done(call, s);
  }
  if (request->measurements_size() > static_cast<int>(kMaxMeasurements)) {
    return Done(call, Invalid("measurements",
                              absl::StrCat("at most ", kMaxMeasurements)));
  }
  for (int i = 0; i < request->measurements_size(); ++i) {
    if (auto s = ValidateMeasurement(request->measurements(i),
                                     absl::StrCat("measurements[", i, "]"));
        !s.ok()) {
      return Done(call, s);
    }
  }
  if (auto s = ValidateDuration(request->default_time(), "default_time",
                                /*non_negative=*/true);
      !s.ok()) {
    return Done(call, s);
  }
  if (auto s = ValidateDuration(request->chosen_time(), "chosen_time",
                                /*non_negative=*/true);
      !s.ok()) {
    return Done(call, s);
  }
  if (const size_t size = request->ByteSizeLong(); size > kMaxEntryBytes) {
    return Done(call,
                Invalid("request", absl::StrCat("at most ", kMaxEntryBytes,
                                                " bytes serialized, got ", size,
                                                " (fewer measurements, or less "
                                                "data)")));
  }
  if (auto s = authority_->CheckClaim(request->claim_id(), ctx->peer());
      !s.ok()) {
    return Done(call, s);
  }
  absl::StatusOr<Arbiter::RecordTicket> ticket =
      arbiter_->BeginRecord(request->claim_id());
  if (!ticket.ok()) return Done(call, ticket.status());

  v1::Entry entry;
  *entry.mutable_key() = ticket->key;
  *entry.mutable_execution() = request->execution();
  *entry.mutable_measurements() = request->measurements();
  if (request->has_default_time()) {
    *entry.mutable_default_time() = request->default_time();
  }
  if (request->has_chosen_time()) {
    *entry.mutable_chosen_time() = request->chosen_time();
  }
  const absl::Duration def = FromProto(request->default_time());
  const absl::Duration chosen = FromProto(request->chosen_time());
  if (def > absl::ZeroDuration() && chosen > absl::ZeroDuration()) {
    entry.set_speedup(absl::FDivDuration(def, chosen));
  }
  entry.set_source(v1::SOURCE_CLIENT_MEASURED);
  *entry.mutable_measured_at() = ToProto(clock_->Now());
  *entry.mutable_fingerprint() = info_.fingerprint;
  entry.set_recorded_by(ticket->holder);

  return OnStore(
      store_executor_, call,
      [this, ticket = *ticket, entry = std::move(entry), response]() {
        if (absl::Status s = fleet_ != nullptr ? fleet_->PersistRecord(entry)
                                               : store_->Put(entry);
            !s.ok()) {
          arbiter_->CancelRecord(ticket);
          spdlog::error("record of {} by '{}' failed: {}", KeyText(ticket.key),
                        LogSafe(ticket.holder), s.message());
          return absl::Status(
              s.code(),
              absl::StrCat("the entry was not persisted: ", s.message()));
        }
        arbiter_->CommitRecord(ticket, entry);
        if (fleet_ != nullptr) fleet_->RecordCommitted(ticket.key);
        authority_->Release(ticket.claim_id);
        spdlog::info("recorded {} by '{}': {}", KeyText(ticket.key),
                     LogSafe(ticket.holder), entry.execution().kernel());
        *response->mutable_entry() = entry;
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TuneServiceImpl::Abandon(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(AbandonRequest, AbandonResponse);
  if (auto s = ValidateClaimId(request->claim_id()); !s.ok()) {
    return Done(call, s);
  }
  if (auto s = ValidateReason(request->reason(), "reason"); !s.ok()) {
    return Done(call, s);
  }
  if (auto s = authority_->CheckClaim(request->claim_id(), ctx->peer());
      !s.ok()) {
    return Done(call, s);
  }
  absl::StatusOr<Arbiter::AbandonResult> result =
      arbiter_->Abandon(request->claim_id());
  if (!result.ok()) return Done(call, result.status());
  authority_->Release(request->claim_id());
  if (metrics_ != nullptr) metrics_->ClaimAbandoned();
  spdlog::info(
      "claim {} on {} abandoned: {}{}", request->claim_id(),
      KeyText(result->key),
      request->reason().empty() ? "(no reason)" : LogSafe(request->reason()),
      result->response.state() == v1::KEY_STATE_BACKOFF ? " -> BACKOFF" : "");
  *response = std::move(result->response);
  return Done(call, absl::OkStatus());
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TuneServiceImpl::Watch(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes) {
  (void)ctx;
  v1::WatchRequest request;
  if (!ParseRequest(*request_bytes, &request)) {
    return new Refuse(NotParsed<v1::WatchRequest>());
  }
  if (auto s = ValidateKey(request.key(), "key"); !s.ok()) {
    return new Refuse(s);
  }
  if (watch_streams_.fetch_add(1, std::memory_order_relaxed) >=
      kMaxWatchStreams) {
    watch_streams_.fetch_sub(1, std::memory_order_relaxed);
    return new Refuse(absl::ResourceExhaustedError(absl::StrCat(
        "gputuned serves ", kMaxWatchStreams,
        " Watch streams at once: retry later, or Lookup the key now and "
        "then")));
  }
  return new WatchReactor(arbiter_, request.key(), &answer_budget_,
                          &watch_streams_);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TuneServiceImpl::SubscribeChanges(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes) {
  // Anyone who may look up may subscribe (an inference-process call).
  v1::SubscribeChangesRequest request;
  if (!ParseRequest(*request_bytes, &request)) {
    return new Refuse(NotParsed<v1::SubscribeChangesRequest>());
  }
  if (feed_ == nullptr) {
    return new Refuse(
        absl::UnimplementedError("this gputuned has no change feed"));
  }
  absl::Status refused;
  auto* reactor = feed_->Subscribe(ctx, request, &refused);
  return reactor != nullptr ? reactor : new Refuse(refused);
}

std::optional<storage::EntryQuery> TuneServiceImpl::QueryFor(
    const v1::EntryFilter& filter) const {
  storage::EntryQuery query;
  query.op = filter.op();
  query.phase = filter.phase();
  query.role = filter.role();
  if (filter.state() != v1::KEY_STATE_UNSPECIFIED) {
    if (!info_.fingerprint_digest) {
      // Without a known device no entry is judged STALE.
      if (filter.state() == v1::KEY_STATE_STALE) return std::nullopt;
    } else {
      query.fingerprint = *info_.fingerprint_digest;
      query.fingerprint_match = filter.state() == v1::KEY_STATE_HIT;
    }
  }
  return query;
}

grpc::ServerUnaryReactor* TuneServiceImpl::ListEntries(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(ListEntriesRequest, ListEntriesResponse);
  if (auto s = ValidateFilter(request->filter(), "filter"); !s.ok()) {
    return Done(call, s);
  }
  if (request->page_size() > kMaxPageSize) {
    return Done(call, Invalid("page_size",
                              absl::StrCat("must be 0..", kMaxPageSize,
                                           ", got ", request->page_size())));
  }
  absl::StatusOr<std::string> after = DecodePageToken(request->page_token());
  if (!after.ok()) return Done(call, after.status());
  const int limit = static_cast<int>(
      request->page_size() == 0 ? kDefaultPageSize : request->page_size());
  return OnStore(
      store_executor_, call,
      [this, request, response, limit,
       after = std::move(*after)]() -> absl::Status {
        const std::optional<storage::EntryQuery> query =
            QueryFor(request->filter());
        if (!query) return absl::OkStatus();
        absl::StatusOr<storage::ListPage> page =
            store_->List(*query, after, limit);
        if (!page.ok()) return page.status();
        if (!page->quarantined.empty()) {
          arbiter_->Erase(page->quarantined);
          spdlog::error(
              "{} damaged entries moved to quarantine while listing (first "
              "{}): "
              "they are MISS now and can be tuned again",
              page->quarantined.size(), page->quarantined.front());
        }
        response->set_skipped_damaged(
            static_cast<uint32_t>(page->quarantined.size()));
        if (page->rows == limit) {
          response->set_next_page_token(EncodePageToken(page->last_key_id));
        }
        size_t bytes = 0;
        for (v1::Entry& entry : page->entries) {
          if (!request->with_measurements()) entry.clear_measurements();
          const size_t size = entry.ByteSizeLong();
          if (bytes > 0 && bytes + size > kMaxListAnswerBytes) {
            // Large entries (Redis values of several MiB): the page ends
            // here, so the answer fits a gRPC message; the next one starts
            // after the last entry sent.
            response->set_next_page_token(EncodePageToken(
                KeyId(response->entries(response->entries_size() - 1).key())));
            break;
          }
          bytes += size;
          const bool hit = !info_.fingerprint_digest ||
                           FingerprintDigest(entry.fingerprint()) ==
                               *info_.fingerprint_digest;
          response->add_states(hit ? v1::KEY_STATE_HIT : v1::KEY_STATE_STALE);
          *response->add_entries() = std::move(entry);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TuneServiceImpl::GetEntry(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(GetEntryRequest, GetEntryResponse);
  if (auto s = ValidateKey(request->key(), "key"); !s.ok())
    return Done(call, s);
  return OnStore(
      store_executor_, call, [this, request, response]() -> absl::Status {
        bool damaged = false;
        absl::StatusOr<std::optional<v1::Entry>> entry =
            store_->Get(KeyId(request->key()), &damaged);
        if (!entry.ok()) return entry.status();
        if (damaged) {
          arbiter_->Erase({KeyId(request->key())});
          spdlog::error("damaged entry {} moved to quarantine: MISS now",
                        KeyId(request->key()));
          return absl::NotFoundError(absl::StrCat(
              "the entry for ", KeyId(request->key()),
              " was damaged on disk and moved to quarantine: tune it again"));
        }
        if (!entry->has_value()) {
          return absl::NotFoundError(
              absl::StrCat("no entry for ", KeyId(request->key())));
        }
        Arbiter::Verdict verdict =
            arbiter_->Judge(**entry, request->key().candidate_set());
        response->set_state(verdict.stale_reason.empty() ? v1::KEY_STATE_HIT
                                                         : v1::KEY_STATE_STALE);
        response->set_stale_reason(std::move(verdict.stale_reason));
        response->set_stale_usable(verdict.stale_usable);
        *response->mutable_entry() = std::move(**entry);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TuneServiceImpl::DeleteEntries(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(DeleteEntriesRequest, DeleteEntriesResponse);
  if (auto s = authority_->RequireOperator(ctx->peer(), "DeleteEntries");
      !s.ok()) {
    return Done(call, s);
  }
  for (int i = 0; i < request->keys_size(); ++i) {
    if (auto s = ValidateKey(request->keys(i), absl::StrCat("keys[", i, "]"));
        !s.ok()) {
      return Done(call, s);
    }
  }
  if (auto s = ValidateFilter(request->filter(), "filter"); !s.ok()) {
    return Done(call, s);
  }
  const bool filter_empty = request->filter().ByteSizeLong() == 0;
  if (request->keys_size() > 0 && !filter_empty) {
    return Done(call, Invalid("filter", "give keys or a filter, not both"));
  }
  if (request->keys_size() == 0 && filter_empty && !request->all()) {
    return Done(call, Invalid("keys", "give keys, a filter, or all=true"));
  }
  return OnStore(
      store_executor_, call, [this, request, response]() -> absl::Status {
        absl::StatusOr<std::vector<std::string>> deleted;
        if (request->keys_size() > 0) {
          std::vector<std::string> ids;
          for (const v1::Key& key : request->keys()) ids.push_back(KeyId(key));
          deleted = store_->Delete(ids);
        } else if (const auto query = QueryFor(request->filter()); query) {
          deleted = store_->DeleteMatching(*query);
        } else {
          deleted = std::vector<std::string>();
        }
        if (!deleted.ok()) return deleted.status();
        arbiter_->Erase(*deleted);
        spdlog::info("deleted {} entries", deleted->size());
        response->set_deleted(static_cast<uint32_t>(deleted->size()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TuneServiceImpl::ImportEntries(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(ImportEntriesRequest, ImportEntriesResponse);
  if (auto s = authority_->RequireOperator(ctx->peer(), "ImportEntries");
      !s.ok()) {
    return Done(call, s);
  }
  if (request->entries_size() == 0 ||
      request->entries_size() > kMaxImportEntries) {
    return Done(
        call, Invalid("entries", absl::StrCat("must hold 1..",
                                              kMaxImportEntries, " entries")));
  }
  std::vector<v1::Entry> entries;
  entries.reserve(request->entries_size());
  for (int i = 0; i < request->entries_size(); ++i) {
    if (auto s = ValidateEntry(request->entries(i),
                               absl::StrCat("entries[", i, "]"));
        !s.ok()) {
      return Done(call, s);
    }
    entries.push_back(request->entries(i));
    entries.back().set_source(v1::SOURCE_IMPORTED);
  }
  return OnStore(
      store_executor_, call,
      [this, entries = std::move(entries), response]() -> absl::Status {
        if (fleet_ != nullptr) {
          if (absl::Status s = fleet_->Import(entries); !s.ok()) return s;
        } else {
          if (absl::Status s = store_->PutAll(entries); !s.ok()) return s;
          arbiter_->Install(entries);
        }
        spdlog::info("imported {} entries", entries.size());
        response->set_imported(static_cast<uint32_t>(entries.size()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TuneServiceImpl::GetStatus(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(GetStatusRequest, GetStatusResponse);
  (void)request;
  response->set_version(info_.version);
  *response->mutable_started_at() = ToProto(info_.started_at);
  response->set_backend(info_.backend);
  response->set_backend_ready(jobs_ != nullptr && jobs_->ready());
  if (jobs_ == nullptr) {
    response->set_backend_error("no benchmark backend");
  } else if (!jobs_->ready()) {
    response->set_backend_error(jobs_->backend_error());
  }
  *response->mutable_fingerprint() = info_.fingerprint;
  response->set_device_uuid(info_.device_uuid);
  response->set_pci_bus_id(info_.pci_bus_id);
  response->set_database_path(info_.database_path);
  response->set_database_quarantined_to(info_.database_quarantined_to);
  const storage::QuarantineInfo quarantine = store_->quarantined();
  response->set_quarantined_entries(quarantine.count);
  for (const std::string& id : quarantine.recent_key_ids) {
    response->add_quarantined_key_ids(id);
  }
  response->set_listen_address(info_.listen_address);
  Arbiter::Stats stats = arbiter_->GetStats();
  response->set_entries(stats.entries);
  response->set_stale_entries(stats.stale_entries);
  response->set_stale_usable_entries(stats.stale_usable_entries);
  if (revalidator_ != nullptr) {
    const Revalidator::Stats rs = revalidator_->GetStats();
    response->set_revalidated(rs.revalidated);
    response->set_revalidations_failed(rs.failed);
  }
  response->set_backoff_keys(stats.backoff_keys);
  for (auto& [key, claim] : stats.claims) {
    *response->add_claim_keys() = std::move(key);
    *response->add_claims() = std::move(claim);
  }
  if (jobs_ != nullptr) {
    JobQueue::Stats js = jobs_->GetStats();
    response->set_queue_depth(js.queue_depth);
    response->set_queue_capacity(js.capacity);
    if (js.running)
      *response->mutable_running_job() = std::move(js.running_job);
    response->set_jobs_completed(js.completed);
    response->set_jobs_failed(js.failed);
  }
  if (fleet_ != nullptr) fleet_->FillStatus(response->mutable_fleet());
  return Done(call, absl::OkStatus());
}

grpc::ServerUnaryReactor* TuneServiceImpl::TuneDense(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(TuneDenseRequest, TuneDenseResponse);
  if (auto s = ValidateKey(request->key(), "key"); !s.ok())
    return Done(call, s);
  if (!request->key().has_dense_bf16()) {
    return Done(call, Invalid("key.dense_bf16",
                              "TuneDense benchmarks dense_bf16 keys only"));
  }
  if (request->device_uuid().size() > kMaxNameLength) {
    return Done(
        call, Invalid("device_uuid", absl::StrCat("at most ", kMaxNameLength,
                                                  " characters (a GPU UUID)")));
  }
  if (auto s = CheckTuneDevice(request->device_uuid(), info_.device_uuid);
      !s.ok()) {
    return Done(call, s);
  }
  if (jobs_ == nullptr) {
    return Done(call, absl::FailedPreconditionError(
                          "this gputuned has no benchmark backend"));
  }
  jobs_->TuneDense(request->key(), request->wait(),
                   [call, response](absl::StatusOr<v1::KeyStatus> result) {
                     if (result.ok()) {
                       *response->mutable_status() = std::move(*result);
                     }
                     call->Reply(result.status());
                   });
  return call;
}

AdminServiceImpl::AdminServiceImpl(storage::TuneStore* store, JobQueue* jobs,
                                   SerialExecutor* store_executor,
                                   const Authority* authority)
    : store_(store),
      jobs_(jobs),
      store_executor_(store_executor),
      authority_(authority) {}

grpc::ServerUnaryReactor* AdminServiceImpl::Backup(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(BackupRequest, BackupResponse);
  if (auto s = authority_->RequireOperator(ctx->peer(), "Backup"); !s.ok()) {
    return Done(call, s);
  }
  if (request->path().empty() || request->path()[0] != '/') {
    return Done(call, Invalid("path", "must be an absolute path"));
  }
  if (request->path().size() > kMaxPathLength) {
    return Done(call, Invalid("path", absl::StrCat("at most ", kMaxPathLength,
                                                   " characters")));
  }
  return OnStore(store_executor_, call, [this, request, response] {
    absl::StatusOr<uint64_t> bytes = store_->Backup(request->path());
    if (!bytes.ok()) {
      spdlog::error("backup to {} failed: {}", LogSafe(request->path()),
                    bytes.status().message());
      return bytes.status();
    }
    response->set_bytes(*bytes);
    spdlog::info("database backed up to {} ({} bytes, verified)",
                 LogSafe(request->path()), *bytes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetLogLevel(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(SetLogLevelRequest, SetLogLevelResponse);
  if (auto s = authority_->RequireOperator(ctx->peer(), "SetLogLevel");
      !s.ok()) {
    return Done(call, s);
  }
  // The whole request is checked before anything changes.
  const spdlog::level::level_enum level =
      spdlog::level::from_str(request->level());
  if (!request->level().empty() && level == spdlog::level::off &&
      request->level() != "off") {
    return Done(call, Invalid("level",
                              "must be one of trace, debug, info, warn, "
                              "error, critical, off"));
  }
  const kernels::StatusOr<kernels::AutotuneLog> autotune =
      kernels::ParseAutotuneLog(request->autotune_log());
  if (!request->autotune_log().empty() && !autotune.ok()) {
    return Done(call,
                Invalid("autotune_log", "must be disabled, minimal or full"));
  }
  if (!request->level().empty()) {
    spdlog::set_level(level);
    spdlog::info("log level set to {}", request->level());
  }
  if (!request->autotune_log().empty() && jobs_ != nullptr) {
    jobs_->SetAutotuneLog(*autotune);
  }
  response->set_level(
      std::string(spdlog::level::to_string_view(spdlog::get_level()).data(),
                  spdlog::level::to_string_view(spdlog::get_level()).size()));
  if (jobs_ != nullptr) {
    response->set_autotune_log(
        std::string(kernels::AutotuneLogName(jobs_->autotune_log())));
  }
  return Done(call, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetMetrics(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  GPUTUNE_PARSE(GetMetricsRequest, GetMetricsResponse);
  if (metrics_ == nullptr) {
    return Done(call, absl::UnavailableError("metrics are not set up yet"));
  }
  response->set_text(metrics_->Render());
  return Done(call, absl::OkStatus());
}

}  // namespace gputune
