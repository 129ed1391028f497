// The real gputuned binary on a temporary unix socket, driven through the
// generated stubs: arbitration, durability, recovery and input validation.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/proto_time.h"
#include "tests/support/answered_status.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/eventually.h"
#include "tests/support/sanitized.h"

namespace gputune {
namespace {

using testing::AnsweredStatus;
using testing::Ctx;
using testing::DaemonProcess;
using testing::DenseKey;
using testing::kSlowdown;

v1::ClaimResponse Claim(v1::TuneService::Stub& stub, const v1::Key& key,
                        const std::string& holder, int ttl_ms = 0) {
  v1::ClaimRequest req;
  *req.mutable_key() = key;
  req.set_holder(holder);
  if (ttl_ms > 0) {
    *req.mutable_ttl() = ToProto(absl::Milliseconds(ttl_ms));
  }
  v1::ClaimResponse resp;
  grpc::Status s = stub.Claim(Ctx().get(), req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return resp;
}

grpc::Status Record(v1::TuneService::Stub& stub, uint64_t claim_id,
                    const std::string& kernel, v1::RecordResponse* resp) {
  v1::RecordRequest req;
  req.set_claim_id(claim_id);
  req.mutable_execution()->set_kernel(kernel);
  (*req.mutable_execution()->mutable_params())["tile"] = 128;
  auto* m = req.add_measurements();
  *m->mutable_execution() = req.execution();
  m->set_validation(v1::VALIDATION_PASSED);
  *m->mutable_median() = ToProto(absl::Microseconds(12));
  m->set_samples(10);
  m->set_chosen(true);
  return stub.Record(Ctx().get(), req, resp);
}

// A Lookup's answer as a KeyStatus, its entry parsed.
v1::KeyStatus Lookup(v1::TuneService::Stub& stub, const v1::Key& key) {
  v1::LookupRequest req;
  *req.mutable_key() = key;
  v1::LookupResponse resp;
  REQUIRE(stub.Lookup(Ctx().get(), req, &resp).ok());
  v1::KeyStatus status;
  *status.mutable_key() = key;
  status.set_state(resp.status().state());
  if (!resp.status().entry().empty()) {
    REQUIRE(status.mutable_entry()->ParseFromString(resp.status().entry()));
  }
  if (resp.status().has_claim())
    *status.mutable_claim() = resp.status().claim();
  if (resp.status().has_retry_after()) {
    *status.mutable_retry_after() = resp.status().retry_after();
  }
  status.set_stale_reason(resp.status().stale_reason());
  return status;
}

// A call with the request as raw bytes (what any client could send).
grpc::Status CallRaw(const DaemonProcess& d, const std::string& method,
                     const std::string& request, std::string* response) {
  grpc::GenericStub stub(d.Channel());
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  auto ctx = Ctx();
  std::promise<grpc::Status> done;
  stub.UnaryCall(ctx.get(), "/gputune.v1.TuneService/" + method,
                 grpc::StubOptions(), &in, &out,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  grpc::Slice answer;
  if (status.ok() && out.Valid() && out.Length() > 0) {
    REQUIRE(out.DumpToSingleSlice(&answer).ok());
    response->assign(reinterpret_cast<const char*>(answer.begin()),
                     answer.size());
  } else {
    response->clear();
  }
  return status;
}

// Makes DenseKey(1) a HIT (kernel "k1") and DenseKey(2) PENDING; returns
// those keys, DenseKey(3) (a MISS) and DenseKey(1) asked for another
// candidate set (STALE), in that order.
std::vector<v1::Key> KeysInFourStates(v1::TuneService::Stub& stub) {
  v1::RecordResponse recorded;
  REQUIRE(Record(stub, Claim(stub, DenseKey(1), "p").claim().claim_id(), "k1",
                 &recorded)
              .ok());
  Claim(stub, DenseKey(2), "tuner");
  return {DenseKey(1), DenseKey(2), DenseKey(3),
          DenseKey(1, 256, 256, "another-set")};
}

}  // namespace

TEST_CASE("two clients racing for one new key: one GRANTED, one PENDING") {
  DaemonProcess d({"--backend=none"});
  const v1::Key key = DenseKey(1);
  std::atomic<int> granted{0}, pending{0};
  std::vector<std::thread> clients;
  std::vector<std::string> holders(2);
  for (int i = 0; i < 2; ++i) {
    // No Catch2 macros in these threads: Catch2 v2 is not thread-safe.
    clients.emplace_back([&, i] {
      auto stub = d.Stub();  // its own channel, like another process
      v1::ClaimRequest req;
      *req.mutable_key() = key;
      req.set_holder("client-" + std::to_string(i));
      v1::ClaimResponse r;
      if (!stub->Claim(Ctx().get(), req, &r).ok()) return;
      if (r.outcome() == v1::CLAIM_OUTCOME_GRANTED) ++granted;
      if (r.outcome() == v1::CLAIM_OUTCOME_PENDING) {
        ++pending;
        holders[i] = r.claim().holder();
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(granted == 1);
  CHECK(pending == 1);
  CHECK((holders[0] == "client-1" || holders[1] == "client-0"));
}

TEST_CASE("a lapsed lease is taken over and the stale holder's Record fails") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(2);
  v1::ClaimResponse first = Claim(*stub, key, "slow-owner", 300);
  REQUIRE(first.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  CHECK(Claim(*stub, key, "next").outcome() == v1::CLAIM_OUTCOME_PENDING);
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  v1::ClaimResponse second = Claim(*stub, key, "next");
  REQUIRE(second.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  CHECK(second.claim().claim_id() > first.claim().claim_id());

  v1::RecordResponse resp;
  grpc::Status late = Record(*stub, first.claim().claim_id(), "stale", &resp);
  CHECK(late.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(Lookup(*stub, key).state() == v1::KEY_STATE_PENDING);
  REQUIRE(Record(*stub, second.claim().claim_id(), "fresh", &resp).ok());
  v1::KeyStatus s = Lookup(*stub, key);
  CHECK(s.state() == v1::KEY_STATE_HIT);
  CHECK(s.entry().execution().kernel() == "fresh");
}

TEST_CASE("a watcher is woken by Record and the stream ends at HIT") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  const v1::Key key = DenseKey(3);
  const uint64_t claim = Claim(*stub, key, "tuner").claim().claim_id();
  std::vector<v1::KeyState> seen;
  std::atomic<int> answers{0};
  grpc::Status finished;
  std::thread watcher([&] {  // no Catch2 macros: they are not thread-safe
    auto ctx = Ctx();
    v1::WatchRequest req;
    *req.mutable_key() = key;
    auto reader = d.Stub()->Watch(ctx.get(), req);
    v1::WatchResponse resp;
    while (reader->Read(&resp)) {
      seen.push_back(resp.status().state());
      ++answers;
    }
    finished = reader->Finish();
  });
  // The Record once the watch answered the key's state: it is subscribed
  // (not after a fixed pause, which a loaded machine can outlast).
  CHECK(testing::Eventually([&] { return answers.load() >= 1; },
                            std::chrono::seconds(60)));
  v1::RecordResponse resp;
  REQUIRE(Record(*stub, claim, "k", &resp).ok());
  watcher.join();
  CHECK(finished.ok());
  REQUIRE(seen.size() >= 2);
  CHECK(seen.front() == v1::KEY_STATE_PENDING);
  CHECK(seen.back() == v1::KEY_STATE_HIT);
}

TEST_CASE("every acknowledged Record survives kill -9 and restart") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  constexpr int kRecords = 50;
  for (int i = 1; i <= kRecords; ++i) {
    const uint64_t claim = Claim(*stub, DenseKey(i), "p").claim().claim_id();
    v1::RecordResponse resp;
    REQUIRE(Record(*stub, claim, "k" + std::to_string(i), &resp).ok());
  }
  d.Kill();
  d.Start();
  stub = d.Stub();
  for (int i = 1; i <= kRecords; ++i) {
    v1::KeyStatus s = Lookup(*stub, DenseKey(i));
    REQUIRE(s.state() == v1::KEY_STATE_HIT);
    CHECK(s.entry().execution().kernel() == "k" + std::to_string(i));
  }
  CHECK(AnsweredStatus(*stub).entries() == kRecords);
  SECTION("and claim ids issued after the restart are new") {
    v1::ClaimResponse r = Claim(*stub, DenseKey(999), "p");
    CHECK(r.claim().claim_id() > kRecords);
  }
}

TEST_CASE("ListEntries pages through every entry exactly once") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  for (int i = 1; i <= 5; ++i) {
    const uint64_t claim = Claim(*stub, DenseKey(i), "p").claim().claim_id();
    v1::RecordResponse resp;
    REQUIRE(Record(*stub, claim, "k", &resp).ok());
  }
  std::set<uint32_t> seen;
  std::string token;
  int pages = 0;
  do {
    v1::ListEntriesRequest req;
    req.set_page_size(2);
    req.set_page_token(token);
    v1::ListEntriesResponse resp;
    REQUIRE(stub->ListEntries(Ctx().get(), req, &resp).ok());
    for (const auto& e : resp.entries()) {
      CHECK(seen.insert(e.key().dense_bf16().tokens()).second);
      CHECK(e.measurements_size() == 0);
    }
    for (auto state : resp.states()) CHECK(state == v1::KEY_STATE_HIT);
    token = resp.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  CHECK(seen.size() == 5);
  CHECK(pages == 3);
  SECTION("a filter on another role lists nothing") {
    v1::ListEntriesRequest req;
    req.mutable_filter()->set_role("other");
    v1::ListEntriesResponse resp;
    REQUIRE(stub->ListEntries(Ctx().get(), req, &resp).ok());
    CHECK(resp.entries_size() == 0);
  }
  SECTION("DeleteEntries by filter removes them from lookups too") {
    v1::DeleteEntriesRequest req;
    req.mutable_filter()->set_role("test.role");
    v1::DeleteEntriesResponse resp;
    REQUIRE(stub->DeleteEntries(Ctx().get(), req, &resp).ok());
    CHECK(resp.deleted() == 5);
    CHECK(Lookup(*stub, DenseKey(1)).state() == v1::KEY_STATE_MISS);
  }
}

TEST_CASE("a garbage database is quarantined and the daemon serves") {
  DaemonProcess d({"--backend=none"});
  d.Kill();
  std::filesystem::remove(d.db_path() + "-wal");
  std::filesystem::remove(d.db_path() + "-shm");
  std::ofstream(d.db_path(), std::ios::trunc) << std::string(8192, 'G');
  d.Start();
  auto stub = d.Stub();
  v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK_FALSE(status.database_quarantined_to().empty());
  CHECK(std::filesystem::exists(status.database_quarantined_to()));
  CHECK(status.entries() == 0);
  CHECK(d.Log().find("corrupt") != std::string::npos);
  const uint64_t claim = Claim(*stub, DenseKey(1), "p").claim().claim_id();
  v1::RecordResponse resp;
  CHECK(Record(*stub, claim, "k", &resp).ok());
}

TEST_CASE("bad input gets INVALID_ARGUMENT naming the field, nothing changes") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  const uint64_t claim = Claim(*stub, DenseKey(1), "p").claim().claim_id();

  struct Case {
    std::string name;
    std::function<grpc::Status()> call;
    std::string field;
  };
  v1::Key no_role = DenseKey(1);
  no_role.mutable_dense_bf16()->set_role("");
  v1::Key zero_m = DenseKey(1);
  zero_m.mutable_dense_bf16()->set_tokens(0);
  v1::Key huge_k = DenseKey(1);
  huge_k.mutable_dense_bf16()->set_input_features(1u << 30);
  v1::Key bad_phase = DenseKey(1);
  bad_phase.mutable_dense_bf16()->set_phase(static_cast<v1::Phase>(9));
  v1::Key long_params;
  long_params.mutable_custom()->set_op("x");
  long_params.mutable_custom()->set_params(std::string(5000, 'p'));
  long_params.set_candidate_set("c");
  v1::Key custom_ok;
  custom_ok.mutable_custom()->set_op("attn");
  custom_ok.mutable_custom()->set_params("b=1");
  custom_ok.set_candidate_set("c");

  auto lookup = [&](const v1::Key& key) {
    return [&stub, key] {
      v1::LookupRequest req;
      *req.mutable_key() = key;
      v1::LookupResponse resp;
      return stub->Lookup(Ctx().get(), req, &resp);
    };
  };
  const std::vector<Case> cases = {
      {"empty role", lookup(no_role), "key.dense_bf16.role"},
      {"zero tokens", lookup(zero_m), "key.dense_bf16.tokens"},
      {"absurd K", lookup(huge_k), "key.dense_bf16.input_features"},
      {"unknown phase", lookup(bad_phase), "key.dense_bf16.phase"},
      {"oversized params", lookup(long_params), "key.custom.params"},
      {"no key", lookup(v1::Key()), "key"},
      {"claim without holder",
       [&] {
         v1::ClaimRequest req;
         *req.mutable_key() = DenseKey(5);
         v1::ClaimResponse resp;
         return stub->Claim(Ctx().get(), req, &resp);
       },
       "holder"},
      {"claim with absurd ttl",
       [&] {
         v1::ClaimRequest req;
         *req.mutable_key() = DenseKey(5);
         req.set_holder("p");
         req.mutable_ttl()->set_seconds(86400);
         v1::ClaimResponse resp;
         return stub->Claim(Ctx().get(), req, &resp);
       },
       "ttl"},
      {"record without execution",
       [&] {
         v1::RecordRequest req;
         req.set_claim_id(claim);
         v1::RecordResponse resp;
         return stub->Record(Ctx().get(), req, &resp);
       },
       "execution"},
      {"record with bad measurement",
       [&] {
         v1::RecordRequest req;
         req.set_claim_id(claim);
         req.mutable_execution()->set_kernel("k");
         req.add_measurements()->set_validation(
             static_cast<v1::Validation>(42));
         v1::RecordResponse resp;
         return stub->Record(Ctx().get(), req, &resp);
       },
       "measurements[0]"},
      {"record without claim id",
       [&] {
         v1::RecordRequest req;
         req.mutable_execution()->set_kernel("k");
         v1::RecordResponse resp;
         return stub->Record(Ctx().get(), req, &resp);
       },
       "claim_id"},
      {"page size out of range",
       [&] {
         v1::ListEntriesRequest req;
         req.set_page_size(5000);
         v1::ListEntriesResponse resp;
         return stub->ListEntries(Ctx().get(), req, &resp);
       },
       "page_size"},
      {"list filter with unknown state",
       [&] {
         v1::ListEntriesRequest req;
         req.mutable_filter()->set_state(v1::KEY_STATE_PENDING);
         v1::ListEntriesResponse resp;
         return stub->ListEntries(Ctx().get(), req, &resp);
       },
       "filter.state"},
      {"delete with nothing selected",
       [&] {
         v1::DeleteEntriesResponse resp;
         return stub->DeleteEntries(Ctx().get(), v1::DeleteEntriesRequest(),
                                    &resp);
       },
       "keys"},
      {"import of an entry without execution",
       [&] {
         v1::ImportEntriesRequest req;
         *req.add_entries()->mutable_key() = DenseKey(8);
         v1::ImportEntriesResponse resp;
         return stub->ImportEntries(Ctx().get(), req, &resp);
       },
       "entries[0].execution"},
      {"tune a custom op",
       [&] {
         v1::TuneDenseRequest req;
         *req.mutable_key() = custom_ok;
         v1::TuneDenseResponse resp;
         return stub->TuneDense(Ctx().get(), req, &resp);
       },
       "key.dense_bf16"},
      {"batch lookup of nothing",
       [&] {
         v1::BatchLookupResponse resp;
         return stub->BatchLookup(Ctx().get(), v1::BatchLookupRequest(), &resp);
       },
       "keys"},
  };
  for (const Case& c : cases) {
    grpc::Status s = c.call();
    INFO(c.name << ": " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(s.error_message().rfind(c.field, 0) == 0);
  }
  v1::GetStatusResponse after = AnsweredStatus(*stub);
  CHECK(after.entries() == 0);
  CHECK(after.claims_size() == 1);  // only the one claimed above
  CHECK(Lookup(*stub, DenseKey(1)).state() == v1::KEY_STATE_PENDING);
}

TEST_CASE("Lookup and BatchLookup answer every state alike") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  const std::vector<v1::Key> keys = KeysInFourStates(*stub);
  v1::BatchLookupRequest batch;
  for (const v1::Key& k : keys) *batch.add_keys() = k;
  v1::BatchLookupResponse answer;
  REQUIRE(stub->BatchLookup(Ctx().get(), batch, &answer).ok());
  REQUIRE(answer.statuses_size() == 4);
  const v1::KeyState states[] = {v1::KEY_STATE_HIT, v1::KEY_STATE_PENDING,
                                 v1::KEY_STATE_MISS, v1::KEY_STATE_STALE};
  for (int i = 0; i < 4; ++i) {
    INFO("key " << i);
    v1::LookupRequest one_request;
    *one_request.mutable_key() = keys[i];
    v1::LookupResponse one;
    REQUIRE(stub->Lookup(Ctx().get(), one_request, &one).ok());
    CHECK(one.status().state() == states[i]);
    CHECK(google::protobuf::util::MessageDifferencer::Equals(
        one.status(), answer.statuses(i)));
  }
  v1::Entry entry;
  REQUIRE(entry.ParseFromString(answer.statuses(0).entry()));
  CHECK(entry.execution().kernel() == "k1");

  // Bytes that are not the request, and a bad key among good ones.
  std::string raw;
  grpc::Status s = CallRaw(d, "Lookup", std::string("\xff\xff\xff", 3), &raw);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().find("could not be parsed") != std::string::npos);
  s = CallRaw(d, "BatchLookup", std::string("\x0a\x05", 2) + "ab", &raw);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().find("could not be parsed") != std::string::npos);
  v1::BatchLookupRequest bad = batch;
  bad.mutable_keys(1)->mutable_dense_bf16()->set_tokens(0);
  s = stub->BatchLookup(Ctx().get(), bad, &answer);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().rfind("keys[1]", 0) == 0);
}

TEST_CASE("a large batch keeps its order") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  // HITs spread over 3,000 keys, the rest MISSes.
  for (uint32_t m : {1u, 1499u, 1500u, 1501u, 3000u}) {
    v1::RecordResponse recorded;
    REQUIRE(Record(*stub, Claim(*stub, DenseKey(m), "p").claim().claim_id(),
                   "k" + std::to_string(m), &recorded)
                .ok());
  }
  v1::BatchLookupRequest batch;
  for (uint32_t m = 1; m <= 3000; ++m) *batch.add_keys() = DenseKey(m);
  {
    v1::BatchLookupResponse answer;
    REQUIRE(stub->BatchLookup(Ctx().get(), batch, &answer).ok());
    REQUIRE(answer.statuses_size() == 3000);
    int hits = 0;
    for (int i = 0; i < 3000; ++i) {
      const v1::LookupStatus& s = answer.statuses(i);
      const uint32_t m = static_cast<uint32_t>(i + 1);
      if (s.state() == v1::KEY_STATE_HIT) {
        ++hits;
        v1::Entry entry;
        REQUIRE(entry.ParseFromString(s.entry()));
        REQUIRE(entry.execution().kernel() == "k" + std::to_string(m));
        REQUIRE(entry.key().dense_bf16().tokens() == m);
      } else {
        REQUIRE(s.state() == v1::KEY_STATE_MISS);
      }
    }
    CHECK(hits == 5);
  }
  // A bad key late in the batch is named by its index in the request.
  batch.mutable_keys(2500)->mutable_dense_bf16()->set_role("bad role");
  v1::BatchLookupResponse answer;
  grpc::Status s = stub->BatchLookup(Ctx().get(), batch, &answer);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().rfind("keys[2500].dense_bf16.role", 0) == 0);
}

TEST_CASE("without a backend the cache is served and TuneDense says why") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK_FALSE(status.backend_ready());
  CHECK(status.backend_error().find("--backend=none") != std::string::npos);
  v1::TuneDenseRequest req;
  *req.mutable_key() = DenseKey(1);
  v1::TuneDenseResponse resp;
  grpc::Status s = stub->TuneDense(Ctx().get(), req, &resp);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_CASE(
    "the cuda backend without a usable device serves the cache and says why") {
  DaemonProcess d({"--backend=cuda"});
  auto stub = d.Stub();
  v1::GetStatusResponse status = AnsweredStatus(*stub);
  if (status.backend_ready()) {
    WARN("skipped: a CUDA device is present");
    return;
  }
  CHECK(status.backend() == "none");
  CHECK(status.backend_error().find("CUDA") != std::string::npos);
  v1::TuneDenseRequest req;
  *req.mutable_key() = DenseKey(1);
  v1::TuneDenseResponse resp;
  grpc::Status s = stub->TuneDense(Ctx().get(), req, &resp);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(s.error_message().find(status.backend_error()) != std::string::npos);
  // The cache still works.
  const uint64_t claim = Claim(*stub, DenseKey(1), "p").claim().claim_id();
  v1::RecordResponse recorded;
  CHECK(Record(*stub, claim, "k", &recorded).ok());
}

TEST_CASE("the auto backend falls back to the host backend with a warning") {
  DaemonProcess d({"--backend=auto"});
  v1::GetStatusResponse status = AnsweredStatus(*d.Stub());
  if (status.backend() == "cuda") {
    WARN("skipped: a CUDA device is present");
    return;
  }
  CHECK(status.backend() == "host");
  CHECK(status.backend_ready());
  CHECK(d.Log().find("benchmarking on the host CPU instead") !=
        std::string::npos);
}

TEST_CASE("the CUDA module: a missing or foreign one is named, not loaded") {
  {
    DaemonProcess probe({"--backend=cuda"});
    if (AnsweredStatus(*probe.Stub())
            .backend_error()
            .find("built without CUDA") != std::string::npos) {
      WARN("skipped: this gputuned was built without CUDA");
      return;
    }
  }
  // Not a shared library at all; then one without the module's entry points
  // (the client library, built beside it).
  // Per process: other checkouts' test runs share /tmp.
  const std::string not_elf =
      std::filesystem::temp_directory_path() /
      ("gputune-test-not-a-module-" + std::to_string(getpid()) + ".so");
  std::ofstream(not_elf) << "not a module\n";
  struct Case {
    std::string module;
    std::string says;
  };
  for (const Case& c :
       {Case{not_elf, "cannot load the CUDA module"},
        Case{GPUTUNE_FOREIGN_SO, "is not the CUDA module of this gputuned"}}) {
    DaemonProcess d({"--backend=cuda"}, {{"GPUTUNE_CUDA_MODULE", c.module}});
    v1::GetStatusResponse status = AnsweredStatus(*d.Stub());
    INFO(status.backend_error());
    CHECK(status.backend() == "none");
    CHECK(status.backend_error().find(c.says) != std::string::npos);
  }
  std::filesystem::remove(not_elf);
  // --backend=auto without the NVIDIA driver does not load it at all.
  if (!std::filesystem::exists("/dev/nvidiactl")) {
    DaemonProcess d({"--backend=auto"}, {{"GPUTUNE_CUDA_MODULE", not_elf}});
    CHECK(AnsweredStatus(*d.Stub()).backend() == "host");
    CHECK(d.Log().find("/dev/nvidiactl does not exist") != std::string::npos);
  }
}

TEST_CASE("SIGTERM shuts down cleanly with exit status 0") {
  DaemonProcess d({"--backend=none"});
  const int status = d.Terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(d.Log().find("gputuned stopped") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(d.socket_path()));
}

// The change feed (SubscribeChanges) as a raw subscriber sees it.
namespace {

// Reads a change stream on a thread of its own, keeping what it was sent.
struct Subscriber {
  explicit Subscriber(std::shared_ptr<grpc::Channel> channel,
                      v1::SubscribeChangesRequest request = {})
      : stub(v1::TuneService::NewStub(std::move(channel))),
        reader(stub->SubscribeChanges(&ctx, request)) {}
  // Reads one message; false when the stream ended.
  bool Next() {
    v1::SubscribeChangesResponse m;
    if (!reader->Read(&m)) return false;
    if (messages++ == 0) reset = m.reset();
    epoch = m.epoch();
    for (const v1::Change& c : m.changes()) seqs.push_back(c.seq());
    head = m.head_seq();
    return true;
  }
  // Reads until `count` changes arrived (nullopt) or the stream ended (its
  // status).
  std::optional<grpc::Status> Read(size_t count = SIZE_MAX) {
    while (seqs.size() < count) {
      if (!Next()) return reader->Finish();
    }
    return std::nullopt;
  }

