#include "gputune/client.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/src/client_impl.h"
#include "client/src/lookup_cell.h"
#include "google/protobuf/arena.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/proto_time.h"
#include "proto/validation.h"

namespace gputune {
namespace {

using client_internal::kMaxBatchKeys;
using google::protobuf::Arena;

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

namespace {

// The payload of a BatchLookup error about one key: its index, in decimal.
constexpr absl::string_view kKeyIndexPayload =
    "type.gputune.dev/gputune.v1.InvalidKeyIndex";

}  // namespace

std::optional<size_t> InvalidKeyIndex(const absl::Status& status) {
  const auto payload = status.GetPayload(kKeyIndexPayload);
  size_t index = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &index)) {
    return std::nullopt;
  }
  return index;
}

namespace client_internal {

absl::Status WithKeyIndex(absl::Status status, size_t index) {
  status.SetPayload(kKeyIndexPayload, absl::Cord(absl::StrCat(index)));
  return status;
}

}  // namespace client_internal

v1::KeyState LookupResult::state() const {
  return cell_ ? cell_->state() : v1::KEY_STATE_UNSPECIFIED;
}

const v1::Entry& LookupResult::entry() const {
  return cell_ ? cell_->entry() : v1::Entry::default_instance();
}

const v1::KeyStatus& LookupResult::status() const {
  return cell_ ? cell_->status() : v1::KeyStatus::default_instance();
}

bool LookupResult::stale_usable() const {
  return cell_ != nullptr && cell_->stale_usable();
}

const v1::Execution& LookupResult::execution_to_run() const {
  return ExecutionToRun(state(), stale_usable(), entry());
}

const v1::Execution& ExecutionToRun(v1::KeyState state, bool stale_usable,
                                    const v1::Entry& entry) {
  // The daemon marks stale_usable only a non-HIT state whose entry it
  // serves for this candidate set and device model.
  const bool usable = state == v1::KEY_STATE_HIT ||
                      (state != v1::KEY_STATE_UNSPECIFIED && stale_usable);
  return usable ? entry.execution() : v1::Execution::default_instance();
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
          options.deadline) {
  if (options.follow_changes && memo.enabled()) {
    changes = std::make_unique<client_internal::ChangeStream>(&rpc, &memo);
  }
}

LookupResult Client::Impl::Remember(
    std::shared_ptr<const client_internal::LookupCell> cell, uint64_t since) {
  memo.Put(cell, since);
  return client_internal::ResultAccess::Make(std::move(cell),
                                             /*from_memo=*/false);
}

LookupResult Client::Impl::Remember(const v1::Key& key, v1::KeyStatus status) {
  return Remember(std::make_shared<const client_internal::LookupCell>(
      key, std::move(status)));
}

namespace {

// One BatchLookup RPC of a batch: keys[first, first + count) of it, the
// messages on an arena that its results keep, the call in flight.
struct BatchPart {
  size_t first = 0;
  size_t count = 0;
  std::shared_ptr<Arena> arena = std::make_shared<Arena>();
  v1::BatchLookupRequest* request =
      Arena::CreateMessage<v1::BatchLookupRequest>(arena.get());
  v1::BatchLookupResponse* response =
      Arena::CreateMessage<v1::BatchLookupResponse>(arena.get());
  grpc::ClientContext ctx;
  grpc::Status status;  // set before `done`
  absl::Notification done;
};

}  // namespace

