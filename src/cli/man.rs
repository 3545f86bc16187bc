//! The man pages, generated from the command-line definition (`args.rs`) with clap_mangen:
//! one page per subcommand under `docs/man/` (`mirrorfs-status.8`, `mirrorfs-scrub-start.8`...),
//! and the SYNOPSIS of the hand-written `docs/mirrorfs.8` (between its `BEGIN synopsis` and
//! `END synopsis` comments; every other section of that page is written by hand).
//! `man_pages_follow_the_definition` holds them to the definition; `make man` (or
//! `MIRRORFS_WRITE_DOCS=1`) writes them. clap_mangen is a dev-dependency: the daemon does not
//! carry it.

#[cfg(test)]
mod tests {
    use crate::cli::command;
    use std::path::Path;

    const VERSION: &str = env!("CARGO_PKG_VERSION");

    fn man(cmd: clap::Command) -> clap_mangen::Man {
        let title = cmd
            .get_display_name()
            .unwrap_or(cmd.get_name())
            .to_uppercase();
        clap_mangen::Man::new(cmd)
            .title(title)
            .section("8")
            .source(format!("mirrorfs {VERSION}"))
            .manual("System Administration")
    }

    /// The subcommands, depth first, each built (with its full name, `mirrorfs scrub start`).
    fn leaves_and_nodes(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            out.push(sub.clone());
            leaves_and_nodes(sub, out);
        }
    }

    /// Every generated page: file name and text.
    fn pages() -> Vec<(String, String)> {
        let mut root = command();
        root.build();
        let mut subs = Vec::new();
        leaves_and_nodes(&root, &mut subs);
        subs.into_iter()
            .map(|sub| {
                let m = man(sub);
                let mut text = Vec::new();
                m.render(&mut text).unwrap();
                let mut text = String::from_utf8(text).unwrap();
                text.push_str(".SH \"SEE ALSO\"\n.BR mirrorfs (8)\n");
                (m.get_filename(), text)
            })
            .collect()
    }

    /// Roff text: `-` escaped.
    fn roff(s: &str) -> String {
        s.replace('\\', "\\\\").replace('-', "\\-")
    }

    /// One synopsis line for `c`, from its definition: options with their values (a value
    /// enum's choices spelled out), then the positionals.
    fn synopsis_line(c: &clap::Command) -> String {
        let name = c.get_bin_name().unwrap_or(c.get_name());
        let mut line = format!("\\fB{}\\fR", roff(name));
        let value = |a: &clap::Arg| -> String {
            let choices: Vec<String> = a
                .get_possible_values()
                .iter()
                .filter(|p| !p.is_hide_set())
                .map(|p| format!("\\fB{}\\fR", p.get_name()))
                .collect();
            if !choices.is_empty() {
                return choices.join("|");
            }
            let v = a
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
            format!("\\fI{}\\fR", roff(&v))
        };
        for a in c.get_arguments().filter(|a| {
            !a.is_positional()
                && !a.is_hide_set()
                && !matches!(a.get_id().as_str(), "help" | "version")
        }) {
            let flag = match (a.get_long(), a.get_short()) {
                (Some(l), _) => format!("\\fB\\-\\-{}\\fR", roff(l)),
                (None, Some(s)) => format!("\\fB\\-{s}\\fR"),
                (None, None) => continue,
            };
            let takes = a.get_num_args().is_some_and(|n| n.takes_values());
            let optional_value = a.get_num_args().is_some_and(|n| n.min_values() == 0);
            let text = match (takes, optional_value) {
                (false, _) => flag,
                (true, true) => format!("{flag}[={}]", value(a)),
                (true, false) if a.get_long().is_some() => format!("{flag}={}", value(a)),
                (true, false) => format!("{flag} {}", value(a)),
            };
            line.push_str(&format!(" [{text}]"));
        }
        for a in c.get_arguments().filter(|a| a.is_positional()) {
            let v = value(a);
            let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
            let v = if many { format!("{v}...") } else { v };
            line.push(' ');
            line.push_str(&if a.is_required_set() {
                v
            } else {
                format!("[{v}]")
            });
        }
        line
    }

    /// The SYNOPSIS lines of `docs/mirrorfs.8`: the mount form, then every subcommand that
    /// has no subcommands of its own.
    fn synopsis() -> String {
        let mut root = command();
        root.build();
        let mut subs = Vec::new();
        leaves_and_nodes(&root, &mut subs);
        let mut lines = vec![synopsis_line(&root)];
        lines.extend(
            subs.iter()
                .filter(|s| !s.has_subcommands())
                .map(synopsis_line),
        );
        lines.join("\n.br\n") + "\n"
    }

    const BEGIN: &str = ".\\\" BEGIN synopsis: generated from src/cli/args.rs by `make man`\n";
    const END: &str = ".\\\" END synopsis";

    #[test]
    fn man_pages_follow_the_definition() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let write = std::env::var_os("MIRRORFS_WRITE_DOCS").is_some();
        let mut stale = Vec::new();
        let dir = root.join("docs/man");
        let want = pages();
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                if !want
                    .iter()
                    .any(|(n, _)| *n == e.file_name().to_string_lossy())
                {
                    std::fs::remove_file(e.path()).unwrap();
                }
            }
        }
        for (name, text) in &want {
            let path = dir.join(name);
            if std::fs::read_to_string(&path).ok().as_ref() != Some(text) {
                if write {
                    std::fs::write(&path, text).unwrap();
                } else {
                    stale.push(format!("docs/man/{name}"));
                }
            }
        }
        let extra: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !want.iter().any(|(w, _)| w == n))
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            extra.is_empty(),
            "docs/man holds pages of no subcommand: {extra:?}"
        );

        let main = root.join("docs/mirrorfs.8");
        let text = std::fs::read_to_string(&main).unwrap();
        let i = text
            .find(BEGIN)
            .expect("docs/mirrorfs.8: no BEGIN synopsis comment")
            + BEGIN.len();
        let j = text[i..]
            .find(END)
            .expect("docs/mirrorfs.8: no END synopsis comment")
            + i;
        let synopsis = synopsis();
        if text[i..j] != synopsis {
            if write {
                std::fs::write(&main, format!("{}{synopsis}{}", &text[..i], &text[j..])).unwrap();
            } else {
                stale.push("docs/mirrorfs.8 (synopsis)".into());
            }
        }
        // The main page's SEE ALSO names every subcommand's page.
        for (name, _) in &want {
            let page = name.trim_end_matches(".8").replace('-', "\\-");
            assert!(
                text.contains(&format!(".BR {page} (8)")),
                "docs/mirrorfs.8 does not name {name} in SEE ALSO"
            );
        }
        assert!(
            stale.is_empty(),
            "these man pages differ from src/cli/args.rs; run `make man`: {stale:?}"
        );
    }
}
