// gputunectl's command line: global and command flags, usage text, and the
// exit codes scripts test (documented in docs/client.md).
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_CLI_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_CLI_H_

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gputune::ctl {

// Exit codes.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        // any other failure (the message says what)
  kExitUsage = 2,        // bad command line or key text
  kExitUnavailable = 3,  // gputuned unreachable or too slow
  kExitNotFound = 4,     // no entry for the key
  kExitInvalid = 5,      // bad input: import file, field the daemon refused
  kExitConflict = 6,     // the key's state refuses it: PENDING, BACKOFF, HIT
  kExitTuneFailed = 7,   // the benchmark job failed
};

// The exit code for an error.
ExitCode ExitCodeFor(const absl::Status& status);

struct CommandLine {
  std::string command;
  std::vector<std::string> args;             // positional, after the command
  std::map<std::string, std::string> flags;  // "--name=value" / "--name value"
  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::string Get(const std::string& name,
                  const std::string& fallback = "") const;
};

// Splits argv (without the program name). Boolean flags take no value; the
// others take "--name=value" or "--name value". INVALID_ARGUMENT names an
// unknown flag or one without its value.
absl::StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& argv);

// Flag values.
absl::StatusOr<absl::Duration> DurationFlag(const CommandLine& cl,
                                            const std::string& name,
                                            absl::Duration fallback);
absl::StatusOr<int> IntFlag(const CommandLine& cl, const std::string& name,
                            int fallback);

// The text of `gputunectl --help`.
std::string Usage();

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_CLI_H_
