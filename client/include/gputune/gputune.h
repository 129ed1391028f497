/* clang-format off */
/* gputune.h: the C API of libgputune, for inference servers written in C,
 * Rust, Python (ctypes) or anything else that can call C.
 *
 *   gputune_client_options o;
 *   gputune_client_options_init(&o);            (defaults, struct_size set)
 *   o.endpoint = "unix:///run/gputuned/gpu0.sock";
 *   gputune_client* client;
 *   if (gputune_client_create(&o, &client) != GPUTUNE_OK)
 *     fprintf(stderr, "%s\n", gputune_last_error());
 *   gputune_key* key;
 *   gputune_key_parse("dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1", &key);
 *   gputune_result* r = gputune_result_new();
 *   if (gputune_lookup(client, key, r) == GPUTUNE_OK && gputune_result_hit(r))
 *     run(gputune_result_kernel(r), ...);       (memo hit: no I/O)
 *   else
 *     run_default();                            (tuning never blocks)
 *
 * It is a thin layer over the C++ gputune::Client (gputune/client.h): one
 * memo, one circuit breaker, one lease renewer, the same deadlines and the
 * same error messages. Nothing here needs protobuf, gRPC, Abseil or C++.
 *
 * Errors: every call that can fail returns a gputune_code (GPUTUNE_OK is 0;
 * the other values are gRPC's status codes) and, when it is not GPUTUNE_OK,
 * leaves a message saying what was wrong and what to do, which
 * gputune_last_error() returns on the same thread until that thread's next
 * failing call.
 *
 * NULL: a call that returns a gputune_code answers INVALID_ARGUMENT for a
 * NULL handle; the others (accessors, destroy/free aside) must not be given
 * one.
 *
 * Lifetimes: every handle made by a *_create / *_new / *_parse call is freed
 * by its *_destroy / *_free. Strings a handle returns stay valid until the
 * handle is changed or freed. Strings this library allocates for the caller
 * (the *_json calls) are freed with gputune_string_free.
 *
 * Threads: a gputune_client is shared by every thread of a process; a key is
 * immutable and may be shared too. A result, claim or watch is used by one
 * thread at a time.
 *
 * ABI: GPUTUNE_ABI_VERSION grows when something is added; gputune_abi_version()
 * is the library's. Option and input structs begin with struct_size
 * (sizeof of the caller's struct): the library reads only the fields that
 * fit, so a program built against an older header keeps working. */
/* clang-format on */
#ifndef GPUTUNE_GPUTUNE_H_
#define GPUTUNE_GPUTUNE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUTUNE_ABI_VERSION 3

/* The ABI version of the library in use (GPUTUNE_ABI_VERSION it was built
 * with) and its release ("0.1.0"). */
uint32_t gputune_abi_version(void);
const char* gputune_version(void);

/* --- Errors --- */

/* gRPC's status codes. */
typedef enum gputune_code {
  GPUTUNE_OK = 0,
  GPUTUNE_CANCELLED = 1,
  GPUTUNE_UNKNOWN = 2,
  GPUTUNE_INVALID_ARGUMENT = 3,
  GPUTUNE_DEADLINE_EXCEEDED = 4,
  GPUTUNE_NOT_FOUND = 5,
  GPUTUNE_ALREADY_EXISTS = 6,
  GPUTUNE_PERMISSION_DENIED = 7,
  GPUTUNE_RESOURCE_EXHAUSTED = 8,
  GPUTUNE_FAILED_PRECONDITION = 9,
  GPUTUNE_ABORTED = 10,
  GPUTUNE_OUT_OF_RANGE = 11,
  GPUTUNE_UNIMPLEMENTED = 12,
  GPUTUNE_INTERNAL = 13,
  GPUTUNE_UNAVAILABLE = 14,
  GPUTUNE_DATA_LOSS = 15,
  GPUTUNE_UNAUTHENTICATED = 16
} gputune_code;

/* The message of this thread's last failed call ("" if none). */
const char* gputune_last_error(void);
/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for a value out of range. */
const char* gputune_code_name(gputune_code code);

/* --- Enums of the API (values as in tune.proto) --- */

typedef enum gputune_state {
  GPUTUNE_STATE_UNSPECIFIED =
      0, /* an empty result (try_lookup: not memoised) */
  GPUTUNE_STATE_MISS = 1,
  GPUTUNE_STATE_PENDING = 2,
  GPUTUNE_STATE_HIT = 3,
  GPUTUNE_STATE_STALE = 4,
  GPUTUNE_STATE_BACKOFF = 5
} gputune_state;

