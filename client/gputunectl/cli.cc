#include "client/gputunectl/cli.h"

#include <algorithm>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/gputunectl/tool_formats.h"

namespace gputune::ctl {
namespace {

CommandSpec Cmd(std::string name, std::string args, std::string summary,
                std::string description, std::vector<FlagSpec> flags,
                bool names_daemon = false, std::string complete = "") {
  return CommandSpec{std::move(name),    std::move(args),
                     std::move(summary), std::move(description),
                     std::move(flags),   names_daemon,
                     std::move(complete)};
}

std::vector<CommandSpec> MakeCommands() {
  // The entry filter of list, delete and export.
  const FlagSpec kOp{
      "op", "OP", "only entries of this op (dense_bf16, or a custom op)", {}};
  const FlagSpec kPhase{"phase",
                        "PHASE",
                        "only prefill or only decode entries",
                        {"prefill", "decode"}};
  const FlagSpec kRole{
      "role", "ROLE", "only entries of this role (e.g. attn.qkv)", {}};
  const FlagSpec kState{
      "state", "STATE", "only HIT or only STALE entries", {"hit", "stale"}};
  // A file-based tuner's cache format (export/import).
  const FlagSpec kFormat{"format", "F",
                         "read/write a tuner's own cache file format instead "
                         "of JSON lines (docs/integrations.md)",
                         ToolFormats()};
  return {
      Cmd("status", "", "the daemon: device, database, claims, queue",
          "Shows which daemon answers (version, socket, uptime), its backend "
          "and "
          "device, the database (entries, stale entries), the benchmark queue "
          "and the live claims.",
          {}),
      Cmd("list", "", "entries, a page at a time",
          "Lists the entries in key order, --limit at a time; the next page's "
          "token is printed on stderr, or --all follows every page.",
          {kOp,
           kPhase,
           kRole,
           kState,
           {"limit", "N", "entries per page (default 100)", {}},
           {"page-token", "TOKEN", "continue where the last page ended", {}},
           {"all", "", "follow every page", {}},
           {"with-measurements",
            "",
            "fetch every candidate's measurements (--json)",
            {}}}),
      Cmd("get", "KEY", "one entry with every candidate's measurements",
          "Prints the entry for KEY with every measured candidate. A key that "
          "is "
          "being tuned has no entry yet: get says PENDING and who holds it "
          "(exit 6).",
          {}),
      Cmd("delete", "[KEY...]", "delete entries: KEYs, a filter or --all",
          "Deletes the named KEYs, or every entry the filter matches, or (with "
          "--all) every entry. It first says which daemon it acts on (device "
          "and "
          "socket). --all asks for confirmation on a terminal and needs --yes "
          "otherwise.",
          {kOp,
           kPhase,
           kRole,
           kState,
           {"all", "", "delete every entry", {}},
           {"yes", "", "do not ask before deleting every entry", {}},
           {"fleet",
            "CONNINFO",
            "also delete the KEYs (or, with --all, every entry of this "
            "daemon's fingerprint) from the fleet, as the PostgreSQL role "
            "CONNINFO names: every daemon of the fleet drops them and re-tunes "
            "on demand",
            {}}},
          /*names_daemon=*/true),
      Cmd("export", "FILE", "every entry as JSON lines ('-': stdout)",
          "Writes every entry matching the filter, with its measurements and "
          "provenance, one gputune.v1.Entry in protobuf JSON per line. FILE is "
          "written next to itself and renamed, so a failed export leaves "
          "nothing "
          "behind. With --format, writes a tuner's own cache file instead: "
          "the entries of that format's op for one tool version "
          "(docs/integrations.md).",
          {kOp,
           kPhase,
           kRole,
           kState,
           kFormat,
           {"match",
            "FILE",
            "with --format: only the entries of the tool versions of FILE (a "
            "cache file of the format, or just its metadata)",
            {}}},
          false, "file"),
      Cmd("import", "FILE", "entries from an export ('-': stdin)",
          "Reads an export and imports every entry, replacing those with the "
          "same keys. Every line is checked first: nothing is imported if one "
          "is "
          "bad. It first says which daemon it acts on. With --format, reads a "
          "tuner's own cache file: bad rows are listed by line and refuse the "
          "import unless --skip-bad.",
          {kFormat,
           {"skip-bad",
            "",
            "with --format: import the rows that parse, skipping those that "
            "do not (each is reported by line)",
            {}}},
          /*names_daemon=*/true, "file"),
      Cmd("claim", "KEY", "hold a key: nobody tunes it until the lease ends",
          "Claims KEY for --ttl. The claim outlives gputunectl: nobody renews "
          "it, and it ends when the lease runs out or with `abandon`.",
          {{"ttl", "DURATION", "lease length (default 30s)", {}},
           {"holder", "TEXT", "who holds it, as status shows", {}}}),
      Cmd("abandon", "CLAIM_ID", "give up a claim (status lists them)",
          "Abandons a live claim; the key becomes MISS again, or BACKOFF after "
          "repeated failures. It first says which daemon it acts on.",
          {{"reason", "TEXT", "why, for the daemon's log", {}}},
          /*names_daemon=*/true),
      Cmd("tune", "KEY", "let the daemon benchmark a dense_bf16 key",
          "Starts the daemon's benchmark job for KEY and follows it: on a "
          "terminal one live line (candidates done/total, elapsed time), "
          "otherwise a line per change, then the entry. The job runs in the "
          "daemon: interrupting gputunectl (Ctrl-C) leaves it running.",
          {{"no-wait", "", "start the job and return at once", {}},
           {"poll",
            "DURATION",
            "how often to ask for progress (default 250ms)",
            {}}}),
      Cmd("backup", "PATH", "a consistent copy of the database",
          "Writes a consistent copy of the database to PATH (VACUUM INTO). "
          "PATH "
          "must be absolute, must not exist, and its directory must exist and "
          "be "
          "writable by the daemon's user (gputune).",
          {}, false, "file"),
      Cmd("log-level", "[LEVEL]", "the daemon's log level and autotune log",
          "Sets the daemon's log level (trace, debug, info, warn, error, "
          "critical, off) and/or the autotune log.",
          {{"autotune-log",
            "LEVEL",
            "the autotune log",
            {"disabled", "minimal", "full"}}}),
      Cmd("metrics", "", "the daemon's counters in Prometheus text format",
          "Prints the metrics the daemon writes to --metrics_textfile, in the "
          "Prometheus text exposition format.",
          {}),
      Cmd("help", "[COMMAND]", "this overview, or one command's help",
          "Prints the overview of commands, or the help of COMMAND (the same "
          "as "
          "gputunectl COMMAND --help).",
          {}, false, "command"),
  };
}

std::vector<FlagSpec> MakeGlobalFlags() {
  return {
      {"endpoint",
       "E",
       "unix:///path, /path or host:port; wins over --device and "
       "$GPUTUNE_ENDPOINT",
       {}},
      {"device",
       "N",
       "the daemon of GPU N (unix:///run/gputuned/gpuN.sock); wins over "
       "$GPUTUNE_ENDPOINT",
       {}},
      {"gpu",
       "UUID",
       "the daemon of the GPU with this UUID (GPU-..., as nvidia-smi -L "
       "prints it: by-uuid/UUID.sock in $GPUTUNE_SOCKET_DIR or "
       "/run/gputuned); wins over $GPUTUNE_ENDPOINT",
       {}},
      {"json", "", "protobuf JSON on stdout instead of tables", {}},
      {"timeout",
       "DURATION",
       "deadline of each call (default 30s; tune: the whole run)",
       {}},
      {"help", "", "this help (after a command: the command's)", {}},
      {"version", "", "the version, git revision and backends built", {}},
  };
}

// Levenshtein distance, for "did you mean".
size_t Distance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The nearest of `names` to `word`, if near enough to be a typo.
std::string Nearest(absl::string_view word,
                    const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& name : names) {
    const size_t d = Distance(word, name);
    if (d < best_distance ||
        (absl::StartsWith(name, word) && word.size() >= 3 && best.empty())) {
      best = name;
      best_distance = std::min(d, best_distance);
    }
  }
  return best;
}

// "--name" of an argv word ("--name=value", "-x").
std::string FlagName(absl::string_view word) {
  absl::string_view name = word;
  if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
  return std::string(name.substr(0, name.find('=')));
}

// Why `word` is not a flag of `command` (null: before any command).
absl::Status UnknownFlag(absl::string_view word, const CommandSpec* command) {
  const std::string name = FlagName(word);
  std::vector<std::string> known;
  for (const FlagSpec& f : GlobalFlags()) known.push_back(f.name);
  if (command != nullptr) {
    for (const FlagSpec& f : command->flags) known.push_back(f.name);
  }
  std::vector<std::string> takers;
  for (const CommandSpec& c : Commands()) {
    for (const FlagSpec& f : c.flags) {
      if (f.name == name) takers.push_back(c.name);
    }
  }
  const std::string where = command == nullptr
                                ? "before the command"
                                : absl::StrCat("for ", command->name);
  if (!takers.empty()) {
    if (command != nullptr && std::find(takers.begin(), takers.end(),
                                        command->name) != takers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(word, ": given twice or malformed"));
    }
    if (command == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " is a flag of ", absl::StrJoin(takers, ", "),
          ": put it after the command (gputunectl ", takers[0], " --", name,
          ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, " is not a flag of ", command->name, " (",
        absl::StrJoin(takers, ", "), " take", takers.size() == 1 ? "s" : "",
        " it; see gputunectl help ", command->name, ")"));
  }
  std::string message = absl::StrCat("unknown flag ", word, " ", where);
  if (const std::string near = Nearest(name, known); !near.empty()) {
    absl::StrAppend(&message, ": did you mean --", near, "?");
  } else {
    absl::StrAppend(&message, " (see gputunectl help",
                    command ? " " + command->name : std::string(), ")");
  }
  return absl::InvalidArgumentError(message);
}

