// gputune-sync: runs a job's COMMAND with a file-based tuner's cache file
// (tool_formats.h) written from gputuned before it starts, the same bytes
// for every rank of the host, and what COMMAND adds imported back every
// --interval and when it exits. The help text (SyncHelp) is the manual;
// docs/integrations.md, "File-based tuners", shows launches.
//
//   gputune-sync --format=trtllm --path=/cache/autotuner.json --
//       trtllm-serve ...
#ifndef GPUTUNE_CLIENT_SYNC_GPUTUNE_SYNC_H_
#define GPUTUNE_CLIENT_SYNC_GPUTUNE_SYNC_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/gputunectl/cli.h"

namespace gputune::sync {

// Exit codes of gputune-sync itself; otherwise it exits with COMMAND's code
// (128 + the signal when a signal ended it), as a shell does.
enum SyncExit : int {
  kSyncUsage = 2,            // bad command line: COMMAND was not run
  kSyncCannotExecute = 126,  // COMMAND found but not executable
  kSyncNotFound = 127,       // COMMAND not found
};

// The command line, checked.
struct SyncCommandLine {
  std::string format;  // one of ctl::ToolFormats()
  std::string path;    // the tool's cache file
  std::string match;   // --match FILE, or empty
  absl::Duration interval = absl::Seconds(60);
  absl::Duration timeout = absl::Seconds(30);  // each call to gputuned
  // --endpoint, --device and --gpu, in the form ctl::ResolveTarget takes.
  ctl::CommandLine target;
  std::vector<std::string> command;  // after "--"
  bool help = false;
  bool version = false;
};

// Parses argv (without the program name): flags (CLI11; "--name=value" or
// "--name value"), then "--", then COMMAND and its arguments, which are
// not looked at. INVALID_ARGUMENT says what is wrong.
absl::StatusOr<SyncCommandLine> ParseSyncCommandLine(
    const std::vector<std::string>& argv);

// The text of `gputune-sync --help`.
std::string SyncHelp();

// The whole program. Blocks the signals it forwards before it starts any
// thread: call it from main, before anything else starts one. Returns the
// exit code (COMMAND's, or SyncExit).
int SyncMain(const std::vector<std::string>& argv, std::ostream& out,
             std::ostream& err);

}  // namespace gputune::sync

#endif  // GPUTUNE_CLIENT_SYNC_GPUTUNE_SYNC_H_
