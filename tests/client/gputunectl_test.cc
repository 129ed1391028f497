// gputunectl against a real gputuned: tables, --json, exit codes, and the
// export/import round trip.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/gputunectl/cli.h"
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

  REQUIRE(RunCtl(daemon, {"delete", "--all"}).exit_code == kExitOk);
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
  REQUIRE(RunCtl(daemon, {"delete", "--all"}).exit_code == kExitOk);

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
  REQUIRE(systemd.exit_code == kExitUnavailable);
  REQUIRE(systemd.err.find("systemctl status gputuned@7") != std::string::npos);
}

}  // namespace
}  // namespace gputune::testing
