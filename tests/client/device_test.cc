// Finding the daemon of this process's CUDA device by its GPU's UUID
// (FindDaemon, gputune/options.h): CUDA_VISIBLE_DEVICES as indices and as
// UUIDs, reordered; the machine's GPUs from a driver directory of the test's
// own (nvidia_proc_dir); real host-backend daemons given GPU identities
// (--device_uuid) and found through their by-uuid links; a TuneDense sent
// to another GPU's daemon refused.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "client/gputunectl/cli.h"
#include "client/gputunectl/commands.h"
#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kA[] = "GPU-a1111111-1111-1111-1111-111111111111";
constexpr char kB[] = "GPU-b2222222-2222-2222-2222-222222222222";
constexpr char kC[] = "GPU-c3333333-3333-3333-3333-333333333333";

std::string TempDir() {
  std::string dir = fs::temp_directory_path() / "gputune-device-XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  return dir;
}

// The driver's description of one GPU, as /proc/driver/nvidia has it.
void WriteGpu(const std::string& proc_dir, const std::string& bus,
              const std::string& uuid, const std::string& model) {
  const fs::path dir = fs::path(proc_dir) / "gpus" / bus;
  fs::create_directories(dir);
  std::ofstream(dir / "information")
      << "Model: \t\t " << model << "\nIRQ:   \t\t 42\nGPU UUID: \t " << uuid
      << "\nVideo BIOS: \t 96.00.89.00.01\nBus Type: \t PCIe\n"
      << "Bus Location: \t " << bus << "\nDevice Minor: \t 0\n";
}

// A machine with GPUs A, B, C in PCI bus order (listed out of order).
std::string ThreeGpus(const std::string& model_c = "NVIDIA H200") {
  const std::string proc = TempDir();
  WriteGpu(proc, "0000:65:00.0", kB, "NVIDIA H200");
  WriteGpu(proc, "0000:b3:00.0", kC, model_c);
  WriteGpu(proc, "0000:17:00.0", kA, "NVIDIA H200");
  return proc;
}

// A socket directory where daemons of these GPUs made their links.
std::string SocketDirWith(const std::vector<std::string>& uuids) {
  const std::string dir = TempDir();
  fs::create_directories(fs::path(dir) / "by-uuid");
  for (const std::string& uuid : uuids) {
    fs::create_symlink("../gpuX.sock",
                       fs::path(dir) / "by-uuid" / (uuid + ".sock"));
  }
  return dir;
}

using Env = std::map<std::string, std::string>;

