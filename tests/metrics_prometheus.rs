//! `mirrorfs status --format=prometheus`: the text exposition, parsed by a real exposition-format
//! parser (the Python client's, `prometheus_client.parser`, Debian's python3-prometheus-client),
//! shows each mount's and each leg's state, errors by kind, bytes per leg, free space, and the
//! scrub's progress and end; `--output=FILE` writes it atomically (what the timer in
//! contrib/prometheus/ runs).

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

/// Debian's interpreter, where python3-prometheus-client installs (not a pyenv shim's).
const PYTHON: &str = "/usr/bin/python3";

/// Parses an exposition with `prometheus_client.parser.text_string_to_metric_families`:
/// family name → (type, samples as (sample name, labels, value)). Panics if the parser refuses it.
type Families = BTreeMap<String, (String, Vec<(String, BTreeMap<String, String>, f64)>)>;

fn parser_available() -> bool {
    let ok = Path::new(PYTHON).exists()
        && Command::new(PYTHON)
            .args(["-c", "import prometheus_client.parser"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        cannot_run(
            "needs /usr/bin/python3 with prometheus_client (apt-get install python3-prometheus-client)",
        );
    }
    ok
}

#[track_caller]
fn parse(text: &str) -> Families {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    out[f.name] = [f.type, [[s.name, s.labels, s.value] for s in f.samples]]
print(json.dumps(out))
"#;
    let mut child = Command::new(PYTHON)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut fams = Families::new();
    for (name, f) in v.as_object().unwrap() {
        let samples = f[1]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let labels = s[1]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                (
                    s[0].as_str().unwrap().to_string(),
                    labels,
                    s[2].as_f64().unwrap(),
                )
            })
            .collect();
        fams.insert(name.clone(), (f[0].as_str().unwrap().to_string(), samples));
    }
    fams
}

