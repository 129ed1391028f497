#include "daemon/tune_service.h"

#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/logging.h"
#include "kernels/engine.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "proto/validation.h"
#include "proto/wire.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

constexpr uint32_t kDefaultPageSize = 100;
constexpr uint32_t kMaxPageSize = 1000;
constexpr size_t kMaxBatchKeys = 100000;
// BatchLookups of at least this many keys are done in two halves.
constexpr size_t kSplitBatchKeys = 2048;
constexpr int kMaxImportEntries = 100000;

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

// The bytes of a request, joined into `slice` when gRPC holds them in
// several slices.
absl::string_view BufferBytes(const grpc::ByteBuffer& buffer,
                              grpc::Slice* slice) {
  if (!buffer.Valid() || buffer.Length() == 0 ||
      !buffer.DumpToSingleSlice(slice).ok()) {
    return {};
  }
  return absl::string_view(reinterpret_cast<const char*>(slice->begin()),
                           slice->size());
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Reads an ask's key from its bytes: in place when they are plain (every
// client's serializer writes plain keys), else with protobuf's parser into
// the message storage() returns, which must outlive the ask. False when the
// bytes are not a Key.
template <typename Storage>
bool ReadAsk(Arbiter::Ask* ask, Storage storage) {
  if (ReadPlainKeyView(ask->bytes, &ask->key)) return true;
  v1::Key& key = storage();
  if (!key.ParseFromArray(ask->bytes.data(),
                          static_cast<int>(ask->bytes.size()))) {
    return false;
  }
  ask->key = KeyView::Of(key);
  return true;
}

absl::Status ValidateTtl(const google::protobuf::Duration& ttl) {
  if (ttl.seconds() < 0 || ttl.nanos() < 0) {
    return Invalid("ttl", "must not be negative");
  }
  return absl::OkStatus();
}

absl::Status ValidateClaimId(uint64_t id) {
  return id == 0 ? Invalid("claim_id", "required (from ClaimResponse.claim)")
                 : absl::OkStatus();
}

// Streams a key's status changes until HIT or cancellation. The arbiter's
// callback and gRPC's reactions share `Shared`, which outlives the reactor, so
// a notification racing with OnDone never touches a deleted reactor.
class WatchReactor final : public grpc::ServerWriteReactor<v1::WatchResponse> {
 public:
  WatchReactor(Arbiter* arbiter, const v1::Key& key)
      : arbiter_(arbiter), shared_(std::make_shared<Shared>()) {
    shared_->reactor = this;
    watch_id_ =
        arbiter_->Watch(key, [shared = shared_](const v1::KeyStatus& status) {
          std::lock_guard<std::recursive_mutex> lock(shared->mu);
          if (shared->reactor != nullptr) shared->reactor->OnStatus(status);
        });
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(shared_->mu);
    writing_ = false;
    if (finish_after_write_) {
      finish_after_write_ = false;
      return Finish(deferred_);
    }
    if (!ok)
      return FinishOnce(
          grpc::Status(grpc::StatusCode::CANCELLED, "watch stream closed"));
    if (current_.status().state() == v1::KEY_STATE_HIT) {
      return FinishOnce(grpc::Status::OK);
    }
    WriteNext();
  }

  void OnCancel() override {
    std::lock_guard<std::recursive_mutex> lock(shared_->mu);
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    {
      std::lock_guard<std::recursive_mutex> lock(shared_->mu);
      shared_->reactor = nullptr;
    }
    arbiter_->Unwatch(watch_id_);
    delete this;
  }

 private:
  struct Shared {
    std::recursive_mutex mu;
    WatchReactor* reactor = nullptr;
  };

  // Called with shared_->mu held. Keeps only the newest status while a write
  // is in flight.
  void OnStatus(const v1::KeyStatus& status) {
    if (finished_) return;
    pending_ = status;
    has_pending_ = true;
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (!has_pending_ || finished_) return;
    *current_.mutable_status() = std::move(pending_);
    has_pending_ = false;
    writing_ = true;
    StartWrite(&current_);
  }

  void FinishOnce(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    if (writing_) {
      deferred_ = status;
      finish_after_write_ = true;
    } else {
      Finish(status);
    }
  }

  Arbiter* const arbiter_;
  std::shared_ptr<Shared> shared_;
  uint64_t watch_id_ = 0;
  // Guarded by shared_->mu.
  v1::WatchResponse current_;
  v1::KeyStatus pending_;
  bool has_pending_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool finish_after_write_ = false;
  grpc::Status deferred_;
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
                                 const Clock* clock)
    : info_(info),
      arbiter_(arbiter),
      store_(store),
      jobs_(jobs),
      store_executor_(store_executor),
      clock_(clock),
      // Two BatchLookups' halves at once; up to 4 MiB each (a 10,000-key
      // batch's half takes ~1.5 MiB): a 100,000-key Preload's buffers are
      // not kept for the daemon's lifetime.
      answer_buffers_(std::make_shared<BufferPool>(4, 4 << 20)) {}

grpc::ServerUnaryReactor* TuneServiceImpl::OnStore(
    grpc::CallbackServerContext* ctx, std::function<absl::Status()> work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  store_executor_->Submit(
      [reactor, work = std::move(work)] { reactor->Finish(ToGrpc(work())); });
  return reactor;
}

grpc::ServerUnaryReactor* TuneServiceImpl::Lookup(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::Slice request_slice;
  const absl::string_view bytes = BufferBytes(*request, &request_slice);
  // The key's bytes. A repeated key field merges (protobuf rules): then the
  // merged key is serialized again.
  Arbiter::Ask ask;
  int keys = 0;
  wire::Reader r(bytes);
  while (r.Next()) {
    if (r.field() == v1::LookupRequest::kKeyFieldNumber &&
        r.type() == wire::WireType::kBytes) {
      ask.bytes = r.bytes();
      ++keys;
    }
  }
  if (!r.ok()) return Done(ctx, Invalid("request", "not a LookupRequest"));
  std::string merged;
  if (keys > 1) {
    v1::LookupRequest parsed;
    if (!parsed.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      return Done(ctx, Invalid("request", "not a LookupRequest"));
    merged = parsed.key().SerializeAsString();
    ask.bytes = merged;
  }
  v1::Key parsed;
  auto read_key = [&](size_t, Arbiter::Ask* ask) {
    if (!ReadAsk(ask, [&]() -> v1::Key& { return parsed; })) {
      return Invalid("key", "not a Key");
    }
    return ValidateKey(ask->key, "key");
  };
  thread_local std::string answer;
  answer.clear();
  if (absl::Status s = arbiter_->AppendLookups(
          {&ask, 1}, v1::LookupResponse::kStatusFieldNumber,
          Arbiter::AnswerForm(), read_key, &answer);
      !s.ok()) {
    return Done(ctx, s);
  }
  grpc::Slice slice(answer.data(), answer.size());  // a copy: small
  *response = grpc::ByteBuffer(&slice, 1);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* TuneServiceImpl::BatchLookup(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::Slice request_slice;
  const absl::string_view bytes = BufferBytes(*request, &request_slice);
  std::vector<Arbiter::Ask> asks;
  // A dense key takes ~36 bytes; no more than the most a batch may hold.
  asks.reserve(std::min(bytes.size() / 32, kMaxBatchKeys));
  size_t keys = 0;
  Arbiter::AnswerForm form;
  wire::Reader r(bytes);
  while (r.Next()) {
    if (r.field() == v1::BatchLookupRequest::kKeysFieldNumber &&
        r.type() == wire::WireType::kBytes) {
      // Counted past the limit, kept only up to it.
      if (++keys <= kMaxBatchKeys) asks.push_back({KeyView(), r.bytes()});
    } else if (r.field() == v1::BatchLookupRequest::kOmitKeysFieldNumber &&
               r.type() == wire::WireType::kVarint) {
      form.omit_keys = r.number() != 0;
    } else if (r.field() ==
                   v1::BatchLookupRequest::kShareExecutionsFieldNumber &&
               r.type() == wire::WireType::kVarint) {
      form.share_executions = r.number() != 0;
    }
  }
  if (!r.ok()) return Done(ctx, Invalid("request", "not a BatchLookupRequest"));
  if (keys == 0 || keys > kMaxBatchKeys) {
    return Done(ctx,
                Invalid("keys", absl::StrCat("must hold 1..", kMaxBatchKeys,
                                             " keys, got ", keys)));
  }
  // A key the index knows by its bytes needs no checking; any other is
  // checked as it is answered, and one bad key fails the whole batch. A
  // large batch is done in two halves, the second on the other core if it
  // is free: the asker is waiting, and this is all CPU.
  struct Half {
    size_t begin = 0, end = 0;
    absl::Status error;
    std::unique_ptr<std::string> answer;
    std::deque<v1::Key> parsed;  // keys whose bytes were not plain
  };
  const size_t split =
      asks.size() >= kSplitBatchKeys ? asks.size() / 2 : asks.size();
  Half halves[2];
  halves[0].end = halves[1].begin = split;
  halves[1].end = asks.size();
  auto run = [&](int h) {
    Half& half = halves[h];
    auto read_key = [&](size_t i, Arbiter::Ask* ask) {
      i += half.begin;
      if (!ReadAsk(ask,
                   [&]() -> v1::Key& { return half.parsed.emplace_back(); })) {
        return Invalid(absl::StrCat("keys[", i, "]"), "not a Key");
      }
      // The field's name is built only for an invalid key.
      if (!ValidateKey(ask->key, "key").ok()) {
        return ValidateKey(ask->key, absl::StrCat("keys[", i, "]"));
      }
      return absl::OkStatus();
    };
    half.answer = answer_buffers_->Take();
    // What a HIT of a dense key takes, with its key (~240 bytes) or without
    // (~160), ~100 less with a shared execution; larger entries grow the
    // buffer.
    half.answer->reserve(
        (half.end - half.begin) *
        ((form.omit_keys ? 192 : 256) - (form.share_executions ? 96 : 0)));
    Arbiter::AnswerForm half_form = form;
    half_form.first_status = half.begin;
    half.error = arbiter_->AppendLookups(
        absl::MakeSpan(asks).subspan(half.begin, half.end - half.begin),
        v1::BatchLookupResponse::kStatusesFieldNumber, half_form, read_key,
        half.answer.get());
  };
  if (split < asks.size()) {
    batch_halves_.Run(run);
  } else {
    run(0);
  }
  for (Half& half : halves) {
    if (!half.error.ok()) {
      for (Half& h : halves) answer_buffers_->Give(std::move(h.answer));
      return Done(ctx, half.error);
    }
  }
  // Sent from the buffers without a copy; back to the pool once sent.
  struct Sending {
    std::shared_ptr<BufferPool> pool;
    std::unique_ptr<std::string> answer;
  };
  std::vector<grpc::Slice> slices;
  for (Half& half : halves) {
    if (half.answer == nullptr) continue;
    const std::string& answer = *half.answer;
    slices.emplace_back(
        const_cast<char*>(answer.data()), answer.size(),
        [](void* p) {
          std::unique_ptr<Sending> sent(static_cast<Sending*>(p));
          sent->pool->Give(std::move(sent->answer));
        },
        new Sending{answer_buffers_, std::move(half.answer)});
  }
  *response = grpc::ByteBuffer(slices.data(), slices.size());
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* TuneServiceImpl::Claim(
    grpc::CallbackServerContext* ctx, const v1::ClaimRequest* request,
    v1::ClaimResponse* response) {
  if (auto s = ValidateKey(request->key(), "key"); !s.ok()) return Done(ctx, s);
  if (auto s = ValidateHolder(request->holder(), "holder"); !s.ok()) {
    return Done(ctx, s);
  }
  if (auto s = ValidateTtl(request->ttl()); !s.ok()) return Done(ctx, s);
  absl::StatusOr<v1::ClaimResponse> result =
      fleet_ != nullptr ? fleet_->Claim(request->key(), request->holder(),
                                        FromProto(request->ttl()))
                        : arbiter_->Claim(request->key(), request->holder(),
                                          FromProto(request->ttl()));
  if (!result.ok()) return Done(ctx, result.status());
  if (result->outcome() == v1::CLAIM_OUTCOME_GRANTED) {
    spdlog::debug("claim {} granted on {} to '{}'", result->claim().claim_id(),
                  KeyText(request->key()), request->holder());
  }
  *response = std::move(*result);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* TuneServiceImpl::Renew(
    grpc::CallbackServerContext* ctx, const v1::RenewRequest* request,
    v1::RenewResponse* response) {
  if (auto s = ValidateClaimId(request->claim_id()); !s.ok()) {
    return Done(ctx, s);
  }
  if (auto s = ValidateTtl(request->ttl()); !s.ok()) return Done(ctx, s);
  absl::StatusOr<absl::Time> deadline =
      arbiter_->Renew(request->claim_id(), FromProto(request->ttl()));
  if (!deadline.ok()) return Done(ctx, deadline.status());
  *response->mutable_lease_deadline() = ToProto(*deadline);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* TuneServiceImpl::Record(
    grpc::CallbackServerContext* ctx, const v1::RecordRequest* request,
    v1::RecordResponse* response) {
  if (auto s = ValidateClaimId(request->claim_id()); !s.ok()) {
    return Done(ctx, s);
  }
  if (!request->has_execution()) {
    return Done(ctx, Invalid("execution", "required: the chosen execution"));
  }
  if (auto s = ValidateExecution(request->execution(), "execution"); !s.ok()) {
    return Done(ctx, s);
  }
  if (request->measurements_size() > static_cast<int>(kMaxMeasurements)) {
    return Done(ctx, Invalid("measurements",
                             absl::StrCat("at most ", kMaxMeasurements)));
  }
  for (int i = 0; i < request->measurements_size(); ++i) {
    if (auto s = ValidateMeasurement(request->measurements(i),
                                     absl::StrCat("measurements[", i, "]"));
        !s.ok()) {
      return Done(ctx, s);
    }
  }
  for (const auto* d : {&request->default_time(), &request->chosen_time()}) {
    if (d->seconds() < 0 || d->nanos() < 0) {
      return Done(ctx, Invalid(d == &request->default_time() ? "default_time"
                                                             : "chosen_time",
                               "must not be negative"));
    }
  }
  absl::StatusOr<Arbiter::RecordTicket> ticket =
      arbiter_->BeginRecord(request->claim_id());
  if (!ticket.ok()) return Done(ctx, ticket.status());

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

  return OnStore(ctx, [this, ticket = *ticket, entry = std::move(entry),
                       response]() {
    if (absl::Status s = fleet_ != nullptr ? fleet_->PersistRecord(entry)
                                           : store_->Put(entry);
        !s.ok()) {
      arbiter_->CancelRecord(ticket);
      spdlog::error("record of {} by '{}' failed: {}", KeyText(ticket.key),
                    ticket.holder, s.message());
      return absl::Status(
          s.code(), absl::StrCat("the entry was not persisted: ", s.message()));
    }
    arbiter_->CommitRecord(ticket, entry);
    if (fleet_ != nullptr) fleet_->RecordCommitted(ticket.key);
    spdlog::info("recorded {} by '{}': {}", KeyText(ticket.key), ticket.holder,
                 entry.execution().kernel());
    *response->mutable_entry() = entry;
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TuneServiceImpl::Abandon(
    grpc::CallbackServerContext* ctx, const v1::AbandonRequest* request,
    v1::AbandonResponse* response) {
  if (auto s = ValidateClaimId(request->claim_id()); !s.ok()) {
    return Done(ctx, s);
  }
  if (auto s = ValidateReason(request->reason(), "reason"); !s.ok()) {
    return Done(ctx, s);
  }
  absl::StatusOr<Arbiter::AbandonResult> result =
      arbiter_->Abandon(request->claim_id());
  if (!result.ok()) return Done(ctx, result.status());
  spdlog::info(
      "claim {} on {} abandoned: {}{}", request->claim_id(),
      KeyText(result->key),
      request->reason().empty() ? "(no reason)" : request->reason(),
      result->response.state() == v1::KEY_STATE_BACKOFF ? " -> BACKOFF" : "");
  *response = std::move(result->response);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::WatchResponse>* TuneServiceImpl::Watch(
    grpc::CallbackServerContext* ctx, const v1::WatchRequest* request) {
  if (auto s = ValidateKey(request->key(), "key"); !s.ok()) {
    class Refuse final : public grpc::ServerWriteReactor<v1::WatchResponse> {
     public:
      explicit Refuse(const absl::Status& s) { Finish(ToGrpc(s)); }
      void OnDone() override { delete this; }
    };
    return new Refuse(s);
  }
  (void)ctx;
  return new WatchReactor(arbiter_, request->key());
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
    grpc::CallbackServerContext* ctx, const v1::ListEntriesRequest* request,
    v1::ListEntriesResponse* response) {
  if (auto s = ValidateFilter(request->filter(), "filter"); !s.ok()) {
    return Done(ctx, s);
  }
  if (request->page_size() > kMaxPageSize) {
    return Done(ctx, Invalid("page_size",
                             absl::StrCat("must be 0..", kMaxPageSize, ", got ",
                                          request->page_size())));
  }
  const int limit = static_cast<int>(
      request->page_size() == 0 ? kDefaultPageSize : request->page_size());
  return OnStore(ctx, [this, request, response, limit]() -> absl::Status {
    const std::optional<storage::EntryQuery> query =
        QueryFor(request->filter());
    if (!query) return absl::OkStatus();
    absl::StatusOr<std::vector<v1::Entry>> page =
        store_->List(*query, request->page_token(), limit);
    if (!page.ok()) return page.status();
    if (static_cast<int>(page->size()) == limit) {
      response->set_next_page_token(KeyId(page->back().key()));
    }
    for (v1::Entry& entry : *page) {
      const bool hit =
          !info_.fingerprint_digest ||
          FingerprintDigest(entry.fingerprint()) == *info_.fingerprint_digest;
      response->add_states(hit ? v1::KEY_STATE_HIT : v1::KEY_STATE_STALE);
      if (!request->with_measurements()) entry.clear_measurements();
      *response->add_entries() = std::move(entry);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TuneServiceImpl::GetEntry(
    grpc::CallbackServerContext* ctx, const v1::GetEntryRequest* request,
    v1::GetEntryResponse* response) {
  if (auto s = ValidateKey(request->key(), "key"); !s.ok()) return Done(ctx, s);
  return OnStore(ctx, [this, request, response]() -> absl::Status {
    absl::StatusOr<std::optional<v1::Entry>> entry =
        store_->Get(KeyId(request->key()));
    if (!entry.ok()) return entry.status();
    if (!entry->has_value()) {
      return absl::NotFoundError(
          absl::StrCat("no entry for ", KeyId(request->key())));
    }
    std::string reason = Arbiter::StaleReason(
        **entry, request->key().candidate_set(), info_.fingerprint_digest);
    response->set_state(reason.empty() ? v1::KEY_STATE_HIT
                                       : v1::KEY_STATE_STALE);
    response->set_stale_reason(std::move(reason));
    *response->mutable_entry() = std::move(**entry);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TuneServiceImpl::DeleteEntries(
    grpc::CallbackServerContext* ctx, const v1::DeleteEntriesRequest* request,
    v1::DeleteEntriesResponse* response) {
  for (int i = 0; i < request->keys_size(); ++i) {
    if (auto s = ValidateKey(request->keys(i), absl::StrCat("keys[", i, "]"));
        !s.ok()) {
      return Done(ctx, s);
    }
  }
  if (auto s = ValidateFilter(request->filter(), "filter"); !s.ok()) {
    return Done(ctx, s);
  }
  const bool filter_empty = request->filter().ByteSizeLong() == 0;
  if (request->keys_size() > 0 && !filter_empty) {
    return Done(ctx, Invalid("filter", "give keys or a filter, not both"));
  }
  if (request->keys_size() == 0 && filter_empty && !request->all()) {
    return Done(ctx, Invalid("keys", "give keys, a filter, or all=true"));
  }
  return OnStore(ctx, [this, request, response]() -> absl::Status {
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
    grpc::CallbackServerContext* ctx, const v1::ImportEntriesRequest* request,
    v1::ImportEntriesResponse* response) {
  if (request->entries_size() == 0 ||
      request->entries_size() > kMaxImportEntries) {
    return Done(
        ctx, Invalid("entries", absl::StrCat("must hold 1..", kMaxImportEntries,
                                             " entries")));
  }
  std::vector<v1::Entry> entries;
  entries.reserve(request->entries_size());
  for (int i = 0; i < request->entries_size(); ++i) {
    if (auto s = ValidateEntry(request->entries(i),
                               absl::StrCat("entries[", i, "]"));
        !s.ok()) {
      return Done(ctx, s);
    }
    entries.push_back(request->entries(i));
    entries.back().set_source(v1::SOURCE_IMPORTED);
  }
  return OnStore(
      ctx, [this, entries = std::move(entries), response]() -> absl::Status {
        if (absl::Status s = store_->PutAll(entries); !s.ok()) return s;
        arbiter_->Install(entries);
        spdlog::info("imported {} entries", entries.size());
        response->set_imported(static_cast<uint32_t>(entries.size()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TuneServiceImpl::GetStatus(
    grpc::CallbackServerContext* ctx, const v1::GetStatusRequest*,
    v1::GetStatusResponse* response) {
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
  response->set_database_path(info_.database_path);
  response->set_database_quarantined_to(info_.database_quarantined_to);
  response->set_listen_address(info_.listen_address);
  Arbiter::Stats stats = arbiter_->GetStats();
  response->set_entries(stats.entries);
  response->set_stale_entries(stats.stale_entries);
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
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* TuneServiceImpl::TuneDense(
    grpc::CallbackServerContext* ctx, const v1::TuneDenseRequest* request,
    v1::TuneDenseResponse* response) {
  if (auto s = ValidateKey(request->key(), "key"); !s.ok()) return Done(ctx, s);
  if (!request->key().has_dense_bf16()) {
    return Done(ctx, Invalid("key.dense_bf16",
                             "TuneDense benchmarks dense_bf16 keys only"));
  }
  if (jobs_ == nullptr) {
    return Done(ctx, absl::FailedPreconditionError(
                         "this gputuned has no benchmark backend"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  jobs_->TuneDense(request->key(), request->wait(),
                   [reactor, response](absl::StatusOr<v1::KeyStatus> result) {
                     if (result.ok()) {
                       *response->mutable_status() = std::move(*result);
                     }
                     reactor->Finish(ToGrpc(result.status()));
                   });
  return reactor;
}

AdminServiceImpl::AdminServiceImpl(storage::TuneStore* store, JobQueue* jobs,
                                   SerialExecutor* store_executor)
    : store_(store), jobs_(jobs), store_executor_(store_executor) {}

grpc::ServerUnaryReactor* AdminServiceImpl::Backup(
    grpc::CallbackServerContext* ctx, const v1::BackupRequest* request,
    v1::BackupResponse* response) {
  if (request->path().empty() || request->path()[0] != '/') {
    return Done(ctx, Invalid("path", "must be an absolute path"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  store_executor_->Submit([this, reactor, request, response] {
    absl::StatusOr<uint64_t> bytes = store_->Backup(request->path());
    if (bytes.ok()) {
      response->set_bytes(*bytes);
      spdlog::info("database backed up to {} ({} bytes)", request->path(),
                   *bytes);
    }
    reactor->Finish(ToGrpc(bytes.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetLogLevel(
    grpc::CallbackServerContext* ctx, const v1::SetLogLevelRequest* request,
    v1::SetLogLevelResponse* response) {
  if (!request->level().empty()) {
    const spdlog::level::level_enum level =
        spdlog::level::from_str(request->level());
    if (level == spdlog::level::off && request->level() != "off") {
      return Done(ctx, Invalid("level",
                               "must be one of trace, debug, info, warn, "
                               "error, critical, off"));
    }
    spdlog::set_level(level);
    spdlog::info("log level set to {}", request->level());
  }
  if (!request->autotune_log().empty()) {
    bool ok = false;
    const kernels::AutotuneLog level =
        kernels::ParseAutotuneLog(request->autotune_log(), &ok);
    if (!ok) {
      return Done(ctx,
                  Invalid("autotune_log", "must be disabled, minimal or full"));
    }
    if (jobs_ != nullptr) jobs_->SetAutotuneLog(level);
  }
  response->set_level(
      std::string(spdlog::level::to_string_view(spdlog::get_level()).data(),
                  spdlog::level::to_string_view(spdlog::get_level()).size()));
  if (jobs_ != nullptr) {
    response->set_autotune_log(
        std::string(kernels::AutotuneLogName(jobs_->autotune_log())));
  }
  return Done(ctx, absl::OkStatus());
}

}  // namespace gputune
