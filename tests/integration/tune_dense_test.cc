// TuneDense through the real daemon: single flight, one device worker, the
// bounded queue, client claims respected, failures visible.
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/client_context.h"
#include "proto/proto_time.h"
#include "tests/support/answered_status.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/sanitized.h"

namespace gputune {
namespace {

using testing::AnsweredStatus;
using testing::Ctx;
using testing::DaemonProcess;
using testing::DenseKey;
using testing::ImportFromOlderSoftware;
using testing::kSlowdown;

grpc::Status Tune(v1::TuneService::Stub& stub, const v1::Key& key, bool wait,
                  v1::TuneDenseResponse* resp) {
  v1::TuneDenseRequest req;
  *req.mutable_key() = key;
  req.set_wait(wait);
  return stub.TuneDense(Ctx().get(), req, resp);
}

v1::GetEntryResponse GetEntry(v1::TuneService::Stub& stub, const v1::Key& key) {
  v1::GetEntryRequest req;
  *req.mutable_key() = key;
  v1::GetEntryResponse resp;
  REQUIRE(stub.GetEntry(Ctx().get(), req, &resp).ok());
  return resp;
}

// Polls GetStatus until pred holds (or 10 s pass).
template <typename Pred>
bool WaitFor(v1::TuneService::Stub& stub, Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred(AnsweredStatus(stub))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

double ProtoToSeconds(const google::protobuf::Duration& d) {
  return absl::ToDoubleSeconds(FromProto(d));
}

v1::LookupStatus LookupOf(v1::TuneService::Stub& stub, const v1::Key& key) {
  v1::LookupRequest req;
  *req.mutable_key() = key;
  v1::LookupResponse resp;
  REQUIRE(stub.Lookup(Ctx().get(), req, &resp).ok());
  return resp.status();
}

}  // namespace

TEST_CASE("16 concurrent TuneDense calls for one key run exactly one job") {
  DaemonProcess d({"--backend=host", "--tune_budget=300ms"});
  const v1::Key key = DenseKey(4, 256, 512);
  std::vector<v1::Entry> entries(16);
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 16; ++i) {
    callers.emplace_back([&, i] {
      auto stub = d.Stub();
      v1::TuneDenseResponse resp;
      if (Tune(*stub, key, true, &resp).ok() &&
          resp.status().state() == v1::KEY_STATE_HIT) {
        ++ok;
        entries[i] = resp.status().entry();
      }
    });
  }
  for (auto& t : callers) t.join();
  CHECK(ok == 16);
  for (const auto& e : entries) {
    CHECK(google::protobuf::util::MessageDifferencer::Equals(e, entries[0]));
  }
  auto stub = d.Stub();
  v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK(status.jobs_completed() == 1);
  CHECK(status.jobs_failed() == 0);
  SECTION("and the entry explains the choice") {
    v1::GetEntryResponse e = GetEntry(*stub, key);
    CHECK(e.entry().source() == v1::SOURCE_DAEMON_MEASURED);
    CHECK(e.entry().measurements_size() >= 2);
    int chosen = 0, defaults = 0;
    for (const auto& m : e.entry().measurements()) {
      chosen += m.chosen();
      defaults += m.is_default();
      // A candidate that passed was timed, or says the budget cut it (a
      // loaded machine, e.g. the sanitizer run beside the gcc one).
      if (m.validation() == v1::VALIDATION_PASSED && m.samples() == 0) {
        INFO(m.execution().kernel() << ": " << m.error());
        CHECK(m.error().find("by budget") != std::string::npos);
      }
      if (m.chosen() || m.is_default()) CHECK(m.samples() > 0);
    }
    CHECK(chosen == 1);
    CHECK(defaults == 1);
    CHECK(e.entry().fingerprint().backend() == "host");
  }
  SECTION("and says why in one line, with each candidate's quantiles") {
    v1::GetEntryResponse e = GetEntry(*stub, key);
    const std::string& reason = e.entry().reason();
    CHECK_FALSE(reason.empty());
    CHECK(reason.find('\n') == std::string::npos);
    for (const auto& m : e.entry().measurements()) {
      if (m.samples() == 0) continue;
      const double p20 = ProtoToSeconds(m.p20());
      const double p50 = ProtoToSeconds(m.median());
      const double p80 = ProtoToSeconds(m.p80());
      CHECK(p20 > 0);
      CHECK(p20 <= p50);
      CHECK(p50 <= p80);
      CHECK(m.dispersion() == Approx((p80 - p20) / p50).epsilon(1e-3));
    }
  }
}

TEST_CASE("a key claimed by a client is not benchmarked by the daemon") {
  DaemonProcess d({"--backend=host"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(2, 128, 128);
  v1::ClaimRequest claim;
  *claim.mutable_key() = key;
  claim.set_holder("client-tuner");
  v1::ClaimResponse granted;
  REQUIRE(stub->Claim(Ctx().get(), claim, &granted).ok());
  REQUIRE(granted.outcome() == v1::CLAIM_OUTCOME_GRANTED);

  SECTION("wait=false answers PENDING naming the client") {
    v1::TuneDenseResponse resp;
    REQUIRE(Tune(*stub, key, false, &resp).ok());
    CHECK(resp.status().state() == v1::KEY_STATE_PENDING);
    CHECK(resp.status().claim().holder() == "client-tuner");
  }
  SECTION("wait=true follows the client's claim to its entry") {
    v1::TuneDenseResponse resp;
    grpc::Status tuned;
    // No Catch2 macros in the thread: they are not thread-safe.
    std::thread waiter([&] { tuned = Tune(*d.Stub(), key, true, &resp); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    v1::RecordRequest rec;
    rec.set_claim_id(granted.claim().claim_id());
    rec.mutable_execution()->set_kernel("client.kernel");
    v1::RecordResponse recorded;
    REQUIRE(stub->Record(Ctx().get(), rec, &recorded).ok());
    waiter.join();
    REQUIRE(tuned.ok());
    CHECK(resp.status().state() == v1::KEY_STATE_HIT);
    CHECK(resp.status().entry().execution().kernel() == "client.kernel");
  }
  CHECK(AnsweredStatus(*stub).jobs_completed() == 0);
}

TEST_CASE("a failing candidate is dropped and its failure kept in the entry") {
  DaemonProcess d({"--backend=fault", "--tune_budget=300ms"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(3, 64, 64);
  v1::TuneDenseResponse resp;
  REQUIRE(Tune(*stub, key, true, &resp).ok());
  v1::GetEntryResponse e = GetEntry(*stub, key);
  CHECK(e.entry().execution().kernel().rfind("fault.", 0) != 0);
  bool saw_wrong = false, saw_throw = false;
  for (const auto& m : e.entry().measurements()) {
    if (m.execution().kernel() == "fault.wrong") {
      saw_wrong = true;
      CHECK(m.validation() == v1::VALIDATION_FAILED);
      CHECK_FALSE(m.chosen());
      CHECK(m.max_abs_error() > 1.0);
    }
    if (m.execution().kernel() == "fault.throws") {
      saw_throw = true;
      CHECK(m.validation() == v1::VALIDATION_ERROR);
      CHECK(m.error().find("injected failure") != std::string::npos);
    }
  }
  CHECK(saw_wrong);
  CHECK(saw_throw);
}

TEST_CASE("no valid candidate: TuneDense fails clearly and the key is free") {
  DaemonProcess d(
      {"--backend=fault", "--fault_candidates=fault.wrong;fault.throws"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(5, 64, 64);
  v1::TuneDenseResponse resp;
  grpc::Status s = Tune(*stub, key, true, &resp);
  CHECK(s.error_code() == grpc::StatusCode::ABORTED);
  CHECK(s.error_message().find("fault.wrong") != std::string::npos);
  v1::LookupRequest req;
  *req.mutable_key() = key;
  v1::LookupResponse look;
  REQUIRE(stub->Lookup(Ctx().get(), req, &look).ok());
  CHECK(look.status().state() == v1::KEY_STATE_MISS);
  CHECK(AnsweredStatus(*stub).jobs_failed() == 1);
}

TEST_CASE("a lost device stops benchmarking but the cache is still served") {
  DaemonProcess d(
      {"--backend=fault", "--fault_candidates=host.naive;fault.lose_device"});
  auto stub = d.Stub();
  v1::TuneDenseResponse resp;
  grpc::Status failed = Tune(*stub, DenseKey(1, 64, 64), true, &resp);
  CHECK(failed.error_code() == grpc::StatusCode::ABORTED);
  v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK_FALSE(status.backend_ready());
  CHECK(status.backend_error().find("device was lost") != std::string::npos);
  grpc::Status refused = Tune(*stub, DenseKey(2, 64, 64), true, &resp);
  CHECK(refused.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(refused.error_message().find("injected device loss") !=
        std::string::npos);
  CHECK(d.Log().find("the device is unusable") != std::string::npos);
  v1::LookupRequest req;
  *req.mutable_key() = DenseKey(3, 64, 64);
  v1::LookupResponse look;
  CHECK(stub->Lookup(Ctx().get(), req, &look).ok());
}

TEST_CASE("the queue refuses new jobs when full") {
  DaemonProcess d({"--backend=fault", "--queue_capacity=1",
                   "--fault_candidates=fault.slow(sleep_ms=400);host.naive"});
  auto stub = d.Stub();
  v1::TuneDenseResponse resp;
  REQUIRE(Tune(*stub, DenseKey(1, 64, 64), false, &resp).ok());
  CHECK(resp.status().state() == v1::KEY_STATE_PENDING);
  CHECK(resp.status().claim().holder() == "gputuned");
  REQUIRE(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.has_running_job();
  }));
  REQUIRE(Tune(*stub, DenseKey(2, 64, 64), false, &resp).ok());
  grpc::Status full = Tune(*stub, DenseKey(3, 64, 64), false, &resp);
  CHECK(full.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(full.error_message().find("--queue_capacity") != std::string::npos);
  v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK(status.queue_depth() == 1);
  CHECK(status.queue_capacity() == 1);
}

TEST_CASE("decode jobs run ahead of queued prefill jobs") {
  DaemonProcess d({"--backend=fault",
                   "--fault_candidates=fault.slow(sleep_ms=300);host.naive"});
  auto stub = d.Stub();
  v1::TuneDenseResponse resp;
  REQUIRE(Tune(*stub, DenseKey(1, 64, 64, "cs1", "first"), false, &resp).ok());
  REQUIRE(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.has_running_job();
  }));
  REQUIRE(Tune(*stub, DenseKey(512, 64, 64), false, &resp).ok());  // prefill
  REQUIRE(Tune(*stub, DenseKey(8, 64, 64), false, &resp).ok());    // decode
  REQUIRE(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.has_running_job() &&
           s.running_job().key().dense_bf16().role() != "first";
  }));
  CHECK(AnsweredStatus(*stub).running_job().key().dense_bf16().phase() ==
        v1::PHASE_DECODE);
}

TEST_CASE("GetStatus shows the running job's progress") {
  DaemonProcess d({"--backend=fault",
                   "--fault_candidates=host.naive;fault.slow(sleep_ms=300);"
                   "fault.slow(sleep_ms=301)"});
  auto stub = d.Stub();
  v1::TuneDenseResponse resp;
  REQUIRE(Tune(*stub, DenseKey(1, 64, 64), false, &resp).ok());
  CHECK(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.has_running_job() && s.running_job().candidates_total() == 3 &&
           s.running_job().candidates_done() >= 1;
  }));
}

TEST_CASE("shutdown during a job abandons it and writes nothing") {
  DaemonProcess d({"--backend=fault", "--tune_budget=10s",
                   "--fault_candidates=host.naive;fault.slow(sleep_ms=200)"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(1, 64, 64);
  v1::TuneDenseResponse resp;
  REQUIRE(Tune(*stub, key, false, &resp).ok());
  REQUIRE(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.has_running_job();
  }));
  const auto start = std::chrono::steady_clock::now();
  const int status = d.Terminate();  // with the client's channel still open
  INFO(d.Log());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  d.Start();
  stub = d.Stub();
  v1::GetEntryRequest req;
  *req.mutable_key() = key;
  v1::GetEntryResponse entry;
  CHECK(stub->GetEntry(Ctx().get(), req, &entry).error_code() ==
        grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("the min-improvement rule keeps the default within the threshold") {
  // fault.fixed reports exact times: 99 us is 1 % faster than 100 us.
  DaemonProcess d({"--backend=fault", "--min_improvement_bps=200",
                   "--fault_candidates=fault.fixed(time_us=100);"
                   "fault.fixed(time_us=99);fault.fixed(time_us=90)"});
  auto stub = d.Stub();
  v1::TuneDenseResponse resp;
  REQUIRE(Tune(*stub, DenseKey(1, 64, 64), true, &resp).ok());
  CHECK(resp.status().entry().execution().params().at("time_us") == 90);
  d.Kill();
  d.flags().back() =
      "--fault_candidates=fault.fixed(time_us=100);fault.fixed(time_us=99)";
  d.Start();
  stub = d.Stub();
  grpc::Status s = Tune(*stub, DenseKey(2, 64, 64), true, &resp);
  INFO(s.error_message() << "\n" << d.Log());
  REQUIRE(s.ok());
  CHECK(resp.status().entry().execution().params().at("time_us") == 100);
}

TEST_CASE("the autotune log level changes at runtime") {
  testing::DaemonProcess d(
      {"--backend=host", "--autotune_log=disabled", "--tune_budget=100ms"});
  auto stub = d.Stub();
  v1::TuneDenseResponse resp;
  REQUIRE(Tune(*stub, testing::DenseKey(1, 64, 64), true, &resp).ok());
  CHECK(d.Log().find("autotune") == std::string::npos);

  v1::SetLogLevelRequest req;
  req.set_autotune_log("full");
  v1::SetLogLevelResponse set;
  REQUIRE(d.AdminStub()->SetLogLevel(Ctx().get(), req, &set).ok());
  CHECK(set.autotune_log() == "full");
  CHECK(set.level() == "info");
  REQUIRE(Tune(*stub, testing::DenseKey(2, 64, 64), true, &resp).ok());
  const std::string log = d.Log();
  CHECK(log.find("autotune") != std::string::npos);
  CHECK(log.find("host.naive") != std::string::npos);

  req.set_autotune_log("loud");
  CHECK(d.AdminStub()->SetLogLevel(Ctx().get(), req, &set).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("Backup writes an online copy and refuses to overwrite") {
  testing::DaemonProcess d({"--backend=host"});
  auto admin = d.AdminStub();
  v1::BackupRequest req;
  v1::BackupResponse resp;
  req.set_path("relative.db");
  CHECK(admin->Backup(Ctx().get(), req, &resp).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
  req.set_path(d.dir() + "/backup.db");
  REQUIRE(admin->Backup(Ctx().get(), req, &resp).ok());
  CHECK(resp.bytes() > 0);
  CHECK(admin->Backup(Ctx().get(), req, &resp).error_code() ==
        grpc::StatusCode::ALREADY_EXISTS);
}

TEST_CASE(
    "a job past its time limit is cancelled and the worker keeps serving") {
  testing::DaemonProcess d(
      {"--backend=fault", "--job_timeout=300ms", "--tune_budget=10s",
       "--fault_candidates=host.naive;fault.slow(sleep_ms=100);"
       "fault.slow(sleep_ms=101)"});
  auto stub = d.Stub();
  v1::TuneDenseResponse resp;
  grpc::Status s = Tune(*stub, testing::DenseKey(1, 64, 64), true, &resp);
  CHECK(s.error_code() == grpc::StatusCode::ABORTED);
  CHECK(s.error_message().find("time limit") != std::string::npos);
  v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK(status.jobs_failed() == 1);
  CHECK(status.backend_ready());
  // The worker takes the next job.
  REQUIRE(Tune(*stub, testing::DenseKey(2, 64, 64), false, &resp).ok());
  CHECK(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.has_running_job() &&
           s.running_job().key().dense_bf16().tokens() == 2;
  }));
}

TEST_CASE(
    "a TuneDense that cannot compare candidates within its budget is "
    "abandoned with the budget it needs, never recorded") {
  // host.naive at this shape runs for tens of ms: 5 samples of it cannot
  // fit in 10 ms.
  DaemonProcess d({"--backend=host", "--tune_budget=10ms"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(16, 4096, 256);
  v1::TuneDenseResponse resp;
  grpc::Status s = Tune(*stub, key, true, &resp);
  INFO(s.error_message());
  CHECK(s.error_code() == grpc::StatusCode::ABORTED);
  CHECK(s.error_message().find("raise the tuning budget") != std::string::npos);
  v1::LookupRequest req;
  *req.mutable_key() = key;
  v1::LookupResponse look;
  REQUIRE(stub->Lookup(Ctx().get(), req, &look).ok());
  CHECK(look.status().state() != v1::KEY_STATE_HIT);
  CHECK(AnsweredStatus(*stub).jobs_completed() == 0);
}

TEST_CASE(
    "a large job past --job_timeout is cancelled mid-run and the daemon "
    "keeps answering meanwhile") {
  // Uncancelled, this shape takes the host backend tens of seconds (its
  // reference alone is 34 G multiply-adds): cancellation is looked at inside
  // the reference, the input fills and every kernel run.
  DaemonProcess d({"--backend=host", "--job_timeout=1s"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(4096, 2048, 4096);
  grpc::Status tuned;
  v1::TuneDenseResponse resp;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point ended;
  std::thread waiter([&] {
    tuned = Tune(*d.Stub(), key, true, &resp);
    ended = std::chrono::steady_clock::now();
  });
  // While the job runs, GetStatus answers (what the watchdog's self-check
  // relies on): an answer that shows the job running was not held back
  // until the job ended.
  REQUIRE(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.has_running_job();
  }));
  const v1::GetStatusResponse during = AnsweredStatus(*stub);
  CHECK(during.has_running_job());
  waiter.join();
  const double took = std::chrono::duration<double>(ended - start).count();
  INFO(tuned.error_message() << "\n" << d.Log() << "\ntook " << took << " s");
  CHECK(tuned.error_code() == grpc::StatusCode::ABORTED);
  CHECK(tuned.error_message().find("time limit") != std::string::npos);
  // Cancelled in the middle, not at the end: far below the tens of seconds
  // the job takes uncancelled, however loaded the machine. (How soon after
  // its limit a job stops is a latency, not a promise a test on a shared
  // machine can hold to a fraction of a second.)
  CHECK(took < 12.0 * kSlowdown);
  const v1::GetStatusResponse after = AnsweredStatus(*stub);
  CHECK(after.jobs_failed() == 1);
  CHECK(after.backend_ready());
  CHECK_FALSE(after.has_running_job());
}

TEST_CASE(
    "after an upgrade an older entry is served as stale-but-usable until a "
    "background re-tune, most looked-up first, replaces it") {
  // The re-tunes wait for 3 s of an idle queue: time to look at the
  // stale-but-usable answers first.
  DaemonProcess d(
      {"--backend=host", "--tune_budget=300ms", "--revalidate_idle=3s"});
  auto stub = d.Stub();
  const v1::Key popular = DenseKey(2, 128, 128), rare = DenseKey(3, 128, 128);
  ImportFromOlderSoftware(*stub, popular);
  ImportFromOlderSoftware(*stub, rare);
  for (int i = 0; i < 5; ++i) (void)LookupOf(*stub, popular);
  const v1::LookupStatus looked = LookupOf(*stub, rare);
  CHECK(looked.state() == v1::KEY_STATE_STALE);
  CHECK(looked.stale_usable());
  CHECK(looked.stale_reason().find("usable") != std::string::npos);
  v1::Entry served;
  REQUIRE(served.ParseFromString(looked.entry()));
  CHECK(served.execution().kernel() == "older.kernel");
  const v1::GetEntryResponse got = GetEntry(*stub, rare);
  CHECK(got.state() == v1::KEY_STATE_STALE);
  CHECK(got.stale_usable());
  const v1::GetStatusResponse before = AnsweredStatus(*stub);
  CHECK(before.stale_entries() == 2);
  CHECK(before.stale_usable_entries() == 2);
  CHECK(before.jobs_completed() == 0);
  SECTION("never for another candidate set") {
    const v1::LookupStatus other =
        LookupOf(*stub, DenseKey(3, 128, 128, "cs2"));
    CHECK(other.state() == v1::KEY_STATE_STALE);
    CHECK_FALSE(other.stale_usable());
  }

  // A watcher of the rare key sees it stay usable (STALE, then PENDING
  // while it is re-tuned), then the new HIT, which ends the stream.
  std::vector<v1::KeyStatus> seen;
  auto ctx = Ctx();
  v1::WatchRequest watch;
  *watch.mutable_key() = rare;
  auto reader = stub->Watch(ctx.get(), watch);
  v1::WatchResponse update;
  while (reader->Read(&update)) seen.push_back(update.status());
  CHECK(reader->Finish().ok());
  REQUIRE(seen.size() >= 2);
  for (size_t i = 0; i + 1 < seen.size(); ++i) {
    INFO("update " << i << ": " << seen[i].ShortDebugString());
    CHECK(seen[i].stale_usable());
    CHECK(seen[i].entry().execution().kernel() == "older.kernel");
  }
  CHECK(seen.back().state() == v1::KEY_STATE_HIT);

  REQUIRE(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.revalidated() == 2;
  }));
  const v1::GetStatusResponse after = AnsweredStatus(*stub);
  CHECK(after.stale_entries() == 0);
  CHECK(after.stale_usable_entries() == 0);
  CHECK(after.revalidations_failed() == 0);
  CHECK(after.jobs_completed() == 2);
  const v1::GetEntryResponse first = GetEntry(*stub, popular);
  const v1::GetEntryResponse second = GetEntry(*stub, rare);
  for (const v1::GetEntryResponse* e : {&first, &second}) {
    CHECK(e->state() == v1::KEY_STATE_HIT);
    CHECK(e->entry().source() == v1::SOURCE_DAEMON_MEASURED);
    CHECK(e->entry().execution().kernel() != "older.kernel");
    CHECK(e->entry().fingerprint().kernel_version() ==
          after.fingerprint().kernel_version());
  }
  // Five lookups against one: the popular key went first.
  CHECK(FromProto(first.entry().measured_at()) <
        FromProto(second.entry().measured_at()));
}

TEST_CASE(
    "with --stale_while_revalidate=off an older entry is plainly STALE and "
    "not re-tuned") {
  DaemonProcess d({"--backend=host", "--tune_budget=300ms",
                   "--stale_while_revalidate=off", "--revalidate_idle=100ms"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(2, 128, 128);
  ImportFromOlderSoftware(*stub, key);
  const v1::LookupStatus looked = LookupOf(*stub, key);
  CHECK(looked.state() == v1::KEY_STATE_STALE);
  CHECK_FALSE(looked.stale_usable());
  CHECK(looked.stale_reason() ==
        "measured on another device or software (fingerprint differs)");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK(status.stale_entries() == 1);
  CHECK(status.stale_usable_entries() == 0);
  CHECK(status.jobs_completed() == 0);
  CHECK(LookupOf(*stub, key).state() == v1::KEY_STATE_STALE);
}

TEST_CASE(
    "a custom key stays stale-but-usable (also across a restart) and another "
    "device model's entry is never usable nor re-tuned") {
  DaemonProcess d(
      {"--backend=host", "--tune_budget=300ms", "--revalidate_idle=100ms"});
  auto stub = d.Stub();
  v1::Key custom;
  custom.mutable_custom()->set_op("my_attention");
  custom.mutable_custom()->set_params("b=8,h=32");
  custom.set_candidate_set("cs1");
  const v1::Key elsewhere = DenseKey(4, 128, 128);
  ImportFromOlderSoftware(*stub, custom);
  ImportFromOlderSoftware(*stub, elsewhere, "another-cpu");
  for (int start = 0; start < 2; ++start) {
    INFO((start == 0 ? "imported" : "after a restart"));
    const v1::LookupStatus c = LookupOf(*stub, custom);
    CHECK(c.state() == v1::KEY_STATE_STALE);
    CHECK(c.stale_usable());
    const v1::LookupStatus e = LookupOf(*stub, elsewhere);
    CHECK(e.state() == v1::KEY_STATE_STALE);
    CHECK_FALSE(e.stale_usable());
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const v1::GetStatusResponse status = AnsweredStatus(*stub);
    CHECK(status.stale_entries() == 2);
    CHECK(status.stale_usable_entries() == 1);
    CHECK(status.jobs_completed() == 0);
    CHECK(status.revalidated() + status.revalidations_failed() == 0);
    if (start == 0) {
      REQUIRE(WIFEXITED(d.Terminate()));
      d.Start();
      stub = d.Stub();
    }
  }
}

TEST_CASE(
    "the daemon's own TuneDense claim is renewed, recorded and abandoned by "
    "its job alone, not by a peer that read its id from GetStatus") {
  DaemonProcess d({"--backend=fault", "--tune_budget=10s",
                   "--fault_candidates=host.naive;fault.slow(sleep_ms=300);"
                   "fault.slow(sleep_ms=301)"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(3, 64, 64);
  v1::TuneDenseResponse queued;
  REQUIRE(Tune(*stub, key, false, &queued).ok());
  REQUIRE(WaitFor(*stub, [](const v1::GetStatusResponse& s) {
    return s.claims_size() == 1 && s.claims(0).holder() == "gputuned";
  }));
  const uint64_t id = AnsweredStatus(*stub).claims(0).claim_id();
  // This test runs as the daemon's own user: an operator, refused all the
  // same.
  v1::RecordRequest forged;
  forged.set_claim_id(id);
  forged.mutable_execution()->set_kernel("host.naive");
  (*forged.mutable_execution()->mutable_params())["evil"] = 1;
  v1::RecordResponse recorded;
  const grpc::Status record = stub->Record(Ctx().get(), forged, &recorded);
  INFO(record.error_message());
  CHECK(record.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(record.error_message().find("TuneDense job") != std::string::npos);
  v1::RenewRequest renew;
  renew.set_claim_id(id);
  v1::RenewResponse renewed;
  CHECK(stub->Renew(Ctx().get(), renew, &renewed).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  v1::AbandonRequest abandon;
  abandon.set_claim_id(id);
  v1::AbandonResponse abandoned;
  CHECK(stub->Abandon(Ctx().get(), abandon, &abandoned).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  // The job goes on and records its own measurement.
  v1::TuneDenseResponse done;
  REQUIRE(Tune(*stub, key, true, &done).ok());
  REQUIRE(done.status().state() == v1::KEY_STATE_HIT);
  CHECK(done.status().entry().execution().params().count("evil") == 0);
  const v1::Entry entry = GetEntry(*stub, key).entry();
  CHECK(entry.source() == v1::SOURCE_DAEMON_MEASURED);
  CHECK(entry.measurements_size() >= 2);
  CHECK(AnsweredStatus(*stub).jobs_completed() == 1);
  CHECK(AnsweredStatus(*stub).jobs_failed() == 0);
}

}  // namespace gputune
