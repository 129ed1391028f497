// gputunectl against a real gputuned: tables, --json, exit codes, and the
// export/import round trip.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "absl/strings/str_replace.h"
#include "client/gputunectl/cli.h"
#include "client/gputunectl/commands.h"
#include "client/gputunectl/entry_io.h"
#include "google/protobuf/util/json_util.h"
#include "proto/entry_summary.h"
#include "proto/key_format.h"
#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

using ctl::kExitConflict;
using ctl::kExitInvalid;
using ctl::kExitNotFound;
using ctl::kExitOk;
using ctl::kExitUnavailable;
using ctl::kExitUsage;

const char kKey[] = "dense_bf16/decode/attn.qkv/m=1/k=256/n=512@cs1";

// Deterministic bytes (map fields in key order) of what must survive an
// export/import: the execution and every measurement.
std::string Payload(const v1::Entry& e) {
  std::string out = DeterministicBytes(e.execution());
  for (const auto& m : e.measurements()) out += DeterministicBytes(m);
  return out;
}

std::map<std::string, v1::Entry> AllEntries(Client& client) {
  v1::ListEntriesRequest request;
  request.set_page_size(1000);
  request.set_with_measurements(true);
  std::map<std::string, v1::Entry> out;
  absl::StatusOr<v1::ListEntriesResponse> page = client.ListEntries(request);
  REQUIRE(page.ok());
  for (const v1::Entry& e : page->entries()) out[KeyText(e.key())] = e;
  return out;
}

std::string TempPath(const DaemonProcess& daemon, const std::string& name) {
  return daemon.dir() + "/" + name;
}

