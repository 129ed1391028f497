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

// Imports `text` (a file of `format` with three rows) into `daemon`, checks
// the entries, exports them to `out` and checks the bytes are `text`'s.
std::map<std::string, v1::Entry> RoundTrip(const DaemonProcess& daemon,
                                           const std::string& format,
                                           const std::string& text,
                                           const std::string& out) {
  auto client = ClientOf(daemon);
  const std::string in = out + ".in";
  WriteFile(in, text);
  CtlResult imported = RunCtl(daemon, {"import", "--format=" + format, in});
  INFO(imported.err);
  REQUIRE(imported.exit_code == kExitOk);
  REQUIRE(imported.out.find("imported 3 entries") != std::string::npos);
  std::map<std::string, v1::Entry> entries = EntriesOf(*client);
  REQUIRE(entries.size() == 3);
  for (const auto& [key, e] : entries) {
    REQUIRE(e.key().custom().op() == format);
    REQUIRE(e.source() == v1::SOURCE_IMPORTED);
    // The versions are the candidate set: one for the whole file.
    REQUIRE(e.key().candidate_set() ==
            entries.begin()->second.key().candidate_set());
    REQUIRE(e.key().candidate_set().rfind(format + ":", 0) == 0);
  }
  CtlResult exported = RunCtl(daemon, {"export", "--format=" + format, out});
  INFO(exported.err);
  REQUIRE(exported.exit_code == kExitOk);
  REQUIRE(ReadFile(out) == text);
  REQUIRE(!std::filesystem::exists(out + ".partial"));
  return entries;
}

TEST_CASE(
    "a TunableOp file imports as tunableop entries and exports back "
    "byte for byte") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string out = daemon.dir() + "/exported0.csv";
  std::map<std::string, v1::Entry> entries =
      RoundTrip(daemon, "tunableop", TunableOpFile("2.5.0"), out);
  const v1::Entry& half = entries.at(
      "tunableop/GemmTunableOp_Half_TN,tn_4096_1024_4096_ld_4096_4096_4096@" +
      entries.begin()->second.key().candidate_set());
  REQUIRE(half.chosen_time().nanos() == 361234);
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
  WriteFile(old_file, TunableOpFile("2.5.0"));
  // The newer version's file holds its metadata only (what a cold start of
  // the tool is matched against).
  std::string newer = TunableOpFile("2.6.0");
  newer = newer.substr(0, newer.find("Gemm"));
  WriteFile(new_file, newer);
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
  REQUIRE(ReadFile(out) == TunableOpFile("2.5.0"));
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
  WriteFile(a, a_text);
  WriteFile(b, b_text);
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", a}).exit_code ==
          kExitOk);
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", b}).exit_code ==
          kExitOk);
  CtlResult ambiguous = RunCtl(daemon, {"export", "--format=tunableop", out});
  REQUIRE(ambiguous.exit_code == kExitUsage);
  REQUIRE(ambiguous.err.find("several tool versions") != std::string::npos);
  REQUIRE(RunCtl(daemon, {"export", "--format=tunableop", "--match=" + b, out})
              .exit_code == kExitOk);
  REQUIRE(ReadFile(out) == b_text);
}

TEST_CASE(
    "bad TunableOp rows are reported by line and refuse the import "
    "unless --skip-bad") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string file = daemon.dir() + "/damaged.csv";
  WriteFile(
      file,
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
  WriteFile(file, "GemmTunableOp_float_NT,nt_1_2_3,Default,0.5\n");
  CtlResult r = RunCtl(daemon, {"import", "--format=tunableop", file});
  REQUIRE(r.exit_code == kExitInvalid);
  REQUIRE(r.err.find("no Validator,PT_VERSION line") != std::string::npos);
  WriteFile(file, "Validator,PT_VERSION,2.5.0,extra\n");
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", file}).exit_code ==
          kExitInvalid);
  REQUIRE(EntriesOf(*client).empty());
}

