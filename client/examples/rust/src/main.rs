//! How a Rust inference server uses libgputune (the C API, declared in
//! gputune.rs): preload the layers' keys at start-up, claim a key nobody has
//! tuned, tune it here and record it for every process on the GPU, then look
//! it up on the hot path (the in-process memo). When gputuned is unreachable
//! the server runs its defaults: tuning never blocks inference.
//!
//!   gputune-example [ENDPOINT]   (default: $GPUTUNE_ENDPOINT, else gpu0's)

mod gputune;

use gputune::*;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::process::exit;
use std::ptr;

fn text(s: *const c_char) -> String {
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

fn check(code: i32, what: &str) {
    if code != GPUTUNE_OK {
        eprintln!("{}: {}", what, text(unsafe { gputune_last_error() }));
        exit(1);
    }
}

fn main() {
    let endpoint = std::env::args().nth(1).map(|e| CString::new(e).unwrap());
    unsafe {
        let mut options: gputune_client_options = std::mem::zeroed();
        gputune_client_options_init(&mut options);
        if let Some(e) = &endpoint {
            options.endpoint = e.as_ptr();
        }
        options.lookup_deadline_ms = 100;
        let mut client = ptr::null_mut();
        check(gputune_client_create(&options, &mut client), "bad options");
        println!(
            "gputuned at {} (libgputune {}, from Rust)",
            text(gputune_client_endpoint(client)),
            text(gputune_version())
        );

        // Start-up: one RPC for every layer's key.
        let role = CString::new("attn.qkv").unwrap();
        let cs = CString::new("example-rust").unwrap();
        let desc = gputune_key_desc {
            struct_size: std::mem::size_of::<gputune_key_desc>(),
            kind: GPUTUNE_KEY_DENSE_BF16,
            phase: GPUTUNE_PHASE_DECODE,
            role: role.as_ptr(),
            tokens: 1,
            input_features: 4096,
            output_features: 6144,
            op: ptr::null(),
            params: ptr::null(),
            candidate_set: cs.as_ptr(),
        };
        let mut layer = ptr::null_mut();
        check(gputune_key_new(&desc, &mut layer), "layer key");
        let layers = [layer as *const gputune_key];
        let mut hits = 0usize;
        check(
            gputune_preload(client, layers.as_ptr(), layers.len(), &mut hits),
            "gputuned unavailable, running defaults",
        );
        println!("preloaded {} layer key, {} tuned", layers.len(), hits);

        // A custom op: claim it, tune it here, record it for everyone.
        let attention_text = CString::new("example_attention/b=8,h=32,d=128@example-rust").unwrap();
        let mut attention = ptr::null_mut();
        check(gputune_key_parse(attention_text.as_ptr(), &mut attention), "attention key");
        let mut claim = ptr::null_mut();
        check(gputune_claim_acquire(client, attention, &mut claim), "claim");
        if gputune_claim_granted(claim) != 0 {
            let kernel = CString::new("example.flash_decode").unwrap();
            let names = [CString::new("block_n").unwrap(), CString::new("split_kv").unwrap()];
            let params = [
                gputune_param { name: names[0].as_ptr(), value: 64 },
                gputune_param { name: names[1].as_ptr(), value: 4 },
            ];
            let chosen = || gputune_execution {
                kernel: kernel.as_ptr(),
                params: params.as_ptr(),
                param_count: params.len(),
                workspace_bytes: 0,
                data: ptr::null(),
                data_size: 0,
            };
            let measurement = gputune_measurement {
                struct_size: std::mem::size_of::<gputune_measurement>(),
                execution: chosen(),
                validation: GPUTUNE_VALIDATION_PASSED,
                max_abs_error: 0.0,
                error: ptr::null(),
                median_ns: 41_000,
                spread_ns: 0,
                samples: 50,
                is_default: 0,
                chosen: 1,
            };
            let record = gputune_record {
                struct_size: std::mem::size_of::<gputune_record>(),
                execution: chosen(),
                measurements: &measurement,
                measurement_count: 1,
                default_time_ns: 0,
                chosen_time_ns: 41_000,
            };
            check(gputune_claim_record(claim, &record), "record");
            println!("tuned {}: example.flash_decode", text(gputune_key_text(attention)));
        } else {
            println!(
                "{}: claim outcome {} (not ours to tune)",
                text(gputune_key_text(attention)),
                gputune_claim_outcome_of(claim)
            );
        }
        gputune_claim_free(claim); // abandons a claim not recorded

        // Hot path: answered from the memo, no I/O.
        let result = gputune_result_new();
        check(gputune_lookup(client, attention, result), "lookup");
        if gputune_result_hit(result) == 0 {
            eprintln!("expected a hit for {}", text(gputune_key_text(attention)));
            exit(1);
        }
        println!(
            "lookup: {}{}, run {}",
            text(gputune_state_name(gputune_result_state(result))),
            if gputune_result_from_memo(result) != 0 { " (memo)" } else { " (daemon)" },
            text(gputune_result_kernel(result))
        );
        gputune_result_free(result);
        gputune_key_free(attention);
        gputune_key_free(layer);
        gputune_client_destroy(client);
    }
}
