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

#include "absl/time/time.h"
#include "daemon/arbiter.h"
#include "daemon/buffer_pool.h"
#include "daemon/clock.h"
#include "daemon/fleet_hooks.h"
#include "daemon/job_queue.h"
#include "daemon/serial_executor.h"
#include "daemon/split_runner.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "storage/tune_store.h"

namespace gputune {

// What GetStatus reports about the daemon itself.
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

// Lookup and BatchLookup are raw methods: they read the request's bytes and
// write the answer's (see Arbiter::AppendLookups); the other methods work on
// messages. On the wire all of them are the messages of tune.proto.
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

  // With a fleet tier: Claim, Record and GetStatus go through it. Call
  // before serving; null: no fleet.
  void set_fleet(FleetHooks* fleet) { fleet_ = fleet; }

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
  FleetHooks* fleet_ = nullptr;
  // BatchLookup answers; shared with the slices gRPC sends them from, which
  // may outlive the service.
  const std::shared_ptr<BufferPool> answer_buffers_;
  // Large BatchLookups in two halves.
  SplitRunner batch_halves_;
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

 private:
  storage::TuneStore* const store_;
  JobQueue* const jobs_;
  SerialExecutor* const store_executor_;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_TUNE_SERVICE_H_
