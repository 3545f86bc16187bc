# mirrorfs: build, test, try out, install.
#
#   make build          release build ($(TARGET_DIR)/release/mirrorfs)
#   make test           installs what the tests need (scripts/install-test-deps.sh: Debian packages,
#                       pjdfstest and fsx; root; MIRRORFS_NO_INSTALL=1 skips that), then cargo test
#                       --workspace --all-features with the kernel's enable_uring switch off (over
#                       /dev/fuse) and the integration tests again with it on (over io_uring), then
#                       the external checks (tests/external/run-all.sh, three times: by default over
#                       /dev/fuse, with passthrough=ro,checksum=off over io_uring, by default over
#                       io_uring)
#                       against the debug binary; PROFILE=release tests the release one. A test that
#                       lacks root, /dev/fuse or a tool fails, unless MIRRORFS_TEST_ALLOW_SKIP=1; the
#                       last line says how many were skipped
#   make test-unit      only cargo test;  make test-external: only the external checks
#   make test-power-cut the long power-cut run (issue 26; root): CUTS=25 cuts of every disk's
#                       write cache with two legs and as many with three, under five workloads
#                       that record what was acknowledged; SEED= repeats a run (make test runs
#                       3 and 2 cuts)
#   make demo           build, mount a fresh 2-leg mirror in a temp folder (DEMO_DIR=... to choose),
#                       print where the legs and the mount are and how to unmount
#   make install        install the release binary as $(PREFIX)/sbin/mirrorfs, the man pages
#                       (docs/mirrorfs.8, docs/man/*.8), the bash, zsh and fish completions the
#                       binary prints, /sbin/mount.mirrorfs (fstab type `mirrorfs`) and
#                       /sbin/umount.fuse.mirrorfs (umount waits for the legs to be released), and
#                       the systemd units of contrib/; DESTDIR is honoured
#   make uninstall      remove what make install installed (same PREFIX and DESTDIR)
#   make deb            a .deb of the same files under /usr, in $(TARGET_DIR)/deb (cargo-deb, which
#                       scripts/install-test-deps.sh installs; the files are listed in Cargo.toml)
#   make sim            the policy simulator: every read policy on modelled SSD, USB stick and HDD
#                       legs over the seed workloads, a throughput table (no root, seconds)
#   make bench          the real benchmark (root): loop devices, cgroup v1 blkio throttles, btrfs
#                       raid1 as the anchor, every policy; tables, CSV and SVG under bench/results
#   make bench-smoke    the same rig on a tiny size, to check that it still runs
#   make bench-resync   how long a full resync of N=10000 files / MB=2048 MiB takes (root)
#   make bench-readahead one sequential reader on two and three disk-model legs (the simulator's
#                       HDD behind FUSE): the model read directly, mirrorfs with readahead=0 and
#                       with the extent read-ahead, 1 and 4 readers (root; MB=512)
#   make bench-remote   a leg with 20 ms of added latency (the disk model) beside a local one:
#                       random 4 KiB reads against the local leg alone, and the slow leg's share
#   make bench-intent   the write-intent log's cost: fio jobs with write_intent=on against off
#   make bench-checksum what checksums cost: fio sequential and random reads and writes with
#                       checksum=on against off, alternated in one run (MB=1024, ROUNDS=2), and
#                       the checksum store's size per TiB of data (root, loop devices)
#   make bench-first-mount  the first mount over two legs holding the same MB=10240 MiB tree:
#                       time until the mount answers, and until the contents are compared
#   make bench-datapath the data path against the disk (issue 12): tar, find, ls -lR, small-file
#                       reads, git clone and status (cold and warm), rm -rf and fio on an ext4 loop
#                       leg directly, mergerfs and mirrorfs (1 leg, 2 legs, write_intent=off); raw
#                       figures, ratios to the leg, each daemon's peak RSS and each mirrorfs
#                       daemon's CPU time per request (root; MB=1024, RUNTIME=10; MANY=1000000
#                       adds the daemon's memory over a million files; PASSTHROUGH_HP=path adds
#                       libfuse's passthrough_hp over /dev/fuse and io_uring, which
#                       bench/passthrough-hp.sh LIBFUSE_SRC builds)
#   make lint           cargo fmt --check and cargo clippy -D warnings
#   make doc-tables     rewrite the option and key tables of README.md and docs/control.md from
#                       src/config/table.rs (a unit test fails while they differ)
#   make man            rewrite the man pages docs/man/*.8 and the SYNOPSIS of docs/mirrorfs.8 from
#                       the command-line definition, src/cli/args.rs (a unit test fails while they
#                       differ)
#   make clean          cargo clean and the external checks' logs

