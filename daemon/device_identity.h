// DeviceIdentity: which GPU a daemon serves, as clients find it.
//
// A daemon knows its GPU by UUID (as nvidia-smi prints it, "GPU-8f3c...")
// and PCI bus id, reports both in GetStatus, refuses a TuneDense meant for
// another GPU (CheckTuneDevice), and links <socket dir>/by-uuid/<UUID>.sock
// to its socket (ByUuidLink) so that a client that knows its device's UUID
// finds the daemon whatever index the device has in the client's process
// (CUDA_VISIBLE_DEVICES, a container, CUDA's fastest-first order).
//
// The host backend has no GPU: its identity is "HOST-" and a digest of the
// machine's id and --device, stable across restarts and distinct per device
// and machine, so that all of this works and is tested without a GPU.
//
//   absl::StatusOr<DeviceIdentity> id = ChooseIdentity(...);
//   absl::StatusOr<ByUuidLink> link = ByUuidLink::Create(socket, id->uuid);
//   ... link->Remove();   // at a clean stop
#ifndef GPUTUNE_DAEMON_DEVICE_IDENTITY_H_
#define GPUTUNE_DAEMON_DEVICE_IDENTITY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gputune {

struct DeviceIdentity {
  std::string uuid;        // empty: unknown (no by-uuid link then)
  std::string pci_bus_id;  // "00000000:65:00.0"; empty for the host backend
};

// "HOST-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx": a digest (not a secret) of
// the machine id and the device name; the same inputs give the same UUID.
std::string HostDeviceUuid(absl::string_view machine_id,
                           absl::string_view device);

// The first line of /etc/machine-id, else of /var/lib/dbus/machine-id,
// else the host name (a container may have neither file).
std::string MachineId();

// OK when `uuid` can name a device and a file: 1-64 characters of
// [A-Za-z0-9-], not starting with '-'. INVALID_ARGUMENT names `flag`.
absl::Status ValidateDeviceUuid(absl::string_view uuid, absl::string_view flag);

// The identity of the daemon's device. backend_uuid / backend_pci: what the
// backend reports (the CUDA backend: the GPU's; others: empty). override:
// --device_uuid; device: --device. With a backend UUID, a different
// override is FAILED_PRECONDITION (the flag would lie about the GPU).
// Without one: the override, else a --device that is a GPU UUID
// ("GPU-..."), else for the host backend HostDeviceUuid(machine_id, device),
// else unknown (empty).
absl::StatusOr<DeviceIdentity> ChooseIdentity(absl::string_view backend_name,
                                              absl::string_view backend_uuid,
                                              absl::string_view backend_pci,
                                              absl::string_view override,
                                              absl::string_view device,
                                              absl::string_view machine_id);

// TuneDense's check: OK when `wanted` (the caller's TuneDenseRequest
// .device_uuid) is empty or names `served` (case-insensitively: CUDA and
// nvidia-smi print lower case, people paste either); FAILED_PRECONDITION
// naming both otherwise, also when this daemon's identity is unknown.
absl::Status CheckTuneDevice(absl::string_view wanted,
                             absl::string_view served);

// <directory of socket_path>/by-uuid/<uuid>.sock, a symlink to
// "../<socket file name>" (relative, so that it also resolves where the
// directory is mounted elsewhere, e.g. in a container).
class ByUuidLink {
 public:
  // Creates the by-uuid directory if needed and the link, replacing
  // atomically whatever was at its path (a stale link left by a killed
  // daemon; or the link of another daemon given the same identity, which is
  // a configuration error the caller logs). The caller holds the socket's
  // instance lock. UNAVAILABLE (naming the path) when it cannot.
  static absl::StatusOr<ByUuidLink> Create(const std::string& socket_path,
                                           absl::string_view uuid);
  ByUuidLink(ByUuidLink&& other) noexcept;
  ByUuidLink& operator=(ByUuidLink&& other) noexcept;
  ByUuidLink(const ByUuidLink&) = delete;
  ByUuidLink& operator=(const ByUuidLink&) = delete;
  // Remove()s.
  ~ByUuidLink();

  // Removes the link if it still points to this daemon's socket (another
  // daemon's newer link is left). Idempotent.
  void Remove();

  const std::string& path() const { return path_; }

 private:
  ByUuidLink(std::string path, std::string target)
      : path_(std::move(path)), target_(std::move(target)) {}
  std::string path_;    // empty once removed or moved from
  std::string target_;  // what the link points to
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_DEVICE_IDENTITY_H_