// Runs ctl::Main without the test helper's --endpoint, so the environment
// and --device decide; `terminal` stands in for the process's.
CtlResult RunCtlPlain(std::vector<std::string> args,
                      ctl::Terminal terminal = {}) {
  std::ostringstream out, err;
  CtlResult r;
  r.exit_code = ctl::Main(args, out, err, terminal);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// gputunectl (the binary) run as a child: its exit status and stderr.
// `uid` >= 0 runs it as that user; `interrupt_when` sends SIGINT once its
// stderr contains that text.
struct ChildResult {
  int exit_code = -1;
  bool signalled = false;
  std::string err;
};
ChildResult RunCtlBinary(const std::string& dir,
                         const std::vector<std::string>& args, int uid = -1,
                         const std::string& interrupt_when = "") {
  const std::string err_path = dir + "/ctl.stderr";
  std::vector<std::string> argv = {GPUTUNECTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    const int null = open("/dev/null", O_RDWR);
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    if (uid >= 0 && (setgid(uid) != 0 || setuid(uid) != 0)) _exit(100);
    execv(c_argv[0], c_argv.data());
    _exit(101);
  }
  auto read_err = [&] {
    std::ifstream in(err_path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  if (!interrupt_when.empty()) {
    const bool seen = Eventually(
        [&] { return read_err().find(interrupt_when) != std::string::npos; },
        std::chrono::milliseconds(20000));
    INFO(read_err());
    CHECK(seen);
    kill(pid, SIGINT);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ChildResult r;
  r.signalled = WIFSIGNALED(status);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_err();
  return r;
}

TEST_CASE("an explicit --device wins over $GPUTUNE_ENDPOINT") {
  DaemonProcess zero({"--backend=none"});
  auto client = ClientOf(zero);
  MakeHit(*client, CustomKey("gpu0=1"));
  ScopedEnv env("GPUTUNE_ENDPOINT", zero.endpoint());

  // README's `export GPUTUNE_ENDPOINT=...`, then another GPU's daemon asked
  // for by flag: the flag's daemon (absent here), never the environment's.
  CtlResult r = RunCtlPlain({"--device=1", "delete", "--all", "--yes"});
  INFO(r.err);
  REQUIRE(r.exit_code == kExitUnavailable);
  REQUIRE(r.err.find("unix:///run/gputuned/gpu1.sock") != std::string::npos);
  REQUIRE(r.err.find(zero.endpoint()) == std::string::npos);
  REQUIRE(AllEntries(*client).size() == 1);  // GPU 0's cache is untouched

  // Without a flag the environment decides.
  CtlResult listed = RunCtlPlain({"list", "--json"});
  REQUIRE(listed.exit_code == kExitOk);
  REQUIRE(listed.out.find("gpu0=1") != std::string::npos);

  // --endpoint wins too; --endpoint and --device together are refused.
  DaemonProcess other({"--backend=none"});
  CtlResult deleted = RunCtlPlain(
      {"--endpoint=" + other.endpoint(), "delete", "--all", "--yes"});
  REQUIRE(deleted.exit_code == kExitOk);
  REQUIRE(deleted.err.find(other.endpoint()) != std::string::npos);
  REQUIRE(AllEntries(*client).size() == 1);
  CtlResult both =
      RunCtlPlain({"--endpoint=" + other.endpoint(), "--device=1", "status"});
  REQUIRE(both.exit_code == kExitUsage);
  REQUIRE(both.err.find("give one") != std::string::npos);

  ctl::CommandLine cl;
  cl.flags["device"] = "3";
  absl::StatusOr<ctl::Target> target =
      ctl::ResolveTarget(cl, zero.endpoint().c_str());
  REQUIRE(target.ok());
  REQUIRE(target->endpoint == "unix:///run/gputuned/gpu3.sock");
  REQUIRE(target->chosen_by == "--device=3");
  REQUIRE(ctl::ResolveTarget(ctl::CommandLine{}, "unix:///x.sock")->chosen_by ==
          "$GPUTUNE_ENDPOINT");
}

TEST_CASE("delete --all names the daemon and asks before deleting") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  MakeHit(*client, CustomKey("ask=1"));
  MakeHit(*client, CustomKey("ask=2"));

  SECTION("not on a terminal it needs --yes") {
    CtlResult r = RunCtl(daemon, {"delete", "--all"});
    REQUIRE(r.exit_code == kExitUsage);
    REQUIRE(r.err.find("add --yes") != std::string::npos);
    REQUIRE(AllEntries(*client).size() == 2);
  }
  SECTION("on a terminal, anything but yes keeps the entries") {
    std::istringstream answer("n\n");
    CtlResult r =
        RunCtlPlain({"--endpoint=" + daemon.endpoint(), "delete", "--all"},
                    ctl::Terminal{&answer, true, false});
    REQUIRE(r.exit_code == ctl::kExitError);
    REQUIRE(r.err.find("delete every entry? [y/N]") != std::string::npos);
    REQUIRE(r.err.find("nothing deleted") != std::string::npos);
    REQUIRE(AllEntries(*client).size() == 2);
  }
  SECTION("on a terminal, y deletes; the daemon is named first") {
    std::istringstream answer("y\n");
    CtlResult r =
        RunCtlPlain({"--endpoint=" + daemon.endpoint(), "delete", "--all"},
                    ctl::Terminal{&answer, true, false});
    INFO(r.err);
    REQUIRE(r.exit_code == kExitOk);
    REQUIRE(r.err.rfind("gputunectl: delete on gputuned at " +
                            daemon.endpoint() + " (chosen by --endpoint): ",
                        0) == 0);
    REQUIRE(r.err.find("2 entries") != std::string::npos);
    REQUIRE(AllEntries(*client).empty());
  }
}

TEST_CASE("import and abandon name the daemon they act on") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  MakeHit(*client, CustomKey("named=1"));
  const std::string file = TempPath(daemon, "named.jsonl");
  REQUIRE(RunCtl(daemon, {"export", file}).exit_code == kExitOk);
  CtlResult imported = RunCtl(daemon, {"import", file});
  REQUIRE(imported.exit_code == kExitOk);
  REQUIRE(imported.err.find("import on gputuned at " + daemon.endpoint()) !=
          std::string::npos);
  CtlResult claimed = RunCtl(daemon, {"claim", kKey, "--json"});
  v1::ClaimResponse claim;
  REQUIRE(
      google::protobuf::util::JsonStringToMessage(claimed.out, &claim).ok());
  CtlResult abandoned =
      RunCtl(daemon, {"abandon", std::to_string(claim.claim().claim_id())});
  REQUIRE(abandoned.exit_code == kExitOk);
  REQUIRE(abandoned.err.find("abandon on gputuned at " + daemon.endpoint()) !=
          std::string::npos);
}

TEST_CASE("gputunectl help, --help and --version") {
  const ctl::CommandSpec* list = ctl::FindCommand("list");
  REQUIRE(list != nullptr);
  CtlResult help = RunCtlPlain({"help", "list"});
  REQUIRE(help.exit_code == kExitOk);
  REQUIRE(help.out == ctl::CommandHelp(*list));
  REQUIRE(help.out.rfind("usage: gputunectl list [flags]", 0) == 0);
  REQUIRE(help.out.find("--page-token=TOKEN") != std::string::npos);
  REQUIRE(RunCtlPlain({"list", "--help"}).out == help.out);
  REQUIRE(RunCtlPlain({"list", "-h"}).out == help.out);
  REQUIRE(RunCtlPlain({"--help"}).out == ctl::Usage());
  REQUIRE(RunCtlPlain({"help"}).out == ctl::Usage());
  REQUIRE(RunCtlPlain({"help", "lsit"}).err.find("did you mean list?") !=
          std::string::npos);
  // No command: the overview on stderr, a usage error.
  CtlResult none = RunCtlPlain({});
  REQUIRE(none.exit_code == kExitUsage);
  REQUIRE(none.err == ctl::Usage());

  CtlResult version = RunCtlPlain({"--version"});
  REQUIRE(version.exit_code == kExitOk);
  INFO(version.out);
  REQUIRE(version.out.rfind("gputunectl " GPUTUNE_PROJECT_VERSION " (git ",
                            0) == 0);
  REQUIRE(version.out.find("; backends: host") != std::string::npos);
}

TEST_CASE("both binaries' --version name one revision and the backends") {
  // The real binaries, as an operator runs them.
  std::string daemon_out, ctl_out, help;
  REQUIRE(RunProgram(GPUTUNED_PATH, {"--version"}, &daemon_out) == 0);
  REQUIRE(RunProgram(GPUTUNECTL_PATH, {"--version"}, &ctl_out) == 0);
  INFO(daemon_out << ctl_out);
  const std::regex line(
      R"(^(gputuned|gputunectl) \d+\.\d+\.\d+ \(git ([0-9a-f]{7,}(-dirty)?|unknown); )"
      R"(backends: host( cuda)?\)\n$)");
  REQUIRE(std::regex_match(daemon_out, line));
  REQUIRE(std::regex_match(ctl_out, line));
  // Same build: everything after the program name is the same.
  CHECK(daemon_out.substr(daemon_out.find(' ')) ==
        ctl_out.substr(ctl_out.find(' ')));
  // --version wins over anything else on the line, and --help lists it.
  std::string with_other;
  REQUIRE(RunProgram(GPUTUNED_PATH, {"--backend=none", "--version"},
                     &with_other) == 0);
  CHECK(with_other == daemon_out);
  REQUIRE(RunProgram(GPUTUNED_PATH, {"--help"}, &help) == 0);
  CHECK(help.rfind("usage: gputuned [--name=value ...] | --help | --version\n",
                   0) == 0);
  CHECK(help.find("\n  --version\n      print the version") !=
        std::string::npos);
}

TEST_CASE("unknown and misplaced flags are refused per command") {
  CtlResult typo = RunCtlPlain({"list", "--limt=3"});
  REQUIRE(typo.exit_code == kExitUsage);
  REQUIRE(typo.err ==
          "gputunectl: unknown flag --limt=3 for list: did you mean "
          "--limit?\n");
  CtlResult other = RunCtlPlain({"list", "--yes"});
  REQUIRE(other.exit_code == kExitUsage);
  REQUIRE(other.err.find("--yes is not a flag of list (delete takes it") !=
          std::string::npos);
  CtlResult before = RunCtlPlain({"--limit=2", "list"});
  REQUIRE(before.exit_code == kExitUsage);
  REQUIRE(before.err.find("put it after the command") != std::string::npos);
  CtlResult command = RunCtlPlain({"lst"});
  REQUIRE(command.exit_code == kExitUsage);
  REQUIRE(command.err.find("did you mean list?") != std::string::npos);
  CtlResult switch_value = RunCtlPlain({"get", "--jsn", kKey});
  REQUIRE(switch_value.err.find("did you mean --json?") != std::string::npos);
  // Global flags go before or after the command, "--name value" or =value.
  DaemonProcess daemon({"--backend=none"});
  REQUIRE(RunCtlPlain({"--endpoint", daemon.endpoint(), "status", "--json"})
              .exit_code == kExitOk);
  REQUIRE(
      RunCtlPlain({"status", "--endpoint", daemon.endpoint(), "--timeout=5s"})
          .exit_code == kExitOk);
}

TEST_CASE("gputunectl --json prints every field, zero or not") {
  DaemonProcess daemon({"--backend=none"});
  CtlResult deleted = RunCtl(daemon, {"delete", kKey, "--json"});
  REQUIRE(deleted.out == "{\"deleted\":0}\n");
  CtlResult status = RunCtl(daemon, {"status", "--json"});
  REQUIRE(status.exit_code == kExitOk);
  for (const char* field :
       {"\"queueDepth\": 0", "\"entries\": \"0\"", "\"jobsFailed\": \"0\"",
        "\"claims\": []", "\"databaseQuarantinedTo\": \"\""}) {
    INFO(field);
    REQUIRE(status.out.find(field) != std::string::npos);
  }
}

TEST_CASE("get on a key being tuned says PENDING and by whom") {
  DaemonProcess daemon({"--backend=none"});
  REQUIRE(RunCtl(daemon, {"claim", kKey, "--holder=ops on-call"}).exit_code ==
          kExitOk);
  CtlResult r = RunCtl(daemon, {"get", kKey});
  REQUIRE(r.exit_code == kExitConflict);
  REQUIRE(r.err.find("PENDING") != std::string::npos);
  REQUIRE(r.err.find("being tuned by 'ops on-call'") != std::string::npos);
  REQUIRE(r.err.find("no entry (") == std::string::npos);
  CtlResult json = RunCtl(daemon, {"get", kKey, "--json"});
  v1::KeyStatus status;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json.out, &status).ok());
  REQUIRE(status.state() == v1::KEY_STATE_PENDING);
  REQUIRE(status.claim().holder() == "ops on-call");
  // A key nobody holds is still "no entry".
  CtlResult missing =
      RunCtl(daemon, {"get", "dense_bf16/decode/attn.qkv/m=2/k=256/n=512@cs1"});
  REQUIRE(missing.exit_code == kExitNotFound);
  REQUIRE(missing.err.find("no entry") != std::string::npos);
}

