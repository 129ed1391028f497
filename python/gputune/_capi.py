"""ctypes declarations of the C API (client/include/gputune/gputune.h).

The library is loaded on first use, not at import: `import gputune` works
without it (to read gputune.__version__, or to import gputune.torch on a
machine where only some processes tune), and the first call that needs it
(load(), or reading any function below, e.g. through gputune.Client())
loads it or raises LibraryNotFound saying what was tried and how to point
at one. A failed load is tried again on the next use, so setting
$GPUTUNE_LIBRARY in the process after the error is enough.

The library is found, in order: $GPUTUNE_LIBRARY (a path; nothing else is
tried when it is set); <prefix>/lib/libgputune.so.0 when this package was
installed by cmake --install into <prefix>/lib/python3/dist-packages; then
libgputune.so.0 through the dynamic loader (LD_LIBRARY_PATH, ldconfig's
cache, where the .deb puts it); then ctypes.util.find_library.
Every declaration mirrors gputune.h; keep them in step (GPUTUNE_ABI_VERSION).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

ABI_VERSION = 3


class LibraryNotFound(ImportError):
    """libgputune could not be loaded (raised on first use, not at import)."""


def _find() -> ctypes.CDLL:
    tried = []
    explicit = os.environ.get("GPUTUNE_LIBRARY")
    candidates = [explicit] if explicit else []
    beside = pathlib.Path(__file__).resolve().parents[3] / "libgputune.so.0"
    if not explicit and beside.exists():
        candidates.append(str(beside))
    found = ctypes.util.find_library("gputune")
    candidates += ["libgputune.so.0"] + ([found] if found else [])
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name}: {e}")
            if explicit:
                break
    raise LibraryNotFound(
        "cannot load libgputune (the gputune C library): "
        + "; ".join(tried)
        + ". Install it (the libgputune0 package, or cmake --install), or "
        "point GPUTUNE_LIBRARY at it, e.g. "
        "GPUTUNE_LIBRARY=/opt/gputune/lib/libgputune.so.0"
    )

# --- Structs (gputune.h) -------------------------------------------------------


class ClientOptions(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("endpoint", c_char_p),
        ("device", c_int32),
        ("lookup_deadline_ms", c_int64),
        ("deadline_ms", c_int64),
        ("tune_deadline_ms", c_int64),
        ("lease_ttl_ms", c_int64),
        ("holder", c_char_p),
        ("memo_capacity", c_uint64),
        ("memo_ttl_ms", c_int64),
        ("refresh_interval_ms", c_int64),
        ("breaker_failures", c_int32),
        ("breaker_open_time_ms", c_int64),
        ("breaker_max_open_time_ms", c_int64),
        ("follow_changes", c_int32),
        ("gpu_uuid", c_char_p),
        ("socket_dir", c_char_p),
        ("nvidia_proc_dir", c_char_p),
    ]


class KeyDesc(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int),
        ("phase", c_int),
        ("role", c_char_p),
        ("tokens", c_uint32),
        ("input_features", c_uint32),
        ("output_features", c_uint32),
        ("op", c_char_p),
        ("params", c_char_p),
        ("candidate_set", c_char_p),
    ]


class Param(Structure):
    _fields_ = [("name", c_char_p), ("value", c_int32)]


class CExecution(Structure):
    _fields_ = [
        ("kernel", c_char_p),
        ("params", POINTER(Param)),
        ("param_count", c_size_t),
        ("workspace_bytes", c_uint64),
        ("data", c_void_p),
        ("data_size", c_size_t),
    ]


class CMeasurement(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("execution", CExecution),
        ("validation", c_int),
        ("max_abs_error", c_double),
        ("error", c_char_p),
        ("median_ns", c_int64),
        ("spread_ns", c_int64),
        ("samples", c_uint32),
        ("is_default", c_int),
        ("chosen", c_int),
    ]


class CRecord(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("execution", CExecution),
        ("measurements", POINTER(CMeasurement)),
        ("measurement_count", c_size_t),
        ("default_time_ns", c_int64),
        ("chosen_time_ns", c_int64),
    ]


class ListOptions(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("op", c_char_p),
        ("phase", c_int),
        ("role", c_char_p),
        ("state", c_int),
        ("page_size", c_uint32),
        ("page_token", c_char_p),
        ("with_measurements", c_int),
    ]


class DenseArgs(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("m", c_int64),
        ("n", c_int64),
        ("k", c_int64),
        ("x", c_void_p),
        ("w", c_void_p),
        ("y", c_void_p),
        ("stream", c_void_p),
        ("workspace", c_void_p),
        ("workspace_bytes", c_size_t),
    ]


WATCH_CALLBACK = CFUNCTYPE(None, c_void_p, c_void_p)

# --- Functions -----------------------------------------------------------------
# Bound into this module's globals by load(): `_capi.lookup` is then a plain
# global, as fast as a module-level declaration; before it, reading one goes
# through __getattr__ below, which loads.

_P = c_void_p  # every handle

# name in this module: (C symbol, restype, *argtypes)
_FUNCTIONS = {
    "abi_version": ("gputune_abi_version", c_uint32),
    "version": ("gputune_version", c_char_p),
    "last_error": ("gputune_last_error", c_char_p),
    "code_name": ("gputune_code_name", c_char_p, c_int),

    "client_options_init": (
        "gputune_client_options_init", None, POINTER(ClientOptions)
    ),
    "client_create": (
        "gputune_client_create", c_int, POINTER(ClientOptions), POINTER(_P)
    ),
    "client_destroy": ("gputune_client_destroy", None, _P),
    "client_endpoint": ("gputune_client_endpoint", c_char_p, _P),
    "client_gpu_uuid": ("gputune_client_gpu_uuid", c_char_p, _P),

    "key_new": ("gputune_key_new", c_int, POINTER(KeyDesc), POINTER(_P)),
    "key_parse": ("gputune_key_parse", c_int, c_char_p, POINTER(_P)),
    "key_free": ("gputune_key_free", None, _P),
    "key_text": ("gputune_key_text", c_char_p, _P),

    "result_new": ("gputune_result_new", _P),
    "result_free": ("gputune_result_free", None, _P),
    "result_copy": ("gputune_result_copy", c_int, _P, _P),
    "result_state": ("gputune_result_state", c_int, _P),
    "result_from_memo": ("gputune_result_from_memo", c_int, _P),
    "result_kernel": ("gputune_result_kernel", c_char_p, _P),
    "result_param_count": ("gputune_result_param_count", c_size_t, _P),
    "result_param": (
        "gputune_result_param", c_int, _P, c_size_t, POINTER(c_char_p), POINTER(c_int32)
    ),
    "result_workspace_bytes": ("gputune_result_workspace_bytes", c_uint64, _P),
    "result_data": ("gputune_result_data", c_void_p, _P, POINTER(c_size_t)),
    "result_chosen_time_ns": ("gputune_result_chosen_time_ns", c_int64, _P),
    "result_default_time_ns": ("gputune_result_default_time_ns", c_int64, _P),
    "result_speedup": ("gputune_result_speedup", c_double, _P),
    "result_stale_reason": ("gputune_result_stale_reason", c_char_p, _P),
    "result_stale_usable": ("gputune_result_stale_usable", c_int, _P),
    "result_claim_holder": ("gputune_result_claim_holder", c_char_p, _P),
    "result_retry_after_unix_ms": (
        "gputune_result_retry_after_unix_ms", c_int64, _P
    ),

    "lookup": ("gputune_lookup", c_int, _P, _P, _P),
    "try_lookup": ("gputune_try_lookup", None, _P, _P, _P),
    "preload": (
        "gputune_preload", c_int, _P, POINTER(_P), c_size_t, POINTER(c_size_t)
    ),
    "forget": ("gputune_forget", None, _P, _P),
    "forget_all": ("gputune_forget_all", None, _P),
    "memo_size": ("gputune_memo_size", c_size_t, _P),

    "tune_dense": ("gputune_tune_dense", c_int, _P, _P, c_int, _P),

    "claim_acquire": ("gputune_claim_acquire", c_int, _P, _P, POINTER(_P)),
    "claim_free": ("gputune_claim_free", None, _P),
    "claim_outcome": ("gputune_claim_outcome_of", c_int, _P),
    "claim_granted": ("gputune_claim_granted", c_int, _P),
    "claim_lost": ("gputune_claim_lost", c_int, _P),
    "claim_id": ("gputune_claim_id", c_uint64, _P),
    "claim_holder": ("gputune_claim_holder", c_char_p, _P),
    "claim_retry_after_unix_ms": (
        "gputune_claim_retry_after_unix_ms", c_int64, _P
    ),
    "claim_record": ("gputune_claim_record", c_int, _P, POINTER(CRecord)),
    "claim_abandon": ("gputune_claim_abandon", c_int, _P, c_char_p),

    "watch_start": (
        "gputune_watch_start", c_int, _P, _P, WATCH_CALLBACK, c_void_p, c_int64, POINTER(_P)
    ),
    "watch_next": ("gputune_watch_next", c_int, _P, c_int64, _P),
    "watch_wait": ("gputune_watch_wait", c_int, _P, c_int64),
    "watch_cancel": ("gputune_watch_cancel", None, _P),
    "watch_free": ("gputune_watch_free", None, _P),

    "get_status_json": (
        "gputune_get_status_json", c_int, _P, POINTER(c_void_p)
    ),
    "list_entries_json": (
        "gputune_list_entries_json", c_int, _P, POINTER(ListOptions), POINTER(c_void_p)
    ),
    "get_entry_json": ("gputune_get_entry_json", c_int, _P, _P, POINTER(c_void_p)),
    "string_free": ("gputune_string_free", None, c_void_p),

    "dense_runner_create": ("gputune_dense_runner_create", c_int, POINTER(_P)),
    "dense_runner_free": ("gputune_dense_runner_free", None, _P),
    "dense_runner_fallback_reason": (
        "gputune_dense_runner_fallback_reason", c_char_p, _P
    ),
    "dense_run": (
        "gputune_dense_run", c_int, _P, _P, POINTER(DenseArgs), POINTER(c_int)
    ),
}

_lock = threading.Lock()
lib: "ctypes.CDLL | None" = None  # set by load()


def load() -> ctypes.CDLL:
    """Loads libgputune (once) and binds every function above into this
    module. Raises LibraryNotFound, saying what was tried and how to point
    at the library, when it cannot be loaded or is too old."""
    global lib
    with _lock:
        if lib is not None:
            return lib
        found = _find()
        bound = {}
        for name, (symbol, restype, *argtypes) in _FUNCTIONS.items():
            f = getattr(found, symbol)
            f.restype = restype
            f.argtypes = list(argtypes)
            bound[name] = f
        abi = bound["abi_version"]()
        if abi < ABI_VERSION:
            raise LibraryNotFound(
                f"libgputune at {found._name} has C ABI {abi}, this package "
                f"needs {ABI_VERSION} or later: install a newer gputune, or "
                "point GPUTUNE_LIBRARY at one"
            )
        globals().update(bound)
        lib = found
        return lib


def __getattr__(name: str):
    # Only names not bound yet get here (PEP 562): the first use loads.
    if name in _FUNCTIONS:
        load()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
