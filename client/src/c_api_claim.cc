// The C API's claims (a gputune::ClaimGuard each) and watches (a
// gputune::WatchStream each, plus a queue for gputune_watch_next).
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/src/c_api_internal.h"
#include "gputune/gputune.h"
#include "proto/proto_time.h"

namespace v1 = gputune::v1;
using gputune::c_api::Fail;
using gputune::c_api::Guarded;
using gputune::c_api::NotNull;
using gputune::c_api::Str;

struct gputune_claim {
  gputune::ClaimGuard guard;
};

// The stream, and what it delivered. A waiter thread blocks in
// WatchStream::Wait so that the end of the stream (HIT, error, timeout,
// cancel) wakes gputune_watch_next and gputune_watch_wait.
struct gputune_watch {
  std::mutex mu;
  std::condition_variable changed;
  std::deque<v1::KeyStatus> queue;  // statuses not yet taken (no callback)
  bool ended = false;
  absl::Status end;
  std::unique_ptr<gputune::WatchStream> stream;
  std::thread waiter;
};

namespace gputune::c_api {
namespace {

int64_t UnixMs(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return 0;
  return absl::ToUnixMillis(FromProto(t));
}

google::protobuf::Duration NsToProto(int64_t ns) {
  return ToProto(absl::Nanoseconds(ns));
}

v1::Execution ReadExecution(const gputune_execution& e) {
  v1::Execution out;
  out.set_kernel(Str(e.kernel));
  for (size_t i = 0; i < e.param_count; ++i) {
    (*out.mutable_params())[Str(e.params[i].name)] = e.params[i].value;
  }
  out.set_workspace_bytes(e.workspace_bytes);
  if (e.data != nullptr && e.data_size > 0) {
    out.set_data(static_cast<const char*>(e.data), e.data_size);
  }
  return out;
}

// The RecordRequest a gputune_record describes (claim_id is the guard's).
gputune_code ReadRecord(const gputune_record* in, v1::RecordRequest* out) {
  gputune_record r{};
  if (auto c = ReadSized(in, sizeof(gputune_record), "record", &r);
      c != GPUTUNE_OK) {
    return c;
  }
  if (r.execution.param_count > 0 && r.execution.params == nullptr) {
    return Fail(absl::StatusCode::kInvalidArgument,
                "record->execution.params is NULL with param_count > 0");
  }
  *out->mutable_execution() = ReadExecution(r.execution);
  if (r.measurement_count > 0) {
    if (auto c = NotNull(r.measurements, "record->measurements");
        c != GPUTUNE_OK) {
      return c;
    }
    const size_t stride = r.measurements[0].struct_size;
    const char* base = reinterpret_cast<const char*>(r.measurements);
    for (size_t i = 0; i < r.measurement_count; ++i) {
      gputune_measurement m{};
      const auto* in_m =
          reinterpret_cast<const gputune_measurement*>(base + i * stride);
      if (auto c = ReadSized(in_m, sizeof(gputune_measurement),
                             "record->measurements[i]", &m);
          c != GPUTUNE_OK) {
        return c;
      }
      v1::CandidateMeasurement* pm = out->add_measurements();
      *pm->mutable_execution() = ReadExecution(m.execution);
      pm->set_validation(static_cast<v1::Validation>(m.validation));
      pm->set_max_abs_error(m.max_abs_error);
      pm->set_error(Str(m.error));
      if (m.median_ns != 0) *pm->mutable_median() = NsToProto(m.median_ns);
      if (m.spread_ns != 0) *pm->mutable_spread() = NsToProto(m.spread_ns);
      pm->set_samples(m.samples);
      pm->set_is_default(m.is_default != 0);
      pm->set_chosen(m.chosen != 0);
    }
  }
  if (r.default_time_ns != 0) {
    *out->mutable_default_time() = NsToProto(r.default_time_ns);
  }
  if (r.chosen_time_ns != 0) {
    *out->mutable_chosen_time() = NsToProto(r.chosen_time_ns);
  }
  return GPUTUNE_OK;
}

absl::Duration TimeoutMs(int64_t ms) {
  return ms < 0 ? absl::ZeroDuration() : absl::Milliseconds(ms);
}

}  // namespace
}  // namespace gputune::c_api

extern "C" {

// --- Claims ------------------------------------------------------------------

gputune_code gputune_claim_acquire(gputune_client* client,
                                   const gputune_key* key,
                                   gputune_claim** claim) {
  return Guarded([&] {
    if (auto c = NotNull(claim, "claim"); c != GPUTUNE_OK) return c;
    *claim = nullptr;
    if (client == nullptr || key == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "gputune_claim_acquire: client and key must not be NULL");
    }
    absl::StatusOr<gputune::ClaimGuard> guard = client->client->Claim(key->key);
    if (!guard.ok()) return Fail(guard.status());
    *claim = new gputune_claim{*std::move(guard)};
    return GPUTUNE_OK;
  });
}

// The guard's destructor abandons a claim still held.
void gputune_claim_free(gputune_claim* claim) { delete claim; }