TEST_CASE("get says stale-but-usable for an entry from older software") {
  DaemonProcess daemon({"--backend=host", "--revalidate_idle=1h"});
  const v1::Key key = CustomKey("old=1");
  ImportFromOlderSoftware(*daemon.Stub(), key);
  CtlResult r = RunCtl(daemon, {"get", KeyText(key)});
  REQUIRE(r.exit_code == kExitOk);
  REQUIRE(r.out.find("stale-but-usable (measured on this device model with "
                     "other software") != std::string::npos);
  CtlResult json = RunCtl(daemon, {"get", KeyText(key), "--json"});
  REQUIRE(json.out.find("\"staleUsable\": true") != std::string::npos);
  v1::Key other = key;
  other.set_candidate_set("cs2");
  CtlResult plain = RunCtl(daemon, {"get", KeyText(other)});
  REQUIRE(plain.out.find("stale-but-usable") == std::string::npos);
  REQUIRE(plain.out.find("stale (") != std::string::npos);
}

TEST_CASE("a socket this user may not open says join group gputune") {
  DaemonProcess daemon({"--backend=none"});
  REQUIRE(chmod(daemon.socket_path().c_str(), 0600) == 0);
  REQUIRE(chmod(daemon.dir().c_str(), 0755) == 0);
  if (geteuid() != 0) {
    // Only root can become another user; as anyone else, use a socket owned
    // by someone else (not arranged here).
    WARN("skipped: needs root to run gputunectl as nobody");
    return;
  }
  ChildResult r =
      RunCtlBinary(daemon.dir(), {"--endpoint=" + daemon.endpoint(), "status"},
                   /*uid=*/65534);
  INFO(r.err);
  REQUIRE(r.exit_code == ctl::kExitError);
  REQUIRE(r.err.find("permission denied: join group gputune") !=
          std::string::npos);
  REQUIRE(r.err.find("is it running") == std::string::npos);
}

