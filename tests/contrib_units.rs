//! The systemd units under `contrib/`: every one passes `systemd-analyze verify`, and the
//! metrics service's command, run as systemd would run it, writes a textfile node_exporter reads.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib")
}

/// Every `.service`, `.timer` and `.mount` file under `contrib/`.
fn units() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![contrib()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p
                .extension()
                .is_some_and(|x| x == "service" || x == "timer" || x == "mount")
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The unit's text with the bare command `mirrorfs` (which systemd looks up in its fixed
/// search path: /usr/sbin from the package, /usr/local/sbin from `make install`) replaced by
/// the binary under test, so that verifying does not depend on an installed copy.
fn with_test_binary(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with("Exec") {
                l.replace("=mirrorfs ", &format!("={} ", mirrorfs_bin()))
                    .replace("=-mirrorfs ", &format!("=-{} ", mirrorfs_bin()))
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn every_unit_passes_systemd_analyze_verify() {
    require_tool!("systemd-analyze");
    let units = units();
    assert!(
        units.len() >= 2,
        "no units found under {}: {units:?}",
        contrib().display()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut copies = Vec::new();
    for u in &units {
        let name = u.file_name().unwrap().to_string_lossy().into_owned();
        let copy = dir.path().join(&name);
        fs::write(&copy, with_test_binary(&fs::read_to_string(u).unwrap())).unwrap();
        // A template is verified as an instance too (/srv/mirror), so that its specifiers
        // (%i, %f) are expanded.
        if let Some((stem, kind)) = name.split_once("@.") {
            copies.push(dir.path().join(format!("{stem}@srv-mirror.{kind}")));
        }
        copies.push(copy);
    }
    // --man=no: the man page is installed with the package, not on a build machine.
    let out = run_timeout(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .args(&copies),
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify {units:?}: {}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The value of `Key=` in a unit (the last one).
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .next_back()
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
        .to_string()
}

/// mirrorfs-metrics.service's ExecStart, with its TEXTFILE_DIR pointed at a temp dir: it
/// writes `mirrorfs.prom` there, naming the mount.
#[test]
fn metrics_service_command_writes_the_textfile() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let unit = with_test_binary(
        &fs::read_to_string(contrib().join("prometheus/mirrorfs-metrics.service")).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let env = unit_value(&unit, "Environment");
    assert!(env.starts_with("TEXTFILE_DIR="), "{env}");
    let exec = unit_value(&unit, "ExecStart").replace("${TEXTFILE_DIR}", &path_str(dir.path()));
    let argv: Vec<&str> = exec.split_whitespace().collect();
    let out = run_timeout(Command::new(argv[0]).args(&argv[1..]), TOOL_TIMEOUT);
    // Other mounts on the machine (a dead one, say) may be named on stderr; ours must not be.
    assert_eq!(out.status.code(), Some(0), "{exec}: {}", text(&out.stderr));
    let ours = m.mnt().display().to_string();
    assert!(
        !text(&out.stderr).contains(&ours),
        "{exec}: {}",
        text(&out.stderr)
    );
    assert_eq!(dir_names(dir.path()), vec!["mirrorfs.prom"]);
    let prom = fs::read_to_string(dir.path().join("mirrorfs.prom")).unwrap();
    let want = format!("mirrorfs_up{{mount=\"{}\"}} 1", m.mnt().display());
    assert!(prom.lines().any(|l| l == want), "{want} not in:\n{prom}");
    m.finish();
}
