#include "gputune/client.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "client/src/client_impl.h"
#include "client/src/status_cell.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/key_view.h"
#include "proto/proto_time.h"
#include "proto/validation.h"
#include "proto/wire.h"

namespace gputune {
namespace {

using client_internal::kMaxBatchKeys;
using client_internal::kTwoPartBatchKeys;

// "<program> pid <pid> on <host>": who holds a claim, for people reading
// gputunectl status.
std::string DefaultHolder() {
  std::string program = "client";
  std::ifstream comm("/proc/self/comm");
  std::getline(comm, program);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(program, " pid ", getpid(), " on ", host);
}

absl::Status CheckOptions(const ClientOptions& o) {
  for (const auto& [name, d] : {std::pair<const char*, absl::Duration>{
                                    "lookup_deadline", o.lookup_deadline},
                                {"deadline", o.deadline},
                                {"tune_deadline", o.tune_deadline},
                                {"breaker_open_time", o.breaker_open_time}}) {
    if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ClientOptions.", name, ": must be a positive, finite duration"));
    }
  }
  if (o.lease_ttl < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ClientOptions.lease_ttl: must not be negative (zero: the daemon's "
        "default)");
  }
  if (o.breaker_failures < 1) {
    return absl::InvalidArgumentError(
        "ClientOptions.breaker_failures: must be at least 1");
  }
  if (!o.holder.empty())
    return ValidateHolder(o.holder, "ClientOptions.holder");
  return absl::OkStatus();
}

client_internal::BreakerOptions BreakerFor(const ClientOptions& o) {
  return {o.breaker_failures, o.breaker_open_time,
          std::max(o.breaker_max_open_time, o.breaker_open_time)};
}

}  // namespace

LookupResult::LookupResult(
    std::shared_ptr<const client_internal::StatusCell> cell, bool from_memo)
    : cell_(std::move(cell)), from_memo_(from_memo) {}

v1::KeyState LookupResult::state() const {
  return cell_ ? cell_->state() : v1::KEY_STATE_UNSPECIFIED;
}

const v1::Entry& LookupResult::entry() const {
  return cell_ ? cell_->status().entry() : v1::Entry::default_instance();
}

const v1::KeyStatus& LookupResult::status() const {
  return cell_ ? cell_->status() : v1::KeyStatus::default_instance();
}

Client::Impl::Impl(const ClientOptions& options, std::string endpoint,
                   std::shared_ptr<grpc::Channel> channel,
                   client_internal::Rpc::ChannelFactory factory)
    : options(options),
      holder(options.holder.empty() ? DefaultHolder() : options.holder),
      rpc(std::move(endpoint), std::move(channel), std::move(factory),
          BreakerFor(options)),
      memo(options.memo_capacity, options.memo_ttl),
      refresher([this](const std::vector<v1::Key>& keys) { Refresh(keys); },
                options.refresh_interval),
      renewer(
          [this](uint64_t claim_id, absl::Duration ttl,
                 absl::Duration deadline) {
            v1::RenewRequest request;
            request.set_claim_id(claim_id);
            *request.mutable_ttl() = ToProto(ttl);
            v1::RenewResponse response;
            return rpc.Call(&v1::TuneService::Stub::Renew, request, &response,
                            deadline);
          },
          options.deadline) {}

LookupResult Client::Impl::Remember(const v1::Key& key, v1::KeyStatus status) {
  return Remember(key, std::make_shared<const client_internal::StatusCell>(
                           std::move(status)));
}

LookupResult Client::Impl::Remember(
    const v1::Key& key,
    std::shared_ptr<const client_internal::StatusCell> cell) {
  memo.Put(key, cell);
  return LookupResult(std::move(cell), /*from_memo=*/false);
}

