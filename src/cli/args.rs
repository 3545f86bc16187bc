//! The one definition of the command line, in clap: the mount form mount.fuse3 uses
//! (`SRC MOUNTPOINT -o OPTS`, `-o` anywhere) and every subcommand. `--help`, `SUB --help`, the
//! shell completions (`mirrorfs completions`) and the man pages under `docs/man/` (written by
//! `make man`, held to this by a unit test) all come from it.

use crate::daemon::Args;
use clap::{Args as ClapArgs, CommandFactory, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// The subcommands' names: a first argument that is one of them is a subcommand (a leg called
/// so is written `./status`).
pub fn subcommand_names() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect()
}

const AFTER_HELP: &str = "\
Mount options (-o) are listed by 'man mirrorfs' and in README.md; every subcommand has its own \
--help. Exit status of the mount form: 0 once the mount answers (or the foreground daemon ended \
cleanly), 1 on bad input or a failed mount, with one line saying why.";

/// mirrorfs: a FUSE filesystem that keeps every file on several legs and reads each request
/// from the leg that answers fastest.
#[derive(Parser, Debug)]
#[command(
    name = "mirrorfs",
    version,
    about = "A FUSE filesystem that mirrors every file onto several backing directories (legs)",
    long_about = "A FUSE filesystem that keeps every file as a plain file at the same path on \
                  several backing directories, its legs, sends every write to all of them and \
                  serves each read from the leg that will answer it fastest.\n\n\
                  Mount: mirrorfs [-f] [-d] [-o OPT[,OPT...]] LEG[:LEG...] MOUNTPOINT. The \
                  subcommands talk to a running mount through its control file MOUNT/.mirrorfs.",
    after_help = AFTER_HELP,
    override_usage = "mirrorfs [-f] [-d] [-o OPT[,OPT...]] LEG[:LEG...] MOUNTPOINT\n       \
                      mirrorfs <COMMAND>",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(flatten)]
    pub mount: MountArgs,
    #[command(subcommand)]
    pub command: Option<Sub>,
}

/// The mount form's arguments.
#[derive(ClapArgs, Debug)]
pub struct MountArgs {
    /// Stay in the foreground (default: fork once the mount answers).
    #[arg(short = 'f')]
    pub foreground: bool,
    /// Debug logging: to stderr with -f, to the system log otherwise.
    #[arg(short = 'd')]
    pub debug: bool,
    /// Mount options, comma-separated (see mirrorfs(8)); may come before or after the
    /// positionals, and more than once.
    #[arg(short = 'o', value_name = "OPT[,OPT...]")]
    pub options: Vec<String>,
    /// The legs, separated by ':' (e.g. /mnt/ssd/data:/mnt/hdd/data), each with optional
    /// attributes after '=': rot, nonrot, writemostly, quiet, name=LABEL.
    #[arg(value_name = "LEG[:LEG...]", required = true)]
    pub legs: Option<String>,
    /// Where to mount the mirror.
    #[arg(value_name = "MOUNTPOINT", required = true)]
    pub mountpoint: Option<PathBuf>,
}

/// How `status` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The zpool-status-like report.
    Text,
    /// The statistics document, one JSON object per mount and per line.
    Json,
    /// Prometheus's text exposition, for node_exporter's textfile collector.
    Prometheus,
}

