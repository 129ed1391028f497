// ClientOptions: every setting of a gputune::Client, with its default, and
// how the client finds its daemon.
//
//   gputune::ClientOptions options;
//   options.device = 1;                                // gpu1's daemon
//   options.lookup_deadline = absl::Milliseconds(50);  // hot-path budget
//   auto client = gputune::Client::Create(options);
#ifndef GPUTUNE_OPTIONS_H_
#define GPUTUNE_OPTIONS_H_

#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

// Declared only: a program that sets ClientOptions::channel or calls
// ChannelArgumentsFor includes <grpcpp/grpcpp.h> itself; one that does not
// compiles without gRPC's headers.
namespace grpc {
class Channel;
class ChannelArguments;
}  // namespace grpc

namespace gputune {

struct ClientOptions {
  // Where gputuned listens: "unix:///path", a bare "/path" (taken as a unix
  // socket) or "host:port". Empty: $GPUTUNE_ENDPOINT, else the daemon of
  // gpu_uuid, else of `device` (FindDaemon).
  std::string endpoint;
  // This process's CUDA device whose daemon to use when neither endpoint
  // nor $GPUTUNE_ENDPOINT nor gpu_uuid is set: resolved to its GPU's UUID
  // (FindDaemon), so that under CUDA_VISIBLE_DEVICES or in a container it
  // is the GPU the process computes on, not the host's GPU of that index.
  int device = 0;
  // The GPU whose daemon to use ("GPU-8f3c...", as nvidia-smi -L prints
  // it): <socket_dir>/by-uuid/<gpu_uuid>.sock. Wins over device.
  std::string gpu_uuid;
  // Where the daemons' sockets are. Empty: $GPUTUNE_SOCKET_DIR, else
  // /run/gputuned (a container mounts the host's directory there).
  std::string socket_dir;
  // Where the NVIDIA driver describes the GPUs (gpus/*/information), for
  // mapping CUDA_VISIBLE_DEVICES to UUIDs without NVML. Empty:
  // /proc/driver/nvidia. Tests point it at a directory of their own.
  std::string nvidia_proc_dir;
  // Ask the CUDA driver for `device`'s UUID when the process has it loaded
  // already (it is never loaded for this); false: NVML and
  // CUDA_VISIBLE_DEVICES only.
  bool device_from_cuda = true;
  // Ask NVML (libnvidia-ml.so.1, when installed) for the machine's GPUs
  // before reading nvidia_proc_dir.
  bool device_from_nvml = true;

  // Deadline of a Lookup RPC (and of the background refreshes). The caller of
  // Lookup never waits longer than this.
  absl::Duration lookup_deadline = absl::Milliseconds(250);
  // Deadline of every other call (Claim, Renew, Record, Abandon, BatchLookup,
  // Preload, TuneDense without wait, operator calls).
  absl::Duration deadline = absl::Seconds(2);
  // Deadline of TuneDense(wait=true): the benchmark runs inside it.
  absl::Duration tune_deadline = absl::Minutes(5);

  // Lease asked for in Claim; a ClaimGuard renews it every lease_ttl / 3.
  // Zero: the daemon's default (30 s).
  absl::Duration lease_ttl = absl::Seconds(30);
  // Shown to others as the claim's holder. Empty: "<program> pid <pid> on
  // <host>".
  std::string holder;

  // Most HIT entries kept in the in-process memo; 0 disables the memo (every
  // Lookup is an RPC). When full, an arbitrary entry makes room.
  size_t memo_capacity = 65536;
  // Age after which a memoised entry is re-checked in the background (it is
  // still served meanwhile); a re-check that no longer finds a HIT (deleted,
  // stale) drops it. InfiniteDuration(): never re-checked.
  absl::Duration memo_ttl = absl::Minutes(1);
  // Follow the daemon's change feed (one SubscribeChanges stream per
  // client, in the background) so that the memo learns of deletes and
  // re-tunes at once: a deleted or stale key's next Lookup asks the daemon,
  // a re-tuned one answers with the new entry. memo_ttl stays the safety net
  // while the stream is down. Only with the memo on.
  bool follow_changes = true;
  // TryLookup asks the daemon about a key it does not have at most this
  // often (a MISS is not memoised, so this bounds the background traffic).
  absl::Duration refresh_interval = absl::Seconds(1);