typedef enum gputune_phase {
  GPUTUNE_PHASE_UNSPECIFIED = 0,
  GPUTUNE_PHASE_PREFILL = 1,
  GPUTUNE_PHASE_DECODE = 2
} gputune_phase;

typedef enum gputune_claim_outcome {
  GPUTUNE_CLAIM_UNSPECIFIED = 0,
  GPUTUNE_CLAIM_GRANTED = 1, /* ours: tune, then record or abandon */
  GPUTUNE_CLAIM_PENDING = 2, /* someone else holds it */
  GPUTUNE_CLAIM_HIT = 3,     /* already tuned */
  GPUTUNE_CLAIM_BACKOFF = 4  /* failed repeatedly: retry after retry_after */
} gputune_claim_outcome;

typedef enum gputune_validation {
  GPUTUNE_VALIDATION_UNSPECIFIED = 0,
  GPUTUNE_VALIDATION_PASSED = 1,
  GPUTUNE_VALIDATION_FAILED = 2,
  GPUTUNE_VALIDATION_ERROR = 3
} gputune_validation;

/* "miss", "pending", "hit", "stale", "backoff" ("unspecified" otherwise). */
const char* gputune_state_name(gputune_state state);

/* --- Client --- */

typedef struct gputune_client gputune_client;

/* Durations are milliseconds. See gputune/options.h for each setting. */
typedef struct gputune_client_options {
  size_t struct_size; /* sizeof(gputune_client_options) */
  /* "unix:///path", "/path" or "host:port"; NULL or "": $GPUTUNE_ENDPOINT,
   * else gpu_uuid's daemon, else the daemon of this process's CUDA device
   * `device`, found by its GPU's UUID (gputune::FindDaemon in options.h). */
  const char* endpoint;
  int32_t device;
  int64_t lookup_deadline_ms;  /* a lookup RPC (250) */
  int64_t deadline_ms;         /* every other call (2000) */
  int64_t tune_deadline_ms;    /* gputune_tune_dense with wait (300000) */
  int64_t lease_ttl_ms;        /* asked for in a claim (30000; 0: daemon's) */
  const char* holder;          /* NULL or "": "<program> pid <pid> on <host>" */
  uint64_t memo_capacity;      /* memoised HITs (65536; 0: no memo) */
  int64_t memo_ttl_ms;         /* re-check age (60000; < 0: never) */
  int64_t refresh_interval_ms; /* try_lookup miss re-ask (1000) */
  int32_t breaker_failures;    /* (2) */
  int64_t breaker_open_time_ms;     /* (250) */
  int64_t breaker_max_open_time_ms; /* (2000) */
  /* ABI 2 (beyond an ABI 1 caller's struct_size: the default, 1):
   * with the memo on, apply the daemon's change feed (deletes, re-tunes) to
   * it at once (1); 0: memo_ttl alone. */
  int32_t follow_changes;
  /* ABI 3 (beyond an ABI 2 caller's struct_size: NULL): the GPU whose daemon
   * to use, "GPU-8f3c..." (<socket_dir>/by-uuid/<uuid>.sock; wins over
   * device); where the daemons' sockets are (NULL or "":
   * $GPUTUNE_SOCKET_DIR, else /run/gputuned); where the NVIDIA driver lists
   * the GPUs (NULL or "": /proc/driver/nvidia; for tests). */
  const char* gpu_uuid;
  const char* socket_dir;
  const char* nvidia_proc_dir;
} gputune_client_options;

/* Fills *options with the defaults (and struct_size). */
void gputune_client_options_init(gputune_client_options* options);

/* Creates a client; no I/O but finding the daemon (an unreachable daemon
 * is not an error here). INVALID_ARGUMENT for unusable options (a negative
 * deadline, a struct_size smaller than the first ABI's struct); NOT_FOUND
 * when the GPU meant has no daemon linked by UUID; FAILED_PRECONDITION when
 * the device cannot be resolved (e.g. beyond CUDA_VISIBLE_DEVICES, a MIG
 * instance). The message (gputune_last_error) says how to fix it. */
gputune_code gputune_client_create(const gputune_client_options* options,
                                   gputune_client** client);
/* Stops the background threads (waiting at most one deadline). Claims and
 * watches made from the client stay usable until destroyed. NULL: no-op. */