TEST_CASE("backup refuses a relative path and a missing directory") {
  DaemonProcess daemon({"--backend=none"});
  CtlResult relative = RunCtl(daemon, {"backup", "relative.db"});
  REQUIRE(relative.exit_code == kExitUsage);
  REQUIRE(relative.err.find("must be absolute") != std::string::npos);
  const std::string missing = daemon.dir() + "/no/such/dir/b.db";
  CtlResult nodir = RunCtl(daemon, {"backup", missing});
  REQUIRE(nodir.exit_code == kExitNotFound);
  REQUIRE(nodir.err.find("the directory " + daemon.dir() +
                         "/no/such/dir does not exist") != std::string::npos);
}

TEST_CASE("tune on a terminal keeps one live progress line") {
  DaemonProcess daemon({"--backend=host", "--tune_budget=300ms"});
  CtlResult r = RunCtlPlain(
      {"--endpoint=" + daemon.endpoint(), "tune", kKey, "--poll=10ms"},
      ctl::Terminal{nullptr, false, /*err_is_terminal=*/true});
  INFO(r.err);
  REQUIRE(r.exit_code == kExitOk);
  // Each update returns to the start of the line and erases it; the line
  // ends once, when the job is done.
  REQUIRE(r.err.find("\r\033[Ktune " + std::string(kKey) + ": ") !=
          std::string::npos);
  REQUIRE(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  REQUIRE(r.err.find("candidates measured, ") != std::string::npos);
}

TEST_CASE("Ctrl-C during tune says the job goes on in the daemon") {
  DaemonProcess daemon({"--backend=host", "--tune_budget=3s"});
  ChildResult r = RunCtlBinary(
      daemon.dir(),
      {"--endpoint=" + daemon.endpoint(), "tune", kKey, "--poll=20ms"},
      /*uid=*/-1, /*interrupt_when=*/"benchmarking");
  INFO(r.err);
  REQUIRE(r.exit_code == 130);
  REQUIRE(r.err.find("interrupted; the job goes on in the daemon") !=
          std::string::npos);
  auto client = ClientOf(daemon);
  absl::StatusOr<v1::Key> key = ParseKeyText(kKey);
  REQUIRE(Eventually(
      [&] {
        absl::StatusOr<LookupResult> now = client->Lookup(*key);
        return now.ok() && now->state() == v1::KEY_STATE_HIT;
      },
      std::chrono::milliseconds(60000)));
}

TEST_CASE("bash completion and the man page come from the help table") {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("gputunectl_completion_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = dir + "/gputunectl.bash";
  std::ofstream(script) << ctl::BashCompletion();
  auto complete = [&](const std::string& words, int cword) {
    const std::string out = dir + "/out";
    const std::string command =
        "bash -c 'source " + script + "; COMP_WORDS=(" + words +
        "); COMP_CWORD=" + std::to_string(cword) +
        "; _gputunectl; echo \"${COMPREPLY[*]}\"' > " + out + " 2>&1";
    REQUIRE(std::system(command.c_str()) == 0);
    std::ifstream in(out);
    std::string line;
    std::getline(in, line);
    return line;
  };
  REQUIRE(complete("gputunectl li", 1) == "list");
  REQUIRE(complete("gputunectl l", 1) == "list log-level");
  REQUIRE(complete("gputunectl list --ph", 2) == "--phase=");
  REQUIRE(complete("gputunectl list --phase = pre", 4) == "prefill");
  REQUIRE(complete("gputunectl delete --y", 2) == "--yes");
  REQUIRE(complete("gputunectl help me", 2) == "metrics");
  REQUIRE(complete("gputunectl --dev", 1) == "--device=");

  const std::string page = ctl::ManPage();
  for (const ctl::CommandSpec& c : ctl::Commands()) {
    INFO(c.name);
    REQUIRE(page.find(".SS " + absl::StrReplaceAll(c.name, {{"-", "\\-"}})) !=
            std::string::npos);
  }
  std::ofstream(dir + "/gputunectl.1") << page;
  const std::string render = "MANWIDTH=80 man -l " + dir + "/gputunectl.1 2>" +
                             dir + "/man.err > " + dir + "/man.txt";
  if (std::system("command -v man >/dev/null") == 0) {
    REQUIRE(std::system(render.c_str()) == 0);
    std::ifstream err(dir + "/man.err");
    std::stringstream text;
    text << err.rdbuf();
    REQUIRE(text.str().empty());  // no troff warnings
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("gputunectl export, delete, import round-trips every entry") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  for (int i = 0; i < 25; ++i) {
    MakeHit(*client, CustomKey("rt=" + std::to_string(i)),
            "k" + std::to_string(i));
  }
  MakeHit(*client, DenseKey(4, 1024, 2048, "cs9", "mlp.up"));
  const auto before = AllEntries(*client);
  REQUIRE(before.size() == 26);

  const std::string file = TempPath(daemon, "export.jsonl");
  CtlResult exported = RunCtl(daemon, {"export", file});
  REQUIRE(exported.exit_code == kExitOk);
  REQUIRE(exported.err.find("exported 26 entries") != std::string::npos);

  REQUIRE(RunCtl(daemon, {"delete", "--all", "--yes"}).exit_code == kExitOk);
  REQUIRE(AllEntries(*client).empty());

  CtlResult imported = RunCtl(daemon, {"import", file});
  INFO(imported.err);
  REQUIRE(imported.exit_code == kExitOk);
  REQUIRE(imported.out == "imported 26 entries from " + file + "\n");

  const auto after = AllEntries(*client);
  REQUIRE(after.size() == before.size());
  for (const auto& [key, entry] : before) {
    INFO(key);
    REQUIRE(after.count(key) == 1);
    const v1::Entry& back = after.at(key);
    REQUIRE(Payload(back) == Payload(entry));
    // Provenance survives too, except the source, which import sets.
    REQUIRE(back.source() == v1::SOURCE_IMPORTED);
    REQUIRE(back.measured_at().seconds() == entry.measured_at().seconds());
    REQUIRE(back.measured_at().nanos() == entry.measured_at().nanos());
    REQUIRE(back.recorded_by() == entry.recorded_by());
    REQUIRE(back.fingerprint().SerializeAsString() ==
            entry.fingerprint().SerializeAsString());
    REQUIRE(back.speedup() == entry.speedup());
  }
}

TEST_CASE("gputunectl import reports a malformed line and imports nothing") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  MakeHit(*client, CustomKey("bad=1"));
  MakeHit(*client, CustomKey("bad=2"));
  const std::string file = TempPath(daemon, "export.jsonl");
  REQUIRE(RunCtl(daemon, {"export", file}).exit_code == kExitOk);
  REQUIRE(RunCtl(daemon, {"delete", "--all", "--yes"}).exit_code == kExitOk);

  std::string text;
  {
    std::ifstream in(file);
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  SECTION("not JSON") {
    std::ofstream(file) << text << "\n{\"key\": oops\n";
    CtlResult r = RunCtl(daemon, {"import", file});
    REQUIRE(r.exit_code == kExitInvalid);
    REQUIRE(r.err.find(file + ":4: not a gputune.v1.Entry in JSON") !=
            std::string::npos);  // line 3 is blank
    REQUIRE(r.err.find("nothing was imported") != std::string::npos);
  }
  SECTION("JSON that fails validation") {
    std::ofstream(file)
        << R"({"key":{"custom":{"op":"x","params":"p"},"candidateSet":"c"},)"
        << R"("execution":{"kernel":""}})"
        << "\n"
        << text;
    CtlResult r = RunCtl(daemon, {"import", file});
    REQUIRE(r.exit_code == kExitInvalid);
    INFO(r.err);
    REQUIRE(r.err.find(file + ":1: entry.execution.kernel") !=
            std::string::npos);
  }
  SECTION("a key given twice") {
    std::ofstream(file) << text << text;
    CtlResult r = RunCtl(daemon, {"import", file});
    REQUIRE(r.exit_code == kExitInvalid);
    REQUIRE(r.err.find(file + ":3: key test_op/bad=1 was given already on "
                              "line 1") != std::string::npos);
  }
  REQUIRE(AllEntries(*client).empty());
}

TEST_CASE("gputunectl tune shows progress, then every candidate") {
  DaemonProcess daemon({"--backend=host", "--tune_budget=100ms"});
  CtlResult r = RunCtl(daemon, {"tune", kKey, "--poll=20ms"});
  INFO(r.err);
  REQUIRE(r.exit_code == kExitOk);
  REQUIRE(r.out.find("key           " + std::string(kKey)) !=
          std::string::npos);
  REQUIRE(r.out.find("state         hit") != std::string::npos);
  REQUIRE(r.out.find("#  KERNEL") != std::string::npos);
  REQUIRE(r.out.find("chosen") != std::string::npos);
  REQUIRE(r.out.find("default") != std::string::npos);
  // A second tune is a HIT at once.
  CtlResult again = RunCtl(daemon, {"tune", kKey, "--json"});
  REQUIRE(again.exit_code == kExitOk);
  v1::GetEntryResponse parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(again.out, &parsed).ok());
  REQUIRE(parsed.state() == v1::KEY_STATE_HIT);
  REQUIRE(parsed.entry().measurements_size() > 1);
}

TEST_CASE("gputunectl get, list and status print tables and JSON") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  for (int m = 1; m <= 5; ++m) MakeHit(*client, DenseKey(m, 256, 512, "cs1"));
  MakeHit(*client, CustomKey("list=1"));

  CtlResult get = RunCtl(
      daemon, {"get", "dense_bf16/decode/test.role/m=3/k=256/n=512@cs1"});
  REQUIRE(get.exit_code == kExitOk);
  REQUIRE(get.out.find("test.kernel") != std::string::npos);
  REQUIRE(get.out.find("SAMPLES") != std::string::npos);

  CtlResult list = RunCtl(daemon, {"list", "--op=dense_bf16", "--limit=2"});
  REQUIRE(list.exit_code == kExitOk);
  REQUIRE(list.out.rfind("KEY", 0) == 0);
  REQUIRE(std::count(list.out.begin(), list.out.end(), '\n') == 3);
  REQUIRE(list.err.find("--page-token=") != std::string::npos);

  v1::ListEntriesResponse parsed;
  CtlResult custom = RunCtl(daemon, {"list", "--op=test_op", "--json"});
  REQUIRE(
      google::protobuf::util::JsonStringToMessage(custom.out, &parsed).ok());
  REQUIRE(parsed.entries_size() == 1);

  CtlResult status = RunCtl(daemon, {"status"});
  REQUIRE(status.exit_code == kExitOk);
  REQUIRE(status.out.find("6 entries") != std::string::npos);
  CtlResult json = RunCtl(daemon, {"status", "--json"});
  v1::GetStatusResponse s;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json.out, &s).ok());
  REQUIRE(s.entries() == 6);
}