// What AutoTunerProfilingCache.save_cache writes (TensorRT-LLM's
// autotuner.py: json.dump(indent=2, default=str)), here printed by Python's
// json.dumps with cache_data in key order: str(key tuple) -> runner_id,
// tactic (an int, or a tuple written as a list), min_time (ms, a float).
std::string TrtllmFile(const std::string& lib_version) {
  std::string text = R"json({
  "metadata": {
    "lib_version": "1.0.0rc2",
    "creation_timestamp": 1733280000.123456,
    "device_name": "NVIDIA H200",
    "device_capability": [
      9,
      0
    ]
  },
  "cache_data": {
    "('trtllm::fp4_gemm', 'FP4GemmRunner', -3318523418396282463, ((128, 4096), (14336, 2048)))": {
      "runner_id": 0,
      "tactic": 42,
      "min_time": 0.0123456
    },
    "('trtllm::fused_moe', 'MoERunner', 7120362744710000641, ((64, 7168), (256, 7168), (64, 8)))": {
      "runner_id": 0,
      "tactic": -1,
      "min_time": 2.0
    },
    "('trtllm::fused_moe', 'MoERunner', 7120362744710000641, ((8, 7168), (256, 7168), (8, 8)))": {
      "runner_id": 1,
      "tactic": [
        128,
        256,
        1
      ],
      "min_time": 1e-05
    }
  }
})json";
  const std::string from = "\"1.0.0rc2\"";
  text.replace(text.find(from), from.size(), "\"" + lib_version + "\"");
  return text;
}

TEST_CASE(
    "a TensorRT-LLM cache imports as trtllm entries and exports back "
    "byte for byte") {
  DaemonProcess daemon({"--backend=none"});
  const std::string out = daemon.dir() + "/exported.rank0.json";
  RoundTrip(daemon, "trtllm", TrtllmFile("1.0.0rc2"), out);

  // Another TensorRT-LLM version's file is not given these entries.
  const std::string newer = daemon.dir() + "/newer.json";
  WriteFile(newer,
            "{\"metadata\": {\"lib_version\": \"1.1.0\", "
            "\"creation_timestamp\": 1.0, \"device_name\": \"NVIDIA H200\", "
            "\"device_capability\": [9, 0]}, \"cache_data\": {}}");
  CtlResult none = RunCtl(
      daemon, {"export", "--format=trtllm", "--match=" + newer, out + "2"});
  REQUIRE(none.exit_code == kExitNotFound);
  REQUIRE(!std::filesystem::exists(out + "2"));
}

// What the later AutoTunerProfilingCache.save_cache writes, one file for
// every rank (TensorRT-LLM's autotuner.py: each rank merges its results into
// the file under a lock, json.dump(indent=2, default=str)): "metadata", then
// "shared" (the ops every rank tunes alike), then one "rank_N" per rank in
// the order the ranks saved (here in rank order), an empty one for a rank
// that tuned nothing of its own; the tactic is repr(tactic).
std::string TrtllmRanksFile() {
  return R"json({
  "metadata": {
    "lib_version": "1.2.0rc1",
    "creation_timestamp": 1764806400.25,
    "device_name": "NVIDIA H200",
    "device_capability": [
      9,
      0
    ]
  },
  "shared": {
    "('trtllm::allreduce', 'AllReduceRunner', '(8, 0)', ((8, 7168),))": {
      "runner_id": 0,
      "tactic": "3",
      "min_time": 0.0042
    }
  },
  "rank_0": {
    "('trtllm::fp4_gemm', 'FP4GemmRunner', '(torch.bfloat16,)', ((128, 4096), (14336, 2048)))": {
      "runner_id": 0,
      "tactic": "(128, 256, 1)",
      "min_time": 0.0123456
    }
  },
  "rank_1": {
    "('trtllm::fp4_gemm', 'FP4GemmRunner', '(torch.bfloat16,)', ((128, 4096), (14336, 2048)))": {
      "runner_id": 0,
      "tactic": "(64, 256, 2)",
      "min_time": 0.0125
    }
  },
  "rank_2": {}
})json";
}

