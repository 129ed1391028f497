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

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/answer_budget.h"
#include "daemon/arbiter.h"
#include "daemon/authority.h"
#include "daemon/change_feed.h"
#include "daemon/clock.h"
#include "daemon/fleet_hooks.h"
#include "daemon/job_queue.h"
#include "daemon/revalidator.h"
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
  // The GPU served (daemon/device_identity.h); empty when unknown.
  std::string device_uuid;
  std::string pci_bus_id;
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
// connections and calls against (call arenas, buffers of requests being
// read); under pressure it shrinks its read buffers and holds off new work.
// It does not account answers being sent: kAnswerMemoryBytes bounds those.
inline constexpr size_t kCallMemoryQuotaBytes = size_t{512} << 20;
// The unary answers of 64 KiB or more that the daemon holds for askers that
// have not yet read them, at most (daemon/answer_budget.h): beyond it a call
// is answered RESOURCE_EXHAUSTED instead.
inline constexpr size_t kAnswerMemoryBytes = size_t{256} << 20;
// Watch streams open at once; more are refused with RESOURCE_EXHAUSTED.
// Each holds its call (about 18 KiB in gRPC) and, while its asker does not
// read, its last message: a HIT's of 64 KiB or more is counted in the
// answer budget above (tests/integration/hardening_test.cc: 136,300 unread
// Watch streams of such a HIT, on 100 connections, took gputuned without
// these bounds from 25 MiB to 8.0 GiB).
inline constexpr size_t kMaxWatchStreams = 4096;
// Concurrent calls on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_
// STREAMS; gRPC's own default is unlimited): a client's further calls wait
// for one to end. libgputune uses one connection per process.
inline constexpr int kMaxStreamsPerConnection = 128;

// Every method is raw and parses its request with protobuf itself (on an
// arena for Lookup and BatchLookup; daemon/parsed_call.h for the others):
// gRPC 1.51 answers a request its own deserializer rejects with UNIMPLEMENTED
// and no message; these answer INVALID_ARGUMENT saying the request could not
// be parsed. On the wire all methods are the messages of tune.proto.
using TuneServiceBase = v1::TuneService::WithRawCallbackMethod_Lookup<
    v1::TuneService::WithRawCallbackMethod_BatchLookup<v1::TuneService::WithRawCallbackMethod_Claim<
        v1::TuneService::WithRawCallbackMethod_Renew<v1::TuneService::WithRawCallbackMethod_Record<
            v1::TuneService::WithRawCallbackMethod_Abandon<v1::TuneService::WithRawCallbackMethod_Watch<
                v1::TuneService::WithRawCallbackMethod_ListEntries<
                    v1::TuneService::WithRawCallbackMethod_GetEntry<
                        v1::TuneService::WithRawCallbackMethod_DeleteEntries<
                            v1::TuneService::WithRawCallbackMethod_ImportEntries<
                                v1::TuneService::WithRawCallbackMethod_GetStatus<
                                    v1::TuneService::WithRawCallbackMethod_TuneDense<
                                        v1::TuneService::
                                            WithRawCallbackMethod_SubscribeChanges<
                                                v1::TuneService::
                                                    CallbackService>>>>>>>>>>>>>>;
using AdminServiceBase = v1::AdminService::WithRawCallbackMethod_Backup<
    v1::AdminService::WithRawCallbackMethod_SetLogLevel<
        v1::AdminService::WithRawCallbackMethod_GetMetrics<
            v1::AdminService::CallbackService>>>;

class TuneServiceImpl final : public TuneServiceBase {
 public:
  // Every pointer must outlive the service. `jobs` may be null (no
  // TuneDense).
  // `authority` decides operator calls and claim ownership.
  TuneServiceImpl(const DaemonInfo& info, Arbiter* arbiter,
                  storage::TuneStore* store, JobQueue* jobs,
                  SerialExecutor* store_executor, const Clock* clock,
                  Authority* authority);

  // Counts lookups by state and claims by outcome (daemon/metrics.h); set
  // before serving, or never.
  void set_metrics(DaemonMetrics* metrics) { metrics_ = metrics; }

  // With a fleet tier: Claim, Record and GetStatus go through it. Call
  // before serving; null: no fleet.
  void set_fleet(FleetHooks* fleet) { fleet_ = fleet; }

  // Stale-while-revalidate's background re-tunes, for GetStatus. Call before
  // serving; null: none.
  void set_revalidator(const Revalidator* revalidator) {
    revalidator_ = revalidator;
  }
  // The feed SubscribeChanges streams from; set before serving. Null:
  // SubscribeChanges is UNIMPLEMENTED.
  void set_change_feed(ChangeFeed* feed) { feed_ = feed; }

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
  // A SubscribeChangesRequest in, SubscribeChangesResponses out
  // (daemon/change_feed.h).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* SubscribeChanges(
      grpc::CallbackServerContext* ctx,
      const grpc::ByteBuffer* request) override;

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
  DaemonMetrics* metrics_ = nullptr;  // set before serving; may stay null
  FleetHooks* fleet_ = nullptr;       // set before serving; may stay null
  const Revalidator* revalidator_ = nullptr;  // likewise
  ChangeFeed* feed_ = nullptr;                // likewise
  AnswerBudget answer_budget_{kAnswerMemoryBytes};
  AnswerBudget* answer_budget() { return &answer_budget_; }
  // Watch streams open (kMaxWatchStreams).
  std::atomic<size_t> watch_streams_{0};
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
  // The metrics' text (daemon/metrics.h); UNAVAILABLE until set_metrics.
  grpc::ServerUnaryReactor* GetMetrics(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  void set_metrics(const DaemonMetrics* metrics) { metrics_ = metrics; }

 private:
  storage::TuneStore* const store_;
  JobQueue* const jobs_;
  SerialExecutor* const store_executor_;
  const Authority* const authority_;
  const DaemonMetrics* metrics_ = nullptr;  // set before serving
  // Its answers are small: not counted.
  AnswerBudget* answer_budget() { return nullptr; }
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_TUNE_SERVICE_H_