TEST_CASE("gputunectl list --all follows every page") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  for (int i = 0; i < 5; ++i)
    MakeHit(*client, CustomKey("page=" + std::to_string(i)));
  CtlResult all = RunCtl(daemon, {"list", "--all", "--limit=2", "--json"});
  INFO(all.err);
  REQUIRE(all.exit_code == kExitOk);
  v1::ListEntriesResponse parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(all.out, &parsed).ok());
  REQUIRE(parsed.entries_size() == 5);
}

TEST_CASE("gputunectl claim holds a key until abandon") {
  DaemonProcess daemon({"--backend=none"});
  CtlResult claimed = RunCtl(daemon, {"claim", kKey, "--holder=ops on-call"});
  INFO(claimed.err);
  REQUIRE(claimed.exit_code == kExitOk);
  auto client = ClientOf(daemon);
  absl::StatusOr<v1::Key> key = ParseKeyText(kKey);
  absl::StatusOr<LookupResult> state = client->Lookup(*key);
  REQUIRE(state->state() == v1::KEY_STATE_PENDING);
  REQUIRE(state->status().claim().holder() == "ops on-call");
  const uint64_t id = state->status().claim().claim_id();

  CtlResult status = RunCtl(daemon, {"status"});
  REQUIRE(status.out.find("ops on-call") != std::string::npos);
  REQUIRE(RunCtl(daemon, {"claim", kKey}).exit_code == kExitConflict);

  CtlResult abandoned = RunCtl(daemon, {"abandon", std::to_string(id)});
  REQUIRE(abandoned.exit_code == kExitOk);
  REQUIRE(abandoned.out.find("now miss") != std::string::npos);
  REQUIRE(RunCtl(daemon, {"abandon", std::to_string(id)}).exit_code ==
          kExitConflict);
}

