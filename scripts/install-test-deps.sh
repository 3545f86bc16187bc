#!/bin/bash
# scripts/install-test-deps.sh: installs everything mirrorfs's tests need on a Debian 12 machine
# that has only a Rust toolchain: the Debian packages (FUSE, attr/acl, fio, rsync, sqlite3, a C
# compiler, mkfs tools, python3...), pjdfstest and fsx from crates.io into /usr/local/bin (so that
# user nobody can run them too; /root is mode 700), cargo-deb (what `make deb` builds the .deb
# with), and rustfmt and clippy. Idempotent: what is
# there already is kept. `make test` and `.ci/run` both run it.
#
# Needs root (apt-get, /usr/local). MIRRORFS_NO_INSTALL=1 skips it (the tests then fail, with
# this script named, where a tool is missing).
set -euo pipefail
[ "${MIRRORFS_NO_INSTALL:-0}" = 1 ] && { echo "install-test-deps: skipped (MIRRORFS_NO_INSTALL=1)"; exit 0; }
if [ "$(id -u)" -ne 0 ]; then
    echo "install-test-deps: must run as root (apt-get, /usr/local/bin); the FUSE tests need root too" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive

# Debian packages. libc6-dev: headers for the C build and the /usr/include that tar/rsync copy;
# psmisc: fuser(1); python3-prometheus-client: a real exposition-format parser for the
# metrics test; systemd: systemd-analyze verify for the units under contrib/; man-db: man -l on
# the generated man pages; xz-utils: the .deb's compression (make deb); mergerfs: the other
# FUSE filesystem bench/datapath.sh (make bench-smoke) measures mirrorfs against; strace: which
# calls `ls -l` makes (tests/ops_xattrs.rs, selinux_xattr=); sshfs, openssh-server,
# openssh-client and iproute2: tests/remote_sshfs.rs mounts a real sshfs leg from an sshd of its
# own in a network namespace (ip netns, a veth pair). The sshd it starts is its own, on a
# private address in that namespace: the package's system sshd is not needed, and is not
# started here (no init system starts it in a container; see policy-rc.d below).
packages=(fuse3 attr acl fio rsync sqlite3 git make gcc libc6-dev psmisc ca-certificates
    e2fsprogs util-linux btrfs-progs jq python3 xz-utils
    python3-prometheus-client systemd man-db bash mergerfs strace
    sshfs openssh-server openssh-client iproute2)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-test-deps: apt-get install ${missing[*]}"
    apt-get update -qq
    # openssh-server's postinst starts the system sshd through invoke-rc.d where it can: on a
    # machine without one, a policy-rc.d that refuses (101) keeps it from starting for this
    # install only (an existing policy-rc.d is left as it is).
    policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [ -n "$policy" ]; then rm -f "$policy"; trap - EXIT; fi
else
    echo "install-test-deps: Debian packages present"
fi
modprobe fuse 2>/dev/null || true
[ -c /dev/fuse ] || { echo "install-test-deps: /dev/fuse is missing" >&2; exit 1; }

# The test tools from crates.io, at the versions the external checks were written against, and
# cargo-deb at the version the .deb's metadata in Cargo.toml was written for.
cargo_tool() { # NAME VERSION
    if [ "$(/usr/local/bin/"$1" -V 2>/dev/null)" = "$1 $2" ]; then
        echo "install-test-deps: $1 $2 present"
    else
        echo "install-test-deps: cargo install $1 $2 (a few minutes)"
        cargo install --quiet --locked --root /usr/local "$1" --version "$2"
    fi
}
cargo_tool pjdfstest 0.2.2
cargo_tool fsx 0.3.2
cargo_tool cargo-deb 3.8.0
if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy 2>&1 | grep -v 'is up to date' || true
fi
