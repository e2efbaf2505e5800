#!/bin/sh
# Builds the Debian package of fenced-run with cargo-deb (`cargo install cargo-deb`; host/Cargo.toml's
# [package.metadata.deb], docs/install.md): fenced-run in /usr/bin, the static guest agent and its build record in
# /usr/share/fenced-run (linked from the same build, as scripts/install.sh does), scripts/vm-setup.sh beside them.
# PROFILE (default release) is the cargo profile; prints the .deb's path last.
set -eu
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
case "$profile" in dev) dir=debug ;; *) dir="$profile" ;; esac
flags="-C target-feature=+crt-static -C strip=symbols"

cargo build --locked -p host --bin fenced-run --profile "$profile" >&2
# shellcheck disable=SC2086 # the flags are words
cargo rustc --locked -p host --bin fenced-run-agent --profile "$profile" -- $flags >&2
assets=target/deb-assets
rm -rf "$assets" && mkdir -p "$assets"
cp "target/$dir/fenced-run-agent" "$assets/guest-agent"
vv="$(rustc -vV)"
field() { printf '%s\n' "$vv" | sed -n "s/^$1: //p"; }
cat >"$assets/guest-agent.build.json" <<JSON
{
  "rustc_release": "$(field release)",
  "rustc_commit_hash": "$(field commit-hash)",
  "rustc_host": "$(field host)",
  "target": "x86_64-unknown-linux-gnu",
  "profile": "$profile",
  "cargo_lock_sha256": "$(sha256sum Cargo.lock | cut -d' ' -f1)"
}
JSON
cargo deb --locked -p host --no-build --no-strip --profile "$profile" --output target/debian >&2
ls -t target/debian/*.deb | head -n 1
