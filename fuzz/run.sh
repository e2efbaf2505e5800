#!/usr/bin/env bash
# Builds the cargo-fuzz targets and runs each for a bounded time (docs/fuzzing.md).
#   fuzz/run.sh [SECONDS_PER_TARGET]   (default 25; FUZZ_TARGETS="a b" to pick targets)
# Corpora live under target/fuzz-corpus/<target> (seeded from fuzz/seeds/<target> and, for the parsers they
# fit, from $FENCED_RUN_VECTORS: copied at run time, never into the repository). A crash leaves its input in
# fuzz/artifacts/<target>/ and makes this script fail: turn it into a regression test of the normal suite.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-25}"
targets="${FUZZ_TARGETS:-event_log tdx_quote snp_report certificates collateral_json evidence_cbor measurement_set}"
vectors="${FENCED_RUN_VECTORS:-$(cd .. && pwd)/shared/vectors}"
export RUSTC_BOOTSTRAP=1 # cargo-fuzz needs nightly flags; the machine has a stable toolchain
# No sanitizer: the code under test has no `unsafe` (denied workspace-wide); overflow checks stay on (-a).
flags=(-O -a -s none --target-dir target/fuzz)
cargo fuzz build "${flags[@]}"

seed() { # seed TARGET FILES...
  local dir="target/fuzz-corpus/$1"; shift
  mkdir -p "$dir"
  local f
  for f in "$@"; do
    [ -f "$f" ] && cp "$f" "$dir/seed-$(sha256sum "$f" | cut -c1-16)"
  done
  return 0
}
for t in $targets; do
  mkdir -p "target/fuzz-corpus/$t"
  [ -d "fuzz/seeds/$t" ] && seed "$t" fuzz/seeds/"$t"/*
done
if [ -d "$vectors" ]; then
  shopt -s nullglob
  seed tdx_quote "$vectors"/tdx/*/quote.bin
  seed collateral_json "$vectors"/tdx/*/collateral.json
  seed snp_report "$vectors"/snp/*/report.bin
  seed certificates "$vectors"/snp/*/*.pem "$vectors"/snp/*/*.der "$vectors"/snp/roots/*/*.pem \
    "$vectors"/snp/chain-only/*/*.pem "$vectors"/snp/chain-only/*/*.der
  shopt -u nullglob
fi

printf '%-16s %8s %10s %10s %8s\n' target seconds cpu_s corpus bytes
for t in $targets; do
  corpus="target/fuzz-corpus/$t"
  TIMEFORMAT="%U %S"
  cpu=$( { time cargo fuzz run "${flags[@]}" "$t" "$corpus" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      >"target/fuzz-$t.log" 2>&1; } 2>&1 ) || {
    echo "fuzz target $t failed; see target/fuzz-$t.log and fuzz/artifacts/$t/" >&2
    tail -40 "target/fuzz-$t.log" >&2
    exit 1
  }
  cpu_s=$(echo "$cpu" | awk '{printf "%.1f", $1+$2}')
  n=$(find "$corpus" -type f | wc -l)
  bytes=$(du -sb "$corpus" | cut -f1)
  printf '%-16s %8s %10s %10s %8s\n' "$t" "$secs" "$cpu_s" "$n" "$bytes"
done