// Where the command is in argv: the first word that is neither a flag nor
// the value of a global flag given as "--name value". argv.size() if none.
size_t CommandIndex(const std::vector<std::string>& argv) {
  for (size_t i = 0; i < argv.size(); ++i) {
    if (!absl::StartsWith(argv[i], "-")) return i;
    if (absl::StrContains(argv[i], "=")) continue;
    for (const FlagSpec& f : GlobalFlags()) {
      if (!f.value.empty() && argv[i] == "--" + f.name) ++i;  // its value
    }
  }
  return argv.size();
}

absl::Status UnknownCommand(absl::string_view word) {
  std::vector<std::string> names;
  for (const CommandSpec& c : Commands()) names.push_back(c.name);
  std::string message = absl::StrCat("unknown command '", word, "'");
  if (const std::string near = Nearest(word, names); !near.empty()) {
    absl::StrAppend(&message, ": did you mean ", near, "?");
  } else {
    absl::StrAppend(&message, " (gputunectl --help lists them)");
  }
  return absl::InvalidArgumentError(message);
}

// Registers `flags` on `app`; `given` gets the options to read back.
void AddFlags(CLI::App& app, const std::vector<FlagSpec>& flags,
              std::map<std::string, std::string>& values,
              std::vector<std::pair<std::string, CLI::Option*>>& given) {
  for (const FlagSpec& f : flags) {
    const std::string names =
        f.name == "help" ? "-h,--help" : absl::StrCat("--", f.name);
    CLI::Option* option = f.value.empty()
                              ? app.add_flag(names, f.help)
                              : app.add_option(names, values[f.name], f.help);
    given.emplace_back(f.name, option);
  }
}

