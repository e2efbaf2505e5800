#!/usr/bin/env bash
# Benchmarks of the toolchain image (docs/benchmarks.md, "The toolchain image"):
#   scripts/bench-toolchain-image.sh build OUTDIR        image build time and size per toolchain set
#   scripts/bench-toolchain-image.sh boot IMAGE_DIR      one boot by hand, the agent's console timeline (30 s bound)
# Run from the workspace root after `cargo build -p host` and one `fenced-run image build` (for the agent).
set -euo pipefail
cd "$(dirname "$0")/.."
# The static agent `fenced-run image build` links in this build tree (host::image::agent, docs/vm.md "One build").
agent=target/debug/fenced-run-agent
case "${1:-}" in
build)
  out="${2:?OUTDIR}"
  for set in python rust node go go,node,python,rust; do
    dir="$out/img-${set//,/-}"
    rm -rf "$dir"
    s=$(date +%s.%N)
    target/debug/fenced-run image build --toolchains "$set" --agent "$agent" --out "$dir" >"$dir.log" 2>&1 \
      || { echo "$set: failed, see $dir.log"; continue; }
    e=$(date +%s.%N)
    n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['toolchains']['packages']))" "$dir/manifest.json")
    printf '%s: build %.1f s, toolchains.img %s bytes, tree %s bytes, %s packages\n' "$set" \
      "$(echo "$e - $s" | bc)" "$(stat -c %s "$dir/toolchains.img")" "$(du -sb "$dir/toolchains.tree" | cut -f1)" "$n"
  done
  ;;
boot)
  img="${2:?IMAGE_DIR}"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cmdline=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['cmdline']['value'])" "$img/manifest.json")
  disk=()
  [ -f "$img/toolchains.img" ] && disk=(-drive "file=$img/toolchains.img,if=none,id=toolchains,format=raw,readonly=on"
    -device virtio-blk-pci,drive=toolchains)
  bios=()
  [ -f /usr/share/qemu/qboot.rom ] && bios=(-bios /usr/share/qemu/qboot.rom)
  # No host speaks on the channel: the agent's timeline up to the toolchain image is what this shows.
  timeout 30 qemu-system-x86_64 -nodefaults -no-user-config -nographic -no-reboot -machine q35 -accel tcg -cpu max \
    "${bios[@]}" -smp 2 -m 2048M -kernel "$img/vmlinux" -initrd "$img/initramfs.cpio" -append "$cmdline" \
    -nic none -monitor none -serial "file:$tmp/console" \
    -chardev "socket,id=job,path=$tmp/job.sock,server=on,wait=off" -device virtio-serial-pci,id=vser \
    -device virtserialport,bus=vser.0,chardev=job,name=fenced-run.job "${disk[@]}" &
  qemu=$!
  for _ in $(seq 1 250); do
    sleep 0.1
    grep -q 'toolchain image' "$tmp/console" 2>/dev/null && break
  done
  sleep 0.5
  kill "$qemu" 2>/dev/null || true
  wait "$qemu" 2>/dev/null || true
  grep 'guest-agent' "$tmp/console" || true
  ;;
*)
  echo "usage: $0 build OUTDIR | boot IMAGE_DIR" >&2
  exit 2
  ;;
esac
