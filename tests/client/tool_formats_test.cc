// gputunectl export/import --format against a real gputuned: each tool's
// cache file, made here from the format as the tool writes it, goes in as
// entries of the format's op and comes back byte for byte; another tool
// version's entries are never exported into a file; bad rows are reported
// by line and refuse the import unless --skip-bad.
#include "client/gputunectl/tool_formats.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/gputunectl/cli.h"
#include "proto/key_format.h"
#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

using ctl::kExitInvalid;
using ctl::kExitNotFound;
using ctl::kExitOk;
using ctl::kExitUsage;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void Spit(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// What TuningContext::WriteFile writes (PyTorch's Tunable.cpp): the
// validators, then OP_SIGNATURE,PARAMS_SIGNATURE,SOLUTION,TIME per result,
// TIME in milliseconds at the stream's default precision. Rows in key order.
std::string TunableOpFile(const std::string& pt_version) {
  return "Validator,PT_VERSION," + pt_version +
         "\n"
         "Validator,ROCBLAS_VERSION,4.2.1-c1f2a1b\n"
         "Validator,HIPBLASLT_VERSION,800-d4e8d8a\n"
         "Validator,ROCM_VERSION,6.2.41133-dd7f95766\n"
         "Validator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-\n"
         "GemmStridedBatchedTunableOp_BFloat16_NN,nn_128_128_64_ld_128_64_128_"
         "B_8_bs_16384_8192_16384,Gemm_Hipblaslt_NN_73624,0.0121456\n"
         "GemmTunableOp_Half_TN,tn_4096_1024_4096_ld_4096_4096_4096,Gemm_"
         "Rocblas_21417,0.361234\n"
         "GemmTunableOp_float_NT,nt_25088_4096_64_ld_4096_64_4096,Default,"
         "1.262\n";
}

std::map<std::string, v1::Entry> EntriesOf(Client& client) {
  v1::ListEntriesRequest request;
  request.set_page_size(1000);
  std::map<std::string, v1::Entry> out;
  absl::StatusOr<v1::ListEntriesResponse> page = client.ListEntries(request);
  REQUIRE(page.ok());
  for (const v1::Entry& e : page->entries()) out[KeyText(e.key())] = e;
  return out;
}

TEST_CASE(
    "a TunableOp file imports as tunableop entries and exports back "
    "byte for byte") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string in = daemon.dir() + "/tunableop_results0.csv";
  const std::string out = daemon.dir() + "/exported0.csv";
  Spit(in, TunableOpFile("2.5.0"));
  CtlResult imported = RunCtl(daemon, {"import", "--format=tunableop", in});
  INFO(imported.err);
  REQUIRE(imported.exit_code == kExitOk);
  REQUIRE(imported.out.find("imported 3 entries") != std::string::npos);
  std::map<std::string, v1::Entry> entries = EntriesOf(*client);
  REQUIRE(entries.size() == 3);
  for (const auto& [text, e] : entries) {
    REQUIRE(e.key().custom().op() == "tunableop");
    REQUIRE(e.source() == v1::SOURCE_IMPORTED);
    // The versions are the candidate set: one for the whole file.
    REQUIRE(e.key().candidate_set() ==
            entries.begin()->second.key().candidate_set());
    REQUIRE(e.key().candidate_set().rfind("tunableop:", 0) == 0);
  }
  const v1::Entry& half = entries.at(
      "tunableop/GemmTunableOp_Half_TN,tn_4096_1024_4096_ld_4096_4096_4096@" +
      entries.begin()->second.key().candidate_set());
  REQUIRE(half.chosen_time().nanos() == 361234);
  CtlResult exported = RunCtl(daemon, {"export", "--format=tunableop", out});
  INFO(exported.err);
  REQUIRE(exported.exit_code == kExitOk);
  REQUIRE(Slurp(out) == TunableOpFile("2.5.0"));
  REQUIRE(!std::filesystem::exists(out + ".partial"));
  // Importing what was exported changes nothing.
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", out}).exit_code ==
          kExitOk);
  REQUIRE(EntriesOf(*client).size() == 3);
}

