#!/bin/bash
# scripts/with-uring.sh Y|N COMMAND...: runs COMMAND with the kernel's switch for FUSE over
# io_uring (/sys/module/fuse/parameters/enable_uring) set to Y or N, and puts the switch back
# as it was afterwards. The switch is global and read at each mount's INIT, so `make test`
# runs the suites once with it off (transport=auto is /dev/fuse) and once with it on (auto is
# io_uring), never both at once. Fails loudly where the switch cannot be set: no root, or a
# kernel without FUSE over io_uring.
set -u
sw=/sys/module/fuse/parameters/enable_uring
want=${1:?usage: with-uring.sh Y|N COMMAND...}
shift
case "$want" in Y|N) ;; *) echo "with-uring.sh: Y or N, not '$want'" >&2; exit 2 ;; esac
if [ ! -e "$sw" ]; then
  echo "with-uring.sh: $sw is missing: this kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING)" >&2
  exit 1
fi
was=$(cat "$sw")
if ! echo "$want" > "$sw" 2>/dev/null; then
  echo "with-uring.sh: cannot set $sw to $want (needs root)" >&2
  exit 1
fi
trap 'echo "$was" > "$sw"' EXIT
echo "with-uring.sh: enable_uring=$want for: $*"
"$@"
