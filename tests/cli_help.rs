//! One command-line definition (clap) behind everything the user reads: `mirrorfs --help`
//! lists every subcommand, `mirrorfs SUB --help` explains each one, the bash completion loads
//! and completes subcommands and their words, and `man -l` renders every page (the generated
//! ones under docs/man/ and the main docs/mirrorfs.8) without a warning.

#[macro_use]
mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every subcommand path: `["status"]`, `["scrub", "start"]`...
fn subcommands() -> Vec<Vec<String>> {
    fn walk(c: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for s in c.get_subcommands() {
            let mut p = prefix.to_vec();
            p.push(s.get_name().to_string());
            out.push(p.clone());
            walk(s, &p, out);
        }
    }
    let mut out = Vec::new();
    walk(&mirrorfs::cli::command(), &[], &mut out);
    out
}

#[test]
fn help_lists_and_explains_every_subcommand() {
    let out = run_mirrorfs(["--help"]);
    assert_exit(&out, 0, "--help");
    let help = text(&out.stdout);
    let subs = subcommands();
    for want in [
        "status",
        "iostat",
        "get",
        "set",
        "list",
        "scrub",
        "leg",
        "completions",
    ] {
        assert!(subs.iter().any(|s| s == &[want]), "no subcommand {want}");
    }
    for s in subs.iter().filter(|s| s.len() == 1) {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{} ", s[0]))),
            "mirrorfs --help does not list {}:\n{help}",
            s[0]
        );
    }
    assert!(help.contains("MOUNTPOINT") && help.contains("-o"), "{help}");
    for s in &subs {
        let mut args = s.clone();
        args.push("--help".into());
        let out = run_mirrorfs(&args);
        assert_exit(&out, 0, &format!("mirrorfs {}", args.join(" ")));
        let h = text(&out.stdout);
        assert!(
            h.contains(&format!("Usage: mirrorfs {}", s.join(" "))),
            "mirrorfs {} --help:\n{h}",
            s.join(" ")
        );
        // More than a usage line: what it does.
        assert!(h.lines().count() > 4, "{h}");
    }
    // A usage error names the subcommand's help, in one line, exit 2.
    let out = run_mirrorfs(["scrub", "start"]);
    assert_exit(&out, 2, "scrub start without a mount");
    assert!(
        text(&out.stderr).contains("mirrorfs scrub --help")
            || text(&out.stderr).contains("<MOUNT>"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bash_completion_loads_and_completes() {
    require_tool!("bash");
    let bin = mirrorfs_bin();
    let out = run(
        "bash",
        &[
            &"-c",
            &format!("source <('{bin}' completions bash) && complete -p mirrorfs"),
        ],
        TOOL_TIMEOUT,
    );
    assert_exit(
        &out,
        0,
        "source <(mirrorfs completions bash); complete -p mirrorfs",
    );
    let spec = text(&out.stdout);
    assert!(
        spec.starts_with("complete ") && spec.trim_end().ends_with(" mirrorfs"),
        "{spec}"
    );
    // What pressing TAB would offer after "mirrorfs sc" and after "mirrorfs scrub st".
    let complete = |words: &str| -> String {
        let script = format!(
            "source <('{bin}' completions bash) || exit 1\n\
             fn=$(complete -p mirrorfs | sed -E 's/.*-F ([^ ]+).*/\\1/')\n\
             COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n\
             COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}\n\
             \"$fn\" mirrorfs \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        let out = run("bash", &[&"-c", &script], TOOL_TIMEOUT);
        assert_exit(&out, 0, &format!("completing {words:?}"));
        text(&out.stdout)
    };
    let got = complete("mirrorfs sc");
    assert_eq!(
        got.split_whitespace().collect::<Vec<_>>(),
        ["scrub"],
        "{got}"
    );
    let got = complete("mirrorfs scrub st");
    let mut words: Vec<&str> = got.split_whitespace().collect();
    words.sort();
    assert_eq!(words, ["start", "status"], "{got}");
    let got = complete("mirrorfs status --fo");
    assert!(got.split_whitespace().any(|w| w == "--format"), "{got}");
}

#[test]
fn other_shells_get_a_script() {
    for shell in ["zsh", "fish"] {
        let out = run_mirrorfs(["completions", shell]);
        assert_exit(&out, 0, &format!("completions {shell}"));
        let script = text(&out.stdout);
        assert!(
            script.contains("mirrorfs") && script.contains("scrub") && script.len() > 500,
            "{shell}: {script}"
        );
    }
    let out = run_mirrorfs(["completions", "tcsh"]);
    assert_exit(&out, 2, "completions tcsh");
}

fn man_pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("docs/mirrorfs.8")];
    let mut generated: Vec<PathBuf> = std::fs::read_dir(root.join("docs/man"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    generated.sort();
    pages.extend(generated);
    pages
}

#[test]
fn man_renders_every_page() {
    require_tool!("man");
    let pages = man_pages();
    // One page per subcommand, and the main one.
    assert_eq!(pages.len(), subcommands().len() + 1, "{pages:?}");
    for p in &pages {
        let out = run_timeout(
            Command::new("man")
                .args(["--warnings", "-l"])
                .arg(p)
                .env("MANPAGER", "cat")
                .env("MANWIDTH", "100")
                .env("LC_ALL", "C.UTF-8"),
            TOOL_TIMEOUT,
        );
        let shown = text(&out.stdout);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "man -l {}: {}\n{}",
            p.display(),
            out.status,
            text(&out.stderr)
        );
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(
            shown.contains("NAME") && shown.contains("SYNOPSIS") && shown.contains(&name),
            "man -l {}:\n{shown}",
            p.display()
        );
    }
}
