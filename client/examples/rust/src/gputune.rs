//! The part of gputune.h (the C API of libgputune) this example uses,
//! declared by hand. Layouts follow the header exactly (#[repr(C)]); keep
//! them in step with GPUTUNE_ABI_VERSION.
#![allow(non_camel_case_types, dead_code)]

use std::os::raw::{c_char, c_int, c_void};

pub const GPUTUNE_OK: c_int = 0;
pub const GPUTUNE_KEY_DENSE_BF16: c_int = 1;
pub const GPUTUNE_PHASE_DECODE: c_int = 2;
pub const GPUTUNE_VALIDATION_PASSED: c_int = 1;

#[repr(C)]
pub struct gputune_client {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gputune_key {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gputune_result {
    _private: [u8; 0],
}
#[repr(C)]
pub struct gputune_claim {
    _private: [u8; 0],
}

#[repr(C)]
pub struct gputune_client_options {
    pub struct_size: usize,
    pub endpoint: *const c_char,
    pub device: i32,
    pub lookup_deadline_ms: i64,
    pub deadline_ms: i64,
    pub tune_deadline_ms: i64,
    pub lease_ttl_ms: i64,
    pub holder: *const c_char,
    pub memo_capacity: u64,
    pub memo_ttl_ms: i64,
    pub refresh_interval_ms: i64,
    pub breaker_failures: i32,
    pub breaker_open_time_ms: i64,
    pub breaker_max_open_time_ms: i64,
    pub follow_changes: i32,
    pub gpu_uuid: *const c_char,
    pub socket_dir: *const c_char,
    pub nvidia_proc_dir: *const c_char,
}

#[repr(C)]
pub struct gputune_key_desc {
    pub struct_size: usize,
    pub kind: c_int,
    pub phase: c_int,
    pub role: *const c_char,
    pub tokens: u32,
    pub input_features: u32,
    pub output_features: u32,
    pub op: *const c_char,
    pub params: *const c_char,
    pub candidate_set: *const c_char,
}

#[repr(C)]
pub struct gputune_param {
    pub name: *const c_char,
    pub value: i32,
}

#[repr(C)]
pub struct gputune_execution {
    pub kernel: *const c_char,
    pub params: *const gputune_param,
    pub param_count: usize,
    pub workspace_bytes: u64,
    pub data: *const c_void,
    pub data_size: usize,
}

#[repr(C)]
pub struct gputune_measurement {
    pub struct_size: usize,
    pub execution: gputune_execution,
    pub validation: c_int,
    pub max_abs_error: f64,
    pub error: *const c_char,
    pub median_ns: i64,
    pub spread_ns: i64,
    pub samples: u32,
    pub is_default: c_int,
    pub chosen: c_int,
}

#[repr(C)]
pub struct gputune_record {
    pub struct_size: usize,
    pub execution: gputune_execution,
    pub measurements: *const gputune_measurement,
    pub measurement_count: usize,
    pub default_time_ns: i64,
    pub chosen_time_ns: i64,
}

extern "C" {
    pub fn gputune_version() -> *const c_char;
    pub fn gputune_last_error() -> *const c_char;
    pub fn gputune_client_options_init(options: *mut gputune_client_options);
    pub fn gputune_client_create(
        options: *const gputune_client_options,
        client: *mut *mut gputune_client,
    ) -> c_int;
    pub fn gputune_client_destroy(client: *mut gputune_client);
    pub fn gputune_client_endpoint(client: *const gputune_client) -> *const c_char;
    pub fn gputune_key_new(desc: *const gputune_key_desc, key: *mut *mut gputune_key) -> c_int;
    pub fn gputune_key_parse(text: *const c_char, key: *mut *mut gputune_key) -> c_int;
    pub fn gputune_key_free(key: *mut gputune_key);
    pub fn gputune_key_text(key: *const gputune_key) -> *const c_char;
    pub fn gputune_result_new() -> *mut gputune_result;
    pub fn gputune_result_free(result: *mut gputune_result);
    pub fn gputune_result_state(result: *const gputune_result) -> c_int;
    pub fn gputune_result_hit(result: *const gputune_result) -> c_int;
    pub fn gputune_result_from_memo(result: *const gputune_result) -> c_int;
    pub fn gputune_result_kernel(result: *const gputune_result) -> *const c_char;
    pub fn gputune_state_name(state: c_int) -> *const c_char;
    pub fn gputune_lookup(
        client: *mut gputune_client,
        key: *const gputune_key,
        result: *mut gputune_result,
    ) -> c_int;
    pub fn gputune_preload(
        client: *mut gputune_client,
        keys: *const *const gputune_key,
        count: usize,
        hits: *mut usize,
    ) -> c_int;
    pub fn gputune_claim_acquire(
        client: *mut gputune_client,
        key: *const gputune_key,
        claim: *mut *mut gputune_claim,
    ) -> c_int;
    pub fn gputune_claim_free(claim: *mut gputune_claim);
    pub fn gputune_claim_granted(claim: *const gputune_claim) -> c_int;
    pub fn gputune_claim_outcome_of(claim: *const gputune_claim) -> c_int;
    pub fn gputune_claim_record(claim: *mut gputune_claim, record: *const gputune_record) -> c_int;
}
