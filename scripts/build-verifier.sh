#!/usr/bin/env bash
# Builds the verify-attestation founders run: one static binary (musl libc, dlmalloc, the `verifier` profile's
# fat LTO), which starts in about a fifth of the time a glibc binary takes on the VMs this project runs on
# (docs/benchmarks.md, "One thread, one static binary"). Prints the binary's path on the last line.
#
# Needs Rust's x86_64-unknown-linux-musl target (added with rustup when rustup is there) and a C compiler for
# musl (Debian: musl-tools), since aws-lc and ring carry C and assembly. Elsewhere it says what is missing and
# exits 1; `cargo build --release -p verify-attestation --bin verify-attestation` still builds the ordinary binary.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-musl
if [ "$(uname -m)" != x86_64 ]; then
  echo "build-verifier: only x86_64 hosts are set up for the static build (this is $(uname -m))" >&2
  exit 1
fi
if ! rustc --print target-libdir --target "$target" >/dev/null 2>&1 \
  || [ ! -d "$(rustc --print target-libdir --target "$target")" ]; then
  if command -v rustup >/dev/null; then
    rustup target add "$target" >&2
  else
    echo "build-verifier: Rust's $target target is missing and there is no rustup to add it" >&2
    exit 1
  fi
fi
if ! command -v musl-gcc >/dev/null; then
  echo "build-verifier: musl-gcc is missing (Debian: apt-get install musl-tools)" >&2
  exit 1
fi
# aws-lc probes the CPU in a load-time constructor, in every run, even one that never calls it (a TDX quote is
# checked with ring); built without it, aws-lc probes on first use instead (attestation::sig calls
# aws_lc_rs::init() before each aws-lc check). Each `cpuid` is a trip to the hypervisor on the VMs this runs on.
export AWS_LC_SYS_CFLAGS_x86_64_unknown_linux_musl="${AWS_LC_SYS_CFLAGS_x86_64_unknown_linux_musl:-} -DBORINGSSL_NO_STATIC_INITIALIZER"
cargo build --profile verifier --target "$target" -p verify-attestation --bin verify-attestation >&2
echo "$PWD/target/$target/verifier/verify-attestation"
