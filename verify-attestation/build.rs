//! Link settings of the `verify-attestation` binary (the library and the tests are built as cargo's defaults).
//!
//! A founder runs `verify-attestation` once per report or quote, so its start is part of every verification
//! (docs/benchmarks.md, issue 19). On x86-64 Linux with glibc it is linked with its input sections sorted by name
//! (`--sort-section=name`, GNU ld, gold and lld): each crate's functions then lie together, so the code one
//! verification runs is spread over fewer pages of the 7 MB text (fewer page faults at every start).
//!
//! It stays a position-independent executable. Linking it with `-no-pie` saved about 20 page faults per run
//! (the loader's 10,000-odd relative relocations), but fixes the load address of a program whose whole job is
//! parsing hostile bytes, which ASLR exists to protect; the gain is not worth that.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && arch == "x86_64" && env == "gnu" {
        println!("cargo:rustc-link-arg-bin=verify-attestation=-Wl,--sort-section=name");
    }
}
