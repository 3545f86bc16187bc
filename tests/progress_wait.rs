//! `--wait` (issue 14, item 7): `mirrorfs leg add|replace --wait` and `scrub start --wait`
//! follow the job to its end: plain lines (no terminal codes) into a pipe, a progress bar with
//! the bytes done, the rate and the time left on a terminal (run under `script`, a real pty);
//! the last line is the job's outcome and the exit status says whether it succeeded.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::process::Command;
use std::time::Duration;

/// A 2-leg mirror with `MB` MiB of data, leg1 dropped: a full `leg add` copies it back.
fn mirror_with_leg1_out(mb: usize, speed: &str) -> Mounted {
    let m = TestMirror::new(2)
        .option(&format!("resync_speed_max={speed}"))
        .mount();
    for i in 0..mb {
        fs::write(m.path(&format!("f{i}")), pattern(MIB, i as u64)).unwrap();
    }
    mirrorfs_ok(&[&"leg", &"fail", &m.mnt(), &"leg1"]);
    m
}

#[test]
fn leg_add_wait_into_a_pipe() {
    require_fuse!();
    let m = mirror_with_leg1_out(4, "4M");
    let out = run_mirrorfs([
        "leg".as_ref(),
        "add".as_ref(),
        m.mnt().as_os_str(),
        "leg1".as_ref(),
        "--full".as_ref(),
        "--wait".as_ref(),
    ]);
    assert_exit(&out, 0, "leg add --full --wait");
    let said = text(&out.stdout);
    assert!(
        said.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("resync finished after")),
        "{said}"
    );
    assert!(
        !said.contains('\x1b') && text(&out.stderr).is_empty(),
        "{said:?}"
    );
    // Returned once the leg is back: no waiting needed now.
    let st = stats(m.mnt());
    assert_eq!(st.legs[1].state, mirrorfs::stats::LegState::InSync);
    assert_eq!(st.legs_online, 2);
    m.finish();
}

#[test]
fn leg_replace_wait() {
    require_fuse!();
    let m = mirror_with_leg1_out(2, "0");
    let new = m.root().join("newdisk");
    fs::create_dir(&new).unwrap();
    let out = run_mirrorfs([
        "leg".as_ref(),
        "replace".as_ref(),
        m.mnt().as_os_str(),
        "leg1".as_ref(),
        new.as_os_str(),
        "--wait".as_ref(),
    ]);
    assert_exit(&out, 0, "leg replace --wait");
    let st = stats(m.mnt());
    assert_eq!(st.legs[1].path, path_str(&new));
    assert_eq!(st.legs[1].state, mirrorfs::stats::LegState::InSync);
    for i in 0..2 {
        assert_eq!(
            fs::read(new.join(format!("f{i}"))).unwrap(),
            pattern(MIB, i as u64)
        );
    }
}

#[test]
fn a_terminal_gets_a_progress_bar() {
    require_fuse!();
    require_tool!("script");
    let m = mirror_with_leg1_out(6, "2M");
    let cmd = format!(
        "{} leg add {} leg1 --full --wait",
        shq(mirrorfs_bin()),
        shq(m.mnt())
    );
    let log = m.root().join("typescript");
    let out = run_timeout(
        Command::new("script")
            .args(["-q", "-e", "-c", &cmd])
            .arg(&log)
            .env("TERM", "xterm"),
        Duration::from_secs(120),
    );
    let shown = fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{shown}");
    // The bar: bytes done of the total (6 MiB, written as sizes are: `6M`), a rate, the time
    // left; then the outcome.
    let total_shown = shown.split('/').any(|p| {
        p.split(", ")
            .next()
            .and_then(|t| mirrorfs::value::size(t).ok())
            .is_some_and(|b| (6 * MIB as u64..=6 * MIB as u64 * 101 / 100).contains(&b))
    });
    assert!(
        shown.contains("resync leg1 [")
            && total_shown
            && shown.contains("/s, ")
            && shown.contains(" left"),
        "no progress bar in:\n{shown}"
    );
    assert!(shown.contains("resync finished after"), "{shown}");
    m.finish();
}