absl::Status Client::Impl::BatchLookupAll(const std::vector<v1::Key>& keys,
                                          std::vector<LookupResult>* out,
                                          bool parse) {
  // Every key is checked before anything is sent.
  for (size_t i = 0; i < keys.size(); ++i) {
    // The field's name is built only for an invalid key.
    if (!ValidateKey(keys[i], "key").ok()) {
      return client_internal::WithKeyIndex(
          ValidateKey(keys[i], absl::StrCat("keys[", i, "]")), i);
    }
  }
  if (keys.empty()) return absl::OkStatus();
  // Parts of at most kMaxBatchKeys, and two at least from
  // kTwoPartBatchKeys, all in flight at once: the daemon answers one (on
  // another of its threads) while this thread writes the next one's
  // request, and gRPC parses one's answer while the daemon works on the
  // next. One call to the breaker: admitted once, one verdict.
  size_t parts = (keys.size() + kMaxBatchKeys - 1) / kMaxBatchKeys;
  if (parts < 2 && keys.size() >= client_internal::kTwoPartBatchKeys) parts = 2;
  // Declared before the parts: released after them, on this thread (the
  // last reference to a channel must not go on one of its own threads).
  std::shared_ptr<const client_internal::Connection> connection;
  if (absl::Status s = rpc.Admit(&connection); !s.ok()) return s;
  const uint64_t since = memo.generation();
  std::vector<std::unique_ptr<BatchPart>> started;
  for (size_t p = 0; p < parts; ++p) {
    auto part = std::make_unique<BatchPart>();
    part->first = keys.size() * p / parts;
    part->count = keys.size() * (p + 1) / parts - part->first;
    part->request->mutable_keys()->Reserve(static_cast<int>(part->count));
    for (size_t i = 0; i < part->count; ++i) {
      *part->request->add_keys() = keys[part->first + i];
    }
    client_internal::Rpc::SetDeadline(&part->ctx, options.deadline);
    BatchPart* const raw = part.get();
    connection->tune->async()->BatchLookup(
        &raw->ctx, raw->request, raw->response, [raw](grpc::Status status) {
          raw->status = std::move(status);
          raw->done.Notify();
        });
    started.push_back(std::move(part));
  }
  // The breaker hears of the first transport failure, else of the first
  // part's answer.
  const BatchPart* judged = nullptr;
  for (const std::unique_ptr<BatchPart>& part : started) {
    part->done.WaitForNotification();
    if (judged == nullptr ||
        (!client_internal::IsTransportFailure(judged->status) &&
         (client_internal::IsTransportFailure(part->status) ||
          (judged->status.ok() && !part->status.ok())))) {
      judged = part.get();
    }
  }
  if (absl::Status s = rpc.Conclude(judged->status, options.deadline);
      !s.ok()) {
    return s;
  }
  out->reserve(out->size() + keys.size());
  std::vector<const client_internal::LookupCell*> distinct;
  if (parse) distinct.reserve(keys.size());
  for (const std::unique_ptr<BatchPart>& part : started) {
    const auto& statuses = part->response->statuses();
    if (static_cast<size_t>(statuses.size()) != part->count) {
      return absl::InternalError(absl::StrCat(
          "gputuned answered ", statuses.size(), " statuses for ", part->count,
          " keys: is it the same version as this client?"));
    }
    std::vector<std::shared_ptr<const client_internal::LookupCell>> cells(
        part->count);
    for (size_t i = 0; i < part->count; ++i) {
      const v1::LookupStatus& status = statuses[static_cast<int>(i)];
      if (status.same_as() == 0) {
        cells[i] = std::make_shared<const client_internal::LookupCell>(
            part->arena, &part->request->keys(static_cast<int>(i)), &status);
        if (parse) distinct.push_back(cells[i].get());
      } else if (status.same_as() <= i) {
        cells[i] = cells[status.same_as() - 1];
      } else {
        return absl::InternalError(absl::StrCat(
            "gputuned answered keys[", part->first + i,
            "] as the same as keys[", part->first + status.same_as() - 1,
            "], which is not before it"));
      }
      out->push_back(Remember(cells[i], since));
    }
  }
  client_internal::ParseAll(distinct);
  return absl::OkStatus();
}

