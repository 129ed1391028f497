// TuneServiceImpl / AdminServiceImpl: the gRPC surface of gputuned.
//
// This layer only validates requests, translates them to Arbiter, TuneStore
// and JobQueue calls, and maps absl::Status to grpc::Status (the codes are the
// same). Reactions never block: in-memory work (lookups, claims) is answered
// inline; SQLite work runs on the store executor, which finishes the reactor.
#ifndef GPUTUNE_DAEMON_TUNE_SERVICE_H_
#define GPUTUNE_DAEMON_TUNE_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/arbiter.h"
#include "daemon/clock.h"
#include "daemon/job_queue.h"
#include "daemon/serial_executor.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "storage/tune_store.h"

namespace gputune {

// What GetStatus reports about the daemon itself.
class DaemonMetrics;  // daemon/metrics.h

struct DaemonInfo {
  std::string version;
  absl::Time started_at;
  std::string backend;  // "cuda", "host", "fault" or "none"
  std::string listen_address;
  std::string database_path;
  std::string database_quarantined_to;
  v1::Fingerprint fingerprint;                    // stamped on client Records
  std::optional<std::string> fingerprint_digest;  // nullopt: unknown device
};

grpc::Status ToGrpc(const absl::Status& status);

// Keys a BatchLookup may hold.
inline constexpr size_t kMaxBatchKeys = 100000;
// The largest BatchLookup answer; a larger one is refused with
// RESOURCE_EXHAUSTED saying how to split the batch. Below the client
// library's 64 MiB receive limit.
inline constexpr size_t kMaxBatchAnswerBytes = size_t{48} << 20;
// The trailing metadata of a BatchLookup refused for an invalid key: the
// key's index (decimal), for callers that act on it without reading the
// message.
inline constexpr absl::string_view kKeyIndexTrailer = "gputune-key-index";
// The server's ResourceQuota: the budget gRPC accounts the memory of its
// connections and calls in flight against (buffers of requests being read
// and answers being sent); under pressure it shrinks its read buffers and
// holds off new work, so many large answers to askers that do not read them
// cannot grow the daemon without bound.
inline constexpr size_t kCallMemoryQuotaBytes = size_t{512} << 20;

// Lookup and BatchLookup are raw methods that parse their requests with
// protobuf themselves, on an arena: gRPC answers a request its own
// deserializer rejects with UNIMPLEMENTED and no message; these answer
// INVALID_ARGUMENT saying the request could not be parsed. On the wire all
// methods are the messages of tune.proto.
using TuneServiceBase = v1::TuneService::WithRawCallbackMethod_Lookup<
    v1::TuneService::WithRawCallbackMethod_BatchLookup<
        v1::TuneService::CallbackService>>;

class TuneServiceImpl final : public TuneServiceBase {
 public:
  // Every pointer must outlive the service. `jobs` may be null (no
  // TuneDense).
  TuneServiceImpl(const DaemonInfo& info, Arbiter* arbiter,
                  storage::TuneStore* store, JobQueue* jobs,
                  SerialExecutor* store_executor, const Clock* clock);

  // A LookupRequest in, a LookupResponse out.
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // A BatchLookupRequest in, a BatchLookupResponse out.
  grpc::ServerUnaryReactor* BatchLookup(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Claim(grpc::CallbackServerContext* ctx,
                                  const v1::ClaimRequest* request,
                                  v1::ClaimResponse* response) override;
  grpc::ServerUnaryReactor* Renew(grpc::CallbackServerContext* ctx,
                                  const v1::RenewRequest* request,
                                  v1::RenewResponse* response) override;
  grpc::ServerUnaryReactor* Record(grpc::CallbackServerContext* ctx,
                                   const v1::RecordRequest* request,
                                   v1::RecordResponse* response) override;
  grpc::ServerUnaryReactor* Abandon(grpc::CallbackServerContext* ctx,
                                    const v1::AbandonRequest* request,
                                    v1::AbandonResponse* response) override;
  grpc::ServerWriteReactor<v1::WatchResponse>* Watch(
      grpc::CallbackServerContext* ctx,
      const v1::WatchRequest* request) override;
  grpc::ServerUnaryReactor* ListEntries(
      grpc::CallbackServerContext* ctx, const v1::ListEntriesRequest* request,
      v1::ListEntriesResponse* response) override;
  grpc::ServerUnaryReactor* GetEntry(grpc::CallbackServerContext* ctx,
                                     const v1::GetEntryRequest* request,
                                     v1::GetEntryResponse* response) override;
  grpc::ServerUnaryReactor* DeleteEntries(
      grpc::CallbackServerContext* ctx, const v1::DeleteEntriesRequest* request,
      v1::DeleteEntriesResponse* response) override;
  grpc::ServerUnaryReactor* ImportEntries(
      grpc::CallbackServerContext* ctx, const v1::ImportEntriesRequest* request,
      v1::ImportEntriesResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* TuneDense(grpc::CallbackServerContext* ctx,
                                      const v1::TuneDenseRequest* request,
                                      v1::TuneDenseResponse* response) override;

 private:
  // Runs `work` on the store executor and finishes the reactor with its
  // status.
  grpc::ServerUnaryReactor* OnStore(grpc::CallbackServerContext* ctx,
                                    std::function<absl::Status()> work);
  // The store query for a filter; nullopt when nothing can match.
  std::optional<storage::EntryQuery> QueryFor(
      const v1::EntryFilter& filter) const;

  const DaemonInfo info_;
  Arbiter* const arbiter_;
  storage::TuneStore* const store_;
  JobQueue* const jobs_;
  SerialExecutor* const store_executor_;
  const Clock* const clock_;
};

class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  AdminServiceImpl(storage::TuneStore* store, JobQueue* jobs,
                   SerialExecutor* store_executor);

  grpc::ServerUnaryReactor* Backup(grpc::CallbackServerContext* ctx,
                                   const v1::BackupRequest* request,
                                   v1::BackupResponse* response) override;
  grpc::ServerUnaryReactor* SetLogLevel(
      grpc::CallbackServerContext* ctx, const v1::SetLogLevelRequest* request,
      v1::SetLogLevelResponse* response) override;
  // The metrics' text (daemon/metrics.h); UNAVAILABLE until set_metrics.
  grpc::ServerUnaryReactor* GetMetrics(
      grpc::CallbackServerContext* ctx, const v1::GetMetricsRequest* request,
      v1::GetMetricsResponse* response) override;
  void set_metrics(const DaemonMetrics* metrics) { metrics_ = metrics; }

 private:
  storage::TuneStore* const store_;
  JobQueue* const jobs_;
  SerialExecutor* const store_executor_;
  const DaemonMetrics* metrics_ = nullptr;  // set before serving
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_TUNE_SERVICE_H_
