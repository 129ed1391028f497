// gputunectl's command line: the table of commands and flags (the one source
// of `--help`, `gputunectl help COMMAND`, the man page and the bash
// completion), the parser (CLI11) that checks a command line against it, and
// the exit codes scripts test (documented in docs/client.md).
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_CLI_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_CLI_H_

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

// One flag, of a command or global.
struct FlagSpec {
  std::string name;   // without the leading "--"
  std::string value;  // the value's placeholder ("N", "DURATION"); empty: a
                      // switch that takes no value
  std::string help;   // one line
  std::vector<std::string> choices;  // the values it takes, when a fixed set
};

// One command.
struct CommandSpec {
  std::string name;
  std::string args;         // the positional synopsis: "KEY", "[KEY...]"
  std::string summary;      // one line, for the command list
  std::string description;  // paragraphs separated by blank lines
  std::vector<FlagSpec> flags;
  bool names_daemon = false;  // destructive: says which daemon it acts on
  std::string complete;       // what its arguments complete to: "file",
                              // "command" or "" (nothing)
};

// The flags every command takes (they may come before or after it).
const std::vector<FlagSpec>& GlobalFlags();
// Every command, in the order --help lists them.
const std::vector<CommandSpec>& Commands();
// The command called `name`; null when there is none.
const CommandSpec* FindCommand(absl::string_view name);

// A command line checked against the table.
struct CommandLine {
  std::string command;                       // empty with --help/--version
  std::vector<std::string> args;             // positional, after the command
  std::map<std::string, std::string> flags;  // given flags; "" for switches
  bool help = false;     // print help (for `command`, or the overview)
  bool version = false;  // print the version line
  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::string Get(const std::string& name,
                  const std::string& fallback = "") const;
};

// Parses argv (without the program name) with CLI11. "--name=value" and
// "--name value" both work; global flags may come before or after the
// command, a command's own flags only after it. INVALID_ARGUMENT says what
// is wrong and, for a misspelt command or flag, the nearest one ("did you
// mean --limit?"); for a flag of another command, which commands take it.
// `help COMMAND`, `COMMAND --help` and `--help` set `help`.
absl::StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& argv);

// Flag values.
absl::StatusOr<absl::Duration> DurationFlag(const CommandLine& cl,
                                            const std::string& name,
                                            absl::Duration fallback);
absl::StatusOr<int> IntFlag(const CommandLine& cl, const std::string& name,
                            int fallback);

// The text of `gputunectl --help`: every command and the global flags.
std::string Usage();
// The text of `gputunectl help COMMAND` / `gputunectl COMMAND --help`.
std::string CommandHelp(const CommandSpec& command);
// gputunectl(1) in troff (man) format, from the same table.
std::string ManPage();
// A bash completion script for gputunectl, from the same table.
std::string BashCompletion();
// `text` for a troff (man page) line: backslashes and dashes escaped, a
// leading dot or quote guarded.
std::string RoffEscape(absl::string_view text);

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_CLI_H_