void gputune_client_destroy(gputune_client* client);
/* The endpoint in use. */
const char* gputune_client_endpoint(const gputune_client* client);
/* ABI 3: the GPU UUID the client means ("" when not known: a daemon named
 * by endpoint or host index); its tune_dense calls carry it. */
const char* gputune_client_gpu_uuid(const gputune_client* client);

/* --- Keys --- */

typedef struct gputune_key gputune_key;

typedef enum gputune_key_kind {
  GPUTUNE_KEY_DENSE_BF16 = 1,
  GPUTUNE_KEY_CUSTOM = 2
} gputune_key_kind;

/* A key's fields. dense_bf16 uses phase..output_features; custom uses op and
 * params. Strings are copied. */
typedef struct gputune_key_desc {
  size_t struct_size; /* sizeof(gputune_key_desc) */
  gputune_key_kind kind;
  gputune_phase phase;
  const char* role;
  uint32_t tokens;          /* M */
  uint32_t input_features;  /* K */
  uint32_t output_features; /* N */
  const char* op;
  const char* params;
  const char* candidate_set;
} gputune_key_desc;

/* A validated key. Build keys once (at start-up) and reuse them: a lookup
 * with a prepared key does no conversion. INVALID_ARGUMENT names the bad
 * field. */
gputune_code gputune_key_new(const gputune_key_desc* desc, gputune_key** key);
/* From the text form ("dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1",
 * "my_op/params@cs"). */
gputune_code gputune_key_parse(const char* text, gputune_key** key);
void gputune_key_free(gputune_key* key);
/* The text form. */
const char* gputune_key_text(const gputune_key* key);

/* --- Results --- */

/* A key's status: what a lookup, try_lookup, tune_dense or watch reported.
 * Reusable: each call that fills it replaces what it held. */
typedef struct gputune_result gputune_result;

gputune_result* gputune_result_new(void);
void gputune_result_free(gputune_result* result);
/* Makes `to` hold what `from` holds (e.g. to keep a watch callback's
 * status past the call). */
gputune_code gputune_result_copy(const gputune_result* from,
                                 gputune_result* to);

gputune_state gputune_result_state(const gputune_result* result);
/* state == HIT. */
int gputune_result_hit(const gputune_result* result);
/* The entry is stale-but-usable (stale-while-revalidate): tuned for this
 * candidate set on the same device model before a driver, CUDA, cuBLASLt or
 * gputune upgrade. State STALE, or PENDING / BACKOFF while the key is being
 * re-tuned (the daemon does so in the background). gputune_dense_run runs such
 * an entry's execution only after its replay check passes, else the default; a
 * plain STALE runs the default. */
int gputune_result_stale_usable(const gputune_result* result);
/* The answer came from the in-process memo (no I/O). */
int gputune_result_from_memo(const gputune_result* result);

/* The chosen execution (HIT and STALE; "" / 0 otherwise): the kernel name
 * ("cublaslt", "cuda.gemv_splitk", "my.kernel"), its parameters by name, the
 * workspace it needs and the opaque data a client recorded with it. */
const char* gputune_result_kernel(const gputune_result* result);
size_t gputune_result_param_count(const gputune_result* result);
/* The index-th parameter (0 <= index < param_count), in name order.
 * OUT_OF_RANGE past the end. */
gputune_code gputune_result_param(const gputune_result* result, size_t index,
                                  const char** name, int32_t* value);
/* NOT_FOUND when the execution has no parameter `name`. */
gputune_code gputune_result_param_by_name(const gputune_result* result,
                                          const char* name, int32_t* value);
uint64_t gputune_result_workspace_bytes(const gputune_result* result);
const void* gputune_result_data(const gputune_result* result, size_t* size);

/* The entry's times (nanoseconds; 0 when unknown) and speedup (0 unknown). */
int64_t gputune_result_chosen_time_ns(const gputune_result* result);
int64_t gputune_result_default_time_ns(const gputune_result* result);
double gputune_result_speedup(const gputune_result* result);
/* STALE: why. PENDING: the holder of the claim. "" otherwise. */
const char* gputune_result_stale_reason(const gputune_result* result);
const char* gputune_result_claim_holder(const gputune_result* result);
/* BACKOFF: when to ask again (Unix time, milliseconds); 0 otherwise. */
int64_t gputune_result_retry_after_unix_ms(const gputune_result* result);

/* --- Hot path --- */

/* The key's state: a memoised HIT without I/O, else one Lookup RPC within
 * lookup_deadline (a HIT is memoised). UNAVAILABLE / DEADLINE_EXCEEDED when
 * the daemon cannot answer: run the default. */
