// gputune_dense_bench: the engine over the CUDA backend on LLM layer shapes.
//
//   gputune_dense_bench --out=DIR [--budget=0.5] [--quick] [--device=0]
//
// For every K x N in kLayers and M in kTokens: tune with TuneDense, then time
// cuBLASLt's heuristic #0 (the default, the first candidate) and the choice
// again, interleaved, as a check on the engine's own numbers, and the choice
// once more without the L2 scrub and once after a memset scrub (the scrub
// A/B: how much L2 hits would flatter it, how much dirty lines left by a
// write scrub would cost it). Decode shapes (M <= 16) also report the HBM
// bandwidth reached, counting the weight bytes (N * K * 2) over the chosen
// time, next to a device-to-device cudaMemcpy of a 2 GiB buffer measured at the
// start of the same run (bytes read plus written): above that copy bandwidth
// means the scrub failed. The summary gives the decode geomean speed-up, any
// shape where the choice is slower than the default beyond 2 %, the heuristic
// algos whose rebuild differs from the heuristic's bytes, and the total tuning
// time. Writes DIR/dense_bench.json and DIR/dense_bench.txt (the table, also
// printed last), both rewritten after every key: a run cut short by a
// timeout leaves the rows of every key it finished.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/dense.h"
#include "kernels/engine.h"

