#include "client/sync/gputune_sync.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/gputunectl/commands.h"
#include "client/gputunectl/tool_formats.h"
#include "client/sync/cache_sync.h"
#include "client/sync/host_lock.h"
#include "gputune/client.h"
#include "version/build_info.h"

extern char** environ;

namespace gputune::sync {
namespace {

// The signals passed on to COMMAND (the ones a launcher, a scheduler or a
// person sends to stop or poke a job).
constexpr int kForwarded[] = {SIGINT,  SIGTERM, SIGHUP,
                              SIGQUIT, SIGUSR1, SIGUSR2};

// --interval: a duration (300ms, 30s, 5m) or a number of seconds.
absl::StatusOr<absl::Duration> ParseInterval(const std::string& text) {
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    d = absl::ZeroDuration();
  }
  if (d < absl::Milliseconds(10) || d > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--interval=", text,
        ": expected seconds (30) or a duration (300ms, 30s, 5m) between 10ms "
        "and 24h"));
  }
  return d;
}

// COMMAND's exit status as a shell reports it.
int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

absl::StatusOr<SyncCommandLine> ParseSyncCommandLine(
    const std::vector<std::string>& argv) {
  SyncCommandLine cl;
  // Everything after the first "--" is COMMAND, untouched.
  std::vector<std::string> flags = argv;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--") {
      flags.assign(argv.begin(), argv.begin() + i);
      cl.command.assign(argv.begin() + i + 1, argv.end());
      break;
    }
  }
  CLI::App app("gputune-sync", "gputune-sync");
  app.set_help_flag();
  std::string interval;
  std::string timeout;
  std::string endpoint;
  std::string device;
  std::string gpu;
  app.add_option("--format", cl.format)
      ->check(CLI::IsMember(ctl::ToolFormats()));
  app.add_option("--path", cl.path);
  app.add_option("--match", cl.match);
  app.add_option("--interval", interval);
  app.add_option("--timeout", timeout);
  auto* endpoint_flag = app.add_option("--endpoint", endpoint);
  auto* device_flag = app.add_option("--device", device);
  auto* gpu_flag = app.add_option("--gpu", gpu);
  app.add_flag("-h,--help", cl.help);
  app.add_flag("--version", cl.version);
  std::vector<std::string> reversed(flags.rbegin(), flags.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (cl.help || cl.version) return cl;
  if (cl.format.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--format is required: one of ",
                     absl::StrJoin(ctl::ToolFormats(), ", ")));
  }
  if (cl.path.empty()) {
    return absl::InvalidArgumentError(
        "--path is required: the cache file the tool reads and writes");
  }
  if (cl.command.empty()) {
    return absl::InvalidArgumentError(
        "no COMMAND: give it after \"--\" (gputune-sync --format=F --path=P "
        "-- COMMAND...)");
  }
  if (!interval.empty()) {
    absl::StatusOr<absl::Duration> d = ParseInterval(interval);
    if (!d.ok()) return d.status();
    cl.interval = *d;
  }
  if (!timeout.empty()) {
    ctl::CommandLine t;
    t.flags["timeout"] = timeout;
    absl::StatusOr<absl::Duration> d =
        ctl::DurationFlag(t, "timeout", cl.timeout);
    if (!d.ok()) return d.status();
    cl.timeout = *d;
  }
  if (endpoint_flag->count() > 0) cl.target.flags["endpoint"] = endpoint;
  if (device_flag->count() > 0) cl.target.flags["device"] = device;
  if (gpu_flag->count() > 0) cl.target.flags["gpu"] = gpu;
  return cl;
}