gputune_code gputune_lookup(gputune_client* client, const gputune_key* key,
                            gputune_result* result);
/* Never blocks on I/O: the memoised HIT, or an empty result (state
 * UNSPECIFIED) after queueing a background lookup. */
void gputune_try_lookup(gputune_client* client, const gputune_key* key,
                        gputune_result* result);
/* One BatchLookup for start-up: fills the memo; *hits (may be NULL) is how
 * many of the keys were HIT. INVALID_ARGUMENT names the bad key's index. */
gputune_code gputune_preload(gputune_client* client,
                             const gputune_key* const* keys, size_t count,
                             size_t* hits);
/* Drops memoised entries (one key, or all). */
void gputune_forget(gputune_client* client, const gputune_key* key);
void gputune_forget_all(gputune_client* client);
size_t gputune_memo_size(const gputune_client* client);

/* --- Tuning --- */

/* The daemon benchmarks a dense_bf16 key on its device. wait != 0: the HIT
 * (within tune_deadline); wait == 0: PENDING at once, or the HIT if there is
 * one. FAILED_PRECONDITION (no benchmark backend), RESOURCE_EXHAUSTED (queue
 * full), ABORTED (the job failed), UNAVAILABLE, DEADLINE_EXCEEDED. */
gputune_code gputune_tune_dense(gputune_client* client, const gputune_key* key,
                                int wait, gputune_result* result);

/* A claim on a key. GRANTED: held by this handle, its lease renewed in the
 * background until recorded or abandoned; freeing a claim that still holds
 * the key abandons it ("released without record"). */
typedef struct gputune_claim gputune_claim;

gputune_code gputune_claim_acquire(gputune_client* client,
                                   const gputune_key* key,
                                   gputune_claim** claim);
void gputune_claim_free(gputune_claim* claim);
gputune_claim_outcome gputune_claim_outcome_of(const gputune_claim* claim);
/* GRANTED and still held (not recorded, abandoned or lost). */
int gputune_claim_granted(const gputune_claim* claim);
/* A background renewal was refused: the lease is gone; stop tuning. */
int gputune_claim_lost(const gputune_claim* claim);
/* GRANTED: our claim id (the fencing token); PENDING: the holder's. */
uint64_t gputune_claim_id(const gputune_claim* claim);
/* PENDING: who holds the key. */
const char* gputune_claim_holder(const gputune_claim* claim);
/* BACKOFF: when to ask again (Unix time, milliseconds). */
int64_t gputune_claim_retry_after_unix_ms(const gputune_claim* claim);

typedef struct gputune_param {
  const char* name;
  int32_t value;
} gputune_param;

typedef struct gputune_execution {
  const char* kernel;
  const gputune_param* params;
  size_t param_count;
  uint64_t workspace_bytes;
  const void* data; /* opaque to gputune; may be NULL */
  size_t data_size;
} gputune_execution;

typedef struct gputune_measurement {
  size_t struct_size; /* sizeof(gputune_measurement) */
  gputune_execution execution;
  gputune_validation validation;
  double max_abs_error;
  const char* error; /* NULL or "" when none */
  int64_t median_ns;
  int64_t spread_ns;
  uint32_t samples;
  int is_default;
  int chosen;
} gputune_measurement;

/* What a client measured. Measurements are read with the first element's
 * struct_size as the stride (every element has the same). */
typedef struct gputune_record {
  size_t struct_size; /* sizeof(gputune_record) */
  gputune_execution execution;
  const gputune_measurement* measurements;
  size_t measurement_count;
  int64_t default_time_ns; /* 0: unknown */
  int64_t chosen_time_ns;  /* 0: unknown */
} gputune_record;

/* Persists the result and releases the claim; the key turns HIT for every
 * process and is memoised here. FAILED_PRECONDITION when the claim is no
 * longer live; INVALID_ARGUMENT names a bad field (the claim is still held:
 * fix and retry, or abandon). */
gputune_code gputune_claim_record(gputune_claim* claim,
                                  const gputune_record* record);
/* Gives the claim up (the key turns MISS, or BACKOFF after repeated
 * abandons). The handle holds nothing afterwards, whatever the result. */
gputune_code gputune_claim_abandon(gputune_claim* claim, const char* reason);

/* --- Watch --- */

typedef struct gputune_watch gputune_watch;