CARGO ?= cargo
PROFILE ?= debug
PREFIX ?= /usr/local
# mount(8) and umount(8) look for their helpers (mount.<type>, umount.<type>) in /sbin only.
UMOUNT_HELPER_DIR ?= /sbin
MAN8_DIR ?= $(PREFIX)/share/man/man8
# systemd reads units from /usr/local/lib/systemd/system as well as /usr/lib/systemd/system.
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
UNITS := $(wildcard contrib/systemd/*.service contrib/systemd/*.timer contrib/prometheus/*.service contrib/prometheus/*.timer)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
DEMO_DIR ?=
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
RELEASE_BIN := $(TARGET_DIR)/release/mirrorfs
BIN ?= $(RELEASE_BIN)
DEB_OUT ?= $(TARGET_DIR)/deb
# xz, or gz (faster); done by the xz or gzip command (cargo-deb's own gzip takes minutes on the
# debug binary).
DEB_COMPRESS ?= xz
# What the .deb takes that the tree does not hold: the completions, and the binary where
# cargo-deb looks for it (release/ of the target directory it is given). A fixed place in the
# repository, since the asset list in Cargo.toml names it.
DEB_GEN := $(CURDIR)/target/deb-gen
TEST_BIN := $(TARGET_DIR)/$(PROFILE)/mirrorfs

# In CI: no colours, and every failing test reported, not only the first test binary's.
ifneq ($(CI),)
export CARGO_TERM_COLOR := never
CARGO_TEST_FLAGS ?= --no-fail-fast
endif

.PHONY: all build build-debug test deps test-unit test-external test-power-cut demo install install-files uninstall deb deb-package lint clean sim bench bench-smoke bench-resync bench-intent bench-first-mount doc-tables man bench-checksum bench-datapath bench-readahead bench-remote

all: build

build:
	$(CARGO) build --release

build-debug:
	$(CARGO) build

SKIP_LOG := $(TARGET_DIR)/skipped-tests.txt

test: deps test-unit test-external
	@echo "make test: every test ran and passed; skipped: $$(cat $(SKIP_LOG) 2>/dev/null | wc -l)$$( [ -s $(SKIP_LOG) ] && echo " (listed in $(SKIP_LOG))")"

deps:
	scripts/install-test-deps.sh

# The test disks' binaries first (the disk model, the cache disk): tests put legs on them, and
# cargo test builds only the test harness of another package's binary.
# Twice: with the kernel's enable_uring switch off (transport=auto is /dev/fuse), then the
# integration tests again with it on (auto is FUSE over io_uring). scripts/with-uring.sh sets
# the switch for one pass and puts it back.
test-unit:
	@mkdir -p $(TARGET_DIR); rm -f $(SKIP_LOG)
	$(CARGO) build -p mirrorfs-diskmodel -p mirrorfs-cachedisk $(filter --release,$(CARGO_TEST_FLAGS))
	scripts/with-uring.sh N env MIRRORFS_SKIP_LOG=$(SKIP_LOG) $(CARGO) test --workspace --all-features $(CARGO_TEST_FLAGS)
	scripts/with-uring.sh Y env MIRRORFS_SKIP_LOG=$(SKIP_LOG) $(CARGO) test -p mirrorfs --all-features --test '*' $(CARGO_TEST_FLAGS)
	@echo "test-unit: skipped: $$(cat $(SKIP_LOG) 2>/dev/null | wc -l)"

# The second pass mounts every mirror with passthrough=ro (checksum=off, which it needs).
# Three passes: as mounted by default over /dev/fuse (the switch off), with
# passthrough=ro,checksum=off over io_uring, and by default over io_uring.
test-external: $(if $(filter release,$(PROFILE)),build,build-debug)
	MIRRORFS=$(TEST_BIN) EXT_OUT=$(TARGET_DIR)/external \
		scripts/with-uring.sh N tests/external/run-all.sh
	MIRRORFS=$(TEST_BIN) EXT_OUT=$(TARGET_DIR)/external-passthrough-uring \
		EXT_MOUNT_OPTS=passthrough=ro,checksum=off,transport=uring scripts/with-uring.sh Y tests/external/run-all.sh
	MIRRORFS=$(TEST_BIN) EXT_OUT=$(TARGET_DIR)/external-uring \
		EXT_MOUNT_OPTS=transport=uring scripts/with-uring.sh Y tests/external/run-all.sh

# The disks of tests/power_cut.rs are the cache disk's binary: built first, as in test-unit.
CUTS ?= 25
test-power-cut:
	$(CARGO) build -p mirrorfs-cachedisk $(filter --release,$(CARGO_TEST_FLAGS))
	MIRRORFS_POWER_CUTS=$(CUTS) $(if $(SEED),MIRRORFS_POWER_CUT_SEED=$(SEED)) \
		$(CARGO) test -p mirrorfs --all-features --test power_cut $(CARGO_TEST_FLAGS) -- --nocapture --test-threads=1

sim:
	$(CARGO) run --release -p mirrorfs-sim

bench: build
	MIRRORFS=$(RELEASE_BIN) bench/run.sh

bench-smoke: build-debug
	MIRRORFS=$(TEST_BIN) BENCH_SIZE=tiny bench/run.sh
	$(CARGO) build -p mirrorfs-diskmodel
	MIRRORFS=$(TEST_BIN) MB=64 bench/readahead.sh
	MIRRORFS=$(TEST_BIN) RUNTIME=2 bench/remote.sh
	MIRRORFS=$(TEST_BIN) MB=16 DIR=$(TARGET_DIR)/bench-first-mount bench/first-mount.sh
	MIRRORFS=$(TEST_BIN) MB=16 RUNTIME=1 ROUNDS=1 DIR=$(TARGET_DIR)/bench-checksum bench/checksum.sh
	MIRRORFS=$(TEST_BIN) BENCH_SIZE=tiny DIR=$(TARGET_DIR)/bench-datapath scripts/with-uring.sh Y bench/datapath.sh

bench-resync: build
	MIRRORFS=$(RELEASE_BIN) bench/resync.sh

bench-intent: build
	MIRRORFS=$(RELEASE_BIN) bench/intent.sh

bench-checksum: build
	MIRRORFS=$(RELEASE_BIN) bench/checksum.sh

bench-first-mount: build
	MIRRORFS=$(RELEASE_BIN) bench/first-mount.sh

bench-datapath: build
	MIRRORFS=$(RELEASE_BIN) scripts/with-uring.sh Y bench/datapath.sh

bench-readahead: build
	$(CARGO) build --release -p mirrorfs-diskmodel
	MIRRORFS=$(RELEASE_BIN) bench/readahead.sh

bench-remote: build
	$(CARGO) build --release -p mirrorfs-diskmodel
	MIRRORFS=$(RELEASE_BIN) bench/remote.sh

demo: build
	@set -e; \
	if [ -n "$(DEMO_DIR)" ]; then \
		d="$(abspath $(DEMO_DIR))"; mkdir -p "$$d"; \
		[ -z "$$(ls -A "$$d")" ] || { echo "demo: $$d is not empty; choose another DEMO_DIR" >&2; exit 1; }; \
	else d=$$(mktemp -d /tmp/mirrorfs-demo.XXXXXX); fi; \
	mkdir -p "$$d/leg0" "$$d/leg1" "$$d/mnt"; \
	"$(RELEASE_BIN)" "$$d/leg0:$$d/leg1" "$$d/mnt"; \
	echo "hello from mirrorfs" > "$$d/mnt/hello.txt"; \
	echo; \
	echo "mirrorfs is mounted at  $$d/mnt"; \
	echo "its legs (mirrors) are  $$d/leg0  and  $$d/leg1"; \
	echo "try:       echo hi > $$d/mnt/x; cat $$d/leg0/x $$d/leg1/x"; \
	echo "unmount:   umount $$d/mnt    (as a non-root user: fusermount3 -u $$d/mnt)"; \
	echo "clean up:  rm -rf $$d        (after unmounting)"

install: build install-files

# What `make install` installs, from BIN (the release binary by default; the tests give the one
# they built). The same list is what `make uninstall` removes and what the .deb holds.
install-files:
	install -D -m755 "$(BIN)" "$(DESTDIR)$(PREFIX)/sbin/mirrorfs"
	install -D -m644 -t "$(DESTDIR)$(MAN8_DIR)" docs/mirrorfs.8 docs/man/*.8
	install -d "$(DESTDIR)$(PREFIX)/share/bash-completion/completions" \
		"$(DESTDIR)$(PREFIX)/share/zsh/vendor-completions" "$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d"
	"$(BIN)" completions bash > "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/mirrorfs"
	"$(BIN)" completions zsh > "$(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_mirrorfs"
	"$(BIN)" completions fish > "$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/mirrorfs.fish"
	install -d "$(DESTDIR)$(UMOUNT_HELPER_DIR)"
	ln -sf "$(PREFIX)/sbin/mirrorfs" "$(DESTDIR)$(UMOUNT_HELPER_DIR)/umount.fuse.mirrorfs"
	ln -sf "$(PREFIX)/sbin/mirrorfs" "$(DESTDIR)$(UMOUNT_HELPER_DIR)/umount.mirrorfs"
	ln -sf "$(PREFIX)/sbin/mirrorfs" "$(DESTDIR)$(UMOUNT_HELPER_DIR)/mount.mirrorfs"
	install -D -m644 -t "$(DESTDIR)$(SYSTEMD_UNIT_DIR)" $(UNITS)
	install -D -m644 contrib/tmpfiles.d/mirrorfs-fuse-uring.conf \
		"$(DESTDIR)$(PREFIX)/share/doc/mirrorfs/examples/mirrorfs-fuse-uring.conf"

uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/sbin/mirrorfs" \
		"$(DESTDIR)$(UMOUNT_HELPER_DIR)/umount.fuse.mirrorfs" \
		"$(DESTDIR)$(UMOUNT_HELPER_DIR)/umount.mirrorfs" \
		"$(DESTDIR)$(UMOUNT_HELPER_DIR)/mount.mirrorfs" \
		"$(DESTDIR)$(PREFIX)/share/bash-completion/completions/mirrorfs" \
		"$(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_mirrorfs" \
		"$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/mirrorfs.fish" \
		"$(DESTDIR)$(PREFIX)/share/doc/mirrorfs/examples/mirrorfs-fuse-uring.conf"
	rm -f $(addprefix "$(DESTDIR)$(MAN8_DIR)/,$(addsuffix ",$(notdir docs/mirrorfs.8 $(wildcard docs/man/*.8))))
	rm -f $(addprefix "$(DESTDIR)$(SYSTEMD_UNIT_DIR)/,$(addsuffix ",$(notdir $(UNITS))))

deb: build deb-package

# The .deb from BIN, built by cargo-deb from [package.metadata.deb] in Cargo.toml: the same files
# as make install-files, under /usr (helpers in /usr/sbin, which /sbin is on Debian 12), the man
# pages gzipped, depending on fuse3. No maintainer scripts (no systemd-units table either): the
# units are shipped, not enabled, and nothing is restarted on an upgrade (that would unmount a
# live mirror). BIN is staged as the "release" binary of a target directory of its own, so the
# package holds exactly BIN (the tests give the binary they built); --no-build, --no-strip: as
# built (make deb has just built it).
deb-package:
	@command -v cargo-deb >/dev/null || { echo "make deb: cargo-deb is missing: scripts/install-test-deps.sh installs it" >&2; exit 1; }
	rm -rf "$(DEB_GEN)"
	install -d "$(DEB_GEN)/completions" "$(DEB_GEN)/target/release"
	"$(BIN)" completions bash > "$(DEB_GEN)/completions/mirrorfs"
	"$(BIN)" completions zsh > "$(DEB_GEN)/completions/_mirrorfs"
	"$(BIN)" completions fish > "$(DEB_GEN)/completions/mirrorfs.fish"
	ln -s "$(abspath $(BIN))" "$(DEB_GEN)/target/release/mirrorfs"
	install -d "$(DEB_OUT)"
	CARGO_TARGET_DIR="$(DEB_GEN)/target" $(CARGO) deb --no-build --no-strip \
		--compress-system --compress-type $(DEB_COMPRESS) --output "$(DEB_OUT)/"

doc-tables:
	MIRRORFS_WRITE_DOCS=1 $(CARGO) test --lib doc_tables_follow_the_table

man:
	MIRRORFS_WRITE_DOCS=1 $(CARGO) test --lib man_pages_follow_the_definition

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	scripts/module-deps.py

clean:
	$(CARGO) clean
	rm -rf "$(TARGET_DIR)/external"
