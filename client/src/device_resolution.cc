// FindDaemon (gputune/options.h): which daemon serves this process's CUDA
// device. The sources, best first: the CUDA driver already loaded in the
// process (it applies CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER itself);
// else CUDA_VISIBLE_DEVICES read as CUDA reads it, over the machine's GPUs
// from NVML or the driver's /proc/driver/nvidia/gpus/*/information.
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gputune/options.h"
#include "proto/device_uuid.h"

namespace gputune {
namespace {

constexpr char kDefaultSocketDir[] = "/run/gputuned";
constexpr char kDefaultNvidiaProcDir[] = "/proc/driver/nvidia";
// Bounds on what is read from the driver's files (each a few hundred
// bytes) and how many GPUs a machine may list.
constexpr size_t kMaxInformationBytes = 64 * 1024;
constexpr size_t kMaxGpus = 256;

struct Gpu {
  std::string uuid;
  std::string bus;  // lower case, "0000:65:00.0"
  std::string model;
};

// What the machine's GPUs are, in PCI bus order (nvidia-smi's indices),
// and where the list came from; empty when no source could list them.
struct GpuTable {
  std::vector<Gpu> gpus;
  std::string source;
};

std::string Env(const std::function<const char*(const char*)>& getenv,
                const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? "" : v;
}

// --- The CUDA driver, if this process has loaded it. -----------------------

// The driver API's few calls used here (cuda.h's signatures; CUresult and
// CUdevice are ints, CUuuid is 16 bytes).
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetUuid = int (*)(unsigned char*, int);

// The UUID of the process's CUDA device `device`; nullopt when the driver
// is not loaded (RTLD_NOLOAD: never loaded for this) or cannot say.
// FAILED_PRECONDITION when the process has fewer devices.
absl::StatusOr<std::optional<std::string>> UuidFromCudaDriver(int device) {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) return std::optional<std::string>();
  auto init = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto count_fn =
      reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<CuDeviceGet>(dlsym(lib, "cuDeviceGet"));
  auto uuid_fn =
      reinterpret_cast<CuDeviceGetUuid>(dlsym(lib, "cuDeviceGetUuid"));
  std::optional<std::string> found;
  int count = 0;
  int handle = 0;
  unsigned char b[16] = {};
  absl::Status status;
  if (init != nullptr && count_fn != nullptr && get != nullptr &&
      uuid_fn != nullptr && init(0) == 0 && count_fn(&count) == 0) {
    if (device >= count) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "this process has ", count, " CUDA device(s) (CUDA_VISIBLE_DEVICES=",
          Env(std::getenv, "CUDA_VISIBLE_DEVICES"), "): there is no device ",
          device));
    } else if (get(&handle, device) == 0 && uuid_fn(b, handle) == 0) {
      found = FormatGpuUuid(b);
    }
  }
  dlclose(lib);
  if (!status.ok()) return status;
  return found;
}

// --- The machine's GPUs. ---------------------------------------------------

using NvmlInit = int (*)();
using NvmlShutdown = int (*)();
using NvmlCount = int (*)(unsigned*);
using NvmlHandle = int (*)(unsigned, void**);
using NvmlText = int (*)(void*, char*, unsigned);

// NVML's list (its indices are nvidia-smi's: PCI bus order); empty when
// libnvidia-ml.so.1 is not installed or not working.
std::vector<Gpu> GpusFromNvml() {
  std::vector<Gpu> gpus;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return gpus;
  auto init = reinterpret_cast<NvmlInit>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlShutdown>(dlsym(lib, "nvmlShutdown"));
  auto count_fn =
      reinterpret_cast<NvmlCount>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle_fn =
      reinterpret_cast<NvmlHandle>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto uuid_fn = reinterpret_cast<NvmlText>(dlsym(lib, "nvmlDeviceGetUUID"));
  auto name_fn = reinterpret_cast<NvmlText>(dlsym(lib, "nvmlDeviceGetName"));
  if (init != nullptr && shutdown != nullptr && count_fn != nullptr &&
      handle_fn != nullptr && uuid_fn != nullptr && name_fn != nullptr &&
      init() == 0) {
    unsigned count = 0;
    if (count_fn(&count) == 0) {
      for (unsigned i = 0; i < count && i < kMaxGpus; ++i) {
        void* handle = nullptr;
        char uuid[96] = {};
        char name[96] = {};
        if (handle_fn(i, &handle) != 0 ||
            uuid_fn(handle, uuid, sizeof(uuid)) != 0) {
          gpus.clear();  // a gap would shift every later index
          break;
        }
        name_fn(handle, name, sizeof(name));
        gpus.push_back({uuid, "", name});
      }
    }
    shutdown();
  }
  dlclose(lib);
  return gpus;
}