namespace gputune::kernels {
namespace {

using Clock = std::chrono::steady_clock;

struct Layer {
  int64_t k;
  int64_t n;
  const char* role;  // a Llama-3-style model's layer with this K x N
};
constexpr Layer kLayers[] = {
    {4096, 6144, "8B attn.qkv"},     {4096, 4096, "8B attn.o"},
    {4096, 28672, "8B mlp.gate_up"}, {14336, 4096, "8B mlp.down"},
    {8192, 10240, "70B attn.qkv"},   {28672, 8192, "70B mlp.down"},
};
constexpr int64_t kTokens[] = {1, 2, 4, 8, 16, 128, 512, 2048};

struct Row {
  DenseShape shape;
  std::string role;
  TuneReport report;
  double tune_wall_seconds = 0;
  double default_seconds = 0;         // re-measured
  double chosen_seconds = 0;          // re-measured
  double chosen_noscrub_seconds = 0;  // re-measured without the L2 scrub
  double chosen_dirty_seconds = 0;    // re-measured after a memset scrub
  int rebuild_mismatches = 0;         // heuristic algos not byte-identical
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Bytes moved per second by a device-to-device copy of `bytes` (read plus
// written), median of 7 timed copies after one warm-up.
double CopyBandwidth(cudaStream_t stream, size_t bytes) {
  DeviceBuffer src(bytes), dst(bytes);
  CheckCuda(cudaMemsetAsync(src.get(), 1, bytes, stream), "cudaMemsetAsync");
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> rates;
  for (int i = 0; i < 8; ++i) {
    CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord");
    CheckCuda(cudaMemcpyAsync(dst.get(), src.get(), bytes,
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync");
    CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    CheckCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i > 0) rates.push_back(2.0 * bytes / (ms * 1e-3));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(rates);
}

// Median of 9 interleaved samples of each, each sample >= 200 us: the
// default and the choice with the (read) L2 scrub, the choice without it
// (what L2 hits would give) and after a memset scrub (what writing back its
// dirty lines inside the sample costs).
// The value, or std::runtime_error with the status's message: the
// re-measurement below gives up on a row at its first failure.
template <typename T>
T OrThrow(StatusOr<T> result) {
  if (!result.ok()) throw std::runtime_error(result.status().message());
  return std::move(*result);
}

void Remeasure(CudaBackend& backend, const DenseShape& shape,
               const Execution& by_default, const Execution& chosen, Row* row) {
  auto workload = OrThrow(backend.Prepare(shape, 0xbe9c));
  OrThrow(backend.TimeSample(*workload, by_default, 1));
  OrThrow(backend.TimeSample(*workload, chosen, 1));
  const double once = OrThrow(backend.TimeSample(*workload, by_default, 1));
  const int reps = std::clamp(static_cast<int>(200e-6 / once) + 1, 1, 2000);
  std::vector<double> d, c, unscrubbed, dirty;
  for (int i = 0; i < 9; ++i) {
    d.push_back(OrThrow(backend.TimeSample(*workload, by_default, reps)));
    c.push_back(OrThrow(backend.TimeSample(*workload, chosen, reps)));
    backend.set_scrub(L2Scrub::kNone);
    unscrubbed.push_back(OrThrow(backend.TimeSample(*workload, chosen, reps)));
    backend.set_scrub(L2Scrub::kWrite);
    dirty.push_back(OrThrow(backend.TimeSample(*workload, chosen, reps)));
    backend.set_scrub(L2Scrub::kRead);
  }
  row->default_seconds = Median(d);
  row->chosen_seconds = Median(c);
  row->chosen_noscrub_seconds = Median(unscrubbed);
  row->chosen_dirty_seconds = Median(dirty);
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

const char* ValidationName(CandidateValidation v) {
  switch (v) {
    case CandidateValidation::kNotRun:
      return "not_run";
    case CandidateValidation::kPassed:
      return "passed";
    case CandidateValidation::kFailed:
      return "failed";
    case CandidateValidation::kError:
      return "error";
  }
  return "?";
}

std::string Json(const Fingerprint& fp, double copy_bw, double budget,
                 const std::vector<Row>& rows, double total_tune_wall) {
  std::ostringstream o;
  o << "{\n  \"device\": {\"name\": " << JsonString(fp.device_name)
    << ", \"uuid\": " << JsonString(fp.device_uuid)
    << ", \"compute_capability\": " << JsonString(fp.compute_capability)
    << ", \"sm_count\": " << fp.processor_count
    << ", \"memory_bytes\": " << fp.memory_bytes
    << ", \"driver\": " << JsonString(fp.driver_version)
    << ", \"runtime\": " << JsonString(fp.runtime_version)
    << ", \"cublaslt\": " << JsonString(fp.cublaslt_version)
    << ", \"kernel_version\": " << JsonString(fp.kernel_version)
    << ", \"build\": " << JsonString(fp.build) << "},\n";
  o << "  \"copy_bandwidth_bytes_per_s\": " << copy_bw << ",\n";
  o << "  \"budget_seconds_per_key\": " << budget << ",\n";
  o << "  \"total_tune_wall_seconds\": " << total_tune_wall << ",\n";
  o << "  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double weight_bytes = 2.0 * r.shape.n * r.shape.k;
    o << (i ? "," : "") << "\n    {\"m\": " << r.shape.m
      << ", \"n\": " << r.shape.n << ", \"k\": " << r.shape.k
      << ", \"role\": " << JsonString(r.role)
      << ", \"ok\": " << (r.report.status.ok() ? "true" : "false")
      << ", \"error\": " << JsonString(r.report.status.message())
      << ", \"tune_wall_seconds\": " << r.tune_wall_seconds
      << ", \"chosen\": " << JsonString(r.report.chosen.ToString())
      << ", \"engine_default_seconds\": " << r.report.default_seconds
      << ", \"engine_chosen_seconds\": " << r.report.chosen_seconds
      << ", \"reason\": " << JsonString(r.report.reason)
      << ", \"notes\": " << r.report.notes.size()
      << ", \"rebuild_mismatches\": " << r.rebuild_mismatches
      << ", \"default_seconds\": " << r.default_seconds
      << ", \"chosen_seconds\": " << r.chosen_seconds
      << ", \"chosen_noscrub_seconds\": " << r.chosen_noscrub_seconds
      << ", \"chosen_dirty_seconds\": " << r.chosen_dirty_seconds
      << ", \"speedup\": "
      << (r.chosen_seconds > 0 ? r.default_seconds / r.chosen_seconds : 0)
      << ", \"weight_bytes\": " << weight_bytes
      << ", \"weight_bandwidth_fraction\": "
      << (r.chosen_seconds > 0 ? weight_bytes / r.chosen_seconds / copy_bw : 0)
      << ", \"candidates\": [";
    for (size_t j = 0; j < r.report.candidates.size(); ++j) {
      const CandidateReport& c = r.report.candidates[j];
      o << (j ? "," : "")
        << "\n      {\"execution\": " << JsonString(c.execution.ToString())
        << ", \"validation\": " << JsonString(ValidationName(c.validation))
        << ", \"max_abs_error\": " << c.max_abs_error
        << ", \"median_seconds\": " << c.median_seconds
        << ", \"p20_seconds\": " << c.p20_seconds
        << ", \"p80_seconds\": " << c.p80_seconds
        << ", \"dispersion\": " << c.dispersion
        << ", \"spread_seconds\": " << c.spread_seconds
        << ", \"samples\": " << c.samples
        << ", \"default\": " << (c.is_default ? "true" : "false")
        << ", \"chosen\": " << (c.chosen ? "true" : "false")
        << ", \"error\": " << JsonString(c.error) << "}";
    }
    o << "]}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

std::string Table(const Fingerprint& fp, double copy_bw,
                  const std::vector<Row>& rows, double total_tune_wall) {
  std::ostringstream o;
  char line[512];
  o << fp.device_name << " (" << fp.compute_capability << ", "
    << fp.processor_count << " SMs), driver " << fp.driver_version
    << ", runtime " << fp.runtime_version << ", cuBLASLt "
    << fp.cublaslt_version << "\n";
  std::snprintf(line, sizeof(line),
                "device copy bandwidth (D2D memcpy, read+write): %.0f GB/s\n",
                copy_bw / 1e9);
  o << line;
  o << "default = cuBLASLt heuristic #0 as DenseRunner runs it; chosen = "
       "the engine's choice; both re-measured after a read-only L2 scrub; "
       "noscrub = the choice without it (L2% = what L2 hits take off); "
       "dirty = after a memset scrub (WB% = what writing back dirty lines "
       "adds); HBM GB/s = weight bytes / chosen time (M <= 16)\n";
  std::snprintf(line, sizeof(line),
                "%6s %6s %5s %11s %11s %7s %8s %11s %6s %6s  %s\n", "K", "N",
                "M", "default_us", "chosen_us", "speedup", "HBM_GB/s",
                "noscrub_us", "L2%", "WB%", "winner");
  o << line;
  double log_sum = 0;
  int decode = 0, slower = 0, failed = 0, mismatched = 0;
  double worst = 0;
  for (const Row& r : rows) {
    mismatched += r.rebuild_mismatches;
    if (!r.report.status.ok()) {
      ++failed;
      std::snprintf(
          line, sizeof(line), "%6lld %6lld %5lld  FAILED: %s\n",
          static_cast<long long>(r.shape.k), static_cast<long long>(r.shape.n),
          static_cast<long long>(r.shape.m), r.report.status.message().c_str());
      o << line;
      continue;
    }
    const double weight_bytes = 2.0 * r.shape.n * r.shape.k;
    const double speedup = r.default_seconds / r.chosen_seconds;
    char bw[16] = "-";
    if (r.shape.m <= 16 && r.chosen_seconds > 0) {
      std::snprintf(bw, sizeof(bw), "%.0f",
                    weight_bytes / r.chosen_seconds / 1e9);
      log_sum += std::log(speedup);
      ++decode;
    }
    if (speedup < 0.98) ++slower;
    worst = worst == 0 ? speedup : std::min(worst, speedup);
    std::snprintf(
        line, sizeof(line),
        "%6lld %6lld %5lld %11.1f %11.1f %7.3f %8s %11.1f %6.1f %6.1f  %s\n",
        static_cast<long long>(r.shape.k), static_cast<long long>(r.shape.n),
        static_cast<long long>(r.shape.m), r.default_seconds * 1e6,
        r.chosen_seconds * 1e6, speedup, bw, r.chosen_noscrub_seconds * 1e6,
        100.0 * (1.0 - r.chosen_noscrub_seconds / r.chosen_seconds),
        100.0 * (r.chosen_dirty_seconds / r.chosen_seconds - 1.0),
        r.report.chosen.ToString().c_str());
    o << line;
  }
  if (decode > 0) {
    std::snprintf(line, sizeof(line),
                  "decode (M <= 16) geomean speed-up over heuristic #0: "
                  "%.3fx over %d shapes\n",
                  std::exp(log_sum / decode), decode);
    o << line;
  }
  std::snprintf(line, sizeof(line),
                "worst chosen/default speed-up %.3fx; %d shape(s) slower than "
                "the default by more than 2 %%; %d failed; %d heuristic algo "
                "rebuild(s) not byte-identical\n",
                worst, slower, failed, mismatched);
  o << line;
  std::snprintf(line, sizeof(line),
                "total tuning wall time: %.1f s for %zu keys\n",
                total_tune_wall, rows.size());
  o << line;
  return o.str();
}

// Writes `content` to path through a temporary file and a rename, so a
// reader (or a kill between keys) never sees a half-written file.
void WriteAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
}

// DIR/dense_bench.json and DIR/dense_bench.txt with the rows so far.
void WriteResults(const std::string& out_dir, const Fingerprint& fp,
                  double copy_bw, double budget, const std::vector<Row>& rows,
                  double total_tune_wall) {
  WriteAtomically(out_dir + "/dense_bench.json",
                  Json(fp, copy_bw, budget, rows, total_tune_wall));
  WriteAtomically(out_dir + "/dense_bench.txt",
                  Table(fp, copy_bw, rows, total_tune_wall));
}

int Main(int argc, char** argv) {
  std::string out_dir = ".";
  double budget = 0.5;
  bool quick = false;
  CudaBackendOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--out=")) {
      out_dir = std::string(arg.substr(6));
    } else if (arg.starts_with("--budget=")) {
      budget = std::atof(std::string(arg.substr(9)).c_str());
    } else if (arg.starts_with("--device=")) {
      options.device = std::string(arg.substr(9));
    } else if (arg == "--quick") {
      quick = true;
    } else {
      std::cerr << "usage: gputune_dense_bench [--out=DIR] [--budget=SECONDS]"
                   " [--device=ORDINAL|UUID] [--quick]\n";
      return 2;
    }
  }

  StatusOr<std::unique_ptr<CudaBackend>> created = CudaBackend::Create(options);
  if (!created.ok()) {
    std::cerr << "gputune_dense_bench: " << created.status().message() << "\n";
    return 1;
  }
  const std::unique_ptr<CudaBackend> backend = std::move(*created);
  const Fingerprint fp = backend->GetFingerprint();
  std::cerr << "device: " << fp.device_name << " " << fp.device_uuid << "\n";
  const double copy_bw = CopyBandwidth(backend->stream(), size_t{2} << 30);

  TuneOptions tune;
  tune.budget_seconds = budget;
  TuneHooks hooks;
  hooks.log = [](int severity, const std::string& line) {
    if (severity >= 2) std::cerr << "engine: " << line << "\n";
  };

  std::vector<Row> rows;
  double total_tune_wall = 0;
  for (const Layer& layer : kLayers) {
    if (quick && layer.n != 6144 && layer.k != 14336) continue;
    for (const int64_t m : kTokens) {
      if (quick && m != 1 && m != 16 && m != 512) continue;
      Row row;
      row.shape = {.m = m, .n = layer.n, .k = layer.k};
      row.role = layer.role;
      const auto start = Clock::now();
      row.report = TuneDense(*backend, row.shape, tune, hooks);
      row.tune_wall_seconds =
          std::chrono::duration<double>(Clock::now() - start).count();
      total_tune_wall += row.tune_wall_seconds;
      for (const HeuristicRebuild& r : backend->heuristic_rebuilds()) {
        row.rebuild_mismatches += r.rebuilt && !r.identical ? 1 : 0;
      }
      for (const std::string& note : row.report.notes) {
        std::cerr << "note: " << note << "\n";
      }
      if (row.report.status.ok()) {
        try {
          Remeasure(*backend, row.shape,
                    row.report.candidates.front().execution, row.report.chosen,
                    &row);
        } catch (const std::exception& e) {
          row.report.status =
              InternalError(std::string("re-measure failed: ") + e.what());
        }
      }
      std::cerr << "K=" << layer.k << " N=" << layer.n << " M=" << m << ": "
                << (row.report.status.ok() ? row.report.chosen.ToString()
                                           : row.report.status.message())
                << " (" << row.tune_wall_seconds << " s; " << row.report.reason
                << ")\n";
      rows.push_back(std::move(row));
      // Both files are rewritten after every key, so that a run stopped by
      // run.sh's timeout still leaves every finished key's row.
      WriteResults(out_dir, fp, copy_bw, budget, rows, total_tune_wall);
    }
  }
  WriteResults(out_dir, fp, copy_bw, budget, rows, total_tune_wall);
  std::cout << Table(fp, copy_bw, rows, total_tune_wall);
  return 0;
}

}  // namespace
}  // namespace gputune::kernels

int main(int argc, char** argv) {
  try {
    return gputune::kernels::Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "gputune_dense_bench: " << e.what() << "\n";
    return 1;
  }
}
