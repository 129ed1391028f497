// The C API (gputune.h) against the real gputuned: what an inference server
// written in C sees. The library is the C++ client underneath, so these
// tests check the translation (states, executions, errors, lifetimes) and
// that the C handles keep the C++ client's behaviour (memo, renewal,
// abandon on free).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gputune/gputune.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/eventually.h"
#include "tests/support/sanitized.h"

namespace gputune::testing {
namespace {

// Owners for the C handles, so a failed REQUIRE frees them too.
struct Freer {
  void operator()(gputune_client* p) const { gputune_client_destroy(p); }
  void operator()(gputune_key* p) const { gputune_key_free(p); }
  void operator()(gputune_result* p) const { gputune_result_free(p); }
  void operator()(gputune_claim* p) const { gputune_claim_free(p); }
  void operator()(gputune_watch* p) const { gputune_watch_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Freer>;

// A client of endpoint. Its deadlines are generous (a minute a call, 30 s a
// lookup, three times that under the sanitizers): they bound waiting on a
// loaded machine; a test about deadlines passes its own lookup deadline.
Owned<gputune_client> CClient(const std::string& endpoint,
                              int64_t lease_ttl_ms = 30000,
                              int64_t lookup_deadline_ms = 30000 * kSlowdown) {
  gputune_client_options o;
  gputune_client_options_init(&o);
  o.endpoint = endpoint.c_str();
  o.lease_ttl_ms = lease_ttl_ms;
  o.lookup_deadline_ms = lookup_deadline_ms;
  o.deadline_ms = 60000 * kSlowdown;
  gputune_client* c = nullptr;
  REQUIRE(gputune_client_create(&o, &c) == GPUTUNE_OK);
  return Owned<gputune_client>(c);
}

Owned<gputune_key> Key(const std::string& text) {
  gputune_key* k = nullptr;
  INFO(text);
  REQUIRE(gputune_key_parse(text.c_str(), &k) == GPUTUNE_OK);
  return Owned<gputune_key>(k);
}

Owned<gputune_result> Result() {
  return Owned<gputune_result>(gputune_result_new());
}

Owned<gputune_claim> Claim(gputune_client* c, const gputune_key* k) {
  gputune_claim* claim = nullptr;
  REQUIRE(gputune_claim_acquire(c, k, &claim) == GPUTUNE_OK);
  return Owned<gputune_claim>(claim);
}

// Records kernel `kernel` with params tile=64, threads=2 and 4096 bytes of
// workspace, measured at 41 us against a default of 82 us.
gputune_code Record(gputune_claim* claim, const char* kernel) {
  const gputune_param params[] = {{"tile", 64}, {"threads", 2}};
  gputune_execution chosen{};
  chosen.kernel = kernel;
  chosen.params = params;
  chosen.param_count = 2;
  chosen.workspace_bytes = 4096;
  gputune_measurement m[2]{};
  m[0].struct_size = sizeof(gputune_measurement);
  m[0].execution = chosen;
  m[0].validation = GPUTUNE_VALIDATION_PASSED;
  m[0].median_ns = 41000;
  m[0].samples = 10;
  m[0].chosen = 1;
  m[1].struct_size = sizeof(gputune_measurement);
  m[1].execution.kernel = "default.kernel";
  m[1].validation = GPUTUNE_VALIDATION_PASSED;
  m[1].median_ns = 82000;
  m[1].samples = 10;
  m[1].is_default = 1;
  gputune_record r{};
  r.struct_size = sizeof(r);
  r.execution = chosen;
  r.measurements = m;
  r.measurement_count = 2;
  r.default_time_ns = 82000;
  r.chosen_time_ns = 41000;
  return gputune_claim_record(claim, &r);
}

gputune_state StateOf(gputune_client* c, const gputune_key* k) {
  auto r = Result();
  REQUIRE(gputune_lookup(c, k, r.get()) == GPUTUNE_OK);
  return gputune_result_state(r.get());
}

TEST_CASE("C: a MISS claimed and recorded turns HIT, answered from the memo") {
  DaemonProcess daemon({"--backend=none"});
  auto client = CClient(daemon.endpoint());
  auto key = Key("my_attention/b=8,h=32@c1");
  REQUIRE(std::string(gputune_key_text(key.get())) ==
          "my_attention/b=8,h=32@c1");

  auto r = Result();
  REQUIRE(gputune_lookup(client.get(), key.get(), r.get()) == GPUTUNE_OK);
  REQUIRE(gputune_result_state(r.get()) == GPUTUNE_STATE_MISS);
  REQUIRE_FALSE(gputune_result_hit(r.get()));
  REQUIRE(std::string(gputune_result_kernel(r.get())).empty());

  auto claim = Claim(client.get(), key.get());
  REQUIRE(gputune_claim_outcome_of(claim.get()) == GPUTUNE_CLAIM_GRANTED);
  REQUIRE(gputune_claim_granted(claim.get()));
  REQUIRE(gputune_claim_id(claim.get()) > 0);
  REQUIRE(StateOf(client.get(), key.get()) == GPUTUNE_STATE_PENDING);
  REQUIRE(Record(claim.get(), "my.flash") == GPUTUNE_OK);
  REQUIRE_FALSE(gputune_claim_granted(claim.get()));

  REQUIRE(gputune_lookup(client.get(), key.get(), r.get()) == GPUTUNE_OK);
  REQUIRE(gputune_result_hit(r.get()));
  REQUIRE(gputune_result_from_memo(r.get()));
  REQUIRE(std::string(gputune_result_kernel(r.get())) == "my.flash");
  REQUIRE(gputune_result_workspace_bytes(r.get()) == 4096);
  REQUIRE(gputune_result_chosen_time_ns(r.get()) == 41000);
  REQUIRE(gputune_result_default_time_ns(r.get()) == 82000);
  REQUIRE(gputune_result_speedup(r.get()) == Approx(2.0));
  // Parameters by index come in name order; by name too.
  REQUIRE(gputune_result_param_count(r.get()) == 2);
  const char* name = nullptr;
  int32_t value = 0;
  REQUIRE(gputune_result_param(r.get(), 0, &name, &value) == GPUTUNE_OK);
  REQUIRE((std::string(name) == "threads" && value == 2));
  REQUIRE(gputune_result_param(r.get(), 1, &name, &value) == GPUTUNE_OK);
  REQUIRE((std::string(name) == "tile" && value == 64));
  REQUIRE(gputune_result_param(r.get(), 2, &name, &value) ==
          GPUTUNE_OUT_OF_RANGE);
  REQUIRE(gputune_result_param_by_name(r.get(), "tile", &value) == GPUTUNE_OK);
  REQUIRE(value == 64);
  REQUIRE(gputune_result_param_by_name(r.get(), "nope", &value) ==
          GPUTUNE_NOT_FOUND);

  // Another process (client) sees the HIT through the daemon.
  auto other = CClient(daemon.endpoint());
  REQUIRE(gputune_lookup(other.get(), key.get(), r.get()) == GPUTUNE_OK);
  REQUIRE(gputune_result_hit(r.get()));
  REQUIRE_FALSE(gputune_result_from_memo(r.get()));
}

TEST_CASE("C: freeing a granted claim without a record abandons it") {
  DaemonProcess daemon({"--backend=none"});
  auto client = CClient(daemon.endpoint());
  auto key = Key("freed/x=1@c1");
  {
    auto claim = Claim(client.get(), key.get());
    REQUIRE(gputune_claim_granted(claim.get()));
  }
  REQUIRE(StateOf(client.get(), key.get()) == GPUTUNE_STATE_MISS);
  REQUIRE(daemon.Log().find("released without record") != std::string::npos);

  // An explicit abandon releases it with the caller's reason.
  auto claim = Claim(client.get(), key.get());
  REQUIRE(gputune_claim_abandon(claim.get(), "tuning crashed") == GPUTUNE_OK);
  REQUIRE_FALSE(gputune_claim_granted(claim.get()));
  REQUIRE(daemon.Log().find("tuning crashed") != std::string::npos);
  REQUIRE(Record(claim.get(), "late.kernel") == GPUTUNE_FAILED_PRECONDITION);
  REQUIRE(std::string(gputune_last_error()).find("holds no claim") !=
          std::string::npos);
}

TEST_CASE("C: a claim is renewed in the background past its lease") {
  DaemonProcess daemon({"--backend=none"});
  // Renewed every third of the 2 s lease: a renewal may be 1.3 s late (a
  // loaded machine) before the claim is lost.
  auto client = CClient(daemon.endpoint(), /*lease_ttl_ms=*/2000);
  auto rival = CClient(daemon.endpoint());
  auto key = Key("renewed/x=1@c1");
  auto claim = Claim(client.get(), key.get());
  REQUIRE(gputune_claim_granted(claim.get()));
  // Past the first lease's end: without renewal the rival would take it.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  REQUIRE_FALSE(gputune_claim_lost(claim.get()));
  auto theirs = Claim(rival.get(), key.get());
  REQUIRE(gputune_claim_outcome_of(theirs.get()) == GPUTUNE_CLAIM_PENDING);
  REQUIRE(gputune_claim_id(theirs.get()) == gputune_claim_id(claim.get()));
  REQUIRE(std::string(gputune_claim_holder(theirs.get())).find("pid") !=
          std::string::npos);
  REQUIRE(Record(claim.get(), "slow.tune") == GPUTUNE_OK);
}

TEST_CASE("C: preload memoises the HITs of many keys in one call") {
  DaemonProcess daemon({"--backend=none"});
  auto writer = CClient(daemon.endpoint());
  auto hit = Key("pre/x=1@c1");
  auto miss = Key("pre/x=2@c1");
  auto claim = Claim(writer.get(), hit.get());
  REQUIRE(Record(claim.get(), "pre.kernel") == GPUTUNE_OK);

  auto client = CClient(daemon.endpoint());
  const gputune_key* keys[] = {hit.get(), miss.get()};
  size_t hits = 99;
  REQUIRE(gputune_preload(client.get(), keys, 2, &hits) == GPUTUNE_OK);
  REQUIRE(hits == 1);
  REQUIRE(gputune_memo_size(client.get()) == 1);
  auto r = Result();
  REQUIRE(gputune_lookup(client.get(), hit.get(), r.get()) == GPUTUNE_OK);
  REQUIRE(gputune_result_from_memo(r.get()));
  gputune_forget(client.get(), hit.get());
  REQUIRE(gputune_memo_size(client.get()) == 0);

  const gputune_key* bad[] = {hit.get(), nullptr};
  REQUIRE(gputune_preload(client.get(), bad, 2, nullptr) ==
          GPUTUNE_INVALID_ARGUMENT);
  REQUIRE(std::string(gputune_last_error()) == "keys[1] is NULL");
  REQUIRE(gputune_preload(nullptr, keys, 2, nullptr) ==
          GPUTUNE_INVALID_ARGUMENT);
  REQUIRE(std::string(gputune_last_error()) == "client must not be NULL");
}

TEST_CASE("C: try_lookup never blocks and finds the HIT in the background") {
  DaemonProcess daemon({"--backend=none"});
  auto writer = CClient(daemon.endpoint());
  auto key = Key("try/x=1@c1");
  auto claim = Claim(writer.get(), key.get());
  REQUIRE(Record(claim.get(), "try.kernel") == GPUTUNE_OK);

  auto client = CClient(daemon.endpoint());
  auto r = Result();
  gputune_try_lookup(client.get(), key.get(), r.get());
  REQUIRE(gputune_result_state(r.get()) == GPUTUNE_STATE_UNSPECIFIED);
  bool found = false;
  for (int i = 0; i < 500 && !found; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    gputune_try_lookup(client.get(), key.get(), r.get());
    found = gputune_result_hit(r.get()) != 0;
  }
  REQUIRE(found);
  REQUIRE(std::string(gputune_result_kernel(r.get())) == "try.kernel");
}

TEST_CASE("C: keys are validated when made, naming the bad part") {
  gputune_key* key = nullptr;
  REQUIRE(gputune_key_parse("dense_bf16/decode/x/m=1/k=8@cs1", &key) ==
          GPUTUNE_INVALID_ARGUMENT);
  REQUIRE(key == nullptr);
  REQUIRE(std::string(gputune_last_error()).find("6 '/'-separated parts") !=
          std::string::npos);

  gputune_key_desc d{};
  d.struct_size = sizeof(d);
  d.kind = GPUTUNE_KEY_DENSE_BF16;
  d.phase = GPUTUNE_PHASE_DECODE;
  d.role = "attn.qkv";
  d.tokens = 1;
  d.input_features = 4096;
  d.output_features = 6144;
  d.candidate_set = "cs1";
  REQUIRE(gputune_key_new(&d, &key) == GPUTUNE_OK);
  REQUIRE(std::string(gputune_key_text(key)) ==
          "dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1");
  // A call that succeeds leaves the last error as it was.
  REQUIRE(std::string(gputune_last_error()).find("6 '/'-separated parts") !=
          std::string::npos);
  gputune_key_free(key);

  d.input_features = 0;
  REQUIRE(gputune_key_new(&d, &key) == GPUTUNE_INVALID_ARGUMENT);
  REQUIRE(std::string(gputune_last_error()).find("input_features") !=
          std::string::npos);
  d.kind = static_cast<gputune_key_kind>(7);
  REQUIRE(gputune_key_new(&d, &key) == GPUTUNE_INVALID_ARGUMENT);
  d.struct_size = 4;  // not sizeof: refused, not read past
  REQUIRE(gputune_key_new(&d, &key) == GPUTUNE_INVALID_ARGUMENT);
  REQUIRE(std::string(gputune_last_error()).find("struct_size") !=
          std::string::npos);
}

TEST_CASE("C: options are checked and a stopped daemon is UNAVAILABLE fast") {
  gputune_client_options o;
  gputune_client_options_init(&o);
  REQUIRE(o.struct_size == sizeof(o));
  REQUIRE(o.lookup_deadline_ms == 250);
  REQUIRE(o.deadline_ms == 2000);
  gputune_client* c = nullptr;
  o.deadline_ms = -1;
  REQUIRE(gputune_client_create(&o, &c) == GPUTUNE_INVALID_ARGUMENT);
  REQUIRE(c == nullptr);
  REQUIRE_FALSE(std::string(gputune_last_error()).empty());

  DaemonProcess daemon({"--backend=none"});
  auto client = CClient(daemon.endpoint(), 30000, 500);
  auto key = Key("down/x=1@c1");
  REQUIRE(StateOf(client.get(), key.get()) == GPUTUNE_STATE_MISS);
  daemon.Kill();
  auto r = Result();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    const gputune_code code = gputune_lookup(client.get(), key.get(), r.get());
    REQUIRE((code == GPUTUNE_UNAVAILABLE || code == GPUTUNE_DEADLINE_EXCEEDED));
    REQUIRE(std::string(gputune_last_error()).find("gputuned") !=
            std::string::npos);
  }
  // Two deadlines at most (500 ms each), then the breaker answers at once
  // (a refused connection costs milliseconds, also on a loaded machine).
  REQUIRE(std::chrono::steady_clock::now() - start <
          std::chrono::seconds(2 * kSlowdown));
  REQUIRE(std::string(gputune_code_name(GPUTUNE_UNAVAILABLE)) == "UNAVAILABLE");
}

TEST_CASE("C: every code has gRPC's name, and an unknown value is UNKNOWN") {
  const std::vector<std::string> names = {"OK",
                                          "CANCELLED",
                                          "UNKNOWN",
                                          "INVALID_ARGUMENT",
                                          "DEADLINE_EXCEEDED",
                                          "NOT_FOUND",
                                          "ALREADY_EXISTS",
                                          "PERMISSION_DENIED",
                                          "RESOURCE_EXHAUSTED",
                                          "FAILED_PRECONDITION",
                                          "ABORTED",
                                          "OUT_OF_RANGE",
                                          "UNIMPLEMENTED",
                                          "INTERNAL",
                                          "UNAVAILABLE",
                                          "DATA_LOSS",
                                          "UNAUTHENTICATED"};
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    CHECK(gputune_code_name(static_cast<gputune_code>(i)) == names[i]);
  }
  CHECK(std::string(gputune_code_name(static_cast<gputune_code>(17))) ==
        "UNKNOWN");
  CHECK(std::string(gputune_code_name(static_cast<gputune_code>(-1))) ==
        "UNKNOWN");
  // The same pointer each time: callers may keep it.
  CHECK(gputune_code_name(GPUTUNE_NOT_FOUND) ==
        gputune_code_name(GPUTUNE_NOT_FOUND));
}

TEST_CASE("C: a watch delivers each status until the HIT") {
  DaemonProcess daemon({"--backend=none"});
  auto client = CClient(daemon.endpoint());
  auto key = Key("watched/x=1@c1");

  struct Seen {
    std::mutex mu;
    std::vector<gputune_state> states;
    std::string kernel;
  } seen;
  gputune_watch* raw = nullptr;
  REQUIRE(gputune_watch_start(
              client.get(), key.get(),
              [](void* user, const gputune_result* s) {
                auto* seen = static_cast<Seen*>(user);
                std::lock_guard<std::mutex> lock(seen->mu);
                seen->states.push_back(gputune_result_state(s));
                seen->kernel = gputune_result_kernel(s);
              },
              &seen, 10000, &raw) == GPUTUNE_OK);
  Owned<gputune_watch> with_callback(raw);

  REQUIRE(gputune_watch_start(client.get(), key.get(), nullptr, nullptr, 10000,
                              &raw) == GPUTUNE_OK);
  Owned<gputune_watch> queued(raw);
  auto r = Result();
  REQUIRE(gputune_watch_next(queued.get(), 5000, r.get()) == GPUTUNE_OK);
  REQUIRE(gputune_result_state(r.get()) == GPUTUNE_STATE_MISS);
  REQUIRE(gputune_watch_next(queued.get(), 50, r.get()) ==
          GPUTUNE_DEADLINE_EXCEEDED);

  auto claim = Claim(client.get(), key.get());
  REQUIRE(gputune_watch_next(queued.get(), 5000, r.get()) == GPUTUNE_OK);
  REQUIRE(gputune_result_state(r.get()) == GPUTUNE_STATE_PENDING);
  REQUIRE(Record(claim.get(), "watched.kernel") == GPUTUNE_OK);
  REQUIRE(gputune_watch_next(queued.get(), 5000, r.get()) == GPUTUNE_OK);
  REQUIRE(gputune_result_hit(r.get()));
  REQUIRE(std::string(gputune_result_kernel(r.get())) == "watched.kernel");
  REQUIRE(gputune_watch_wait(queued.get(), 5000) == GPUTUNE_OK);
  REQUIRE(gputune_watch_next(queued.get(), 5000, r.get()) ==
          GPUTUNE_OUT_OF_RANGE);

  REQUIRE(gputune_watch_wait(with_callback.get(), 5000) == GPUTUNE_OK);
  std::lock_guard<std::mutex> lock(seen.mu);
  REQUIRE(seen.states.size() == 3);
  REQUIRE(seen.states.front() == GPUTUNE_STATE_MISS);
  REQUIRE(seen.states.back() == GPUTUNE_STATE_HIT);
  REQUIRE(seen.kernel == "watched.kernel");
}

TEST_CASE("C: a cancelled watch ends with CANCELLED") {
  DaemonProcess daemon({"--backend=none"});
  auto client = CClient(daemon.endpoint());
  auto key = Key("cancelled/x=1@c1");
  gputune_watch* raw = nullptr;
  REQUIRE(gputune_watch_start(client.get(), key.get(), nullptr, nullptr, 10000,
                              &raw) == GPUTUNE_OK);
  Owned<gputune_watch> w(raw);
  REQUIRE(gputune_watch_wait(w.get(), 50) == GPUTUNE_DEADLINE_EXCEEDED);
  gputune_watch_cancel(w.get());
  REQUIRE(gputune_watch_wait(w.get(), 5000) == GPUTUNE_CANCELLED);
}

TEST_CASE("C: the daemon tunes a dense key, waiting or not") {
  DaemonProcess daemon({"--backend=host"});
  auto client = CClient(daemon.endpoint());
  auto key = Key("dense_bf16/decode/c.api/m=1/k=64/n=64@cs1");
  auto r = Result();
  REQUIRE(gputune_tune_dense(client.get(), key.get(), 1, r.get()) ==
          GPUTUNE_OK);
  REQUIRE(gputune_result_hit(r.get()));
  REQUIRE(std::string(gputune_result_kernel(r.get())).rfind("host.", 0) == 0);
  REQUIRE(gputune_result_chosen_time_ns(r.get()) > 0);

  // A custom key is not the daemon's to tune.
  auto custom = Key("not_dense/x=1@cs1");
  REQUIRE(gputune_tune_dense(client.get(), custom.get(), 0, r.get()) ==
          GPUTUNE_INVALID_ARGUMENT);
}

TEST_CASE("C: operator calls answer in the API's JSON") {
  DaemonProcess daemon({"--backend=none"});
  auto client = CClient(daemon.endpoint());
  auto key = Key("ops/x=1@c1");
  char* json = nullptr;
  REQUIRE(gputune_get_entry_json(client.get(), key.get(), &json) ==
          GPUTUNE_NOT_FOUND);
  REQUIRE(json == nullptr);
  auto claim = Claim(client.get(), key.get());
  REQUIRE(Record(claim.get(), "ops.kernel") == GPUTUNE_OK);

  REQUIRE(gputune_get_entry_json(client.get(), key.get(), &json) == GPUTUNE_OK);
  std::string entry = json;
  gputune_string_free(json);
  REQUIRE(entry.find("\"kernel\":\"ops.kernel\"") != std::string::npos);
  REQUIRE(entry.find("\"measurements\"") != std::string::npos);

  REQUIRE(gputune_get_status_json(client.get(), &json) == GPUTUNE_OK);
  std::string status = json;
  gputune_string_free(json);
  REQUIRE(status.find("\"entries\":\"1\"") != std::string::npos);

  gputune_list_options lo{};
  lo.struct_size = sizeof(lo);
  lo.op = "ops";
  REQUIRE(gputune_list_entries_json(client.get(), &lo, &json) == GPUTUNE_OK);
  std::string list = json;
  gputune_string_free(json);
  REQUIRE(list.find("ops.kernel") != std::string::npos);
  lo.op = "other";
  REQUIRE(gputune_list_entries_json(client.get(), &lo, &json) == GPUTUNE_OK);
  REQUIRE(std::string(json).find("ops.kernel") == std::string::npos);
  gputune_string_free(json);
}

TEST_CASE("C: the dense runner without a usable GPU says why, runs nothing") {
  gputune_dense_runner* runner = nullptr;
  const gputune_code code = gputune_dense_runner_create(&runner);
  if (code == GPUTUNE_OK) {
    gputune_dense_runner_free(runner);
    SUCCEED("skipped: a CUDA device is usable here");
    return;
  }
  REQUIRE(code == GPUTUNE_FAILED_PRECONDITION);
  REQUIRE(runner == nullptr);
  const std::string why = gputune_last_error();
  INFO(why);
#if GPUTUNE_TEST_WITH_CUDA
  // Built with CUDA: libgputune_dense.so loads and names the CUDA call
  // that found no device.
  REQUIRE(why.find("cannot run dense executions here") != std::string::npos);
#else
  REQUIRE(why.find("not built with CUDA") != std::string::npos);
#endif
  gputune_dense_args args{};
  args.struct_size = sizeof(args);
  int fell_back = 7;
  REQUIRE(gputune_dense_run(nullptr, nullptr, &args, &fell_back) ==
          GPUTUNE_INVALID_ARGUMENT);
  REQUIRE(fell_back == 0);
}

TEST_CASE("libgputune.so exports only the C API and namespace gputune") {
  const std::string command =
      "nm -D --defined-only '" GPUTUNE_SHARED_LIBRARY "' | awk '{print $3}'";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::vector<std::string> others;
  int c_api = 0;
  int cxx = 0;
  char line[4096];
  while (fgets(line, sizeof line, pipe) != nullptr) {
    std::string sym(line);
    while (!sym.empty() && (sym.back() == '\n' || sym.back() == '\r')) {
      sym.pop_back();
    }
    if (sym.empty()) continue;
    const std::string name = sym.substr(0, sym.find('@'));
    if (name.rfind("gputune_", 0) == 0) {
      ++c_api;
    } else if (name.rfind("_ZN7gputune", 0) == 0 ||
               name.rfind("_ZNK7gputune", 0) == 0 ||
               name.rfind("_ZTVN7gputune", 0) == 0 ||
               name.rfind("_ZTIN7gputune", 0) == 0 ||
               name.rfind("_ZTSN7gputune", 0) == 0) {
      ++cxx;
    } else if (name != "GPUTUNE_1") {
      others.push_back(sym);
    }
    if (name.rfind("gputune_", 0) == 0) {
      INFO(sym);
      REQUIRE(sym.find("@@GPUTUNE_1") != std::string::npos);
    }
  }
  REQUIRE(pclose(pipe) == 0);
  INFO("first unexpected: " << (others.empty() ? "" : others.front()));
  REQUIRE(others.empty());
  REQUIRE(c_api >= 60);
  REQUIRE(cxx > 20);
}

TEST_CASE("C: a stale-but-usable entry is said so, a plain STALE one is not") {
  DaemonProcess daemon({"--backend=host", "--revalidate_idle=1h"});
  v1::Key key;
  key.mutable_custom()->set_op("my_attention");
  key.mutable_custom()->set_params("b=8,h=32");
  key.set_candidate_set("c1");
  ImportFromOlderSoftware(*daemon.Stub(), key);
  auto client = CClient(daemon.endpoint());
  auto r = Result();
  REQUIRE(gputune_lookup(client.get(), Key("my_attention/b=8,h=32@c1").get(),
                         r.get()) == GPUTUNE_OK);
  CHECK(gputune_result_state(r.get()) == GPUTUNE_STATE_STALE);
  CHECK(gputune_result_stale_usable(r.get()) == 1);
  CHECK(std::string(gputune_result_kernel(r.get())) == "older.kernel");
  CHECK(std::string(gputune_result_stale_reason(r.get())).find("usable") !=
        std::string::npos);
  auto copy = Result();
  REQUIRE(gputune_result_copy(r.get(), copy.get()) == GPUTUNE_OK);
  CHECK(gputune_result_stale_usable(copy.get()) == 1);
  REQUIRE(gputune_lookup(client.get(), Key("my_attention/b=8,h=32@c2").get(),
                         r.get()) == GPUTUNE_OK);
  CHECK(gputune_result_state(r.get()) == GPUTUNE_STATE_STALE);
  CHECK(gputune_result_stale_usable(r.get()) == 0);
}

TEST_CASE("C: follow_changes 0 keeps a deleted entry memoised, 1 drops it") {
  DaemonProcess daemon({"--backend=none"});
  auto writer = CClient(daemon.endpoint());
  auto key = Key("follow/x=1@c1");
  auto claim = Claim(writer.get(), key.get());
  REQUIRE(Record(claim.get(), "follow.kernel") == GPUTUNE_OK);
  gputune_client_options o;
  gputune_client_options_init(&o);
  REQUIRE(o.follow_changes == 1);
  const std::string endpoint = daemon.endpoint();
  o.endpoint = endpoint.c_str();
  o.memo_ttl_ms = -1;  // only the change feed can drop an entry
  gputune_client* raw = nullptr;
  REQUIRE(gputune_client_create(&o, &raw) == GPUTUNE_OK);
  Owned<gputune_client> following(raw);
  o.follow_changes = 0;
  REQUIRE(gputune_client_create(&o, &raw) == GPUTUNE_OK);
  Owned<gputune_client> not_following(raw);
  // An ABI 1 caller's struct ends before follow_changes: the default.
  o.struct_size = offsetof(gputune_client_options, follow_changes);
  REQUIRE(gputune_client_create(&o, &raw) == GPUTUNE_OK);
  Owned<gputune_client> abi1(raw);

  const gputune_key* keys[] = {key.get()};
  auto memoised = [&](gputune_client* c) { return gputune_memo_size(c) == 1; };
  for (gputune_client* c : {following.get(), not_following.get(), abi1.get()}) {
    // The feed's stream starts in the background; an entry memoised while
    // it catches up may be dropped once: memoise until it stays.
    gputune_code code = GPUTUNE_OK;
    size_t hits = 0;
    const bool stays = Eventually([&] {
      code = gputune_preload(c, keys, 1, &hits);
      return code == GPUTUNE_OK && hits == 1 && memoised(c);
    });
    INFO(gputune_code_name(code) << " " << gputune_last_error() << ", hits "
                                 << hits << ", memo " << gputune_memo_size(c));
    REQUIRE(stays);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (gputune_client* c : {following.get(), not_following.get(), abi1.get()}) {
    REQUIRE(memoised(c));
  }

  v1::DeleteEntriesRequest request;
  request.add_keys()->mutable_custom()->set_op("follow");
  request.mutable_keys(0)->mutable_custom()->set_params("x=1");
  request.mutable_keys(0)->set_candidate_set("c1");
  v1::DeleteEntriesResponse response;
  grpc::ClientContext ctx;
  REQUIRE(daemon.Stub()->DeleteEntries(&ctx, request, &response).ok());
  REQUIRE(response.deleted() == 1);
  REQUIRE(Eventually([&] { return !memoised(following.get()); },
                     std::chrono::milliseconds(2000)));
  REQUIRE(Eventually([&] { return !memoised(abi1.get()); },
                     std::chrono::milliseconds(2000)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(memoised(not_following.get()));
  auto r = Result();
  REQUIRE(gputune_lookup(not_following.get(), key.get(), r.get()) ==
          GPUTUNE_OK);
  CHECK(gputune_result_from_memo(r.get()));
  REQUIRE(gputune_lookup(following.get(), key.get(), r.get()) == GPUTUNE_OK);
  CHECK(gputune_result_state(r.get()) == GPUTUNE_STATE_MISS);
}

TEST_CASE("C: gpu_uuid and socket_dir (ABI 3) find a daemon by its GPU") {
  const std::string uuid = "GPU-c0ffee00-1111-2222-3333-444455556666";
  DaemonProcess daemon({"--backend=none", "--device_uuid=" + uuid});
  gputune_client_options o;
  gputune_client_options_init(&o);
  REQUIRE(o.gpu_uuid == nullptr);
  o.gpu_uuid = uuid.c_str();
  o.socket_dir = daemon.dir().c_str();
  gputune_client* raw = nullptr;
  REQUIRE(gputune_client_create(&o, &raw) == GPUTUNE_OK);
  Owned<gputune_client> client(raw);
  CHECK(std::string(gputune_client_gpu_uuid(client.get())) == uuid);
  CHECK(std::string(gputune_client_endpoint(client.get())) ==
        "unix://" + daemon.dir() + "/by-uuid/" + uuid + ".sock");
  char* status = nullptr;
  REQUIRE(gputune_get_status_json(client.get(), &status) == GPUTUNE_OK);
  CHECK(std::string(status).find(uuid) != std::string::npos);
  gputune_string_free(status);

  // A GPU with no daemon: NOT_FOUND naming it and the directory.
  const std::string other = "GPU-0dd00000-1111-2222-3333-444455556666";
  o.gpu_uuid = other.c_str();
  REQUIRE(gputune_client_create(&o, &raw) == GPUTUNE_NOT_FOUND);
  CHECK(std::string(gputune_last_error()).find(other) != std::string::npos);
  CHECK(std::string(gputune_last_error()).find(daemon.dir() + "/by-uuid") !=
        std::string::npos);

  // An ABI 2 caller's struct ends before gpu_uuid: not read.
  o.struct_size = offsetof(gputune_client_options, gpu_uuid);
  o.endpoint = nullptr;
  REQUIRE(gputune_client_create(&o, &raw) == GPUTUNE_OK);
  Owned<gputune_client> abi2(raw);
  CHECK(std::string(gputune_client_gpu_uuid(abi2.get())).empty());
}

}  // namespace
}  // namespace gputune::testing