  // Circuit breaker: after this many consecutive transport failures
  // (UNAVAILABLE, DEADLINE_EXCEEDED) calls fail at once with UNAVAILABLE for
  // breaker_open_time, doubling on each failed probe up to
  // breaker_max_open_time. One call then probes the daemon; success closes
  // the breaker.
  int breaker_failures = 2;
  absl::Duration breaker_open_time = absl::Milliseconds(250);
  absl::Duration breaker_max_open_time = absl::Seconds(2);

  // Advanced: talk through this channel instead of creating one (e.g. a
  // channel with interceptors). `endpoint` then only names it in messages.
  // Build it with ChannelArgumentsFor(options) to keep the reconnect policy.
  std::shared_ptr<grpc::Channel> channel;
};

// "unix:///run/gputuned/gpu<device>.sock": where the systemd unit
// gputuned@<device> listens.
std::string DefaultEndpoint(int device);

// The daemon a client with these options talks to, and how it was chosen.
struct DaemonTarget {
  std::string endpoint;
  // The GPU meant (sent with TuneDense, which a daemon serving another GPU
  // refuses); empty when the daemon was named by endpoint or host index.
  std::string gpu_uuid;
  // For messages: "CUDA_VISIBLE_DEVICES=2,3 (entry 1, via
  // /proc/driver/nvidia)", "--endpoint", ...
  std::string chosen_by;
};

// Finds the daemon (first that applies): options.endpoint;
// $GPUTUNE_ENDPOINT; options.gpu_uuid; this process's CUDA device
// options.device, by its GPU's UUID from (1) the CUDA driver if the process
// has loaded it, else (2) entry `device` of $CUDA_VISIBLE_DEVICES (a GPU
// UUID or a prefix of one; an index into the machine's GPUs in PCI bus
// order, as NVML or nvidia_proc_dir list them), or without
// $CUDA_VISIBLE_DEVICES the machine's GPU `device` in PCI bus order. A
// device found by UUID is <socket_dir>/by-uuid/<UUID>.sock, which must
// exist: NOT_FOUND names the UUID and the directory searched. Where the
// machine's GPUs cannot be listed (no NVIDIA driver, e.g. the host
// backend), an index names <socket_dir>/gpu<index>.sock as before.
// FAILED_PRECONDITION for what cannot be resolved and says how to fix it:
// a device beyond $CUDA_VISIBLE_DEVICES, a MIG instance (gputuned serves
// whole GPUs), an index with GPUs of different models and
// CUDA_DEVICE_ORDER not PCI_BUS_ID (CUDA's fastest-first order is then
// unknown). `getenv` reads the variables (tests pass their own).
absl::StatusOr<DaemonTarget> FindDaemon(
    const ClientOptions& options,
    const std::function<const char*(const char*)>& getenv = std::getenv);

// FindDaemon's endpoint; where FindDaemon fails, DefaultEndpoint(device) in
// the socket directory (Client::Create reports the failure instead).
std::string ResolveEndpoint(const ClientOptions& options);

// Channel arguments the client uses: fast reconnection (100 ms .. 1 s
// backoff, 2 s per connection attempt), its own subchannels (not gRPC's
// process-wide pool) and 64 MiB messages (BatchLookup, ListEntries pages).
// Include <grpcpp/support/channel_arguments.h> to call it.
grpc::ChannelArguments ChannelArgumentsFor(const ClientOptions& options);

}  // namespace gputune

#endif  // GPUTUNE_OPTIONS_H_