  grpc::ClientContext ctx;
  std::unique_ptr<v1::TuneService::Stub> stub;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeChangesResponse>> reader;
  uint64_t epoch = 0;
  uint64_t head = 0;
  bool reset = false;
  int messages = 0;
  std::vector<uint64_t> seqs;
};

v1::ImportEntriesRequest BigImport(uint32_t m) {
  v1::ImportEntriesRequest req;
  v1::Entry* e = req.add_entries();
  *e->mutable_key() = DenseKey(m);
  e->mutable_execution()->set_kernel("k");
  e->mutable_execution()->set_data(std::string(32 << 10, 'd'));
  return req;
}

}  // namespace

TEST_CASE(
    "the change feed numbers every change, resumes exactly, and cuts off a "
    "subscriber that does not read without slowing writers") {
  DaemonProcess d({"--backend=none", "--subscriber_max_lag=32"});
  auto stub = d.Stub();
  Subscriber fast(d.Channel());
  REQUIRE(fast.Next());  // subscribed: every change from now on
  REQUIRE(fast.reset);   // a first subscription has nothing to resume
  // A subscriber that reads its first message, then nothing: a small
  // window, so that the daemon's writes to it soon cannot complete.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  Subscriber slow(grpc::CreateCustomChannel(
      d.endpoint(), grpc::InsecureChannelCredentials(), args));
  REQUIRE(slow.Next());
  REQUIRE(slow.epoch == fast.epoch);
  REQUIRE(fast.epoch != 0);
  const uint64_t epoch = fast.epoch;

  std::thread reading([&] {
    fast.ctx.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(30));
    fast.Read(100);
  });
  std::vector<double> import_ms;
  for (uint32_t m = 1; m <= 100; ++m) {
    const auto start = std::chrono::steady_clock::now();
    v1::ImportEntriesResponse resp;
    REQUIRE(stub->ImportEntries(Ctx().get(), BigImport(m), &resp).ok());
    import_ms.push_back(std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start)
                            .count());
  }
  reading.join();
  // The reader got every change, once, in order.
  REQUIRE(fast.seqs.size() == 100);
  for (size_t i = 0; i < fast.seqs.size(); ++i) {
    REQUIRE(fast.seqs[i] == i + 1);
  }
  // The one that did not read was cut off; the imports never waited for it
  // (had they, none would have answered: it never reads again). The median
  // is bounded only loosely, an order of magnitude above what it is on an
  // idle machine, so that the check holds on a loaded one.
  std::sort(import_ms.begin(), import_ms.end());
  INFO("median import " << import_ms[50] << " ms, slowest " << import_ms.back()
                        << " ms");
  CHECK(import_ms[50] < 1000 * kSlowdown);
  slow.ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
  const std::optional<grpc::Status> end = slow.Read();
  REQUIRE(end.has_value());
  INFO(end->error_message());
  CHECK((end->error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
         end->error_code() == grpc::StatusCode::CANCELLED));
  CHECK(slow.seqs.size() < 100);
  CHECK(d.Log().find("cut off") != std::string::npos);

  // Resuming where the slow one stopped is too far behind: reset.
  v1::SubscribeChangesRequest behind;
  behind.set_epoch(epoch);
  behind.set_after_seq(slow.seqs.empty() ? 0 : slow.seqs.back());
  Subscriber late(d.Channel(), behind);
  REQUIRE(late.Next());
  CHECK(late.reset);
  late.ctx.TryCancel();

  // Resuming within the kept changes sends exactly those after after_seq.
  v1::SubscribeChangesRequest resume;
  resume.set_epoch(epoch);
  resume.set_after_seq(90);
  Subscriber again(d.Channel(), resume);
  again.ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
  REQUIRE_FALSE(again.Read(10));
  CHECK_FALSE(again.reset);
  REQUIRE(again.seqs.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(again.seqs[i] == 91 + i);

  // A delete is a change too; another epoch's subscriber is told to reset.
  v1::DeleteEntriesRequest del;
  *del.add_keys() = DenseKey(1);
  v1::DeleteEntriesResponse deleted;
  REQUIRE(stub->DeleteEntries(Ctx().get(), del, &deleted).ok());
  REQUIRE_FALSE(again.Read(11));
  CHECK(again.seqs.back() == 101);
  v1::SubscribeChangesRequest other;
  other.set_epoch(epoch + 1);
  other.set_after_seq(101);
  Subscriber stranger(d.Channel(), other);
  REQUIRE(stranger.Next());
  CHECK(stranger.reset);
  CHECK(stranger.head == 101);
  stranger.ctx.TryCancel();
  again.ctx.TryCancel();
  fast.ctx.TryCancel();
}

}  // namespace gputune