/* Called with the key's status, then each change, until a HIT (the last
 * call). Runs on a library thread: must not block or destroy the watch; the
 * result is valid during the call only. */
typedef void (*gputune_watch_callback)(void* user,
                                       const gputune_result* status);

/* Follows a key for at most timeout_ms (<= 0: 10 minutes). With a NULL
 * callback the statuses are queued for gputune_watch_next instead. */
gputune_code gputune_watch_start(gputune_client* client, const gputune_key* key,
                                 gputune_watch_callback callback, void* user,
                                 int64_t timeout_ms, gputune_watch** watch);
/* Without a callback: the next status, waiting at most timeout_ms. OK with a
 * status; DEADLINE_EXCEEDED when none came in time (the watch goes on);
 * OUT_OF_RANGE once the stream has ended and every status was returned
 * (gputune_watch_wait says how it ended). */
gputune_code gputune_watch_next(gputune_watch* watch, int64_t timeout_ms,
                                gputune_result* status);
/* Waits until the stream ends, at most timeout_ms: OK after a HIT,
 * DEADLINE_EXCEEDED when time ran out, CANCELLED after cancel, else the
 * stream's error. */
gputune_code gputune_watch_wait(gputune_watch* watch, int64_t timeout_ms);
void gputune_watch_cancel(gputune_watch* watch);
/* Cancels and waits until the callback can no longer run. */
void gputune_watch_free(gputune_watch* watch);

/* --- Operator calls (scripts) --- */
/* Each is one RPC within `deadline`; *json is the daemon's answer as protobuf
 * JSON (tune.proto's GetStatusResponse, ListEntriesResponse,
 * GetEntryResponse), freed with gputune_string_free. */

gputune_code gputune_get_status_json(gputune_client* client, char** json);

typedef struct gputune_list_options {
  size_t struct_size; /* sizeof(gputune_list_options) */
  const char* op;     /* NULL or "": any */
  gputune_phase phase;
  const char* role;
  gputune_state state; /* HIT or STALE; UNSPECIFIED: any */
  uint32_t page_size;  /* 0: the daemon's default */
  const char* page_token;
  int with_measurements;
} gputune_list_options;

/* options may be NULL (everything, first page). */
gputune_code gputune_list_entries_json(gputune_client* client,
                                       const gputune_list_options* options,
                                       char** json);
/* NOT_FOUND when the key has no entry. */
gputune_code gputune_get_entry_json(gputune_client* client,
                                    const gputune_key* key, char** json);
void gputune_string_free(char* s);

/* --- Replay: running a dense_bf16 execution here --- */

/* Runs y[M,N] = x[M,K] * W[N,K]^T (row-major bf16 device pointers) with a
 * tuned execution on the caller's CUDA stream, in this process (see
 * gputune/dense_runner.h for the checks). Needs libgputune built with CUDA
 * (it then loads libgputune_dense.so, next to it, on first use) and a
 * device; else gputune_dense_runner_create fails with FAILED_PRECONDITION
 * saying which is missing. */
typedef struct gputune_dense_runner gputune_dense_runner;

/* Binds to the CUDA device current on the calling thread. */
gputune_code gputune_dense_runner_create(gputune_dense_runner** runner);
void gputune_dense_runner_free(gputune_dense_runner* runner);

typedef struct gputune_dense_args {
  size_t struct_size; /* sizeof(gputune_dense_args) */
  int64_t m, n, k;
  const void* x;
  const void* w;
  void* y;
  void* stream; /* cudaStream_t; NULL: the legacy default stream */
  void* workspace;
  size_t workspace_bytes;
} gputune_dense_args;

/* Enqueues the execution `result` holds when it is a HIT or
 * stale-but-usable (gputune_result_stale_usable), else the default
 * (also when `result` is NULL or holds none). When the execution cannot run
 * here (unknown kernel, bad params, cuBLASLt's AlgoCheck refuses it, too little
 * workspace or alignment) the default runs instead, the call returns OK,
 * *fell_back (may be NULL) is set to 1 and
 * gputune_dense_runner_fallback_reason says why. Anything but OK means
 * nothing ran. Not thread-safe: one runner per thread. */
gputune_code gputune_dense_run(gputune_dense_runner* runner,
                               const gputune_result* result,
                               const gputune_dense_args* args, int* fell_back);
/* Why the runner's last gputune_dense_run fell back ("" if it did not). */
const char* gputune_dense_runner_fallback_reason(
    const gputune_dense_runner* runner);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUTUNE_GPUTUNE_H_ */
