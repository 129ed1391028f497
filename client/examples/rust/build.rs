// Links libgputune from $GPUTUNE_LIB_DIR (an install's lib directory), with
// an rpath to it so the example runs from there; without it, from the
// loader's paths (a package install).
fn main() {
    println!("cargo:rerun-if-env-changed=GPUTUNE_LIB_DIR");
    if let Ok(dir) = std::env::var("GPUTUNE_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=gputune");
}