// Wraps `text` at `width` columns, each line starting with `indent`.
std::string Wrap(absl::string_view text, size_t width,
                 absl::string_view indent) {
  std::string out;
  for (absl::string_view paragraph : absl::StrSplit(text, "\n\n")) {
    if (!out.empty()) absl::StrAppend(&out, "\n");
    std::string line;
    for (absl::string_view word :
         absl::StrSplit(paragraph, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      if (!line.empty() &&
          indent.size() + line.size() + 1 + word.size() > width) {
        absl::StrAppend(&out, indent, line, "\n");
        line.clear();
      }
      absl::StrAppend(&line, line.empty() ? "" : " ", word);
    }
    if (!line.empty()) absl::StrAppend(&out, indent, line, "\n");
  }
  return out;
}

std::string FlagSynopsis(const FlagSpec& f) {
  return f.value.empty() ? absl::StrCat("--", f.name)
                         : absl::StrCat("--", f.name, "=", f.value);
}

std::string FlagChoices(const FlagSpec& f) {
  return f.choices.empty()
             ? ""
             : absl::StrCat(" (", absl::StrJoin(f.choices, ", "), ")");
}

// "  --flag=VALUE  help", the help wrapped at 79 columns under itself.
std::string FlagTable(const std::vector<FlagSpec>& flags) {
  size_t width = 0;
  for (const FlagSpec& f : flags) {
    width = std::max(width, FlagSynopsis(f).size());
  }
  const std::string indent(width + 4, ' ');
  std::string out;
  for (const FlagSpec& f : flags) {
    const std::string synopsis = FlagSynopsis(f);
    std::string text = Wrap(f.help + FlagChoices(f), 79, indent);
    text.replace(0, indent.size(),
                 absl::StrCat("  ", synopsis,
                              std::string(width - synopsis.size() + 2, ' ')));
    absl::StrAppend(&out, text);
  }
  return out;
}

constexpr char kKeyHelp[] =
    "KEY: "
    "dense_bf16/<prefill|decode>/<role>/m=<M>/k=<K>/n=<N>@<candidate_set>\n"
    "     or <op>/<params>@<candidate_set>,\n"
    "     e.g. dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1\n";

constexpr char kExitHelp[] =
    "exit codes: 0 ok, 1 error, 2 usage, 3 gputuned unreachable or too slow,\n"
    "  4 not found, 5 invalid input, 6 refused by the key's state (pending,\n"
    "  backoff, already tuned, queue full), 7 tuning failed\n";

constexpr char kEndpointHelp[] =
    "The daemon: --endpoint, else --device=N "
    "(unix:///run/gputuned/gpuN.sock),\n"
    "else --gpu=UUID (by-uuid/UUID.sock there), else $GPUTUNE_ENDPOINT, else\n"
    "GPU 0's. An explicit flag always wins over the environment.\n";

}  // namespace

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* flags = new std::vector<FlagSpec>(MakeGlobalFlags());
  return *flags;
}