/// The value of the sample of `family` whose labels include every one of `want`.
#[track_caller]
fn value(f: &Families, family: &str, want: &[(&str, &str)]) -> f64 {
    let (_, samples) = f
        .get(family)
        .unwrap_or_else(|| panic!("no family {family}; families: {:?}", f.keys()));
    let hits: Vec<f64> = samples
        .iter()
        .filter(|(_, l, _)| {
            want.iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
        .collect();
    assert_eq!(hits.len(), 1, "{family}{want:?}: {samples:?}");
    hits[0]
}

#[track_caller]
fn exposition(mnt: &Path) -> Families {
    let out = run_mirrorfs([
        "status".as_ref(),
        "--format=prometheus".as_ref(),
        mnt.as_os_str(),
    ]);
    assert_exit(&out, 0, "status --format=prometheus");
    parse(&text(&out.stdout))
}

#[test]
fn exposition_shows_states_errors_bytes_space_and_scrub() {
    require_fuse!();
    if !parser_available() {
        return;
    }
    let m = TestMirror::new(2).option("fault_injection").mount();
    let mnt = m.mnt().to_string_lossy().into_owned();
    let mnt = mnt.as_str();
    let data = pattern(300 * KIB, 7);
    fs::write(m.path("f"), &data).unwrap();
    assert_bytes_eq(&fs::read(m.path("f")).unwrap(), &data, "read back");

    let f = exposition(m.mnt());
    assert_eq!(f["mirrorfs_leg_written_bytes"].0, "counter");
    assert_eq!(f["mirrorfs_leg_errors"].0, "counter");
    assert_eq!(f["mirrorfs_state"].0, "gauge");
    assert_eq!(value(&f, "mirrorfs_up", &[("mount", mnt)]), 1.0);
    assert_eq!(
        value(&f, "mirrorfs_state", &[("mount", mnt), ("state", "ONLINE")]),
        1.0
    );
    assert_eq!(
        value(
            &f,
            "mirrorfs_state",
            &[("mount", mnt), ("state", "DEGRADED")]
        ),
        0.0
    );
    assert_eq!(value(&f, "mirrorfs_legs", &[("mount", mnt)]), 2.0);
    assert_eq!(value(&f, "mirrorfs_legs_online", &[("mount", mnt)]), 2.0);
    for leg in ["leg0", "leg1"] {
        let l = [("mount", mnt), ("leg", leg)];
        assert_eq!(
            value(&f, "mirrorfs_leg_state", &[l[0], l[1], ("state", "ONLINE")]),
            1.0
        );
        assert!(value(&f, "mirrorfs_leg_written_bytes", &l) >= data.len() as f64);
        for kind in ["read", "write", "checksum"] {
            assert_eq!(
                value(&f, "mirrorfs_leg_errors", &[l[0], l[1], ("kind", kind)]),
                0.0
            );
        }
        let size = value(&f, "mirrorfs_leg_size_bytes", &l);
        let free = value(&f, "mirrorfs_leg_free_bytes", &l);
        assert!(free > 0.0 && free <= size, "free {free} of {size}");
        assert!(f.contains_key("mirrorfs_leg_reserve_bytes"));
    }
    let read: f64 = ["leg0", "leg1"]
        .iter()
        .map(|leg| {
            value(
                &f,
                "mirrorfs_leg_read_bytes",
                &[("mount", mnt), ("leg", leg)],
            )
        })
        .sum();
    assert!(read >= data.len() as f64, "read bytes {read}");
    assert!(!f.contains_key("mirrorfs_scrub_last_end_timestamp_seconds"));
    // The daemon and the disks (sysinfo).
    assert!(value(&f, "mirrorfs_daemon_memory_bytes", &[("mount", mnt)]) > 0.0);
    assert_eq!(f["mirrorfs_daemon_cpu_seconds"].0, "counter");
    assert!(value(&f, "mirrorfs_daemon_threads", &[("mount", mnt)]) >= 8.0);
    let fs_type = mount_entries()
        .into_iter()
        .filter(|e| m.leg(0).starts_with(&e.mount_point))
        .max_by_key(|e| e.mount_point.as_os_str().len())
        .unwrap()
        .fstype;
    assert_eq!(
        value(
            &f,
            "mirrorfs_leg_disk_info",
            &[("mount", mnt), ("leg", "leg0"), ("filesystem", &fs_type)]
        ),
        1.0
    );

    // A scrub: its progress and its end.
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    mirrorfs_ok(&[&"scrub", &"start", &m.mnt()]);
    wait_scrubbed(m.mnt());
    let f = exposition(m.mnt());
    let s = [("mount", mnt), ("scan", "scrub")];
    assert_eq!(value(&f, "mirrorfs_scan_running", &s), 0.0);
    assert_eq!(
        value(
            &f,
            "mirrorfs_scan_state",
            &[s[0], s[1], ("state", "finished")]
        ),
        1.0
    );
    assert_eq!(value(&f, "mirrorfs_scan_progress_ratio", &s), 1.0);
    assert_eq!(value(&f, "mirrorfs_scan_differences", &s), 0.0);
    let end = value(
        &f,
        "mirrorfs_scrub_last_end_timestamp_seconds",
        &[("mount", mnt)],
    );
    assert!(
        end >= before - 1.0 && end <= before + 60.0,
        "scrub end {end}"
    );

    // A leg fails on a write: the mount is DEGRADED, the leg FAULTED, its write error counted.
    setfattr_ok(
        &m.mnt().join(".mirrorfs"),
        FAULT,
        "leg=1 op=write errno=EIO",
    );
    fs::write(m.path("g"), b"after the fault").unwrap();
    let f = exposition(m.mnt());
    assert_eq!(
        value(
            &f,
            "mirrorfs_state",
            &[("mount", mnt), ("state", "DEGRADED")]
        ),
        1.0
    );
    assert_eq!(value(&f, "mirrorfs_legs_online", &[("mount", mnt)]), 1.0);
    assert_eq!(
        value(
            &f,
            "mirrorfs_leg_state",
            &[("mount", mnt), ("leg", "leg1"), ("state", "FAULTED")]
        ),
        1.0
    );
    assert!(
        value(
            &f,
            "mirrorfs_leg_errors",
            &[("mount", mnt), ("leg", "leg1"), ("kind", "write")]
        ) >= 1.0
    );
    setfattr_ok(&m.mnt().join(".mirrorfs"), FAULT, "clear");
}

/// `--output=FILE` (the timer's form): the file holds the exposition, written by rename (no
/// temporary file left beside it); a mount that cannot be read shows as `mirrorfs_up 0` and
/// the command still succeeds, so the file goes on saying so.
#[test]
fn output_file_is_written_atomically() {
    require_fuse!();
    if !parser_available() {
        return;
    }
    let m = TestMirror::new(2).mount();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mirrorfs.prom");
    fs::write(&file, "old\n").unwrap();
    let not_a_mount = dir.path().join("nothing-here");
    fs::create_dir(&not_a_mount).unwrap();
    let out = run_mirrorfs([
        "status".as_ref(),
        "--format=prometheus".as_ref(),
        format!("--output={}", file.display()).as_ref(),
        m.mnt().as_os_str(),
        not_a_mount.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "",
        "with --output nothing goes to stdout"
    );
    assert_eq!(dir_names(dir.path()), vec!["mirrorfs.prom", "nothing-here"]);
    let f = parse(&fs::read_to_string(&file).unwrap());
    let mnt = m.mnt().to_string_lossy().into_owned();
    assert_eq!(value(&f, "mirrorfs_up", &[("mount", &mnt)]), 1.0);
    assert_eq!(
        value(
            &f,
            "mirrorfs_up",
            &[("mount", &not_a_mount.to_string_lossy())]
        ),
        0.0
    );
    let mode = fs::metadata(&file).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o644);
    // Without --format=prometheus, --output is refused.
    let out = run_mirrorfs([
        "status".as_ref(),
        format!("--output={}", file.display()).as_ref(),
        m.mnt().as_os_str(),
    ]);
    assert_exit(&out, 2, "--output without the prometheus format");
    m.finish();
}
