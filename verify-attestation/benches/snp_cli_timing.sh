#!/bin/sh
# Whole-process timing of `verify-attestation snp-report` on one real SEV-SNP vector (and, if SNPGUEST points
# to a built snpguest, `snpguest verify attestation` on the same files). Needs hyperfine.
# Usage: verify-attestation/benches/snp_cli_timing.sh [VECTOR_DIR]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
vectors=${FENCED_RUN_VECTORS:-$root/../shared/vectors}
dir=${1:-$vectors/snp/genoa-v5-oak-oc}
[ -f "$dir/report.bin" ] || { echo "skipped: no report.bin in $dir"; exit 0; }
cargo build --release -q -p verify-attestation --bin verify-attestation --manifest-path "$root/Cargo.toml"
bin=${CARGO_TARGET_DIR:-$root/target}/release/verify-attestation
"$bin" snp-report "$dir/report.bin" --certs "$dir" --at 2026-01-01T00:00:00Z >/dev/null
set -- "$bin snp-report $dir/report.bin --certs $dir --at 2026-01-01T00:00:00Z"
if [ -n "${SNPGUEST:-}" ]; then
    # snpguest wants ark.pem/ask.pem/vcek.pem in one directory.
    tmp=$(mktemp -d)
    cp "$dir/ark.pem" "$dir/ask.pem" "$tmp/"
    openssl x509 -inform der -in "$dir/vcek.der" -out "$tmp/vcek.pem"
    set -- "$@" "$SNPGUEST verify certs $tmp" "$SNPGUEST verify attestation $tmp $dir/report.bin"
fi
hyperfine -N --warmup 5 --runs 100 "$@"
