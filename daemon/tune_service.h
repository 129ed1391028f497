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
#include <vector>

#include "absl/time/time.h"
#include "daemon/arbiter.h"
#include "daemon/authority.h"
#include "daemon/buffer_pool.h"
#include "daemon/clock.h"
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

// Every method is raw: Lookup and BatchLookup read the request's bytes and
// write the answer's (see Arbiter::AppendLookups); the others parse their
// request themselves (daemon/parsed_call.h) so that one that does not parse
// is answered INVALID_ARGUMENT, not gRPC 1.51's empty UNIMPLEMENTED. On the
// wire all of them are the messages of tune.proto.
using TuneServiceBase = v1::TuneService::WithRawCallbackMethod_Lookup<
    v1::TuneService::WithRawCallbackMethod_BatchLookup<
        v1::TuneService::WithRawCallbackMethod_Claim<v1::TuneService::WithRawCallbackMethod_Renew<
            v1::TuneService::WithRawCallbackMethod_Record<
                v1::TuneService::WithRawCallbackMethod_Abandon<
                    v1::TuneService::WithRawCallbackMethod_Watch<
                        v1::TuneService::WithRawCallbackMethod_ListEntries<
                            v1::TuneService::WithRawCallbackMethod_GetEntry<
                                v1::TuneService::WithRawCallbackMethod_DeleteEntries<
                                    v1::TuneService::WithRawCallbackMethod_ImportEntries<
                                        v1::TuneService::WithRawCallbackMethod_GetStatus<
                                            v1::TuneService::
                                                WithRawCallbackMethod_TuneDense<
                                                    v1::TuneService::
                                                        CallbackService>>>>>>>>>>>>>;
using AdminServiceBase = v1::AdminService::WithRawCallbackMethod_Backup<
    v1::AdminService::WithRawCallbackMethod_SetLogLevel<
        v1::AdminService::CallbackService>>;

class TuneServiceImpl final : public TuneServiceBase {
 public:
  // Every pointer must outlive the service. `jobs` may be null (no
  // TuneDense).
  // `authority` decides operator calls and claim ownership.
  TuneServiceImpl(const DaemonInfo& info, Arbiter* arbiter,
                  storage::TuneStore* store, JobQueue* jobs,
                  SerialExecutor* store_executor, const Clock* clock,
                  Authority* authority);

  // A LookupRequest in, a LookupResponse out.
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // A BatchLookupRequest in, a BatchLookupResponse out.
  grpc::ServerUnaryReactor* BatchLookup(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Claim(grpc::CallbackServerContext* ctx,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Renew(grpc::CallbackServerContext* ctx,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Record(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Abandon(grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(
      grpc::CallbackServerContext* ctx,
      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ListEntries(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetEntry(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteEntries(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ImportEntries(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* TuneDense(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;

 private:
  // The store query for a filter; nullopt when nothing can match.
  std::optional<storage::EntryQuery> QueryFor(
      const v1::EntryFilter& filter) const;

  const DaemonInfo info_;
  Arbiter* const arbiter_;
  storage::TuneStore* const store_;
  JobQueue* const jobs_;
  SerialExecutor* const store_executor_;
  const Clock* const clock_;
  Authority* const authority_;
  // BatchLookup answers; shared with the slices gRPC sends them from, which
  // may outlive the service.
  const std::shared_ptr<BufferPool> answer_buffers_;
  // Large BatchLookups in two halves.
  SplitRunner batch_halves_;
};

class AdminServiceImpl final : public AdminServiceBase {
 public:
  AdminServiceImpl(storage::TuneStore* store, JobQueue* jobs,
                   SerialExecutor* store_executor, const Authority* authority);

  grpc::ServerUnaryReactor* Backup(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SetLogLevel(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

 private:
  storage::TuneStore* const store_;
  JobQueue* const jobs_;
  SerialExecutor* const store_executor_;
  const Authority* const authority_;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_TUNE_SERVICE_H_