absl::StatusOr<DaemonTarget> Find(int device, const std::string& proc,
                                  const std::string& sockets, const Env& env) {
  ClientOptions o;
  o.device = device;
  o.nvidia_proc_dir = proc;
  o.socket_dir = sockets;
  o.device_from_cuda = false;  // no CUDA driver in the test's process
  o.device_from_nvml = false;  // the test's GPU list, not the machine's
  return FindDaemon(o, [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string ByUuid(const std::string& sockets, const std::string& uuid) {
  return "unix://" + sockets + "/by-uuid/" + uuid + ".sock";
}

TEST_CASE("CUDA_VISIBLE_DEVICES as indices names GPUs in PCI bus order") {
  const std::string proc = ThreeGpus();
  const std::string sockets = SocketDirWith({kA, kB, kC});
  const Env visible{{"CUDA_VISIBLE_DEVICES", "2,0"}};
  absl::StatusOr<DaemonTarget> zero = Find(0, proc, sockets, visible);
  REQUIRE(zero.ok());
  CHECK(zero->gpu_uuid == kC);
  CHECK(zero->endpoint == ByUuid(sockets, kC));
  CHECK(zero->chosen_by.find("CUDA_VISIBLE_DEVICES=2,0") != std::string::npos);
  absl::StatusOr<DaemonTarget> one = Find(1, proc, sockets, visible);
  REQUIRE(one.ok());
  CHECK(one->gpu_uuid == kA);
  // Beyond the visible devices: no daemon is guessed.
  absl::StatusOr<DaemonTarget> two = Find(2, proc, sockets, visible);
  REQUIRE(two.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(two.status().message()).find("no device 2") !=
        std::string::npos);
  // Without CUDA_VISIBLE_DEVICES, device N is the machine's GPU N.
  absl::StatusOr<DaemonTarget> plain = Find(1, proc, sockets, {});
  REQUIRE(plain.ok());
  CHECK(plain->gpu_uuid == kB);
  // An index past the machine's GPUs.
  absl::StatusOr<DaemonTarget> past =
      Find(0, proc, sockets, {{"CUDA_VISIBLE_DEVICES", "7"}});
  CHECK(past.status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("CUDA_VISIBLE_DEVICES as UUIDs and prefixes, reordered") {
  const std::string proc = ThreeGpus();
  const std::string sockets = SocketDirWith({kA, kB, kC});
  // Upper case and a prefix, as people and launchers write them.
  const Env visible{{"CUDA_VISIBLE_DEVICES",
                     "GPU-B2222222-2222-2222-2222-222222222222, GPU-a1"}};
  absl::StatusOr<DaemonTarget> zero = Find(0, proc, sockets, visible);
  REQUIRE(zero.ok());
  CHECK(zero->gpu_uuid == kB);
  CHECK(zero->endpoint == ByUuid(sockets, kB));
  absl::StatusOr<DaemonTarget> one = Find(1, proc, sockets, visible);
  REQUIRE(one.ok());
  CHECK(one->gpu_uuid == kA);
  // A full UUID needs no list of GPUs (a container without the driver's
  // files); a prefix does, and one that fits two GPUs is refused.
  absl::StatusOr<DaemonTarget> bare = Find(
      0, "/nonexistent", sockets, {{"CUDA_VISIBLE_DEVICES", std::string(kC)}});
  REQUIRE(bare.ok());
  CHECK(bare->gpu_uuid == kC);
  WriteGpu(proc, "0000:c1:00.0", "GPU-a1999999-1111-1111-1111-111111111111",
           "NVIDIA H200");
  absl::StatusOr<DaemonTarget> ambiguous = Find(1, proc, sockets, visible);
  REQUIRE(ambiguous.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(ambiguous.status().message()).find("prefix of 2") !=
        std::string::npos);
}

TEST_CASE("a GPU with no daemon is an error naming it and the directory") {
  const std::string proc = ThreeGpus();
  const std::string sockets = SocketDirWith({kA, kB});
  absl::StatusOr<DaemonTarget> none =
      Find(0, proc, sockets, {{"CUDA_VISIBLE_DEVICES", "2"}});
  REQUIRE(none.status().code() == absl::StatusCode::kNotFound);
  const std::string message(none.status().message());
  INFO(message);
  CHECK(message.find(kC) != std::string::npos);
  CHECK(message.find(sockets + "/by-uuid") != std::string::npos);
  CHECK(message.find(std::string("linked in ") + sockets + "/by-uuid: " + kA +
                     ", " + kB) != std::string::npos);
  // The same through Client::Create, with gpu_uuid.
  ClientOptions o;
  o.socket_dir = sockets;
  o.gpu_uuid = kC;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(o);
  REQUIRE(client.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(client.status().message()).find(kC) != std::string::npos);
}

TEST_CASE("what cannot be resolved is refused with what to do") {
  const std::string proc = ThreeGpus(/*model_c=*/"NVIDIA L4");
  const std::string sockets = SocketDirWith({kA, kB, kC});
  absl::StatusOr<DaemonTarget> mig = Find(
      0, proc, sockets,
      {{"CUDA_VISIBLE_DEVICES", "MIG-5c7b2a10-0000-0000-0000-000000000000"}});
  REQUIRE(mig.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(mig.status().message()).find("whole GPUs") !=
        std::string::npos);
  // GPUs of two models: CUDA's fastest-first order is not PCI order.
  absl::StatusOr<DaemonTarget> mixed = Find(0, proc, sockets, {});
  REQUIRE(mixed.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(mixed.status().message()).find("CUDA_DEVICE_ORDER") !=
        std::string::npos);
  absl::StatusOr<DaemonTarget> ordered =
      Find(0, proc, sockets, {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}});
  REQUIRE(ordered.ok());
  CHECK(ordered->gpu_uuid == kA);
  // UUIDs need no order.
  CHECK(Find(0, proc, sockets, {{"CUDA_VISIBLE_DEVICES", std::string(kC)}})
            ->gpu_uuid == kC);
}

TEST_CASE("without NVIDIA GPUs an index names gpuN.sock, endpoints win") {
  const std::string sockets = TempDir();
  absl::StatusOr<DaemonTarget> plain = Find(2, "/nonexistent", sockets, {});
  REQUIRE(plain.ok());
  CHECK(plain->endpoint == "unix://" + sockets + "/gpu2.sock");
  CHECK(plain->gpu_uuid.empty());
  // CUDA_VISIBLE_DEVICES=3,1: device 1 is the host's GPU 1.
  absl::StatusOr<DaemonTarget> visible =
      Find(1, "/nonexistent", sockets, {{"CUDA_VISIBLE_DEVICES", "3,1"}});
  REQUIRE(visible.ok());
  CHECK(visible->endpoint == "unix://" + sockets + "/gpu1.sock");
  // CUDA stops at an entry that is neither an index nor a UUID.
  CHECK(Find(1, "/nonexistent", sockets, {{"CUDA_VISIBLE_DEVICES", "0,x,1"}})
            .status()
            .code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Find(0, "/nonexistent", sockets,
             {{"CUDA_VISIBLE_DEVICES", "0"}, {"GPUTUNE_ENDPOINT", "/e.sock"}})
            ->endpoint == "unix:///e.sock");
  CHECK(Find(0, "/nonexistent", sockets, {{"GPUTUNE_SOCKET_DIR", "/elsewhere"}})
            ->endpoint == "unix://" + sockets + "/gpu0.sock");
  ClientOptions o;
  o.endpoint = "/x.sock";
  o.gpu_uuid = kA;  // explicit endpoint wins over the UUID too
  CHECK(FindDaemon(o)->endpoint == "unix:///x.sock");
}

// gputuned for one GPU identity in a shared socket directory, as the
// systemd instances run: <dir>/gpu<N>.sock, linked by-uuid.
class NamedDaemon {
 public:
  NamedDaemon(const std::string& dir, int index, const std::string& uuid)
      : dir_(dir), index_(index), uuid_(uuid) {
    Start();
  }
  ~NamedDaemon() { Stop(); }

  void Start() {
    std::vector<std::string> args = {
        "--listen=unix://" + socket(),
        "--db=" + dir_ + "/gpu" + std::to_string(index_) + ".db",
        "--backend=host",
        "--device=" + std::to_string(index_),
        "--tune_budget=50ms",
        "--log_level=warn"};
    if (!uuid_.empty()) args.push_back("--device_uuid=" + uuid_);
    pid_ = SpawnGputuned(args, {},
                         dir_ + "/gpu" + std::to_string(index_) + ".log");
    ClientOptions o;
    o.endpoint = socket();
    o.deadline = absl::Seconds(5);
    auto client = Client::Create(o);
    REQUIRE(client.ok());
    REQUIRE(Eventually([&] { return (*client)->GetStatus().ok(); },
                       std::chrono::milliseconds(30000)));
  }
  int Stop() {
    const int status = SignalAndReap(pid_, SIGTERM);
    pid_ = -1;
    return status;
  }
  std::string socket() const {
    return dir_ + "/gpu" + std::to_string(index_) + ".sock";
  }

 private:
  std::string dir_;
  int index_;
  std::string uuid_;
  pid_t pid_ = -1;
};

// Sets an environment variable for one scope (Client::Create reads it).
class ScopedVisible {
 public:
  explicit ScopedVisible(const std::string& value) {
    setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1);
  }
  ~ScopedVisible() { unsetenv("CUDA_VISIBLE_DEVICES"); }
};

std::string StatusUuid(Client& client) {
  absl::StatusOr<v1::GetStatusResponse> s = client.GetStatus();
  REQUIRE(s.ok());
  return s->device_uuid();
}

TEST_CASE("two host daemons with distinct identities, a client for each") {
  const std::string sockets = TempDir();
  const std::string proc = TempDir();
  WriteGpu(proc, "0000:17:00.0", kA, "NVIDIA H200");
  WriteGpu(proc, "0000:65:00.0", kB, "NVIDIA H200");
  NamedDaemon a(sockets, 0, kA);
  NamedDaemon b(sockets, 1, kB);
  CHECK(fs::read_symlink(fs::path(sockets) / "by-uuid" /
                         (std::string(kA) + ".sock")) == "../gpu0.sock");

  ClientOptions o;
  o.socket_dir = sockets;
  o.nvidia_proc_dir = proc;
  o.device_from_cuda = false;
  o.device_from_nvml = false;
  {
    ScopedVisible visible("1,0");  // device 0 is the host's GPU 1: B
    o.device = 0;
    auto zero = Client::Create(o);
    REQUIRE(zero.ok());
    CHECK((*zero)->gpu_uuid() == kB);
    CHECK(StatusUuid(**zero) == kB);
    o.device = 1;
    auto one = Client::Create(o);
    REQUIRE(one.ok());
    CHECK(StatusUuid(**one) == kA);
  }
  {
    ScopedVisible visible(std::string(kA) + "," + kB);
    o.device = 0;
    auto zero = Client::Create(o);
    REQUIRE(zero.ok());
    CHECK(StatusUuid(**zero) == kA);
  }
  o.device = 0;
  o.gpu_uuid = kB;
  auto by_uuid = Client::Create(o);
  REQUIRE(by_uuid.ok());
  CHECK(StatusUuid(**by_uuid) == kB);
  absl::StatusOr<v1::GetStatusResponse> status = (*by_uuid)->GetStatus();
  CHECK(status->pci_bus_id().empty());  // the host backend has no PCI bus id

  // gputunectl --gpu, in $GPUTUNE_SOCKET_DIR.
  setenv("GPUTUNE_SOCKET_DIR", sockets.c_str(), 1);
  std::ostringstream out, err;
  const int found = ctl::Main({"--gpu=" + std::string(kA), "status"}, out, err,
                              ctl::Terminal{});
  std::ostringstream out2, err2;
  const int missing = ctl::Main({"--gpu=" + std::string(kC), "status"}, out2,
                                err2, ctl::Terminal{});
  unsetenv("GPUTUNE_SOCKET_DIR");
  INFO(err.str());
  CHECK(found == 0);
  const size_t row = out.str().find("\ngpu ");
  REQUIRE(row != std::string::npos);
  CHECK(out.str().substr(row, out.str().find('\n', row + 1) - row).find(kA) !=
        std::string::npos);
  CHECK(missing == ctl::kExitNotFound);
  CHECK(err2.str().find(kC) != std::string::npos);
  CHECK(err2.str().find(sockets + "/by-uuid") != std::string::npos);

  // A clean stop removes the daemon's link, and only its own.
  REQUIRE(WIFEXITED(a.Stop()));
  CHECK_FALSE(fs::is_symlink(fs::path(sockets) / "by-uuid" /
                             (std::string(kA) + ".sock")));
  CHECK(fs::is_symlink(fs::path(sockets) / "by-uuid" /
                       (std::string(kB) + ".sock")));
}

TEST_CASE("a daemon replaces a stale by-uuid link, host identities differ") {
  const std::string sockets = TempDir();
  fs::create_directories(fs::path(sockets) / "by-uuid");
  const fs::path link =
      fs::path(sockets) / "by-uuid" / (std::string(kA) + ".sock");
  fs::create_symlink("../gpu9.sock", link);  // left by a killed daemon
  {
    NamedDaemon a(sockets, 3, kA);
    CHECK(fs::read_symlink(link) == "../gpu3.sock");
  }
  // Without --device_uuid: HOST-<digest of the machine and device>, one per
  // device, the same again after a restart.
  std::string first, second, again;
  {
    NamedDaemon zero(sockets, 0, "");
    NamedDaemon one(sockets, 1, "");
    ClientOptions o;
    o.endpoint = zero.socket();
    first = StatusUuid(**Client::Create(o));
    o.endpoint = one.socket();
    second = StatusUuid(**Client::Create(o));
  }
  {
    NamedDaemon zero(sockets, 0, "");
    ClientOptions o;
    o.endpoint = zero.socket();
    again = StatusUuid(**Client::Create(o));
  }
  CHECK(first.rfind("HOST-", 0) == 0);
  CHECK(first.size() == 41);
  CHECK(first != second);
  CHECK(first == again);
}

TEST_CASE("a TuneDense sent to another GPU's daemon is refused") {
  const std::string sockets = TempDir();
  NamedDaemon b(sockets, 1, kB);
  ClientOptions o;
  o.endpoint = b.socket();  // names B's daemon...
  o.gpu_uuid = kA;          // ...for GPU A
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  const v1::Key key = DenseKey(2, 64, 64);
  absl::StatusOr<v1::KeyStatus> tuned = (*client)->TuneDense(key, true);
  REQUIRE(tuned.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(tuned.status().message());
  INFO(message);
  CHECK(message.find(kA) != std::string::npos);
  CHECK(message.find(kB) != std::string::npos);
  CHECK(message.find("drop the endpoint") != std::string::npos);
  // Nothing ran, and lookups stay allowed.
  absl::StatusOr<LookupResult> looked = (*client)->Lookup(key);
  REQUIRE(looked.ok());
  CHECK(looked->state() == v1::KEY_STATE_MISS);
  // The right GPU's TuneDense runs.
  o.gpu_uuid = kB;
  auto right = Client::Create(o);
  REQUIRE(right.ok());
  absl::StatusOr<v1::KeyStatus> ok = (*right)->TuneDense(key, true);
  INFO(ok.status().message());
  CHECK(ok.ok());
}

}  // namespace
}  // namespace gputune::testing