TEST_CASE(
    "entries of another TunableOp version are not exported for this "
    "one") {
  DaemonProcess daemon({"--backend=none"});
  const std::string old_file = daemon.dir() + "/old.csv";
  const std::string new_file = daemon.dir() + "/new.csv";
  const std::string out = daemon.dir() + "/out.csv";
  Spit(old_file, TunableOpFile("2.5.0"));
  // The newer version's file holds its metadata only (what a cold start of
  // the tool is matched against).
  std::string newer = TunableOpFile("2.6.0");
  newer = newer.substr(0, newer.find("Gemm"));
  Spit(new_file, newer);
  REQUIRE(
      RunCtl(daemon, {"import", "--format=tunableop", old_file}).exit_code ==
      kExitOk);
  CtlResult none = RunCtl(
      daemon, {"export", "--format=tunableop", "--match=" + new_file, out});
  REQUIRE(none.exit_code == kExitNotFound);
  REQUIRE(none.err.find("no tunableop entries for the versions") !=
          std::string::npos);
  REQUIRE(!std::filesystem::exists(out));
  // With its own versions it is exported.
  REQUIRE(RunCtl(daemon,
                 {"export", "--format=tunableop", "--match=" + old_file, out})
              .exit_code == kExitOk);
  REQUIRE(Slurp(out) == TunableOpFile("2.5.0"));
}

TEST_CASE("entries of two TunableOp versions need --match to be exported") {
  DaemonProcess daemon({"--backend=none"});
  const std::string a = daemon.dir() + "/a.csv";
  const std::string b = daemon.dir() + "/b.csv";
  const std::string out = daemon.dir() + "/out.csv";
  const std::string head = "Validator,PT_VERSION,";
  const std::string a_text =
      head + "2.5.0\nGemmTunableOp_float_NN,nn_1_2_3,Default,0.5\n";
  const std::string b_text =
      head + "2.6.0\nGemmTunableOp_float_TT,tt_4_5_6,Gemm_Cublas_7,0.25\n";
  Spit(a, a_text);
  Spit(b, b_text);
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", a}).exit_code ==
          kExitOk);
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", b}).exit_code ==
          kExitOk);
  CtlResult ambiguous = RunCtl(daemon, {"export", "--format=tunableop", out});
  REQUIRE(ambiguous.exit_code == kExitUsage);
  REQUIRE(ambiguous.err.find("several tool versions") != std::string::npos);
  REQUIRE(RunCtl(daemon, {"export", "--format=tunableop", "--match=" + b, out})
              .exit_code == kExitOk);
  REQUIRE(Slurp(out) == b_text);
}

TEST_CASE(
    "bad TunableOp rows are reported by line and refuse the import "
    "unless --skip-bad") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string file = daemon.dir() + "/damaged.csv";
  Spit(file,
       "Validator,PT_VERSION,2.5.0\n"
       "GemmTunableOp_float_NT,nt_1_2_3,Default,0.5\n"
       "GemmTunableOp_float_NT,nt_4_5_6\n"               // line 3: no solution
       "GemmTunableOp_float_NT,nt_7_8_9,Default,fast\n"  // line 4: bad time
       "GemmTunableOp_float_NT,nt_1_2_3,Gemm_Cublas_1,0.4\n"  // line 5: again
       "GemmTunableOp_float_TN,tn_1_2_3,Gemm_Cublas_2,0.25\n");
  CtlResult refused = RunCtl(daemon, {"import", "--format=tunableop", file});
  REQUIRE(refused.exit_code == kExitInvalid);
  REQUIRE(refused.err.find(file + ":3: ") != std::string::npos);
  REQUIRE(refused.err.find(file + ":4: TIME 'fast'") != std::string::npos);
  REQUIRE(refused.err.find(file + ":5: OP,PARAMS given already on line 2") !=
          std::string::npos);
  REQUIRE(refused.err.find("nothing was imported") != std::string::npos);
  REQUIRE(EntriesOf(*client).empty());

  CtlResult skipped =
      RunCtl(daemon, {"import", "--format=tunableop", "--skip-bad", file});
  REQUIRE(skipped.exit_code == kExitOk);
  REQUIRE(skipped.err.find("skipped 3 bad row(s)") != std::string::npos);
  REQUIRE(EntriesOf(*client).size() == 2);
}

TEST_CASE("a TunableOp file without its versions is refused whole") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string file = daemon.dir() + "/noversion.csv";
  Spit(file, "GemmTunableOp_float_NT,nt_1_2_3,Default,0.5\n");
  CtlResult r = RunCtl(daemon, {"import", "--format=tunableop", file});
  REQUIRE(r.exit_code == kExitInvalid);
  REQUIRE(r.err.find("no Validator,PT_VERSION line") != std::string::npos);
  Spit(file, "Validator,PT_VERSION,2.5.0,extra\n");
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", file}).exit_code ==
          kExitInvalid);
  REQUIRE(EntriesOf(*client).empty());
}

}  // namespace
}  // namespace gputune::testing