gputune_claim_outcome gputune_claim_outcome_of(const gputune_claim* claim) {
  return static_cast<gputune_claim_outcome>(claim->guard.outcome());
}
int gputune_claim_granted(const gputune_claim* claim) {
  return claim->guard.granted();
}
int gputune_claim_lost(const gputune_claim* claim) {
  return claim->guard.lost();
}
uint64_t gputune_claim_id(const gputune_claim* claim) {
  return claim->guard.response().claim().claim_id();
}
const char* gputune_claim_holder(const gputune_claim* claim) {
  return claim->guard.response().claim().holder().c_str();
}
int64_t gputune_claim_retry_after_unix_ms(const gputune_claim* claim) {
  return gputune::c_api::UnixMs(claim->guard.response().retry_after());
}

gputune_code gputune_claim_record(gputune_claim* claim,
                                  const gputune_record* record) {
  return Guarded([&] {
    if (auto c = NotNull(claim, "claim"); c != GPUTUNE_OK) return c;
    v1::RecordRequest request;
    if (auto c = gputune::c_api::ReadRecord(record, &request);
        c != GPUTUNE_OK) {
      return c;
    }
    absl::StatusOr<v1::Entry> entry = claim->guard.Record(std::move(request));
    if (!entry.ok()) return Fail(entry.status());
    return GPUTUNE_OK;
  });
}

gputune_code gputune_claim_abandon(gputune_claim* claim, const char* reason) {
  return Guarded([&] {
    if (auto c = NotNull(claim, "claim"); c != GPUTUNE_OK) return c;
    const char* why =
        reason != nullptr && *reason != '\0' ? reason : "abandoned by caller";
    return Fail(claim->guard.Abandon(why));
  });
}

// --- Watch -------------------------------------------------------------------

gputune_code gputune_watch_start(gputune_client* client, const gputune_key* key,
                                 gputune_watch_callback callback, void* user,
                                 int64_t timeout_ms, gputune_watch** watch) {
  return Guarded([&] {
    if (auto c = NotNull(watch, "watch"); c != GPUTUNE_OK) return c;
    *watch = nullptr;
    if (client == nullptr || key == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "gputune_watch_start: client and key must not be NULL");
    }
    auto w = std::make_unique<gputune_watch>();
    gputune_watch* raw = w.get();
    gputune::WatchStream::Callback on_status;
    if (callback != nullptr) {
      on_status = [callback, user](const v1::KeyStatus& s) {
        gputune_result r;
        r.Set(s);
        callback(user, &r);
      };
    } else {
      on_status = [raw](const v1::KeyStatus& s) {
        std::lock_guard<std::mutex> lock(raw->mu);
        raw->queue.push_back(s);
        raw->changed.notify_all();
      };
    }
    const absl::Duration timeout =
        timeout_ms > 0 ? absl::Milliseconds(timeout_ms) : absl::Minutes(10);
    auto stream =
        client->client->Watch(key->key, std::move(on_status), timeout);
    if (!stream.ok()) return Fail(stream.status());
    w->stream = *std::move(stream);
    w->waiter = std::thread([raw] {
      absl::Status end = raw->stream->Wait(absl::InfiniteDuration());
      std::lock_guard<std::mutex> lock(raw->mu);
      raw->end = std::move(end);
      raw->ended = true;
      raw->changed.notify_all();
    });
    *watch = w.release();
    return GPUTUNE_OK;
  });
}

gputune_code gputune_watch_next(gputune_watch* watch, int64_t timeout_ms,
                                gputune_result* status) {
  return Guarded([&] {
    if (watch == nullptr || status == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "gputune_watch_next: watch and status must not be NULL");
    }
    std::unique_lock<std::mutex> lock(watch->mu);
    const auto timeout =
        absl::ToChronoMilliseconds(gputune::c_api::TimeoutMs(timeout_ms));
    watch->changed.wait_for(lock, timeout, [watch] {
      return !watch->queue.empty() || watch->ended;
    });
    if (!watch->queue.empty()) {
      status->Set(std::move(watch->queue.front()));
      watch->queue.pop_front();
      return GPUTUNE_OK;
    }
    if (watch->ended) {
      return Fail(absl::StatusCode::kOutOfRange,
                  "the watch has ended (" + watch->end.ToString() +
                      "); every status was returned");
    }
    return Fail(absl::StatusCode::kDeadlineExceeded,
                "no new status within " + std::to_string(timeout_ms) +
                    " ms; the watch goes on");
  });
}

gputune_code gputune_watch_wait(gputune_watch* watch, int64_t timeout_ms) {
  return Guarded([&] {
    if (auto c = NotNull(watch, "watch"); c != GPUTUNE_OK) return c;
    std::unique_lock<std::mutex> lock(watch->mu);
    const auto timeout =
        absl::ToChronoMilliseconds(gputune::c_api::TimeoutMs(timeout_ms));
    if (!watch->changed.wait_for(lock, timeout,
                                 [watch] { return watch->ended; })) {
      return Fail(
          absl::StatusCode::kDeadlineExceeded,
          "the watch did not end within " + std::to_string(timeout_ms) + " ms");
    }
    return Fail(watch->end);
  });
}

void gputune_watch_cancel(gputune_watch* watch) {
  if (watch != nullptr) watch->stream->Cancel();
}

void gputune_watch_free(gputune_watch* watch) {
  if (watch == nullptr) return;
  watch->stream->Cancel();
  if (watch->waiter.joinable()) watch->waiter.join();
  watch->stream.reset();  // waits until the callback can no longer run
  delete watch;
}

}  // extern "C"
