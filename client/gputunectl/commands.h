// gputunectl's commands. Each takes the parsed command line and a connected
// client, prints tables (or protobuf JSON with --json) to `out` and errors to
// `err`, and returns an exit code (cli.h).
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_COMMANDS_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_COMMANDS_H_

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

struct Context {
  const CommandLine& cl;
  Client& client;
  std::ostream& out;
  std::ostream& err;
  bool json = false;
  absl::Duration timeout;  // --timeout
};

// Prints "gputunectl: <doing>: <error>" and returns its exit code.
int Fail(Context& ctx, absl::string_view doing, const absl::Status& status);
// Prints "gputunectl: <message>" with a pointer to --help; returns
// kExitUsage.
int UsageError(Context& ctx, absl::string_view message);
// The --op/--phase/--role/--state filter of list, delete and export.
absl::StatusOr<v1::EntryFilter> FilterFromFlags(const CommandLine& cl);
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

// The whole program: parses argv (without the program name), connects and
// runs the command. Returns the exit code.
int Main(const std::vector<std::string>& argv, std::ostream& out,
         std::ostream& err);

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_COMMANDS_H_
