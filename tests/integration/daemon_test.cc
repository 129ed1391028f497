// The real gputuned binary on a temporary unix socket, driven through the
// generated stubs: arbitration, durability, recovery and input validation.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/proto_time.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune {
namespace {

using testing::DaemonProcess;
using testing::DenseKey;

std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 10) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(seconds));
  return ctx;
}

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

v1::GetStatusResponse Status(v1::TuneService::Stub& stub) {
  v1::GetStatusResponse resp;
  REQUIRE(stub.GetStatus(Ctx().get(), v1::GetStatusRequest(), &resp).ok());
  return resp;
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
  grpc::Status finished;
  std::thread watcher([&] {  // no Catch2 macros: they are not thread-safe
    auto ctx = Ctx();
    v1::WatchRequest req;
    *req.mutable_key() = key;
    auto reader = d.Stub()->Watch(ctx.get(), req);
    v1::WatchResponse resp;
    while (reader->Read(&resp)) seen.push_back(resp.status().state());
    finished = reader->Finish();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
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
  CHECK(Status(*stub).entries() == kRecords);
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
  v1::GetStatusResponse status = Status(*stub);
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
  v1::GetStatusResponse after = Status(*stub);
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
  v1::GetStatusResponse status = Status(*stub);
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
  v1::GetStatusResponse status = Status(*stub);
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
  v1::GetStatusResponse status = Status(*d.Stub());
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
    if (Status(*probe.Stub()).backend_error().find("built without CUDA") !=
        std::string::npos) {
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
    v1::GetStatusResponse status = Status(*d.Stub());
    INFO(status.backend_error());
    CHECK(status.backend() == "none");
    CHECK(status.backend_error().find(c.says) != std::string::npos);
  }
  std::filesystem::remove(not_elf);
  // --backend=auto without the NVIDIA driver does not load it at all.
  if (!std::filesystem::exists("/dev/nvidiactl")) {
    DaemonProcess d({"--backend=auto"}, {{"GPUTUNE_CUDA_MODULE", not_elf}});
    CHECK(Status(*d.Stub()).backend() == "host");
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

}  // namespace gputune
