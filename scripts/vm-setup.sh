#!/usr/bin/env bash
# What the vm tier needs on a Debian bookworm machine, installed where it is missing (idempotent):
#   QEMU from bookworm-backports, busybox-static (as root, through apt), and Debian's 6.12 kernel from
#   bookworm-backports, downloaded (not installed) and extracted under TARGET/vm-kernel (default: target/ of this
#   checkout): its vmlinuz, its config and the modules the guest agent loads.
# Run by `fenced-run demo` (as root, where the vm tier's pieces are missing) and by .ci/run.
# The apt source for bookworm-backports is derived from the machine's own Debian source (same mirror, same keyring),
# so no mirror host name is written here.
set -euo pipefail
target="${1:-$(cd "$(dirname "$0")/.." && pwd)/target}"
say() { printf 'vm-setup: %s\n' "$*" >&2; }
root=0
[ "$(id -u)" = 0 ] && root=1
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }

bpo=/etc/apt/sources.list.d/fenced-run-bookworm-backports.sources
if [ "$root" = 1 ] && [ ! -f "$bpo" ] && ! apt-cache policy 2>/dev/null | grep -q 'bookworm-backports'; then
  if [ ! -f /etc/apt/sources.list.d/debian.sources ]; then
    say "no /etc/apt/sources.list.d/debian.sources to derive a bookworm-backports source from"
    exit 1
  fi
  # The first stanza whose Suites include plain `bookworm`, with Suites replaced by bookworm-backports.
  awk 'BEGIN{RS=""; FS="\n"} /(^|\n)Suites:[^\n]*(^| )bookworm( |$|\n)/ && !done {
         for (i = 1; i <= NF; i++) { if ($i ~ /^Suites:/) $i = "Suites: bookworm-backports"; if ($i !~ /^#/) print $i }
         done = 1 }' /etc/apt/sources.list.d/debian.sources >"$bpo"
  if [ ! -s "$bpo" ]; then
    rm -f "$bpo"
    say "no stanza with Suites: bookworm in /etc/apt/sources.list.d/debian.sources"
    exit 1
  fi
  say "added $bpo (bookworm-backports, derived from debian.sources)"
  say "updating apt's package lists"
  apt-get update -qq
fi

# qemu-system-x86 comes from bookworm-backports (the preinstalled qemu-utils from there breaks bookworm's QEMU).
if ! command -v qemu-system-x86_64 >/dev/null; then
  if [ "$root" = 0 ]; then
    say "qemu-system-x86_64 is missing and installing it needs root: run  sudo $0"
    exit 1
  fi
  say "installing qemu-system-x86 from bookworm-backports"
  apt_install -t bookworm-backports qemu-system-x86
fi
if [ ! -x /bin/busybox ] && [ "$root" = 1 ]; then
  say "installing busybox-static"
  apt_install busybox-static
fi

# The toolchain image (image build --toolchains) needs the virtio block driver: an extraction made before it was
# in the list below is made again.
if ls "$target"/vm-kernel/boot/vmlinuz-* >/dev/null 2>&1 \
   && ! ls "$target"/vm-kernel/lib/modules/*/kernel/drivers/block/virtio_blk.ko* >/dev/null 2>&1; then
  say "re-extracting the kernel: its virtio_blk module is missing"
  rm -rf "$target/vm-kernel"
fi
if ! ls "$target"/vm-kernel/boot/vmlinuz-* >/dev/null 2>&1; then
  vpkg="$(apt-cache -t bookworm-backports depends linux-image-amd64 2>/dev/null \
    | awk '/Depends: linux-image-6\.12/{print $2; exit}')"
  if [ -z "$vpkg" ]; then
    say "no linux-image-6.12 in bookworm-backports (is the suite in apt's sources?)"
    exit 1
  fi
  say "downloading $vpkg into $target/vm-kernel"
  rm -rf "$target/vm-kernel" && mkdir -p "$target/vm-kernel"
  (cd "$target/vm-kernel" && apt-get download -qq -t bookworm-backports "$vpkg" 2>/dev/null \
    && say "extracting the kernel and its modules from $vpkg" \
    && dpkg-deb --fsys-tarfile ./*.deb | tar -x --wildcards './boot/vmlinuz-*' './boot/config-*' \
         './lib/modules/*/modules.*' './lib/modules/*/kernel/net/*' './lib/modules/*/kernel/drivers/net/*' \
         './lib/modules/*/kernel/drivers/md/*' './lib/modules/*/kernel/fs/erofs/*' \
         './lib/modules/*/kernel/drivers/block/*' './lib/modules/*/kernel/fs/squashfs/*' \
         './lib/modules/*/kernel/fs/configfs/*' './lib/modules/*/kernel/lib/*' \
         './lib/modules/*/kernel/crypto/*' './lib/modules/*/kernel/drivers/virt/*' \
    && rm -f ./*.deb) || { rm -rf "$target/vm-kernel"; say "downloading or extracting $vpkg failed"; exit 1; }
fi
say "the vm tier's QEMU and kernel are in place"
