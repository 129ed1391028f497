// The client bindings' costs, C++ against C in one process (the Python side
// is client_bench.py, which starts the daemon and runs this):
//   memo hit   Lookup of memoised HITs: gputune::Client::Lookup and
//              gputune_lookup (with a prepared gputune_key), ns per call
//   uncached   Lookup over the unix socket with the memo off (every call an
//              RPC): both, us per call
//
//   gputune_client_bench ENDPOINT KEYS ROUNDS RPC_CALLS
// The KEYS keys "bench_op/i=<i>@bench" must be HITs already; prints one
// JSON object.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gputune/client.h"
#include "gputune/gputune.h"
#include "proto/key_format.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string KeyText(int i) {
  return "bench_op/i=" + std::to_string(i) + "@bench";
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "client_bench: %s\n", what.c_str());
  std::exit(1);
}

// ns per memoised C++ lookup over `rounds` passes of the keys.
double CxxLookupNs(gputune::Client& client,
                   const std::vector<gputune::v1::Key>& keys, int rounds,
                   bool want_memo) {
  size_t good = 0;
  const auto start = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    for (const auto& key : keys) {
      auto result = client.Lookup(key);
      good += result.ok() && result->hit() && result->from_memo() == want_memo;
    }
  }
  const double s = Since(start);
  if (good != keys.size() * rounds) Die("a C++ lookup was not as expected");
  return s * 1e9 / (double(keys.size()) * rounds);
}

double CLookupNs(gputune_client* client, const std::vector<gputune_key*>& keys,
                 int rounds, bool want_memo) {
  gputune_result* result = gputune_result_new();
  size_t good = 0;
  const auto start = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    for (gputune_key* key : keys) {
      good += gputune_lookup(client, key, result) == GPUTUNE_OK &&
              gputune_result_hit(result) &&
              (gputune_result_from_memo(result) != 0) == want_memo;
    }
  }
  const double s = Since(start);
  gputune_result_free(result);
  if (good != keys.size() * rounds) Die("a C lookup was not as expected");
  return s * 1e9 / (double(keys.size()) * rounds);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5)
    Die("usage: gputune_client_bench ENDPOINT KEYS ROUNDS RPC_CALLS");
  const std::string endpoint = argv[1];
  const int n = std::atoi(argv[2]);
  const int rounds = std::atoi(argv[3]);
  const int rpc_calls = std::atoi(argv[4]);

  std::vector<gputune::v1::Key> keys;
  std::vector<gputune_key*> c_keys;
  for (int i = 0; i < n; ++i) {
    auto key = gputune::ParseKeyText(KeyText(i));
    if (!key.ok()) Die(std::string(key.status().message()));
    keys.push_back(*key);
    gputune_key* c_key = nullptr;
    if (gputune_key_parse(KeyText(i).c_str(), &c_key) != GPUTUNE_OK) {
      Die(gputune_last_error());
    }
    c_keys.push_back(c_key);
  }

  // Memo hits.
  gputune::ClientOptions options;
  options.endpoint = endpoint;
  auto cxx = gputune::Client::Create(options);
  if (!cxx.ok()) Die(std::string(cxx.status().message()));
  if (auto p = (*cxx)->Preload(keys); !p.ok() || *p != keys.size()) {
    Die("preload did not find every key HIT");
  }
  gputune_client_options o;
  gputune_client_options_init(&o);
  o.endpoint = endpoint.c_str();
  gputune_client* c = nullptr;
  if (gputune_client_create(&o, &c) != GPUTUNE_OK) Die(gputune_last_error());
  size_t hits = 0;
  if (gputune_preload(c, c_keys.data(), c_keys.size(), &hits) != GPUTUNE_OK ||
      hits != c_keys.size()) {
    Die("C preload did not find every key HIT");
  }
  // Interleaved, best of three each: the machine is shared.
  double cxx_memo = 1e30, c_memo = 1e30;
  for (int t = 0; t < 3; ++t) {
    cxx_memo = std::min(cxx_memo, CxxLookupNs(**cxx, keys, rounds, true));
    c_memo = std::min(c_memo, CLookupNs(c, c_keys, rounds, true));
  }

  // Uncached: memo off, every lookup an RPC.
  options.memo_capacity = 0;
  auto cxx_rpc = gputune::Client::Create(options);
  o.memo_capacity = 0;
  gputune_client* c_rpc = nullptr;
  if (gputune_client_create(&o, &c_rpc) != GPUTUNE_OK)
    Die(gputune_last_error());
  const int passes = std::max(1, rpc_calls / n);
  double cxx_uncached = 1e30, c_uncached = 1e30;
  for (int t = 0; t < 3; ++t) {
    cxx_uncached = std::min(cxx_uncached,
                            CxxLookupNs(**cxx_rpc, keys, passes, false) / 1e3);
    c_uncached =
        std::min(c_uncached, CLookupNs(c_rpc, c_keys, passes, false) / 1e3);
  }
  std::printf(
      "{\"cxx_memo_hit_ns\": %.1f, \"c_memo_hit_ns\": %.1f, "
      "\"cxx_uncached_us\": %.2f, \"c_uncached_us\": %.2f}\n",
      cxx_memo, c_memo, cxx_uncached, c_uncached);
  for (gputune_key* k : c_keys) gputune_key_free(k);
  gputune_client_destroy(c_rpc);
  gputune_client_destroy(c);
  return 0;
}