namespace {

// One BatchLookup RPC of a batch: its request, written by hand; the call in
// flight; then its answer.
struct BatchPart {
  const v1::Key* keys = nullptr;
  size_t begin = 0;  // keys[0] is the batch's keys[begin]
  size_t count = 0;
  std::shared_ptr<client_internal::CallBytes> call =
      std::make_shared<client_internal::CallBytes>();
  // Each key's bytes in call->request.
  std::vector<absl::string_view> asked_keys;
  grpc::ClientContext ctx;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Status status;  // set before `done`
  absl::Notification done;
  // The answer split into cells, as soon as it came (while later parts are
  // still in flight).
  absl::StatusOr<
      std::vector<std::shared_ptr<const client_internal::StatusCell>>>
      cells;
};

// Writes the part's request, checking each key as it goes (one pass over
// the keys, which a batch of 10,000 no longer finds in the CPU's caches on
// a second). The part's keys are keys[first], ... of the batch: an invalid
// key is named by that index.
absl::Status WriteBatchRequest(BatchPart* part, size_t first) {
  std::string& request = part->call->request;
  request.reserve(part->count * 48 + 4);
  std::vector<std::pair<size_t, size_t>> key_spans(part->count);
  for (size_t i = 0; i < part->count; ++i) {
    const KeyView view = KeyView::Of(part->keys[i]);
    // The field's name is built only for an invalid key.
    if (!ValidateKey(view, "key").ok()) {
      return ValidateKey(view, absl::StrCat("keys[", first + i, "]"));
    }
    const size_t size = AppendKeyField(v1::BatchLookupRequest::kKeysFieldNumber,
                                       view, &request);
    key_spans[i] = {request.size() - size, size};
  }
  wire::AppendVarintField(v1::BatchLookupRequest::kOmitKeysFieldNumber, 1,
                          &request);
  wire::AppendVarintField(v1::BatchLookupRequest::kShareExecutionsFieldNumber,
                          1, &request);
  part->asked_keys.resize(part->count);
  for (size_t i = 0; i < part->count; ++i) {
    part->asked_keys[i] = absl::string_view(request).substr(
        key_spans[i].first, key_spans[i].second);
  }
  // gRPC reads the request in place; the slice keeps it alive.
  auto* keep =
      new std::shared_ptr<const client_internal::CallBytes>(part->call);
  grpc::Slice slice(
      const_cast<char*>(request.data()), request.size(),
      [](void* p) {
        delete static_cast<std::shared_ptr<const client_internal::CallBytes>*>(
            p);
      },
      keep);
  part->request = grpc::ByteBuffer(&slice, 1);
  return absl::OkStatus();
}

}  // namespace

namespace client_internal {

absl::Status ShiftKeyIndex(absl::Status status, size_t offset) {
  absl::string_view message = status.message();
  size_t index = 0;
  const size_t close = message.find(']');
  if (offset == 0 || !absl::ConsumePrefix(&message, "keys[") ||
      close == absl::string_view::npos ||
      !absl::SimpleAtoi(message.substr(0, close - 5), &index)) {
    return status;
  }
  return absl::Status(
      status.code(),
      absl::StrCat("keys[", index + offset, status.message().substr(close)));
}

}  // namespace client_internal