TEST_CASE(
    "a TensorRT-LLM cache for every rank keeps each rank's section and "
    "exports back byte for byte") {
  DaemonProcess daemon({"--backend=none"});
  const std::string out = daemon.dir() + "/autotuner.json";
  std::map<std::string, v1::Entry> entries =
      RoundTrip(daemon, "trtllm", TrtllmRanksFile(), out);
  // The same cache key on two ranks: two entries, each rank's own tactic.
  const std::string cs = entries.begin()->second.key().candidate_set();
  const std::string gemm =
      " ('trtllm::fp4_gemm', 'FP4GemmRunner', '(torch.bfloat16,)', ((128, "
      "4096), (14336, 2048)))@" +
      cs;
  REQUIRE(entries.count("trtllm/rank_0" + gemm) == 1);
  REQUIRE(entries.count("trtllm/rank_1" + gemm) == 1);
  CHECK(entries.at("trtllm/rank_1" + gemm).chosen_time().nanos() == 12500);
  CHECK(entries.count("trtllm/shared ('trtllm::allreduce', 'AllReduceRunner', "
                      "'(8, 0)', ((8, 7168),))@" +
                      cs) == 1);

  // Not a section of either layout: refused whole, by line.
  const std::string odd = daemon.dir() + "/odd.json";
  std::string text = TrtllmRanksFile();
  text.replace(text.find("\"rank_2\""), 8, "\"rank_02\"");
  WriteFile(odd, text);
  CtlResult refused = RunCtl(daemon, {"import", "--format=trtllm", odd});
  REQUIRE(refused.exit_code == kExitInvalid);
  REQUIRE(refused.err.find(odd + ":32: \"rank_02\" is neither") !=
          std::string::npos);
}

TEST_CASE("bad TensorRT-LLM entries are reported by line") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string file = daemon.dir() + "/damaged.json";
  std::string text = TrtllmFile("1.0.0rc2");
  // The second entry's min_time becomes a string: reported at its key (line
  // 17).
  const std::string from = "\"min_time\": 2.0";
  text.replace(text.find(from), from.size(), "\"min_time\": \"fast\"");
  WriteFile(file, text);
  CtlResult refused = RunCtl(daemon, {"import", "--format=trtllm", file});
  REQUIRE(refused.exit_code == kExitInvalid);
  REQUIRE(refused.err.find(file + ":17: min_time") != std::string::npos);
  REQUIRE(EntriesOf(*client).empty());
  REQUIRE(RunCtl(daemon, {"import", "--format=trtllm", "--skip-bad", file})
              .exit_code == kExitOk);
  REQUIRE(EntriesOf(*client).size() == 2);
  WriteFile(file, "{\"cache_data\": {}}");
  CtlResult no_metadata = RunCtl(daemon, {"import", "--format=trtllm", file});
  REQUIRE(no_metadata.exit_code == kExitInvalid);
  REQUIRE(no_metadata.err.find("\"metadata\"") != std::string::npos);
}

// What AutoTuner.save_configs writes (FlashInfer's autotuner.py:
// json.dump(indent=2) of "_metadata" then the configs in sorted key order:
// str((custom_op, runner class, profile)) -> [runner class, tactic]), here
// printed by Python's json.dumps.
std::string FlashinferV1File(const std::string& version) {
  std::string text = R"json({
  "_metadata": {
    "flashinfer_version": "0.4.1",
    "cuda_version": "12.8",
    "cublas_version": "12.8.4",
    "cudnn_version": "91002",
    "cudnn_frontend_version": "1.14.1",
    "gpu": "NVIDIA H200"
  },
  "('flashinfer::trtllm_fp4_block_scale_moe', 'TrtllmGenFusedMoELauncher', ((512, 7168), (512, 256), (8,)))": [
    "TrtllmGenFusedMoELauncher",
    [
      256,
      17
    ]
  ],
  "('fp4_gemm', 'CudnnFp4GemmRunner', ((64, 4096), (4096, 2048), (64, -1)))": [
    "CudnnFp4GemmRunner",
    3
  ],
  "('fp4_gemm', 'CutlassFp4GemmRunner', ((128, 4096), (4096, 2048), (128, -1)))": [
    "CutlassFp4GemmRunner",
    -1
  ]
})json";
  const std::string from = "\"0.4.1\"";
  text.replace(text.find(from), from.size(), "\"" + version + "\"");
  return text;
}