#[derive(Subcommand, Debug)]
pub enum Sub {
    /// Health of each mount: state, legs, errors, resync and scrub progress
    #[command(
        long_about = "A zpool-status-like report of each mount (every mirrorfs mount \
                             when none is given): its state (ONLINE, DEGRADED, FAULTED), why \
                             and what to do, the read policy, resync and scrub progress, and \
                             each leg's state, error counts, bytes read and written.\n\n\
                             Exit status: 0 every leg online and no errors counted, 1 degraded \
                             or errors counted, 2 usage error or not a mirrorfs mount. With \
                             --format=prometheus: 0 once the exposition is written (a mount \
                             that cannot be read shows as mirrorfs_up 0)."
    )]
    Status(StatusArgs),
    /// Per-leg operations, bandwidth, latency and queue, every INTERVAL seconds
    #[command(
        long_about = "Per-leg reads and writes per second, bytes read and written per \
                             second (as 18.3M: powers of 1024), mean service time of \
                             small and large reads, and queue depth, every INTERVAL seconds, \
                             COUNT times (once when no interval is given). The first report \
                             covers the time since the mount (or the last stats_reset). MOUNT \
                             defaults to the first mirrorfs mount."
    )]
    Iostat {
        /// The mount (default: the first mirrorfs mount).
        #[arg(value_name = "MOUNT")]
        mount: Option<String>,
        /// Seconds between reports (a decimal number above 0).
        #[arg(value_name = "INTERVAL")]
        interval: Option<String>,
        /// How many reports (default: until interrupted).
        #[arg(value_name = "COUNT")]
        count: Option<String>,
    },
    /// Print one control key's value
    #[command(
        long_about = "Prints the value of one control key (user.mirrorfs.KEY; the \
                             prefix may be left out) of the mount, and a newline. Sizes \
                             (minfreespace, resync_speed_max, readahead) are written as 4G, 1.5G, 300M: \
                             three significant figures at most, powers of 1024, in the form \
                             'mirrorfs set' and -o take back; --bytes prints the exact number \
                             of bytes. 'mirrorfs list' shows every key."
    )]
    Get {
        /// Print sizes as exact byte counts (for scripts), not as 4G.
        #[arg(short = 'b', long)]
        bytes: bool,
        /// The mount (or its control file MOUNT/.mirrorfs).
        mount: PathBuf,
        /// The key, e.g. read_policy, state, stats.
        key: String,
    },
    /// Change a live setting, or send a command through a key
    #[command(
        long_about = "Sets one control key: a live setting (read_policy, minfreespace, \
                             resync_speed_max, readahead) or a command (stats_reset). Only root, or the \
                             user who mounted a mirror root did not mount, may. A refusal says \
                             why in one line (exit 1)."
    )]
    Set {
        /// The mount.
        mount: PathBuf,
        /// The key.
        key: String,
        /// The new value, in the syntax -o takes (sizes: 4G, 1.5G, 1.5GiB, 512K, 2048).
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Print every control key and its value
    #[command(
        long_about = "Prints every control key of the mount as key=value lines, \
                             without the user.mirrorfs. prefix and without the statistics \
                             document; sizes as 'mirrorfs get' writes them (--bytes: exact \
                             byte counts)."
    )]
    List {
        /// Print sizes as exact byte counts (for scripts), not as 4G.
        #[arg(short = 'b', long)]
        bytes: bool,
        /// The mount.
        mount: PathBuf,
    },
    /// Compare every copy of every file, and repair differences
    #[command(
        subcommand,
        long_about = "A scrub compares every copy of every entry on the in-sync legs in the \
                      background (type, mode, owner, size, times, xattrs, hard links and \
                      content), throttled by resync_speed_max, reading at the idle I/O class."
    )]
    Scrub(ScrubCmd),
    /// Drop, add back, forget or replace a leg while mounted
    #[command(subcommand)]
    Leg(LegCmd),
    /// Unmount, and return only once the daemon has released every leg
    #[command(
        long_about = "Unmounts MOUNT and waits until its daemon has flushed the legs, \
                             marked them clean and exited, so that the legs' disks can be \
                             unmounted right after. The same program installed as \
                             /sbin/umount.fuse.mirrorfs (make install does) makes umount(8), \
                             and so systemd, do this for every mirrorfs mount.\n\n\
                             Exit status: 0 unmounted (a daemon still running after --wait \
                             seconds is reported, not an error), 32 the unmount failed (busy, \
                             not mounted)."
    )]
    Unmount {
        /// The mount.
        mount: PathBuf,
        /// Detach now, clean up when the last user lets go (do not wait).
        #[arg(short = 'l', long)]
        lazy: bool,
        /// Force the unmount (MNT_FORCE).
        #[arg(short = 'f', long)]
        force: bool,
        /// Seconds to wait for the daemon at most (default 120).
        #[arg(long, value_name = "S", value_parser = parse_seconds)]
        wait: Option<std::time::Duration>,
    },
    /// Fire a test event: run the notify program, the events directory's programs, the mail
    #[command(
        name = "notify-test",
        long_about = "Asks the mount's daemon for a test event (MIRRORFS_EVENT=test), as \
                      mdadm --test does: it runs notify_program, every executable of \
                      events_dir (default /etc/mirrorfs/events.d) and mails mail_to, and this \
                      command prints what ran and how it ended.\n\n\
                      Exit status: 0 every program (and the mail) succeeded, 1 one failed or \
                      nothing is set up to run, 2 usage error or not a mirrorfs mount."
    )]
    NotifyTest {
        /// The mount.
        mount: PathBuf,
    },
    /// Replaces a mount's server in place (keeper=on): programs see a pause, not an error
    #[command(
        long_about = "Asks the keeper of a mount (-o keeper=on) to replace the process serving \
                      it: the server answers the requests under way and hands the session \
                      over; a new server (PROGRAM, another build, with --binary; else the same \
                      program as before) takes it over, as after a crash but with no request \
                      cut off. Programs using the mount see a pause. A new program that does \
                      not serve is replaced by the one before. /dev/fuse only. Root, or the \
                      user who mounted, may ask; the program must be owned by that user or \
                      root and writable by no one else.\n\n\
                      Exit status: 0 once the new server answers (its pid and build are \
                      printed), 1 refused or no new server within 120 s, 2 usage error or \
                      not a mirrorfs mount."
    )]
    Restart {
        /// The mount.
        mount: PathBuf,
        /// The program to start instead (another build of mirrorfs).
        #[arg(long, value_name = "PROGRAM")]
        binary: Option<PathBuf>,
    },
    /// Where each leg keeps its copy of a file, and whether that copy is in sync
    #[command(
        long_about = "For each FILE of a mirror (any path inside a mirrorfs mount), \
                             each leg's copy: the leg, its state, the copy's path on the leg, \
                             and whether it is in sync: the daemon counts it in sync and the \
                             copy has the type, size and modification time of the file the \
                             mount serves. Run as root to see legs only root may read.\n\n\
                             Exit status: 0 every copy in sync, 1 some copy is not (a leg out \
                             of the mirror, a copy missing or different), 2 a FILE is not in a \
                             mirror."
    )]
    Where {
        /// Print one JSON object per file instead.
        #[arg(short = 'j', long)]
        json: bool,
        /// The files (or directories) inside a mount.
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[command(
        long_about = "Prints the completion script for SHELL on stdout, generated from \
                             this very command-line definition.\n\n\
                             bash: source <(mirrorfs completions bash), or save it as \
                             /usr/share/bash-completion/completions/mirrorfs. zsh: save it as \
                             _mirrorfs in a directory of $fpath. fish: save it as \
                             ~/.config/fish/completions/mirrorfs.fish."
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(ClapArgs, Debug)]
pub struct StatusArgs {
    /// Print the statistics document instead (same as --format=json).
    #[arg(short = 'j', long, conflicts_with = "format")]
    pub json: bool,
    /// How to print.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// With --format=prometheus: write the exposition to FILE atomically (a temporary file,
    /// then a rename) instead of stdout.
    #[arg(short = 'O', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// First zero the error counters and empty the lists of damaged and diverged files
    /// (root, or the user who mounted the mirror), as `zpool clear` does.
    #[arg(long)]
    pub clear: bool,
    /// The mounts (default: every mirrorfs mount).
    #[arg(value_name = "MOUNT")]
    pub mounts: Vec<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ScrubCmd {
    /// Start a scrub in the background
    #[command(
        long_about = "Starts a scrub in the background. Without --repair it only \
                             compares; differences are counted as checksum errors and listed \
                             by 'mirrorfs scrub status'."
    )]
    Start {
        /// The mount.
        mount: PathBuf,
        /// Repair what differs: by majority (three legs or more; the default value), or from
        /// the named leg (its name, legN, or its directory).
        #[arg(
            long,
            value_name = "majority|LEG",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "majority"
        )]
        repair: Option<OsString>,
        /// Wait for the scrub to end, showing its progress (a bar with rate and time left on a
        /// terminal, a line a minute otherwise); exit 1 if a difference was left unrepaired,
        /// or the scrub was cancelled or failed.
        #[arg(long)]
        wait: bool,
    },
    /// Show the last scrub's progress and the paths that differ
    #[command(
        long_about = "Shows the last scrub's progress and up to 100 differing paths; \
                             exit 1 while differences remain unrepaired."
    )]
    Status {
        /// The mount.
        mount: PathBuf,
    },
    /// Stop the running scrub
    Cancel {
        /// The mount.
        mount: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum LegCmd {
    /// Drop a leg from the mirror (not the last in-sync one)
    Fail {
        /// The mount.
        mount: PathBuf,
        /// The leg: its name, legN, or its directory.
        leg: OsString,
    },
    /// Resync a FAULTED, STALE or MISSING leg in the background and bring it back
    #[command(
        long_about = "Resyncs a FAULTED, STALE or MISSING leg in the background and \
                             brings it back into the mirror: incremental, from the record of \
                             what changed while it was away, or a full copy with --full."
    )]
    Add {
        /// The mount.
        mount: PathBuf,
        /// The leg: its name, legN, or its directory.
        leg: OsString,
        /// Copy everything, not only what changed while the leg was away.
        #[arg(long)]
        full: bool,
        /// Wait for the resync to end, showing its progress (a bar with rate and time left on
        /// a terminal, a line a minute otherwise); exit 1 if it failed or was cancelled.
        #[arg(long)]
        wait: bool,
    },
    /// Forget a leg that is out of the mirror, so later mounts no longer wait for it
    Remove {
        /// The mount.
        mount: PathBuf,
        /// The leg: its name, legN, or its directory.
        leg: OsString,
    },
    /// Put an empty directory in a leg's place and fill it with a full resync
    #[command(
        long_about = "Puts NEWDIR (an empty directory, normally on a new disk, outside \
                             the legs and the mount) in the leg's place while mounted and \
                             fills it with a full resync; the old leg is forgotten. Exits 0 \
                             once the resync has started."
    )]
    Replace {
        /// The mount.
        mount: PathBuf,
        /// The leg: its name, legN, or its directory.
        leg: OsString,
        /// The empty directory that takes its place.
        newdir: PathBuf,
        /// Wait for the resync to end, showing its progress; exit 1 if it failed or was
        /// cancelled.
        #[arg(long)]
        wait: bool,
    },
}

