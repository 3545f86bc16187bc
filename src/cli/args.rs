//! Command-line arguments, in the form mount.fuse3 uses (`SRC MOUNTPOINT -o OPTS`, `-o` may come
//! anywhere).

use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;

/// mirrorfs: a FUSE filesystem that keeps every file on several legs and reads each request
/// from the leg that answers fastest.
#[derive(Parser, Debug)]
#[command(name = "mirrorfs", version, about, long_about = None)]
pub struct Args {
    /// Stay in the foreground (default: fork once the mount answers).
    #[arg(short = 'f')]
    pub foreground: bool,
    /// Debug logging: to stderr with -f, to the system log otherwise.
    #[arg(short = 'd')]
    pub debug: bool,
    /// Mount options, comma-separated (see mirrorfs(8)).
    #[arg(short = 'o', value_name = "OPT[,OPT...]")]
    pub options: Vec<String>,
    /// The legs, separated by ':' (e.g. /mnt/ssd/data:/mnt/hdd/data).
    #[arg(value_name = "LEG[:LEG...]")]
    pub legs: String,
    /// Where to mount the mirror.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
}

/// Parses `argv`; on `--help`/`--version` prints and returns `Err(0)`, on a usage error prints
/// one line and returns `Err(1)`.
pub fn parse(argv: Vec<OsString>) -> Result<Args, i32> {
    match Args::try_parse_from(argv) {
        Ok(a) => Ok(a),
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                let _ = e.print();
                Err(0)
            }
            _ => {
                let text = e.to_string();
                let first = text
                    .lines()
                    .next()
                    .unwrap_or("bad arguments")
                    .trim_start_matches("error: ");
                eprintln!("mirrorfs: {first} (see 'mirrorfs --help')");
                Err(1)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Args, i32> {
        parse(v.iter().map(OsString::from).collect())
    }

    #[test]
    fn options_before_or_after_positionals() {
        let a = p(&[
            "mirrorfs",
            "/a:/b",
            "/m",
            "-o",
            "rw,nosuid",
            "-o",
            "threads=2",
        ])
        .unwrap();
        assert_eq!(a.options, vec!["rw,nosuid", "threads=2"]);
        let b = p(&["mirrorfs", "-f", "-o", "ro", "/a:/b", "/m"]).unwrap();
        assert!(b.foreground);
        assert_eq!(b.legs, "/a:/b");
    }

    #[test]
    fn missing_positionals_fail() {
        assert_eq!(p(&["mirrorfs", "/a"]).unwrap_err(), 1);
    }
}