// The driver's description of one GPU: "Name: value" lines (the value after
// tabs and spaces).
std::optional<Gpu> ReadInformation(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxInformationBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  Gpu gpu;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    const absl::string_view name = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (name == "GPU UUID") gpu.uuid = std::string(value);
    if (name == "Bus Location") gpu.bus = absl::AsciiStrToLower(value);
    if (name == "Model") gpu.model = std::string(value);
  }
  if (!IsDeviceUuid(gpu.uuid) || gpu.bus.empty()) return std::nullopt;
  return gpu;
}

// <proc_dir>/gpus/*/information, sorted by bus location.
std::vector<Gpu> GpusFromProc(const std::string& proc_dir) {
  std::vector<Gpu> gpus;
  std::error_code ec;
  std::filesystem::directory_iterator it(
      std::filesystem::path(proc_dir) / "gpus", ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (gpus.size() >= kMaxGpus) break;
    if (std::optional<Gpu> gpu = ReadInformation(it->path() / "information"))
      gpus.push_back(std::move(*gpu));
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.bus < b.bus; });
  return gpus;
}

GpuTable MachineGpus(const ClientOptions& options) {
  GpuTable table;
  if (options.device_from_nvml) {
    table.gpus = GpusFromNvml();
    if (!table.gpus.empty()) {
      table.source = "NVML";
      return table;
    }
  }
  const std::string proc_dir = options.nvidia_proc_dir.empty()
                                   ? kDefaultNvidiaProcDir
                                   : options.nvidia_proc_dir;
  table.gpus = GpusFromProc(proc_dir);
  table.source = absl::StrCat(proc_dir, "/gpus");
  return table;
}

// --- From a device to a UUID. ----------------------------------------------

// What a device resolved to: a GPU UUID, or (where the machine's GPUs
// cannot be listed) only the host's index of it.
struct Resolved {
  std::string uuid;
  int host_index = -1;
  std::string chosen_by;
};

// FAILED_PRECONDITION unless index order is PCI order: CUDA numbers GPUs
// fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and among GPUs of one
// model (the common case) fastest-first is PCI bus order.
absl::Status CheckIndexOrder(
    const GpuTable& table,
    const std::function<const char*(const char*)>& getenv) {
  if (Env(getenv, "CUDA_DEVICE_ORDER") == "PCI_BUS_ID") return absl::OkStatus();
  for (const Gpu& gpu : table.gpus) {
    if (gpu.model != table.gpus.front().model) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this machine has GPUs of different models (", gpu.model, ", ",
          table.gpus.front().model,
          ") and CUDA numbers them fastest first, an order gputune cannot "
          "reproduce without the CUDA driver: set CUDA_DEVICE_ORDER=PCI_BUS_ID "
          "(as gputuned's unit does), or give the GPU's UUID (gpu_uuid, "
          "--gpu) or CUDA_VISIBLE_DEVICES as UUIDs"));
    }
  }
  return absl::OkStatus();
}

// The machine's GPU of `index` (PCI order), or only the index when the
// machine's GPUs cannot be listed.
absl::StatusOr<Resolved> HostIndex(
    int index, const GpuTable& table, std::string chosen_by,
    const std::function<const char*(const char*)>& getenv) {
  if (table.gpus.empty()) return Resolved{"", index, std::move(chosen_by)};
  if (auto s = CheckIndexOrder(table, getenv); !s.ok()) return s;
  if (static_cast<size_t>(index) >= table.gpus.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(chosen_by, " names GPU ", index, " but ", table.source,
                     " lists ", table.gpus.size(), " GPU(s)"));
  }
  return Resolved{table.gpus[static_cast<size_t>(index)].uuid, -1,
                  absl::StrCat(chosen_by, ", via ", table.source)};
}