/// Seconds as every option takes them (`value::seconds`).
fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    crate::value::seconds(s)
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    Mount(Args),
    Sub(Sub),
}

/// One line from a clap error: its message without `error: `, the usage and the hint, the
/// lines joined.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let body = text
        .split("\n\nUsage:")
        .next()
        .unwrap_or("")
        .split("\n\nFor more information")
        .next()
        .unwrap_or("");
    let body = body.trim().trim_start_matches("error: ");
    let joined: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if joined.is_empty() {
        "bad arguments".into()
    } else {
        joined.join(" ")
    }
}

/// Parses `argv`; on `--help`/`--version` prints and returns `Err(0)`, on a usage error prints
/// one line and returns `Err(2)` for a subcommand, `Err(1)` for the mount form.
pub fn parse(argv: Vec<OsString>) -> Result<Parsed, i32> {
    let sub = argv
        .get(1)
        .and_then(|a| a.to_str())
        .filter(|a| subcommand_names().iter().any(|n| n == a))
        .map(str::to_string);
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Some(s), ..
        }) => Ok(Parsed::Sub(s)),
        Ok(Cli { mount, .. }) => Ok(Parsed::Mount(Args {
            foreground: mount.foreground,
            debug: mount.debug,
            options: mount.options,
            legs: mount.legs.unwrap_or_default(),
            mountpoint: mount.mountpoint.unwrap_or_default(),
        })),
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                let _ = e.print();
                Err(0)
            }
            kind => {
                let (hint, code) = match &sub {
                    Some(s) => (format!("mirrorfs {s} --help"), 2),
                    None => ("mirrorfs --help".to_string(), 1),
                };
                let what = match (kind, &sub) {
                    (clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand, Some(s)) => {
                        let subs: Vec<String> = command()
                            .find_subcommand(s)
                            .map(|c| {
                                c.get_subcommands()
                                    .map(|x| x.get_name().to_string())
                                    .collect()
                            })
                            .unwrap_or_default();
                        format!("'mirrorfs {s}' needs one of: {}", subs.join(", "))
                    }
                    _ => one_line(&e),
                };
                eprintln!("mirrorfs: {what} (see '{hint}')");
                Err(code)
            }
        },
    }
}

