#include "gputune/claim_guard.h"

#include "client/src/client_impl.h"

namespace gputune {
namespace {

// Stops the renewals; true when the guard still held the claim.
bool Unhold(ClaimGuard::State* state) {
  if (state == nullptr || !state->held) return false;
  state->held = false;
  state->client->renewer.Remove(state->claim_id);
  return true;
}

}  // namespace

ClaimGuard& ClaimGuard::operator=(ClaimGuard&& other) noexcept {
  if (this != &other) {
    if (Unhold(state_.get())) (void)Abandon("released without record");
    response_ = std::move(other.response_);
    state_ = std::move(other.state_);
  }
  return *this;
}

ClaimGuard::~ClaimGuard() {
  if (state_ != nullptr && state_->held) {
    (void)Abandon("released without record");
  }
}

bool ClaimGuard::granted() const { return state_ != nullptr && state_->held; }

uint64_t ClaimGuard::claim_id() const {
  return state_ != nullptr ? state_->claim_id : 0;
}

bool ClaimGuard::lost() const {
  return state_ != nullptr && state_->lost->load();
}

absl::StatusOr<v1::Entry> ClaimGuard::Record(v1::RecordRequest request) {
  if (!granted()) {
    return absl::FailedPreconditionError(
        "this guard holds no claim (not granted, or already recorded, "
        "abandoned or released)");
  }
  Client::Impl& client = *state_->client;
  // No renewal may race with the record: the daemon releases the claim.
  client.renewer.Remove(state_->claim_id);
  request.set_claim_id(state_->claim_id);
  v1::RecordResponse response;
  absl::Status s = client.rpc.Call(&v1::TuneService::Stub::Record, request,
                                   &response, client.options.deadline);
  if (!s.ok()) {
    if (s.code() == absl::StatusCode::kFailedPrecondition) {
      state_->held = false;  // the claim is gone
      state_->lost->store(true);
    } else {
      // Still ours as far as we know: keep the lease alive for a retry.
      client.KeepAlive(*state_, response_.claim());
    }
    return s;
  }
  state_->held = false;
  v1::KeyStatus hit;
  *hit.mutable_key() = state_->key;
  hit.set_state(v1::KEY_STATE_HIT);
  *hit.mutable_entry() = response.entry();
  hit.mutable_entry()->clear_measurements();
  hit.mutable_entry()->clear_fingerprint();
  client.Remember(state_->key, std::move(hit));
  return std::move(*response.mutable_entry());
}

absl::Status ClaimGuard::Abandon(absl::string_view reason) {
  if (!Unhold(state_.get())) {
    return absl::FailedPreconditionError("this guard holds no claim");
  }
  return state_->client->Abandon(state_->claim_id, reason).status();
}

uint64_t ClaimGuard::Release() {
  return Unhold(state_.get()) ? state_->claim_id : 0;
}

}  // namespace gputune