TEST_CASE("a FlashInfer v1 cache imports and exports back byte for byte") {
  DaemonProcess daemon({"--backend=none"});
  const std::string out = daemon.dir() + "/flashinfer.json";
  RoundTrip(daemon, "flashinfer-v1", FlashinferV1File("0.4.1"), out);
  // Another FlashInfer version's file is not given these entries.
  const std::string newer = daemon.dir() + "/newer.json";
  std::string text = FlashinferV1File("0.5.0");
  WriteFile(newer, text.substr(0, text.find("},") + 1) + "\n}");
  CtlResult none = RunCtl(daemon, {"export", "--format=flashinfer-v1",
                                   "--match=" + newer, out + "2"});
  INFO(none.err);
  REQUIRE(none.exit_code == kExitNotFound);
  REQUIRE(RunCtl(daemon, {"export", "--format=flashinfer-v1",
                          "--match=" + out + ".in", out + "3"})
              .exit_code == kExitOk);
  REQUIRE(ReadFile(out + "3") == FlashinferV1File("0.4.1"));
}

TEST_CASE(
    "a FlashInfer cache that names its last writer and its generation imports "
    "its configs alone") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string file = daemon.dir() + "/incremental.json";
  std::string text = FlashinferV1File("0.4.1");
  // What later FlashInfer writes beside _metadata on an incremental save.
  text.insert(text.find("\n  \"_metadata\"") + 1,
              "  \"_generation\": \"5f1c\",\n"
              "  \"_last_updated_by\": {\"flashinfer_version\": \"0.4.2\"},\n");
  WriteFile(file, text);
  CtlResult imported =
      RunCtl(daemon, {"import", "--format=flashinfer-v1", file});
  INFO(imported.err);
  REQUIRE(imported.exit_code == kExitOk);
  REQUIRE_FALSE(EntriesOf(*client).empty());
  // The configs, for _metadata's versions; the bookkeeping is not kept.
  const std::string out = daemon.dir() + "/out.json";
  REQUIRE(RunCtl(daemon, {"export", "--format=flashinfer-v1", out}).exit_code ==
          kExitOk);
  REQUIRE(ReadFile(out) == FlashinferV1File("0.4.1"));
}

TEST_CASE("bad FlashInfer v1 configs are reported by line") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const std::string file = daemon.dir() + "/damaged.json";
  std::string text = FlashinferV1File("0.4.1");
  // The cuDNN config (its key on line 17) loses its runner name.
  const std::string from = "\"CudnnFp4GemmRunner\",\n    3";
  text.replace(text.find(from), from.size(), "3");
  WriteFile(file, text);
  CtlResult refused =
      RunCtl(daemon, {"import", "--format=flashinfer-v1", file});
  REQUIRE(refused.exit_code == kExitInvalid);
  REQUIRE(
      refused.err.find(file + ":17: expected [runner class name, tactic]") !=
      std::string::npos);
  REQUIRE(EntriesOf(*client).empty());
  WriteFile(file, "{\"k\": [\"R\", 1]}");
  CtlResult no_metadata =
      RunCtl(daemon, {"import", "--format=flashinfer-v1", file});
  REQUIRE(no_metadata.exit_code == kExitInvalid);
  REQUIRE(no_metadata.err.find("no \"_metadata\"") != std::string::npos);
}

}  // namespace
}  // namespace gputune::testing