const std::vector<CommandSpec>& Commands() {
  static const auto* commands = new std::vector<CommandSpec>(MakeCommands());
  return *commands;
}

const CommandSpec* FindCommand(absl::string_view name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

ExitCode ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitInvalid;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kResourceExhausted:
      return kExitConflict;
    case absl::StatusCode::kAborted:
      return kExitTuneFailed;
    default:
      return kExitError;
  }
}

std::string CommandLine::Get(const std::string& name,
                             const std::string& fallback) const {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

absl::StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& argv) {
  CLI::App app("gputunectl", "gputunectl");
  app.set_help_flag();  // help comes from the table (CommandHelp)
  app.allow_extras();   // unknown words are reported below, with hints
  app.require_subcommand(0, 1);
  std::map<std::string, std::string> global_values;
  std::vector<std::pair<std::string, CLI::Option*>> global_given;
  AddFlags(app, GlobalFlags(), global_values, global_given);

  struct Sub {
    const CommandSpec* spec;
    CLI::App* app;
    std::map<std::string, std::string> values;
    std::vector<std::pair<std::string, CLI::Option*>> given;
    std::vector<std::string> args;
  };
  std::vector<std::unique_ptr<Sub>> subs;
  for (const CommandSpec& spec : Commands()) {
    auto sub = std::make_unique<Sub>();
    sub->spec = &spec;
    sub->app = app.add_subcommand(spec.name, spec.summary);
    sub->app->set_help_flag();
    sub->app->fallthrough();  // global flags after the command
    sub->app->allow_extras();
    sub->app->positionals_at_end(false);
    AddFlags(*sub->app, spec.flags, sub->values, sub->given);
    sub->app->add_option("args", sub->args)->expected(0, -1);
    subs.push_back(std::move(sub));
  }

  // CLI11 reads "--name=" (an empty value) as "--name" and takes the next
  // word as its value: pass the empty value as a word of its own. CLI11
  // wants the words last to first.
  std::vector<std::string> reversed;
  for (auto it = argv.rbegin(); it != argv.rend(); ++it) {
    if (absl::StartsWith(*it, "--") && absl::EndsWith(*it, "=")) {
      reversed.push_back("");
      reversed.push_back(it->substr(0, it->size() - 1));
    } else {
      reversed.push_back(*it);
    }
  }
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }

  CommandLine cl;
  const Sub* chosen = nullptr;
  for (const auto& sub : subs) {
    if (sub->app->parsed()) chosen = sub.get();
  }
  // Words CLI11 did not take (a command's unknown flags fall through to the
  // top): before the command they are unknown commands or misplaced flags,
  // after it unknown flags.
  const size_t command_at = CommandIndex(argv);
  for (const std::string& word : app.remaining()) {
    if (!absl::StartsWith(word, "-")) return UnknownCommand(word);
    const size_t at = static_cast<size_t>(
        std::find(argv.begin(), argv.end(), word) - argv.begin());
    return UnknownFlag(
        word, chosen != nullptr && at > command_at ? chosen->spec : nullptr);
  }
  if (chosen != nullptr) {
    for (const std::string& word : chosen->app->remaining()) {
      if (absl::StartsWith(word, "-")) return UnknownFlag(word, chosen->spec);
      // A positional that CLI11 left over (it takes them all): keep it.
      cl.args.push_back(word);
    }
    cl.command = chosen->spec->name;
    cl.args.insert(cl.args.begin(), chosen->args.begin(), chosen->args.end());
    for (const auto& [name, option] : chosen->given) {
      if (option->count() > 0) {
        cl.flags[name] =
            option->get_expected_min() == 0 ? "" : chosen->values.at(name);
      }
    }
  }
  for (const auto& [name, option] : global_given) {
    if (option->count() > 0) {
      cl.flags[name] =
          option->get_expected_min() == 0 ? "" : global_values.at(name);
    }
  }
  cl.help = cl.Has("help");
  cl.version = cl.Has("version");
  cl.flags.erase("help");
  cl.flags.erase("version");
  if (cl.command == "help") {
    if (cl.args.size() > 1) {
      return absl::InvalidArgumentError("help takes at most one COMMAND");
    }
    cl.help = true;
    cl.command = cl.args.empty() ? "" : cl.args[0];
    cl.args.clear();
    if (!cl.command.empty() && FindCommand(cl.command) == nullptr) {
      return UnknownCommand(cl.command);
    }
  }
  return cl;
}