// One entry of CUDA_VISIBLE_DEVICES: a GPU UUID (or a unique prefix of one,
// as CUDA accepts) or an index.
absl::StatusOr<Resolved> FromVisibleEntry(
    absl::string_view entry, const GpuTable& table, std::string chosen_by,
    const std::function<const char*(const char*)>& getenv) {
  if (absl::StartsWithIgnoreCase(entry, "MIG-")) {
    return absl::FailedPreconditionError(absl::StrCat(
        chosen_by, " is MIG instance ", entry,
        ": gputuned benchmarks and serves whole GPUs, and a MIG slice's "
        "timings are not the GPU's. Name the daemon with --endpoint / "
        "GPUTUNE_ENDPOINT (or gpu_uuid) if a cache of the whole GPU is "
        "what you want"));
  }
  if (absl::StartsWithIgnoreCase(entry, "GPU-")) {
    std::vector<const Gpu*> matches;
    for (const Gpu& gpu : table.gpus) {
      if (absl::StartsWithIgnoreCase(gpu.uuid, entry)) matches.push_back(&gpu);
    }
    if (matches.size() == 1) {
      return Resolved{matches.front()->uuid, -1,
                      absl::StrCat(chosen_by, ", via ", table.source)};
    }
    if (matches.size() > 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(chosen_by, ": ", entry, " is a prefix of ",
                       matches.size(), " GPUs' UUIDs in ", table.source));
    }
    // A full UUID needs no table (a container may not see the driver's
    // files); a prefix does.
    if (entry.size() == 40 && IsDeviceUuid(entry)) {
      return Resolved{std::string(entry), -1, std::move(chosen_by)};
    }
    return absl::FailedPreconditionError(
        absl::StrCat(chosen_by, ": no GPU has a UUID starting with ", entry,
                     table.gpus.empty() ? " (no NVML, and no GPUs listed in "
                                        : " (GPUs listed in ",
                     table.source, ")"));
  }
  int index = 0;
  if (!absl::SimpleAtoi(entry, &index) || index < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        chosen_by, " is '", entry,
        "': neither an index nor a GPU UUID (CUDA ignores it and the "
        "entries after it)"));
  }
  return HostIndex(index, table, std::move(chosen_by), getenv);
}

absl::StatusOr<Resolved> ResolveDevice(
    const ClientOptions& options,
    const std::function<const char*(const char*)>& getenv) {
  const int device = options.device;
  if (options.device_from_cuda) {
    absl::StatusOr<std::optional<std::string>> cuda =
        UuidFromCudaDriver(device);
    if (!cuda.ok()) return cuda.status();
    if (cuda->has_value()) {
      return Resolved{
          **cuda, -1,
          absl::StrCat("CUDA device ", device, " (the CUDA driver)")};
    }
  }
  const GpuTable table = MachineGpus(options);
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) {
    return HostIndex(device, table, absl::StrCat("device ", device), getenv);
  }
  // CUDA's reading: comma-separated; the first entry that is neither an
  // index nor a UUID ends the list.
  std::vector<std::string> entries;
  for (absl::string_view e : absl::StrSplit(visible, ',')) {
    e = absl::StripAsciiWhitespace(e);
    int index = 0;
    const bool is_index = absl::SimpleAtoi(e, &index) && index >= 0;
    if (!is_index && !absl::StartsWithIgnoreCase(e, "GPU-") &&
        !absl::StartsWithIgnoreCase(e, "MIG-")) {
      break;
    }
    entries.emplace_back(e);
  }
  if (static_cast<size_t>(device) >= entries.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA_VISIBLE_DEVICES=", absl::string_view(visible).substr(0, 200),
        " makes ", entries.size(),
        " device(s) visible to this process: there is no device ", device));
  }
  return FromVisibleEntry(
      entries[static_cast<size_t>(device)], table,
      absl::StrCat("device ", device, " = entry ", device,
                   " of CUDA_VISIBLE_DEVICES=",
                   absl::string_view(visible).substr(0, 200)),
      getenv);
}

