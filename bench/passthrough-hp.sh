#!/bin/bash
# bench/passthrough-hp.sh SRC [OUT]: builds libfuse's own example server, example/passthrough_hp,
# from the libfuse source tree SRC, into OUT (default: target/passthrough-hp), and prints the
# binary's path. bench/datapath.sh runs it (PASSTHROUGH_HP=that path) beside mirrorfs as the
# one-copy reference: one leg, `--nopassthrough` (every read and write through the daemon, as
# mirrorfs's are), over /dev/fuse and, with libfuse 3.18 or later and the kernel's
# enable_uring switch on, over io_uring (`-o io_uring`).
#
# Nothing of libfuse is in this repository, and CI cannot fetch it (only Debian's packages and
# crates.io are reachable there, and Debian 12's libfuse 3.14 has no io_uring): SRC is a
# checkout made by hand, e.g. `git clone https://github.com/libfuse/libfuse`. The build needs
# meson, ninja-build, pkg-config, g++ and liburing-dev (installed here from Debian, as root).
#
# Usage: bench/passthrough-hp.sh ~/src/libfuse
#        PASSTHROUGH_HP=$(bench/passthrough-hp.sh ~/src/libfuse) make bench-datapath
set -euo pipefail
say() { echo "passthrough-hp: $*" >&2; }
die() { say "error: $*"; exit 1; }

SRC=${1:?usage: bench/passthrough-hp.sh LIBFUSE_SRC [OUT]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${2:-$here/target/passthrough-hp}
[ -f "$SRC/meson.build" ] && [ -f "$SRC/example/passthrough_hp.cc" ] ||
    die "$SRC is not a libfuse source tree (no meson.build or example/passthrough_hp.cc)"
version=$(sed -n "s/^ *version: *'\([^']*\)'.*/\1/p" "$SRC/meson.build" | head -n 1)
say "libfuse $version from $SRC"

need=()
for p in meson ninja-build pkg-config g++ liburing-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "needs ${need[*]} (apt-get install, as root)"
    say "apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$OUT"
if [ ! -f "$OUT/build.ninja" ]; then
    meson setup "$OUT" "$SRC" -Dexamples=true -Dutils=false -Dtests=false \
        -Denable-io-uring=true --buildtype=release >"$OUT/setup.log" 2>&1 ||
        die "meson setup failed: $(tail -n 5 "$OUT/setup.log")"
fi
ninja -C "$OUT" example/passthrough_hp >"$OUT/build.log" 2>&1 ||
    die "the build failed: $(tail -n 5 "$OUT/build.log")"
grep -q "^#define HAVE_URING" "$OUT/fuse_config.h" 2>/dev/null ||
    say "note: built without io_uring (libfuse older than 3.18, or liburing without SQE128)"
echo "$OUT/example/passthrough_hp"