TEST_CASE("gputunectl backup and log-level") {
  DaemonProcess daemon({"--backend=none"});
  const std::string path = TempPath(daemon, "backup.db");
  CtlResult backup = RunCtl(daemon, {"backup", path});
  INFO(backup.err);
  REQUIRE(backup.exit_code == kExitOk);
  REQUIRE(std::filesystem::exists(path));
  REQUIRE(RunCtl(daemon, {"backup", path}).exit_code != kExitOk);

  CtlResult level = RunCtl(daemon, {"log-level", "debug", "--json"});
  REQUIRE(level.exit_code == kExitOk);
  REQUIRE(level.out.find("\"level\":\"debug\"") != std::string::npos);
  REQUIRE(RunCtl(daemon, {"log-level", "loud"}).exit_code == kExitInvalid);
}

TEST_CASE("gputunectl exit codes tell scripts what happened") {
  DaemonProcess daemon({"--backend=none"});
  REQUIRE(RunCtl(daemon, {"get", kKey}).exit_code == kExitNotFound);
  REQUIRE(RunCtl(daemon, {"delete", kKey}).exit_code == kExitNotFound);
  REQUIRE(RunCtl(daemon, {"get", "dense_bf16/sideways/x/m=1/k=1/n=1@c"})
              .exit_code == kExitUsage);
  REQUIRE(RunCtl(daemon, {"frobnicate"}).exit_code == kExitUsage);
  REQUIRE(RunCtl(daemon, {"list", "--bogus"}).exit_code == kExitUsage);
  REQUIRE(RunCtl(daemon, {"delete"}).exit_code == kExitUsage);
  REQUIRE(RunCtl(daemon, {"--help"}).exit_code == kExitOk);

  CtlResult down =
      RunCtlAt("unix://" + daemon.dir() + "/nobody.sock", {"status"});
  REQUIRE(down.exit_code == kExitUnavailable);
  REQUIRE(down.err.find("cannot reach gputuned at unix://" + daemon.dir() +
                        "/nobody.sock") != std::string::npos);

  unsetenv("GPUTUNE_ENDPOINT");
  CtlResult systemd = RunCtlAt("", {"--device=7", "status"});
  INFO(systemd.err);
  REQUIRE(systemd.exit_code == kExitUnavailable);
  REQUIRE(systemd.err.find("systemctl status gputuned@7") != std::string::npos);
  // The default endpoint is this one too: say how to name another daemon.
  REQUIRE(systemd.err.find("a daemon elsewhere: --endpoint or "
                           "$GPUTUNE_ENDPOINT") != std::string::npos);
}

}  // namespace
}  // namespace gputune::testing
