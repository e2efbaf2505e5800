#!/bin/sh
# Installs fenced-run for this user from this checkout (docs/install.md):
#   1. `cargo install --path host --bin fenced-run` (release profile, into ~/.cargo/bin), built in this checkout's
#      target/ so that step 2 reuses every crate it compiled;
#   2. the static guest agent linked from that same build (`cargo rustc ... --bin fenced-run-agent -- -C
#      target-feature=+crt-static -C strip=symbols`, as `fenced-run image build` does in a checkout), copied into
#      the data directory as guest-agent, with guest-agent.build.json (rustc, target, profile, Cargo.lock's
#      SHA-256: what a second builder must match; `image build` copies it into the image's manifest).
# The data directory: the first argument, else $FENCED_RUN_DATA_DIR, else $XDG_DATA_HOME/fenced-run, else
# ~/.local/share/fenced-run. The installed fenced-run finds it there without the checkout; `fenced-run demo` then
# fetches the kernel into it (scripts/vm-setup.sh, embedded in the binary) and builds the image into it.
# PROFILE=dev installs the dev profile's build instead (quick where the README's command 1
# already built it); CARGO_INSTALL_ROOT (cargo's) installs the binary elsewhere than ~/.cargo.
set -eu
cd "$(dirname "$0")/.."
data="${1:-${FENCED_RUN_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/fenced-run}}"
case "$data" in
  /*) ;;
  *) echo "scripts/install.sh: the data directory must be an absolute path, not $data" >&2; exit 2 ;;
esac
profile="${PROFILE:-release}"
case "$profile" in
  release) dir=release ;;
  dev) dir=debug ;;
  *) echo "scripts/install.sh: PROFILE is release or dev, not $profile" >&2; exit 2 ;;
esac
flags="-C target-feature=+crt-static -C strip=symbols"

echo "install: fenced-run (cargo install --locked --path host --bin fenced-run, $profile profile)" >&2
cargo install --locked --path host --bin fenced-run --target-dir target --profile "$profile"
echo "install: the static guest agent from the same build" >&2
# shellcheck disable=SC2086 # the flags are words
cargo rustc --locked -p host --bin fenced-run-agent --profile "$profile" -- $flags
mkdir -p "$data"
install -m 0755 "target/$dir/fenced-run-agent" "$data/guest-agent"

vv="$(rustc -vV)"
field() { printf '%s\n' "$vv" | sed -n "s/^$1: //p"; }
lock="$(sha256sum Cargo.lock | cut -d' ' -f1)"
cat >"$data/guest-agent.build.json" <<JSON
{
  "rustc_release": "$(field release)",
  "rustc_commit_hash": "$(field commit-hash)",
  "rustc_host": "$(field host)",
  "target": "x86_64-unknown-linux-gnu",
  "profile": "$profile",
  "cargo_lock_sha256": "$lock"
}
JSON
echo "install: $data/guest-agent (sha256 $(sha256sum "$data/guest-agent" | cut -d' ' -f1))" >&2
echo "install: done; \`fenced-run doctor\` names the data directory and the agent it found" >&2
