// One client process of the lookup benchmark. The orchestrator (fork/exec of
// this same binary with --role=worker) starts N of them at once: each
// connects and warms up, says it is ready, waits for the start signal, then
// issues calls back to back for the measured duration and writes every
// call's latency to a file.
#ifndef GPUTUNE_BENCH_LOOKUP_BENCH_WORKER_H_
#define GPUTUNE_BENCH_LOOKUP_BENCH_WORKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gputune::bench {

// What each call is.
//   lookup: gputune::Client::Lookup over the unix socket (memo off)
//   echo:   the echo server's Echo, same bytes each way as a Lookup
//   sqlite: no daemon: SELECT the key's row from the database file and parse
//           it, as every process would without gputuned
enum class Mode { kLookup, kEcho, kSqlite };

const char* ModeName(Mode mode);
bool ParseMode(const std::string& name, Mode* mode);

struct WorkerArgs {
  Mode mode = Mode::kLookup;
  std::string endpoint;     // lookup: gputuned; echo: the echo server
  std::string daemon;       // echo: gputuned, to size messages like a Lookup
  std::string db;           // sqlite: the daemon's database
  std::string keys_file;    // key texts, one per line
  std::string fingerprint;  // sqlite: the device digest a row must match
  double seconds = 1.0;     // measured duration
  int ready_fd = -1;        // one byte is written here when warmed up
  int go_fd = -1;           // the run starts when this reads EOF
  std::string out;          // samples file
  uint32_t seed = 0;        // where in the key list to start
};

// The body of a worker process; returns its exit code.
int RunWorker(const WorkerArgs& args);

// What a worker measured.
struct Samples {
  uint64_t errors = 0;
  double cpu_seconds = 0;  // the process's CPU time during the measured run
  std::vector<uint32_t> latency_ns;  // one per completed call
};
absl::StatusOr<Samples> ReadSamples(const std::string& path);

}  // namespace gputune::bench

#endif  // GPUTUNE_BENCH_LOOKUP_BENCH_WORKER_H_
