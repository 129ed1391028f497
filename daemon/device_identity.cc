#include "daemon/device_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "proto/device_uuid.h"
#include "proto/fnv1a.h"

namespace gputune {
namespace {

std::string FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return std::string(absl::StripAsciiWhitespace(line.substr(0, 256)));
}

}  // namespace

std::string HostDeviceUuid(absl::string_view machine_id,
                           absl::string_view device) {
  // Two differently seeded 64-bit digests make 128 bits, shown as a UUID.
  // '\n' separates the inputs, so ("ab", "c") and ("a", "bc") differ.
  const std::string input = absl::StrCat(machine_id, "\n", device);
  const uint64_t a = Fnv1a<uint64_t>(input);
  const uint64_t b = Fnv1a<uint64_t>(input, a ^ 0x9e3779b97f4a7c15ull);
  return absl::StrFormat("HOST-%08x-%04x-%04x-%04x-%012x", a >> 32,
                         (a >> 16) & 0xffff, a & 0xffff, b >> 48,
                         b & 0xffffffffffffull);
}

std::string MachineId() {
  for (const char* path : {"/etc/machine-id", "/var/lib/dbus/machine-id"}) {
    std::string id = FirstLine(path);
    if (!id.empty()) return id;
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) return host;
  return "";
}

absl::Status ValidateDeviceUuid(absl::string_view uuid,
                                absl::string_view flag) {
  if (IsDeviceUuid(uuid)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      flag, "=", uuid.substr(0, 80),
      ": a device UUID is 1-64 letters, digits and '-' (e.g. GPU-8f3c... as "
      "nvidia-smi -L prints it)"));
}

absl::StatusOr<DeviceIdentity> ChooseIdentity(absl::string_view backend_name,
                                              absl::string_view backend_uuid,
                                              absl::string_view backend_pci,
                                              absl::string_view override,
                                              absl::string_view device,
                                              absl::string_view machine_id) {
  DeviceIdentity id;
  id.pci_bus_id = std::string(backend_pci);
  if (!override.empty()) {
    if (auto s = ValidateDeviceUuid(override, "--device_uuid"); !s.ok())
      return s;
  }
  if (!backend_uuid.empty()) {
    if (!override.empty() && !absl::EqualsIgnoreCase(override, backend_uuid)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--device_uuid=", override, " but the ", backend_name,
          " backend's device is ", backend_uuid,
          ": drop --device_uuid (it is for backends without a GPU)"));
    }
    id.uuid = std::string(backend_uuid);
  } else if (!override.empty()) {
    id.uuid = std::string(override);
  } else if (absl::StartsWithIgnoreCase(device, "GPU-") &&
             ValidateDeviceUuid(device, "--device").ok()) {
    id.uuid = std::string(device);
  } else if (backend_name == "host" || backend_name == "fault") {
    id.uuid = HostDeviceUuid(machine_id, device);
  }
  return id;
}

absl::Status CheckTuneDevice(absl::string_view wanted,
                             absl::string_view served) {
  if (wanted.empty() || absl::EqualsIgnoreCase(wanted, served)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "this gputuned serves GPU ",
      served.empty() ? "(unknown: no backend)" : served,
      ", not the GPU the caller means, ", wanted.substr(0, 64),
      ": its benchmark would measure another GPU. Connect to the daemon "
      "linked at by-uuid/",
      wanted.substr(0, 64), ".sock in the socket directory"));
}

absl::StatusOr<ByUuidLink> ByUuidLink::Create(const std::string& socket_path,
                                              absl::string_view uuid) {
  if (auto s = ValidateDeviceUuid(uuid, "device UUID"); !s.ok()) return s;
  const std::filesystem::path socket(socket_path);
  const std::filesystem::path dir = socket.parent_path() / "by-uuid";
  // 0755 less the umask: the unit's UMask=0027 gives 0750, like the socket
  // directory, so the socket group may look links up.
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create ", dir.string(),
                                               ": ", std::strerror(errno)));
  }
  // Spelt as clients spell what they look for.
  const std::string path =
      (dir / absl::StrCat(CanonicalDeviceUuid(uuid), ".sock")).string();
  const std::string target =
      (std::filesystem::path("..") / socket.filename()).string();
  // A new link under a temporary name, renamed over the old one: the path
  // always resolves to some daemon's socket, never to nothing, while a
  // restarted daemon replaces its stale link.
  const std::string temp = absl::StrCat(path, ".", getpid(), ".tmp");
  unlink(temp.c_str());
  if (symlink(target.c_str(), temp.c_str()) != 0 ||
      rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    return absl::UnavailableError(absl::StrCat(
        "cannot link ", path, " to ", target, ": ", std::strerror(err)));
  }
  return ByUuidLink(path, target);
}

ByUuidLink::ByUuidLink(ByUuidLink&& other) noexcept
    : path_(std::exchange(other.path_, "")),
      target_(std::move(other.target_)) {}

ByUuidLink& ByUuidLink::operator=(ByUuidLink&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, "");
    target_ = std::move(other.target_);
  }
  return *this;
}

ByUuidLink::~ByUuidLink() { Remove(); }

void ByUuidLink::Remove() {
  if (path_.empty()) return;
  // Only our own link: a daemon given the same identity may have replaced
  // it since (it then owns the name). A link to the same socket name can
  // only be ours: the socket's instance lock is held.
  char buf[4096];
  const ssize_t n = readlink(path_.c_str(), buf, sizeof(buf));
  if (n >= 0 && absl::string_view(buf, static_cast<size_t>(n)) == target_) {
    unlink(path_.c_str());
  }
  path_.clear();
}

}  // namespace gputune