absl::Status Client::Impl::BatchLookupParts(const v1::Key* keys, size_t count,
                                            std::vector<LookupResult>* out) {
  // Serialized by hand, and the answers split into StatusCells that parse on
  // first use: a batch of 10,000 keys would otherwise copy every key into a
  // request and parse some fifteen messages per answer before returning.
  // The statuses come without keys (omit_keys): each cell reads its key
  // from the request. Each execution comes once (share_executions): a cell
  // takes a repeated one from the bytes of the status that carried it.
  //
  // Parts of at most kMaxBatchKeys; a batch of kTwoPartBatchKeys or more
  // goes in two at least, all in flight at once: the daemon answers one part
  // while this thread writes the next one's request and splits the answer
  // of the one before.
  //
  // The parts are one call to the circuit breaker: admitted once, with the
  // first, and one verdict for all of them.
  size_t parts = (count + kMaxBatchKeys - 1) / kMaxBatchKeys;
  if (parts < 2 && count >= kTwoPartBatchKeys) parts = 2;
  // Declared before the parts: dropped after them, on this thread (see
  // Rpc::StartRaw).
  std::shared_ptr<const client_internal::Connection> connection;
  bool probe = false;
  std::vector<std::unique_ptr<BatchPart>> started;
  absl::Status error;
  // One deadline for the whole call: a later part gets what is left.
  const absl::Time deadline = absl::Now() + options.deadline;
  for (size_t p = 0; p < parts; ++p) {
    auto part = std::make_unique<BatchPart>();
    part->begin = count * p / parts;
    part->keys = keys + part->begin;
    part->count = count * (p + 1) / parts - part->begin;
    error = WriteBatchRequest(part.get(), part->begin);
    if (error.ok() && connection == nullptr) {
      error = rpc.Admit(&connection, /*may_probe=*/true, &probe);
    }
    if (!error.ok()) {
      // An invalid key, or the breaker is open: the parts in flight
      // (lookups, which change nothing) are given up.
      for (const std::unique_ptr<BatchPart>& s : started) s->ctx.TryCancel();
      break;
    }
    BatchPart* const raw = part.get();
    client_internal::Rpc::StartRaw(
        *connection, &client_internal::Connection::batch_lookup, &raw->ctx,
        &raw->request, &raw->response,
        std::max(deadline - absl::Now(), absl::Milliseconds(1)),
        [raw](grpc::Status status) {
          raw->status = std::move(status);
          raw->done.Notify();
        });
    started.push_back(std::move(part));
  }
  // Every started call is waited for, even after an error: each holds its
  // part. The breaker hears once: of the first transport failure, else of
  // the first part the daemon answered; parts this call cancelled itself
  // tell it nothing.
  const BatchPart* failed = nullptr;
  const BatchPart* answered = nullptr;
  for (const std::unique_ptr<BatchPart>& part : started) {
    part->done.WaitForNotification();
    if (error.ok() && part->status.ok()) {
      part->cells = client_internal::CellsFromBatchAnswer(
          part->response, part->call, part->asked_keys);
    }
    if (client_internal::IsTransportFailure(part->status)) {
      if (failed == nullptr) failed = part.get();
    } else if (answered == nullptr &&
               (error.ok() ||
                part->status.error_code() != grpc::StatusCode::CANCELLED)) {
      answered = part.get();
    }
  }
  if (const BatchPart* judged = failed != nullptr ? failed : answered) {
    absl::Status verdict = rpc.Conclude(judged->status, options.deadline);
    if (error.ok())
      error = client_internal::ShiftKeyIndex(std::move(verdict), judged->begin);
  } else if (connection != nullptr) {
    rpc.GiveUp(probe);
  }
  for (const std::unique_ptr<BatchPart>& part : started) {
    if (!error.ok()) break;
    if (!part->status.ok()) {
      error = client_internal::ShiftKeyIndex(
          rpc.Translate(part->status, options.deadline), part->begin);
      break;
    }
    if (!part->cells.ok()) {
      error = part->cells.status();
      break;
    }
    for (size_t i = 0; i < part->count; ++i) {
      out->push_back(Remember(part->keys[i], std::move((*part->cells)[i])));
    }
  }
  return error;
}

void Client::Impl::Refresh(const std::vector<v1::Key>& keys) {
  std::vector<LookupResult> results;
  results.reserve(keys.size());
  // On an error the memo keeps serving what it has.
  if (!BatchLookupParts(keys.data(), keys.size(), &results).ok()) return;
  for (size_t i = 0; i < keys.size(); ++i) {
    // Deleted or stale now: the next Lookup asks the daemon.
    if (!results[i].hit()) memo.Erase(keys[i]);
  }
}

void Client::Impl::KeepAlive(const ClaimGuard::State& state,
                             const v1::ClaimInfo& claim) {
  const absl::Duration lease =
      FromProto(claim.lease_deadline()) - FromProto(claim.granted_at());
  renewer.Add(state.claim_id, options.lease_ttl, lease, state.lost);
}