void Client::Impl::Refresh(const std::vector<v1::Key>& keys) {
  std::vector<LookupResult> results;
  results.reserve(keys.size());
  // On an error the memo keeps serving what it has.
  if (!BatchLookupAll(keys, &results, /*parse=*/false).ok()) return;
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
  absl::StatusOr<DaemonTarget> target = FindDaemon(options);
  // With a channel of the caller's, the endpoint only names it.
  if (!target.ok() && options.channel != nullptr) {
    target = DaemonTarget{DefaultEndpoint(options.device), "", "channel"};
  }
  if (!target.ok()) return target.status();
  std::string endpoint = target->endpoint;
  // The GPU meant travels with TuneDense, also to a daemon named by
  // endpoint when the caller said which GPU it means.
  ClientOptions resolved = options;
  if (!target->gpu_uuid.empty()) resolved.gpu_uuid = target->gpu_uuid;
  resolved.endpoint = endpoint;
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
      resolved, std::move(endpoint), std::move(channel), std::move(factory))));
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() = default;

const std::string& Client::endpoint() const { return impl_->rpc.endpoint(); }

const std::string& Client::gpu_uuid() const { return impl_->options.gpu_uuid; }

absl::StatusOr<LookupResult> Client::Lookup(const v1::Key& key) {
  bool due = false;
  if (auto memoised = impl_->memo.Find(key, &due)) {
    if (due) impl_->refresher.Request(key);
    return client_internal::ResultAccess::Make(std::move(memoised),
                                               /*from_memo=*/true);
  }
  if (absl::Status s = ValidateKey(key, "key"); !s.ok()) return s;
  auto arena = std::make_shared<Arena>();
  auto* request = Arena::CreateMessage<v1::LookupRequest>(arena.get());
  *request->mutable_key() = key;
  auto* response = Arena::CreateMessage<v1::LookupResponse>(arena.get());
  const uint64_t since = impl_->memo.generation();
  if (absl::Status s =
          impl_->rpc.Call(&v1::TuneService::Stub::Lookup, *request, response,
                          impl_->options.lookup_deadline);
      !s.ok()) {
    return s;
  }
  return impl_->Remember(
      std::make_shared<const client_internal::LookupCell>(
          std::move(arena), &request->key(), &response->status()),
      since);
}

LookupResult Client::TryLookup(const v1::Key& key) {
  bool due = false;
  if (auto memoised = impl_->memo.Find(key, &due)) {
    if (due) impl_->refresher.Request(key);
    return client_internal::ResultAccess::Make(std::move(memoised),
                                               /*from_memo=*/true);
  }
  if (ValidateKey(key, "key").ok()) impl_->refresher.Request(key);
  return LookupResult();
}

absl::StatusOr<std::vector<LookupResult>> Client::BatchLookup(
    const std::vector<v1::Key>& keys) {
  std::vector<LookupResult> results;
  results.reserve(keys.size());
  if (absl::Status s = impl_->BatchLookupAll(keys, &results, /*parse=*/true);
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
  request.set_device_uuid(impl_->options.gpu_uuid);
  v1::TuneDenseResponse response;
  const absl::Duration deadline =
      wait ? impl_->options.tune_deadline : impl_->options.deadline;
  absl::Status s = impl_->rpc.Call(&v1::TuneService::Stub::TuneDense, request,
                                   &response, deadline);
  if (!s.ok()) {
    // The daemon's messages say what happened; add what to do.
    switch (s.code()) {
      case absl::StatusCode::kFailedPrecondition:
        if (!request.device_uuid().empty() &&
            absl::StrContains(s.message(), request.device_uuid())) {
          return absl::FailedPreconditionError(absl::StrCat(
              s.message(), " (this client reached ", endpoint(), " for GPU ",
              request.device_uuid(),
              ": drop the endpoint or GPUTUNE_ENDPOINT that names another "
              "GPU's daemon, so that the client finds by-uuid/",
              request.device_uuid(),
              ".sock, or set gpu_uuid / device to "
              "the GPU that daemon serves)"));
        }
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
    impl_->Remember(key, response.status());
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
