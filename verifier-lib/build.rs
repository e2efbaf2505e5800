//! Link settings of the `verify-attestation` binary (the library and the tests are built as cargo's defaults).
//!
//! A founder runs `verify-attestation` once per report or quote, so its start is part of every verification
//! (docs/benchmarks.md, issue 19). On x86-64 Linux with glibc it is linked
//!
//! - as a position-dependent executable (`-no-pie`): the 10,000-odd relative relocations a PIE needs are then
//!   resolved by the linker instead of by the dynamic loader at every start, which writes (and so copies)
//!   every page of `.data.rel.ro` and the GOT. The code is compiled as usual; only the executable's own load
//!   address is fixed (shared libraries, heap and stack stay randomised);
//! - with its input sections sorted by name (`--sort-section=name`, GNU ld, gold and lld): each crate's
//!   functions then lie together, so the code one verification runs is spread over fewer pages of the 7 MB
//!   text (fewer page faults at every start).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    // A static build (`-C target-feature=+crt-static`) is a static PIE, with no dynamic loader to spare; adding
    // `-no-pie` to it links a binary that crashes at once, so it keeps its own setting.
    let crt_static = std::env::var("CARGO_CFG_TARGET_FEATURE")
        .unwrap_or_default()
        .split(',')
        .any(|f| f == "crt-static");
    if os == "linux" && arch == "x86_64" && env == "gnu" {
        if !crt_static {
            println!("cargo:rustc-link-arg-bin=verify-attestation=-no-pie");
        }
        println!("cargo:rustc-link-arg-bin=verify-attestation=-Wl,--sort-section=name");
    }
}
