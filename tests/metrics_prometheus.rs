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
    // Read from the legs, not from the kernel's cache, which kept what was written.
    drop_cached_pages(&m.path("f"));
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
        "leg=leg1 op=write errno=EIO",
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

/// The scrub's state in the statistics, once it is no longer running.
#[track_caller]
fn last_scrub_when_over(mnt: &Path) -> Value {
    let start = std::time::Instant::now();
    loop {
        let st = status_json(mnt);
        if st["scrub"]["state"] != "running" && !st["last_scrub"].is_null() {
            return st["last_scrub"].clone();
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "the scrub did not end: {st}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[track_caller]
fn status_json(mnt: &Path) -> Value {
    let out = run_mirrorfs(["status".as_ref(), "--json".as_ref(), mnt.as_os_str()]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json: {e}: {}", text(&out.stdout)))
}

#[track_caller]
fn status_text(mnt: &Path) -> String {
    text(&run_mirrorfs(["status".as_ref(), mnt.as_os_str()]).stdout)
}

/// The last scrub outlives the mount (operators alert on "no scrub for 35 days"): its end and
/// outcome are kept on the legs and shown after a remount, in the statistics (`last_scrub`),
/// in `mirrorfs status` and in the metrics; a cancelled scrub is shown as such and keeps the
/// end of the last one that went through everything.
#[test]
fn the_last_scrub_outlives_the_mount() {
    require_fuse!();
    if !parser_available() {
        return;
    }
    let mut m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_string_lossy().into_owned();
    let ml = [("mount", mnt.as_str())];
    for i in 0..8 {
        fs::write(m.path(&format!("f{i}")), pattern(256 * KIB, i)).unwrap();
    }
    assert!(status_json(m.mnt())["last_scrub"].is_null());
    assert!(
        status_text(m.mnt()).contains("  scrub: none on record"),
        "{}",
        status_text(m.mnt())
    );
    let f = exposition(m.mnt());
    assert!(!f.contains_key("mirrorfs_scrub_last_end_timestamp_seconds"));

    // A scrub to its end: on record in memory and on both legs.
    mirrorfs_ok(&[&"scrub", &"start", &m.mnt()]);
    wait_scrubbed(m.mnt());
    let first = last_scrub_when_over(m.mnt());
    assert_eq!(first["state"], "finished", "{first}");
    assert_eq!(first["differences"], 0, "{first}");
    assert_eq!(first["done_entries"], 9, "{first}");
    let end = first["ended_unix_s"].as_u64().unwrap();
    assert_eq!(first["last_finished_unix_s"], end, "{first}");
    for leg in m.legs() {
        let on_leg: Value = serde_json::from_str(
            &fs::read_to_string(leg.join(".mirrorfs/last-scrub.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(on_leg, first, "the record on {}", leg.display());
    }

    // Unmount, mount again: no scrub since this mount, the last one still on record.
    m.check_and_unmount();
    m.mount_again(&[]);
    let st = status_json(m.mnt());
    assert!(st["scrub"].is_null(), "{st}");
    assert_eq!(st["last_scrub"], first);
    let f = exposition(m.mnt());
    assert_eq!(
        value(&f, "mirrorfs_scrub_last_end_timestamp_seconds", &ml),
        end as f64
    );
    assert_eq!(
        value(&f, "mirrorfs_scrub_last_finished_timestamp_seconds", &ml),
        end as f64
    );
    assert_eq!(
        value(
            &f,
            "mirrorfs_scrub_last_state",
            &[ml[0], ("state", "finished")]
        ),
        1.0
    );
    assert_eq!(value(&f, "mirrorfs_scrub_last_differences", &ml), 0.0);
    assert!(
        !f.contains_key("mirrorfs_scan_state"),
        "no scan since the mount"
    );
    let s = status_text(m.mnt());
    let local = text(
        &Command::new("date")
            .args(["+%Y-%m-%d %H:%M", "-d", &format!("@{end}")])
            .output()
            .expect("date(1)")
            .stdout,
    );
    assert!(
        s.contains(&format!("  scrub: last ended {} (", local.trim()))
            && s.lines()
                .any(|l| l.starts_with("  scrub: ") && l.ends_with(": finished, clean")),
        "{s}"
    );

    // A scrub cancelled halfway (throttled to 64 KiB/s: 2 MiB take half a minute): on record
    // as cancelled, with the end of the complete one before it; and so after a remount.
    mirrorfs_ok(&[&"set", &m.mnt(), &"resync_speed_max", &"64K"]);
    mirrorfs_ok(&[&"scrub", &"start", &m.mnt()]);
    assert!(
        wait_for(std::time::Duration::from_secs(20), || stats(m.mnt())
            .scrub
            .is_some_and(|s| s.done_bytes > 0)),
        "the scrub read nothing in 20 s: {:?}",
        stats(m.mnt()).scrub
    );
    mirrorfs_ok(&[&"scrub", &"cancel", &m.mnt()]);
    let second = last_scrub_when_over(m.mnt());
    assert_eq!(second["state"], "cancelled", "{second}");
    assert_eq!(second["last_finished_unix_s"], end, "{second}");
    m.check_and_unmount();
    m.mount_again(&[]);
    assert_eq!(status_json(m.mnt())["last_scrub"], second);
    let f = exposition(m.mnt());
    assert_eq!(
        value(&f, "mirrorfs_scrub_last_end_timestamp_seconds", &ml),
        second["ended_unix_s"].as_u64().unwrap() as f64
    );
    assert_eq!(
        value(&f, "mirrorfs_scrub_last_finished_timestamp_seconds", &ml),
        end as f64
    );
    for (state, want) in [("finished", 0.0), ("cancelled", 1.0), ("failed", 0.0)] {
        assert_eq!(
            value(&f, "mirrorfs_scrub_last_state", &[ml[0], ("state", state)]),
            want,
            "{state}"
        );
    }
    let s = status_text(m.mnt());
    assert!(
        s.contains(": cancelled after ")
            && s.contains(&format!("last complete scrub: {}", local.trim())),
        "{s}"
    );
    m.finish();
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