std::string SyncHelp() {
  return absl::StrCat(
      R"(NAME
  gputune-sync - run a job with a tuner's cache file kept in gputuned

SYNOPSIS
  gputune-sync --format=F --path=P [--interval=S] [--match=FILE]
               [--endpoint=E | --device=N | --gpu=UUID] [--timeout=D]
               -- COMMAND [ARG...]

DESCRIPTION
  Some tuners keep their results in a file of their own: PyTorch TunableOp,
  TensorRT-LLM's AutoTuner, FlashInfer's autotuner. gputune-sync makes that
  file the same on every rank and every host of a GPU model, and keeps what
  any of them tunes:

  1. Before COMMAND starts, the first gputune-sync of the host writes P from
     gputuned's entries of the tool's version (P's own version when P
     exists, else --match's, else the only one gputuned holds), atomically
     (a temporary file, synced and renamed). The others (one per rank)
     wait for it and start COMMAND with the same bytes. A job is everything
     that starts while one of its COMMANDs runs. When gputuned has no such
     entries, or cannot be reached, P is left as it is (that is said) and
     COMMAND runs with it.
  2. COMMAND runs with gputune-sync's environment; the signals INT, TERM,
     HUP, QUIT, USR1 and USR2 sent to gputune-sync are passed on to it
     (a terminal's Ctrl-C reaches it directly and is not sent twice).
  3. Every --interval and when COMMAND exits, the rows COMMAND added to P
     are imported into gputuned: each new row once, by whichever rank's
     gputune-sync finds it first. A crash of the job loses at most one
     interval; the rows a killed job added after its last import are
     imported before the next job's P is written. Rows that do not parse
     are reported by line and skipped.

  With gputuned's fleet tier, what one host imported reaches the daemons of
  the other hosts of the fingerprint, and their next jobs start with it.
  Formats, the tool versions followed, and launches for vLLM, SGLang and
  TensorRT-LLM: docs/integrations.md, "File-based tuners".

OPTIONS
  --format=F      the tool's file format: )",
      absl::StrJoin(ctl::ToolFormats(), ", "), R"(
  --path=P        the cache file the tool reads and writes; its directory
                  (made when missing) must be writable: P.gputune-sync.lock
                  and P.gputune-sync.seen are kept next to it
  --interval=S    import what COMMAND added every S seconds (or a duration:
                  300ms, 30s, 5m; default 60s)
  --match=FILE    when P does not exist, write the entries of FILE's tool
                  version (a cache file of the format, or just its metadata)
  --endpoint=E    the gputuned to use (unix:///run/gputuned/gpu0.sock,
                  host:port); default $GPUTUNE_ENDPOINT, else GPU 0's
  --device=N      the gputuned of the host's GPU N
  --gpu=UUID      the gputuned of this GPU (by-uuid/UUID.sock)
  --timeout=D     deadline of each call to gputuned (default 30s)
  -h, --help      this text
  --version       the version line

FILES
  P.gputune-sync.lock   the host's lock: one gputune-sync at a time reads,
                        imports and writes P; never removed
  P.gputune-sync.seen   P as gputuned is known to have it (a row not in it
                        is new)

EXIT STATUS
  COMMAND's exit code, or 128 + the signal that ended it. Before COMMAND
  runs: 2 for a bad command line, 126 when COMMAND cannot be executed, 127
  when it is not found. Problems with gputuned or P never change the exit
  code: they are reported on stderr, lines starting "gputune-sync: ".

ENVIRONMENT
  GPUTUNE_ENDPOINT   the gputuned to use when no flag names one

EXAMPLES
  torchrun --nproc-per-node=8 gputune-sync --format=tunableop \
      --path=/cache/tunableop_results.csv -- python train.py
  gputune-sync --format=trtllm --path=/cache/autotuner.json -- \
      trtllm-serve MODEL
)");
}

int SyncMain(const std::vector<std::string>& argv, std::ostream& out,
             std::ostream& err) {
  absl::StatusOr<SyncCommandLine> cl = ParseSyncCommandLine(argv);
  if (!cl.ok()) {
    err << "gputune-sync: " << cl.status().message()
        << "\n(gputune-sync --help shows the flags)\n";
    return kSyncUsage;
  }
  if (cl->help) {
    out << SyncHelp();
    return 0;
  }
  if (cl->version) {
    out << VersionLine("gputune-sync") << "\n";
    return 0;
  }
  // Blocked from here, so that every thread started later (gRPC's) has them
  // blocked too and they wait for sigtimedwait below. COMMAND gets the mask
  // gputune-sync was started with.
  sigset_t waited;
  sigemptyset(&waited);
  for (int sig : kForwarded) sigaddset(&waited, sig);
  sigaddset(&waited, SIGCHLD);
  sigset_t original;
  pthread_sigmask(SIG_BLOCK, &waited, &original);
  // gRPC ignores SIGPIPE; COMMAND gets it back as it was.
  struct sigaction pipe_action = {};
  sigaction(SIGPIPE, nullptr, &pipe_action);
  const bool pipe_default = pipe_action.sa_handler == SIG_DFL;

  absl::StatusOr<ctl::Target> target =
      ctl::ResolveTarget(cl->target, std::getenv("GPUTUNE_ENDPOINT"));
  if (!target.ok()) {
    err << "gputune-sync: " << target.status().message() << "\n";
    return kSyncUsage;
  }
  ClientOptions options;
  options.endpoint = target->endpoint;
  options.gpu_uuid = target->gpu_uuid;
  options.deadline = cl->timeout;
  options.lookup_deadline = cl->timeout;
  options.memo_capacity = 0;  // it lists and imports; nothing to memoise
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) {
    err << "gputune-sync: " << client.status().message() << "\n";
    return kSyncUsage;
  }
  // The tool would make P's directory itself (TensorRT-LLM and FlashInfer
  // do); the lock file needs it first.
  std::error_code made;
  const std::filesystem::path parent =
      std::filesystem::path(cl->path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, made);
  absl::StatusOr<HostLock> lock =
      HostLock::Open(cl->path + ".gputune-sync.lock");
  if (!lock.ok()) {
    err << "gputune-sync: " << lock.status().message() << "\n";
    return kSyncUsage;
  }
  CacheSync cache(**client, cl->format, cl->path, cl->match, err);
  // Locking errors (fcntl on a local file) are not expected; if one comes,
  // the job runs unsynchronised rather than not at all.
  auto report = [&](const absl::Status& s) {
    if (!s.ok()) err << "gputune-sync: " << s.message() << std::endl;
    return s.ok();
  };
  if (report(lock->LockFiles())) {
    absl::StatusOr<bool> first = lock->StartJob();
    if (report(first.status()) && *first) {
      cache.WriteBeforeJob();
    } else if (first.ok()) {
      err << "gputune-sync: " << cl->path
          << " was written for this job by another rank's gputune-sync"
          << std::endl;
    }
    report(lock->JoinJob());
    report(lock->UnlockFiles());
  }
  auto import_new = [&] {
    if (report(lock->LockFiles())) {
      cache.ImportNew();
      report(lock->UnlockFiles());
    }
  };

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The forwarded signals were blocked, not handled: their dispositions are
  // still the ones gputune-sync was given (an ignored SIGHUP under nohup
  // stays ignored).
  sigset_t defaults;
  sigemptyset(&defaults);
  if (pipe_default) sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &original);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (std::string& a : cl->command) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t child = -1;
  const int spawned =
      posix_spawnp(&child, args[0], nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    err << "gputune-sync: cannot run " << cl->command[0] << ": "
        << std::strerror(spawned) << "\n";
    return spawned == ENOENT ? kSyncNotFound : kSyncCannotExecute;
  }

  int status = 0;
  bool exited = false;
  absl::Time next_import = absl::Now() + cl->interval;
  while (!exited) {
    const absl::Duration left =
        std::max(next_import - absl::Now(), absl::ZeroDuration());
    const timespec wait = absl::ToTimespec(left);
    siginfo_t info;
    const int sig = sigtimedwait(&waited, &info, &wait);
    if (sig < 0 && errno != EAGAIN && errno != EINTR) {
      err << "gputune-sync: sigtimedwait: " << std::strerror(errno) << "\n";
    }
    if (sig > 0 && sig != SIGCHLD) {
      // A terminal sends INT and QUIT to its whole foreground process
      // group, COMMAND included: passing it on would send it twice.
      const bool from_terminal =
          info.si_code == SI_KERNEL && (sig == SIGINT || sig == SIGQUIT);
      if (!from_terminal) kill(child, sig);
    }
    // SIGCHLD may have come with another signal, or merged with an earlier
    // one: ask every time.
    if (waitpid(child, &status, WNOHANG) == child) exited = true;
    if (!exited && absl::Now() >= next_import) {
      import_new();
      next_import = absl::Now() + cl->interval;
    }
  }
  import_new();
  return ExitCodeOf(status);
}

}  // namespace gputune::sync
