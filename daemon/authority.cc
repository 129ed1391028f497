#include "daemon/authority.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gputune {

Authority::Authority(const PeerTable* peers, uid_t daemon_uid,
                     std::optional<gid_t> admin_group)
    : peers_(peers), daemon_uid_(daemon_uid), admin_group_(admin_group) {}

absl::Status Authority::RequireOperator(absl::string_view grpc_peer,
                                        absl::string_view method) const {
  const std::optional<Peer> peer =
      peers_ == nullptr ? std::nullopt : peers_->Find(grpc_peer);
  if (peer && IsOperator(*peer)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      method,
      " is an operator call: it needs root, the daemon's user or a member of "
      "its --admin_group on the unix socket",
      peer && peer->has_credentials
          ? absl::StrCat(" (you are uid ", peer->uid, ")")
          : std::string(" (this peer has no unix credentials)"),
      "; run it as an operator, e.g. with sudo"));
}

bool Authority::IsOperator(const Peer& peer) const {
  if (!peer.has_credentials) return false;
  if (peer.uid == 0 || peer.uid == daemon_uid_) return true;
  return admin_group_ && (peer.gid == *admin_group_ ||
                          std::find(peer.groups.begin(), peer.groups.end(),
                                    *admin_group_) != peer.groups.end());
}

std::string Authority::Owner(absl::string_view grpc_peer) const {
  const std::optional<Peer> peer =
      peers_ == nullptr ? std::nullopt : peers_->Find(grpc_peer);
  if (peer && peer->has_credentials) return absl::StrCat("uid:", peer->uid);
  if (peer) return absl::StrCat("connection:", peer->connection);
  return absl::StrCat("peer:", grpc_peer);
}

void Authority::Bind(uint64_t claim_id, std::string owner) {
  absl::MutexLock lock(&mu_);
  owners_[claim_id] = std::move(owner);
}

absl::Status Authority::CheckClaim(uint64_t claim_id,
                                   absl::string_view grpc_peer) const {
  const std::string owner = Owner(grpc_peer);
  {
    absl::MutexLock lock(&mu_);
    auto it = owners_.find(claim_id);
    if (it == owners_.end() || it->second == owner) return absl::OkStatus();
  }
  if (RequireOperator(grpc_peer, "").ok()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "claim ", claim_id,
      " belongs to another process (claims are bound to the user, or for "
      "TCP the connection, that took them): Claim the key yourself"));
}

void Authority::Release(uint64_t claim_id) {
  absl::MutexLock lock(&mu_);
  owners_.erase(claim_id);
}

void Authority::Prune(size_t threshold,
                      const std::function<bool(uint64_t)>& live) {
  absl::MutexLock lock(&mu_);
  if (owners_.size() <= threshold) return;
  absl::erase_if(owners_, [&](const auto& kv) { return !live(kv.first); });
}

}  // namespace gputune