absl::StatusOr<absl::Duration> DurationFlag(const CommandLine& cl,
                                            const std::string& name,
                                            absl::Duration fallback) {
  if (!cl.Has(name)) return fallback;
  absl::Duration d;
  if (!absl::ParseDuration(cl.Get(name), &d) || d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", cl.Get(name),
                     ": expected a positive duration like 300ms, 30s, 5m"));
  }
  return d;
}

absl::StatusOr<int> IntFlag(const CommandLine& cl, const std::string& name,
                            int fallback) {
  if (!cl.Has(name)) return fallback;
  int v = 0;
  if (!absl::SimpleAtoi(cl.Get(name), &v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", cl.Get(name), ": expected a non-negative integer"));
  }
  return v;
}

std::string Usage() {
  std::string out =
      "gputunectl: inspect and operate gputuned, the per-GPU tuning daemon.\n"
      "\n"
      "usage: gputunectl [global flags] COMMAND [args] [flags]\n"
      "       gputunectl help COMMAND    (or COMMAND --help): one command\n"
      "\n"
      "commands:\n";
  size_t width = 0;
  for (const CommandSpec& c : Commands()) {
    width = std::max(width, c.name.size() + 1 + c.args.size());
  }
  for (const CommandSpec& c : Commands()) {
    const std::string synopsis =
        c.args.empty() ? c.name : absl::StrCat(c.name, " ", c.args);
    absl::StrAppend(&out, "  ", synopsis,
                    std::string(width - synopsis.size() + 2, ' '), c.summary,
                    "\n");
  }
  absl::StrAppend(&out, "\nglobal flags:\n", FlagTable(GlobalFlags()), "\n",
                  kEndpointHelp, "\n", kKeyHelp, "\n", kExitHelp);
  return out;
}

std::string CommandHelp(const CommandSpec& command) {
  std::string out = absl::StrCat("usage: gputunectl ", command.name,
                                 command.args.empty() ? "" : " " + command.args,
                                 command.flags.empty() ? "" : " [flags]",
                                 "\n\n", Wrap(command.description, 78, ""));
  if (!command.flags.empty()) {
    absl::StrAppend(&out, "\nflags:\n", FlagTable(command.flags));
  }
  absl::StrAppend(&out, "\nglobal flags:\n", FlagTable(GlobalFlags()));
  if (absl::StrContains(command.args, "KEY")) {
    absl::StrAppend(&out, "\n", kKeyHelp);
  }
  return out;
}

std::string ManPage() {
  std::string out =
      ".\\\" Generated from gputunectl's help table (client/gputunectl/cli.cc)."
      "\n.TH GPUTUNECTL 1 \"\" \"gputune\" \"gputune manual\"\n"
      ".SH NAME\ngputunectl \\- inspect and operate gputuned, the per-GPU "
      "tuning daemon\n"
      ".SH SYNOPSIS\n.B gputunectl\n[\\fIglobal flags\\fR] \\fICOMMAND\\fR "
      "[\\fIargs\\fR] [\\fIflags\\fR]\n"
      ".SH DESCRIPTION\ngputunectl talks to one gputuned (one daemon per GPU) "
      "over its unix socket: it lists, shows, deletes, exports and imports "
      "tuning entries, claims keys, starts benchmark jobs and administers the "
      "daemon.\n.PP\n";
  absl::StrAppend(&out,
                  RoffEscape(absl::StrReplaceAll(kEndpointHelp, {{"\n", " "}})),
                  "\n.SH COMMANDS\n");
  auto flags = [&](const std::vector<FlagSpec>& list) {
    for (const FlagSpec& f : list) {
      absl::StrAppend(&out, ".TP\n.B ", RoffEscape(FlagSynopsis(f)), "\n",
                      RoffEscape(f.help + FlagChoices(f)), "\n");
    }
  };
  for (const CommandSpec& c : Commands()) {
    absl::StrAppend(&out, ".SS ", RoffEscape(c.name),
                    c.args.empty() ? "" : " " + RoffEscape(c.args), "\n");
    for (absl::string_view paragraph : absl::StrSplit(c.description, "\n\n")) {
      absl::StrAppend(&out, RoffEscape(paragraph), "\n.PP\n");
    }
    if (!c.flags.empty()) {
      absl::StrAppend(&out, ".RS\n");
      flags(c.flags);
      absl::StrAppend(&out, ".RE\n");
    }
  }
  absl::StrAppend(&out, ".SH GLOBAL FLAGS\n");
  flags(GlobalFlags());
  absl::StrAppend(&out, ".SH KEYS\n.nf\n", RoffEscape(kKeyHelp), ".fi\n",
                  ".SH ENVIRONMENT\n.TP\n.B GPUTUNE_ENDPOINT\nThe daemon to "
                  "talk to when neither \\-\\-endpoint nor \\-\\-device is "
                  "given.\n",
                  ".SH EXIT STATUS\n",
                  RoffEscape(absl::StrReplaceAll(kExitHelp, {{"\n", " "}})),
                  "\n.SH SEE ALSO\n.BR gputuned (8)\n");
  return out;
}

std::string RoffEscape(absl::string_view text) {
  std::string out = absl::StrReplaceAll(text, {{"\\", "\\e"}, {"-", "\\-"}});
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

std::string BashCompletion() {
  std::vector<std::string> names;
  for (const CommandSpec& c : Commands()) names.push_back(c.name);
  auto words = [](const std::vector<FlagSpec>& flags) {
    std::vector<std::string> out;
    for (const FlagSpec& f : flags) {
      out.push_back(f.value.empty() ? "--" + f.name : "--" + f.name + "=");
    }
    return absl::StrJoin(out, " ");
  };
  std::string out = absl::StrCat(
      "# bash completion for gputunectl. Generated from its help table\n"
      "# (client/gputunectl/cli.cc); do not edit.\n"
      "_gputunectl() {\n"
      "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" flag=\"\" cmd=\"\" i\n"
      "  # bash splits --flag=value at '=': complete the value of --flag.\n"
      "  if [[ $cur == \"=\" ]]; then\n"
      "    flag=\"${COMP_WORDS[COMP_CWORD-1]}\"; cur=\"\"\n"
      "  elif (( COMP_CWORD > 1 )) && [[ ${COMP_WORDS[COMP_CWORD-1]} == \"=\" "
      "]]; "
      "then\n"
      "    flag=\"${COMP_WORDS[COMP_CWORD-2]}\"\n"
      "  fi\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    case \"${COMP_WORDS[i]}\" in\n"
      "      -*|=) ;;\n"
      "      *) [[ ${COMP_WORDS[i-1]} == \"=\" ]] || { "
      "cmd=\"${COMP_WORDS[i]}\"; "
      "break; } ;;\n"
      "    esac\n"
      "  done\n"
      "  local values=\"\"\n"
      "  case \"$flag\" in\n");
  std::map<std::string, std::vector<std::string>> choices;
  for (const CommandSpec& c : Commands()) {
    for (const FlagSpec& f : c.flags) {
      if (!f.choices.empty()) choices[f.name] = f.choices;
    }
  }
  for (const auto& [name, values] : choices) {
    absl::StrAppend(&out, "    --", name, ") values=\"",
                    absl::StrJoin(values, " "), "\" ;;\n");
  }
  absl::StrAppend(&out,
                  "  esac\n"
                  "  if [[ -n $flag ]]; then\n"
                  "    COMPREPLY=($(compgen -W \"$values\" -- \"$cur\"))\n"
                  "    return\n"
                  "  fi\n"
                  "  local globals=\"",
                  words(GlobalFlags()),
                  "\" flags=\"\" args=\"\"\n"
                  "  case \"$cmd\" in\n"
                  "    \"\") args=\"",
                  absl::StrJoin(names, " "), "\" ;;\n");
  for (const CommandSpec& c : Commands()) {
    absl::StrAppend(&out, "    ", c.name, ") flags=\"", words(c.flags), "\"");
    if (c.complete == "command") {
      absl::StrAppend(&out, "; args=\"", absl::StrJoin(names, " "), "\"");
    } else if (c.name == "log-level") {
      absl::StrAppend(&out,
                      "; args=\"trace debug info warn error critical off\"");
    }
    absl::StrAppend(&out, " ;;\n");
  }
  absl::StrAppend(
      &out,
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$flags $globals\" -- \"$cur\"))\n"
      "    [[ ${COMPREPLY[0]-} == *= ]] && compopt -o nospace 2>/dev/null\n"
      "    return\n"
      "  fi\n"
      "  case \"$cmd\" in\n"
      "    ",
      [] {
        std::vector<std::string> file;
        for (const CommandSpec& c : Commands()) {
          if (c.complete == "file") file.push_back(c.name);
        }
        return absl::StrJoin(file, "|");
      }(),
      ") COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
      "    *) COMPREPLY=($(compgen -W \"$args\" -- \"$cur\")) ;;\n"
      "  esac\n"
      "}\n"
      "complete -F _gputunectl gputunectl\n");
  return out;
}

}  // namespace gputune::ctl