absl::StatusOr<v1::AbandonResponse> Client::Impl::Abandon(
    uint64_t claim_id, absl::string_view reason) {
  v1::AbandonRequest request;
  request.set_claim_id(claim_id);
  request.set_reason(std::string(reason));
  return rpc.Ask(&v1::TuneService::Stub::Abandon, request, options.deadline);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(
    const ClientOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  std::string endpoint = ResolveEndpoint(options);
  client_internal::Rpc::ChannelFactory factory;
  if (options.channel == nullptr) {
    factory = [endpoint, args = ChannelArgumentsFor(options)] {
      return grpc::CreateCustomChannel(
          endpoint, grpc::InsecureChannelCredentials(), args);
    };
  }
  std::shared_ptr<grpc::Channel> channel =
      factory ? factory() : options.channel;
  return std::unique_ptr<Client>(new Client(std::make_shared<Impl>(
      options, std::move(endpoint), std::move(channel), std::move(factory))));
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() = default;

const std::string& Client::endpoint() const { return impl_->rpc.endpoint(); }

absl::StatusOr<LookupResult> Client::Lookup(const v1::Key& key) {
  bool due = false;
  if (auto memoised = impl_->memo.Find(key, &due)) {
    if (due) impl_->refresher.Request(key);
    return LookupResult(std::move(memoised), /*from_memo=*/true);
  }
  const KeyView view = KeyView::Of(key);
  if (absl::Status s = ValidateKey(view, "key"); !s.ok()) return s;
  // Written and split by hand (see StatusCell).
  thread_local std::string request;
  request.clear();
  AppendKeyField(v1::LookupRequest::kKeyFieldNumber, view, &request);
  grpc::Slice request_slice(request.data(), request.size());
  grpc::ByteBuffer request_buffer(&request_slice, 1);
  grpc::ByteBuffer response;
  if (absl::Status s = impl_->rpc.CallRaw(&client_internal::Connection::lookup,
                                          request_buffer, &response,
                                          impl_->options.lookup_deadline);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::shared_ptr<const client_internal::StatusCell>> cell =
      client_internal::CellFromLookupAnswer(response);
  if (!cell.ok()) return cell.status();
  return impl_->Remember(key, *std::move(cell));
}

LookupResult Client::TryLookup(const v1::Key& key) {
  bool due = false;
  if (auto memoised = impl_->memo.Find(key, &due)) {
    if (due) impl_->refresher.Request(key);
    return LookupResult(std::move(memoised), /*from_memo=*/true);
  }
  if (ValidateKey(key, "key").ok()) impl_->refresher.Request(key);
  return LookupResult();
}

absl::StatusOr<std::vector<LookupResult>> Client::BatchLookup(
    const std::vector<v1::Key>& keys) {
  std::vector<LookupResult> results;
  results.reserve(keys.size());
  if (absl::Status s =
          impl_->BatchLookupParts(keys.data(), keys.size(), &results);
      !s.ok()) {
    return s;
  }
  return results;
}

absl::StatusOr<size_t> Client::Preload(const std::vector<v1::Key>& keys) {
  absl::StatusOr<std::vector<LookupResult>> results = BatchLookup(keys);
  if (!results.ok()) return results.status();
  size_t hits = 0;
  for (const LookupResult& r : *results) hits += r.hit() ? 1 : 0;
  return hits;
}

void Client::Forget(const v1::Key& key) { impl_->memo.Erase(key); }

void Client::ForgetAll() { impl_->memo.Clear(); }

size_t Client::memo_size() const { return impl_->memo.size(); }

absl::StatusOr<ClaimGuard> Client::Claim(const v1::Key& key) {
  if (absl::Status s = ValidateKey(key, "key"); !s.ok()) return s;
  v1::ClaimRequest request;
  *request.mutable_key() = key;
  request.set_holder(impl_->holder);
  *request.mutable_ttl() = ToProto(impl_->options.lease_ttl);
  v1::ClaimResponse response;
  if (absl::Status s = impl_->rpc.Call(&v1::TuneService::Stub::Claim, request,
                                       &response, impl_->options.deadline);
      !s.ok()) {
    return s;
  }
  if (response.outcome() == v1::CLAIM_OUTCOME_HIT) {
    v1::KeyStatus hit;
    *hit.mutable_key() = key;
    hit.set_state(v1::KEY_STATE_HIT);
    *hit.mutable_entry() = response.entry();
    impl_->Remember(key, std::move(hit));
  }
  if (response.outcome() != v1::CLAIM_OUTCOME_GRANTED) {
    return ClaimGuard(std::move(response), nullptr);
  }
  auto state = std::make_shared<ClaimGuard::State>();
  state->client = impl_;
  state->claim_id = response.claim().claim_id();
  state->key = key;
  state->lost = std::make_shared<std::atomic<bool>>(false);
  impl_->KeepAlive(*state, response.claim());
  return ClaimGuard(std::move(response), std::move(state));
}

absl::StatusOr<v1::KeyStatus> Client::TuneDense(const v1::Key& key, bool wait) {
  if (absl::Status s = ValidateKey(key, "key"); !s.ok()) return s;
  if (!key.has_dense_bf16()) {
    return absl::InvalidArgumentError(
        "key.dense_bf16: TuneDense benchmarks dense_bf16 keys only (claim "
        "custom ops and record your own measurements)");
  }
  v1::TuneDenseRequest request;
  *request.mutable_key() = key;
  request.set_wait(wait);
  v1::TuneDenseResponse response;
  const absl::Duration deadline =
      wait ? impl_->options.tune_deadline : impl_->options.deadline;
  absl::Status s = impl_->rpc.Call(&v1::TuneService::Stub::TuneDense, request,
                                   &response, deadline);
  if (!s.ok()) {
    // The daemon's messages say what happened; add what to do.
    switch (s.code()) {
      case absl::StatusCode::kFailedPrecondition:
        return absl::FailedPreconditionError(absl::StrCat(
            s.message(),
            " (start gputuned with a benchmark backend, or claim the key and "
            "record your own measurements)"));
      case absl::StatusCode::kResourceExhausted:
        return absl::ResourceExhaustedError(absl::StrCat(
            s.message(), " (run the default meanwhile and ask again later)"));
      default:
        return s;
    }
  }
  if (response.status().state() == v1::KEY_STATE_HIT) {
    impl_->memo.Put(key, std::make_shared<const client_internal::StatusCell>(
                             response.status()));
  }
  return std::move(*response.mutable_status());
}

absl::StatusOr<std::unique_ptr<WatchStream>> Client::Watch(
    const v1::Key& key, WatchStream::Callback on_status,
    absl::Duration timeout) {
  if (absl::Status s = ValidateKey(key, "key"); !s.ok()) return s;
  std::shared_ptr<const client_internal::Connection> connection;
  if (absl::Status s = impl_->rpc.Admit(&connection, /*may_probe=*/false);
      !s.ok()) {
    return s;
  }
  return client_internal::StartWatch(impl_, std::move(connection), key,
                                     std::move(on_status), timeout);
}

absl::StatusOr<v1::GetStatusResponse> Client::GetStatus() {
  return impl_->rpc.Ask(&v1::TuneService::Stub::GetStatus,
                        v1::GetStatusRequest(), impl_->options.deadline);
}

absl::StatusOr<v1::ListEntriesResponse> Client::ListEntries(
    const v1::ListEntriesRequest& request) {
  return impl_->rpc.Ask(&v1::TuneService::Stub::ListEntries, request,
                        impl_->options.deadline);
}

absl::StatusOr<v1::GetEntryResponse> Client::GetEntry(const v1::Key& key) {
  if (absl::Status s = ValidateKey(key, "key"); !s.ok()) return s;
  v1::GetEntryRequest request;
  *request.mutable_key() = key;
  return impl_->rpc.Ask(&v1::TuneService::Stub::GetEntry, request,
                        impl_->options.deadline);
}

absl::StatusOr<uint32_t> Client::DeleteEntries(
    const v1::DeleteEntriesRequest& request) {
  absl::StatusOr<v1::DeleteEntriesResponse> response = impl_->rpc.Ask(
      &v1::TuneService::Stub::DeleteEntries, request, impl_->options.deadline);
  if (!response.ok()) return response.status();
  if (request.keys_size() > 0) {
    for (const v1::Key& key : request.keys()) impl_->memo.Erase(key);
  } else {
    impl_->memo.Clear();
  }
  return response->deleted();
}

absl::StatusOr<uint32_t> Client::ImportEntries(
    const std::vector<v1::Entry>& entries) {
  v1::ImportEntriesRequest request;
  request.mutable_entries()->Reserve(static_cast<int>(entries.size()));
  for (const v1::Entry& e : entries) *request.add_entries() = e;
  absl::StatusOr<v1::ImportEntriesResponse> response = impl_->rpc.Ask(
      &v1::TuneService::Stub::ImportEntries, request, impl_->options.deadline);
  if (!response.ok()) return response.status();
  // Imported entries replace what was there.
  for (const v1::Entry& e : entries) impl_->memo.Erase(e.key());
  return response->imported();
}

absl::StatusOr<v1::AbandonResponse> Client::AbandonClaim(
    uint64_t claim_id, absl::string_view reason) {
  return impl_->Abandon(claim_id, reason);
}

absl::StatusOr<uint64_t> Client::Backup(const std::string& path) {
  v1::BackupRequest request;
  request.set_path(path);
  absl::StatusOr<v1::BackupResponse> response = impl_->rpc.Ask(
      &v1::AdminService::Stub::Backup, request, impl_->options.deadline);
  if (!response.ok()) return response.status();
  return response->bytes();
}

absl::StatusOr<v1::SetLogLevelResponse> Client::SetLogLevel(
    const v1::SetLogLevelRequest& request) {
  return impl_->rpc.Ask(&v1::AdminService::Stub::SetLogLevel, request,
                        impl_->options.deadline);
}

}  // namespace gputune
