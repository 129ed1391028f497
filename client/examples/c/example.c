/* How a C inference server uses libgputune through <gputune/gputune.h>.
 *
 * Start-up: prepare the layers' keys once and preload them (one RPC). A
 * key nobody has tuned yet is claimed, tuned here and recorded, so that
 * every process on the GPU gets the result; the hot path then looks it up
 * in the in-process memo. When gputuned is unreachable the server runs its
 * defaults: tuning never blocks inference.
 *
 *   gputune_c_example [ENDPOINT]   (default: $GPUTUNE_ENDPOINT, else gpu0's)
 *
 * Builds with nothing but the C API on the include path:
 *   cc -std=c11 example.c $(pkg-config --cflags --libs gputune-c) */
#include <gputune/gputune.h>
#include <stdio.h>

static int fail(const char* what) {
  fprintf(stderr, "%s: %s\n", what, gputune_last_error());
  return 1;
}

int main(int argc, char** argv) {
  gputune_client_options options;
  gputune_client_options_init(&options);
  if (argc > 1) options.endpoint = argv[1];
  options.lookup_deadline_ms = 100;
  gputune_client* client = NULL;
  if (gputune_client_create(&options, &client) != GPUTUNE_OK) {
    return fail("bad options");
  }
  printf("gputuned at %s (libgputune %s, ABI %u)\n",
         gputune_client_endpoint(client), gputune_version(),
         (unsigned)gputune_abi_version());

  /* Start-up: one RPC for every layer's key. */
  gputune_key_desc desc = {.struct_size = sizeof(gputune_key_desc)};
  desc.kind = GPUTUNE_KEY_DENSE_BF16;
  desc.phase = GPUTUNE_PHASE_DECODE;
  desc.role = "attn.qkv";
  desc.tokens = 1;
  desc.input_features = 4096;
  desc.output_features = 6144;
  desc.candidate_set = "example-v1";
  gputune_key* layer = NULL;
  if (gputune_key_new(&desc, &layer) != GPUTUNE_OK) return fail("layer key");
  size_t hits = 0;
  const gputune_key* layers[] = {layer};
  if (gputune_preload(client, layers, 1, &hits) != GPUTUNE_OK) {
    /* A server would go on with its defaults; the example reports it. */
    return fail("gputuned unavailable, running defaults");
  }
  printf("preloaded 1 layer key, %zu tuned\n", hits);

  /* A custom op: claim it, tune it here, record it for everyone. */
  gputune_key* attention = NULL;
  if (gputune_key_parse("example_attention/b=8,h=32,d=128@example-c",
                        &attention) != GPUTUNE_OK) {
    return fail("attention key");
  }
  gputune_claim* claim = NULL;
  if (gputune_claim_acquire(client, attention, &claim) != GPUTUNE_OK) {
    return fail("claim");
  }
  if (gputune_claim_granted(claim)) {
    const gputune_param params[] = {{"block_n", 64}, {"split_kv", 4}};
    gputune_execution chosen = {.kernel = "example.flash_decode"};
    chosen.params = params;
    chosen.param_count = 2;
    gputune_measurement m = {.struct_size = sizeof(gputune_measurement)};
    m.execution = chosen;
    m.validation = GPUTUNE_VALIDATION_PASSED;
    m.median_ns = 41000;
    m.samples = 50;
    m.chosen = 1;
    gputune_record record = {.struct_size = sizeof(gputune_record)};
    record.execution = chosen;
    record.measurements = &m;
    record.measurement_count = 1;
    record.chosen_time_ns = 41000;
    if (gputune_claim_record(claim, &record) != GPUTUNE_OK) {
      return fail("record");
    }
    printf("tuned %s: %s\n", gputune_key_text(attention), chosen.kernel);
  } else {
    printf("%s: claim outcome %d (not ours to tune)\n",
           gputune_key_text(attention), (int)gputune_claim_outcome_of(claim));
  }
  gputune_claim_free(claim); /* abandons a claim not recorded */

  /* Hot path: answered from the memo, no I/O. */
  gputune_result* r = gputune_result_new();
  if (gputune_lookup(client, attention, r) != GPUTUNE_OK) {
    return fail("lookup");
  }
  if (!gputune_result_hit(r)) {
    fprintf(stderr, "expected a hit for %s\n", gputune_key_text(attention));
    return 1;
  }
  printf("lookup: %s%s, run %s", gputune_state_name(gputune_result_state(r)),
         gputune_result_from_memo(r) ? " (memo)" : " (daemon)",
         gputune_result_kernel(r));
  for (size_t i = 0; i < gputune_result_param_count(r); ++i) {
    const char* name;
    int32_t value;
    gputune_result_param(r, i, &name, &value);
    printf(" %s=%d", name, (int)value);
  }
  printf("\n");

  gputune_result_free(r);
  gputune_key_free(attention);
  gputune_key_free(layer);
  gputune_client_destroy(client);
  return 0;
}
