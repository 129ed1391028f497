// gputunectl's commands. Each takes the parsed command line and a connected
// client, prints tables (or protobuf JSON with --json) to `out` and errors to
// `err`, and returns an exit code (cli.h).
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_COMMANDS_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_COMMANDS_H_

#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/gputunectl/cli.h"
#include "gputune/client.h"

namespace gputune::ctl {

// Where gputunectl runs: whether it may ask a question (delete --all) and
// whether stderr is a terminal (tune's live progress line).
struct Terminal {
  std::istream* in = nullptr;  // answers; null: never ask
  bool in_is_terminal = false;
  bool err_is_terminal = false;
  // The process's own: std::cin, isatty(0), isatty(2).
  static Terminal Process();
};

// The daemon a command line addresses, and why that one.
struct Target {
  std::string endpoint;   // as ClientOptions::endpoint takes it
  std::string chosen_by;  // "--endpoint", "--device=1", "--gpu=GPU-...",
                          // "$GPUTUNE_ENDPOINT", "the default (GPU 0)"
  std::string gpu_uuid;   // --gpu's, else empty
};
// An explicit --endpoint, --device (the host's GPU N: gpuN.sock) or --gpu
// (a GPU UUID: by-uuid/<UUID>.sock in $GPUTUNE_SOCKET_DIR or /run/gputuned;
// NOT_FOUND when no daemon is linked) wins over $GPUTUNE_ENDPOINT (`env` is
// its value, null when unset); two flags at once are a usage error.
absl::StatusOr<Target> ResolveTarget(const CommandLine& cl, const char* env);

struct Context {
  const CommandLine& cl;
  Client& client;
  std::ostream& out;
  std::ostream& err;
  bool json = false;
  absl::Duration timeout;  // --timeout
  Target target;
  Terminal terminal;
};

// Prints "gputunectl: <doing>: <error>" and returns its exit code. An
// unreachable unix socket that this user may not open is reported as
// "permission denied: join group gputune".
int Fail(Context& ctx, absl::string_view doing, const absl::Status& status);
// Prints "gputunectl: <message>" with a pointer to --help; returns
// kExitUsage.
int UsageError(Context& ctx, absl::string_view message);
// The --op/--phase/--role/--state filter of list, delete and export.
absl::StatusOr<v1::EntryFilter> FilterFromFlags(const CommandLine& cl);
// For a key without an entry: when a claim or a benchmark job holds it,
// prints "<key>: PENDING, being tuned by <holder> ..." (its KeyStatus with
// --json) and returns kExitConflict; otherwise returns -1 (and prints
// nothing).
int ExplainPending(Context& ctx, const v1::Key& key);
// Prints an entry with every measurement (get, tune).
void PrintEntry(Context& ctx, const v1::GetEntryResponse& got);

// commands_entries.cc
int RunList(Context& ctx);
int RunGet(Context& ctx);
int RunDelete(Context& ctx);
int RunExport(Context& ctx);
int RunImport(Context& ctx);
// commands_claims.cc
int RunClaim(Context& ctx);
int RunAbandon(Context& ctx);
int RunTune(Context& ctx);
// commands_admin.cc
int RunStatus(Context& ctx);
int RunBackup(Context& ctx);
int RunLogLevel(Context& ctx);
int RunMetrics(Context& ctx);

// The whole program: parses argv (without the program name), connects and
// runs the command. Returns the exit code.
int Main(const std::vector<std::string>& argv, std::ostream& out,
         std::ostream& err);
int Main(const std::vector<std::string>& argv, std::ostream& out,
         std::ostream& err, const Terminal& terminal);

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_COMMANDS_H_