/// The whole definition, for completions and man pages.
pub fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Parsed, i32> {
        parse(v.iter().map(OsString::from).collect())
    }

    fn mount(v: &[&str]) -> Args {
        match p(v) {
            Ok(Parsed::Mount(a)) => a,
            other => panic!("{v:?}: {other:?}"),
        }
    }

    #[test]
    fn definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn options_before_or_after_positionals() {
        let a = mount(&[
            "mirrorfs",
            "/a:/b",
            "/m",
            "-o",
            "rw,nosuid",
            "-o",
            "threads=2",
        ]);
        assert_eq!(a.options, vec!["rw,nosuid", "threads=2"]);
        let b = mount(&["mirrorfs", "-f", "-o", "ro", "/a:/b", "/m"]);
        assert!(b.foreground);
        assert_eq!(b.legs, "/a:/b");
        assert_eq!(b.mountpoint, PathBuf::from("/m"));
    }

    #[test]
    fn missing_positionals_fail() {
        assert_eq!(p(&["mirrorfs", "/a"]).unwrap_err(), 1);
        assert_eq!(p(&["mirrorfs"]).unwrap_err(), 1);
    }

    #[test]
    fn subcommands_and_their_usage_errors() {
        assert!(matches!(
            p(&["mirrorfs", "status", "--format=prometheus", "/m"]),
            Ok(Parsed::Sub(Sub::Status(StatusArgs {
                format: Some(Format::Prometheus),
                ..
            })))
        ));
        assert!(matches!(
            p(&["mirrorfs", "scrub", "start", "/m", "--repair"]),
            Ok(Parsed::Sub(Sub::Scrub(ScrubCmd::Start { repair: Some(r), wait: false, .. })))
                if r == "majority"
        ));
        assert!(matches!(
            p(&["mirrorfs", "leg", "add", "/m", "leg1", "--full"]),
            Ok(Parsed::Sub(Sub::Leg(LegCmd::Add { full: true, .. })))
        ));
        assert!(matches!(
            p(&["mirrorfs", "set", "/m", "minfreespace", "-1"]),
            Ok(Parsed::Sub(Sub::Set { value, .. })) if value == "-1"
        ));
        for bad in [
            &["mirrorfs", "get", "/m"][..],
            &["mirrorfs", "list", "/m", "extra"],
            &["mirrorfs", "scrub"],
            &["mirrorfs", "scrub", "begin", "/m"],
            &["mirrorfs", "leg", "add", "/m"],
            &["mirrorfs", "status", "--json", "--format=text"],
            &["mirrorfs", "completions", "tcsh"],
        ] {
            assert_eq!(p(bad).unwrap_err(), 2, "{bad:?}");
        }
    }

    #[test]
    fn errors_are_one_line() {
        let e = Cli::try_parse_from(["mirrorfs", "get", "/m"]).unwrap_err();
        let line = one_line(&e);
        assert!(!line.contains('\n') && line.contains("<KEY>"), "{line:?}");
    }
}