// The by-uuid link of `uuid`; NOT_FOUND (naming it, the directory and the
// daemons that are there) when no daemon made one.
absl::StatusOr<DaemonTarget> ByUuid(const std::string& socket_dir,
                                    const std::string& uuid,
                                    std::string chosen_by) {
  if (!IsDeviceUuid(uuid)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu_uuid=", absl::string_view(uuid).substr(0, 80),
        ": a GPU UUID is letters, digits and '-' (GPU-8f3c... as nvidia-smi "
        "-L prints it)"));
  }
  const std::string canonical = CanonicalDeviceUuid(uuid);
  const std::filesystem::path dir =
      std::filesystem::path(socket_dir) / "by-uuid";
  const std::filesystem::path link = dir / absl::StrCat(canonical, ".sock");
  struct stat st {};
  if (lstat(link.c_str(), &st) != 0) {
    std::vector<std::string> present;
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    for (; !ec && it != std::filesystem::directory_iterator() &&
           present.size() < 8;
         it.increment(ec)) {
      const std::string file = it->path().filename().string();
      absl::string_view name = file;
      if (absl::ConsumeSuffix(&name, ".sock")) present.emplace_back(name);
    }
    std::sort(present.begin(), present.end());
    return absl::NotFoundError(absl::StrCat(
        "no gputuned serves GPU ", canonical, " (", chosen_by,
        "): ", link.string(), " does not exist. ",
        present.empty() ? absl::StrCat("No daemon is linked in ", dir.string())
                        : absl::StrCat("Daemons linked in ", dir.string(), ": ",
                                       absl::StrJoin(present, ", ")),
        ". Start gputuned for that GPU, mount the host's socket directory "
        "at ",
        socket_dir,
        " (or set GPUTUNE_SOCKET_DIR), or name the daemon with "
        "GPUTUNE_ENDPOINT"));
  }
  return DaemonTarget{absl::StrCat("unix://", link.string()), canonical,
                      std::move(chosen_by)};
}

std::string SocketDir(const ClientOptions& options,
                      const std::function<const char*(const char*)>& getenv) {
  if (!options.socket_dir.empty()) return options.socket_dir;
  std::string env = Env(getenv, "GPUTUNE_SOCKET_DIR");
  return env.empty() ? kDefaultSocketDir : env;
}

std::string Normalized(std::string endpoint) {
  if (absl::StartsWith(endpoint, "/")) return absl::StrCat("unix://", endpoint);
  return endpoint;
}

}  // namespace

absl::StatusOr<DaemonTarget> FindDaemon(
    const ClientOptions& options,
    const std::function<const char*(const char*)>& getenv) {
  if (!options.endpoint.empty()) {
    return DaemonTarget{Normalized(options.endpoint), "", "endpoint"};
  }
  if (std::string env = Env(getenv, "GPUTUNE_ENDPOINT"); !env.empty()) {
    return DaemonTarget{Normalized(env), "", "GPUTUNE_ENDPOINT"};
  }
  const std::string socket_dir = SocketDir(options, getenv);
  if (!options.gpu_uuid.empty()) {
    return ByUuid(socket_dir, options.gpu_uuid, "gpu_uuid");
  }
  absl::StatusOr<Resolved> resolved = ResolveDevice(options, getenv);
  if (!resolved.ok()) return resolved.status();
  if (!resolved->uuid.empty()) {
    return ByUuid(socket_dir, resolved->uuid, std::move(resolved->chosen_by));
  }
  return DaemonTarget{absl::StrCat("unix://", socket_dir, "/gpu",
                                   resolved->host_index, ".sock"),
                      "",
                      absl::StrCat(resolved->chosen_by,
                                   " (no NVIDIA GPUs listed: the daemon of "
                                   "that host index)")};
}

}  // namespace gputune
