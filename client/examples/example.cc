// How an inference server uses libgputune.
//
// At start-up it preloads the keys of its layers (one RPC); on the hot path
// it looks keys up (answered from the in-process memo); a key nobody has
// tuned yet it claims, tunes itself and records, so that every other process
// on the GPU gets the result. When gputuned is unreachable it runs its
// defaults: tuning never blocks inference.
//
//   gputune_example [ENDPOINT]   (default: $GPUTUNE_ENDPOINT, else gpu0's)
#include <gputune/client.h>
#include <gputune/proto/key_format.h>

#include <iostream>
#include <string>
#include <vector>

namespace v1 = gputune::v1;

namespace {

v1::Key LayerKey(const std::string& role, uint32_t k, uint32_t n) {
  v1::Key key;
  v1::DenseBf16Key* dense = key.mutable_dense_bf16();
  dense->set_phase(v1::PHASE_DECODE);
  dense->set_role(role);
  dense->set_tokens(1);
  dense->set_input_features(k);
  dense->set_output_features(n);
  key.set_candidate_set("example-v1");
  return key;
}

// Stands for the server's own tuning of an op only it knows.
v1::RecordRequest TuneMyAttention() {
  v1::RecordRequest result;
  v1::Execution* chosen = result.mutable_execution();
  chosen->set_kernel("example.flash_decode");
  (*chosen->mutable_params())["block_n"] = 64;
  (*chosen->mutable_params())["split_kv"] = 4;
  v1::CandidateMeasurement* m = result.add_measurements();
  *m->mutable_execution() = *chosen;
  m->set_validation(v1::VALIDATION_PASSED);
  m->mutable_median()->set_nanos(41000);
  m->set_samples(50);
  m->set_chosen(true);
  result.mutable_chosen_time()->set_nanos(41000);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  gputune::ClientOptions options;
  if (argc > 1) options.endpoint = argv[1];
  options.lookup_deadline = absl::Milliseconds(100);
  auto client = gputune::Client::Create(options);
  if (!client.ok()) {
    std::cerr << "bad options: " << client.status() << "\n";
    return 2;
  }
  std::cout << "gputuned at " << (*client)->endpoint() << "\n";

  // Start-up: one RPC for every layer's key.
  const std::vector<v1::Key> layers = {LayerKey("attn.qkv", 4096, 6144),
                                       LayerKey("attn.out", 4096, 4096),
                                       LayerKey("mlp.up", 4096, 14336)};
  absl::StatusOr<size_t> hits = (*client)->Preload(layers);
  if (!hits.ok()) {
    std::cerr << "gputuned unavailable, running defaults: " << hits.status()
              << "\n";
    return 1;  // a server would go on; the example reports it
  }
  std::cout << "preloaded " << layers.size() << " layer keys, " << *hits
            << " tuned\n";

  // A custom op: claim it, tune it here, record it for everyone.
  v1::Key attention;
  attention.mutable_custom()->set_op("example_attention");
  attention.mutable_custom()->set_params("b=8,h=32,d=128");
  attention.set_candidate_set("example-v1");
  absl::StatusOr<gputune::ClaimGuard> claim = (*client)->Claim(attention);
  if (!claim.ok()) {
    std::cerr << "claim failed: " << claim.status() << "\n";
    return 1;
  }
  if (claim->granted()) {
    absl::StatusOr<v1::Entry> entry = claim->Record(TuneMyAttention());
    if (!entry.ok()) {
      std::cerr << "record failed: " << entry.status() << "\n";
      return 1;
    }
    std::cout << "tuned " << gputune::KeyText(attention) << ": "
              << entry->execution().kernel() << "\n";
  } else {
    std::cout << gputune::KeyText(attention) << ": "
              << v1::ClaimOutcome_Name(claim->outcome()) << "\n";
  }

  // Hot path: answered from the memo, no I/O.
  absl::StatusOr<gputune::LookupResult> r = (*client)->Lookup(attention);
  if (!r.ok() || !r->hit()) {
    std::cerr << "expected a hit for " << gputune::KeyText(attention) << "\n";
    return 1;
  }
  std::cout << "lookup: " << gputune::KeyStateName(r->state())
            << (r->from_memo() ? " (memo)" : " (daemon)") << ", run "
            << r->entry().execution().kernel() << "\n";
  return 0;
}
