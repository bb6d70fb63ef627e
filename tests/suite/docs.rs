//! The documentation stays in step with the code: every long flag in a
//! command's --help is in its man page's OPTIONS and the other way round,
//! the man pages are well-formed, and the example config parses.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const PAGES: [(&str, &str); 13] = [
    ("ysctld", "man/ysctld.8"),
    ("ysnoded", "man/ysnoded.8"),
    ("ysbatch", "man/ysbatch.1"),
    ("ysalloc", "man/ysalloc.1"),
    ("ysqueue", "man/ysqueue.1"),
    ("yscancel", "man/yscancel.1"),
    ("ysacct", "man/ysacct.1"),
    ("yscontrol", "man/yscontrol.1"),
    ("ysshare", "man/ysshare.1"),
    ("ysreport", "man/ysreport.1"),
    ("ysinfo", "man/ysinfo.1"),
    ("ystoken", "man/ystoken.1"),
    ("yswebd", "man/yswebd.8"),
];

/// Subcommands whose flags a page documents in a section of their own.
const SUBCOMMAND_SECTIONS: [(&str, &str, &str); 1] =
    [("ysctld simulate", "man/ysctld.8", "SIMULATION")];

/// The Slurm commands with options of their own, each documented in a
/// subsection of ysched-slurm(1)'s OPTIONS.
const SHIM_SUBSECTIONS: [&str; 3] = ["sinfo", "scontrol", "srun"];

/// The Slurm commands that take a ys* command's options, as
/// ysched-slurm(1) says.
const SHIMS_OVER_COMMANDS: [(&str, &str); 6] = [
    ("sbatch", "ysbatch"),
    ("salloc", "ysalloc"),
    ("squeue", "ysqueue"),
    ("scancel", "yscancel"),
    ("sacct", "ysacct"),
    ("sshare", "ysshare"),
];

fn long_flags(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("--") {
        let start = i + pos + 2;
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(text.len(), |e| start + e);
        if end > start && bytes[start].is_ascii_alphabetic() {
            flags.insert(text[start..end].to_string());
        }
        i = end.max(start);
    }
    flags
}

/// Long flags on --help's option lines (not in examples or prose).
fn help_flags(command: &str) -> BTreeSet<String> {
    let mut words = command.split(' ');
    let out = Command::new(common::bin_dir().join(words.next().unwrap()))
        .args(words)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let options: String = text
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .map(|l| format!("{l}\n"))
        .collect();
    long_flags(&options)
}

/// The text of a section of a man page.
fn man_section(page: &str, title: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
    text.split("\n.SH ")
        .find(|s| s.starts_with(title))
        .unwrap_or_else(|| panic!("{page} has no {title}"))
        .replace("\\-", "-")
}

/// Long flags in a section of a man page.
fn man_flags(page: &str, title: &str) -> BTreeSet<String> {
    long_flags(&man_section(page, title))
}

fn assert_same_flags(what: &str, help: &BTreeSet<String>, man: &BTreeSet<String>, page: &str) {
    let missing: Vec<_> = help.difference(man).collect();
    let extra: Vec<_> = man.difference(help).collect();
    assert!(
        missing.is_empty(),
        "{page} lacks flags that {what} --help shows: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "{page} documents flags {what} does not have: {extra:?}"
    );
}

#[test]
fn help_and_man_pages_name_the_same_long_flags() {
    let sections = PAGES
        .iter()
        .map(|&(command, page)| (command, page, "OPTIONS"))
        .chain(SUBCOMMAND_SECTIONS);
    for (command, page, section) in sections {
        assert_same_flags(
            command,
            &help_flags(command),
            &man_flags(page, section),
            page,
        );
    }
}

#[test]
fn the_slurm_commands_and_their_man_page_name_the_same_long_flags() {
    let page = "man/ysched-slurm.1";
    let options = man_section(page, "OPTIONS");
    for shim in SHIM_SUBSECTIONS {
        let subsection = options
            .split("\n.SS ")
            .find(|s| s.starts_with(&format!("{shim}\n")))
            .unwrap_or_else(|| panic!("{page} has no OPTIONS subsection {shim}"));
        // Slurm's layout of --help lists every option the page documents
        // (and Slurm's others, which the compat table decides).
        let man = long_flags(subsection.split("\n.PP").next().unwrap());
        let help = help_flags(&format!("ysched-slurm {shim}"));
        let missing: Vec<_> = man.difference(&help).collect();
        assert!(
            missing.is_empty(),
            "ysched-slurm {shim} --help lacks flags {page} documents: {missing:?}"
        );
    }
    // The others take their ys* command's options, as the page says, and
    // their --help, in Slurm's layout, shows each.
    for (shim, command) in SHIMS_OVER_COMMANDS {
        let slurm = help_flags(&format!("ysched-slurm {shim}"));
        let missing: Vec<_> = help_flags(command)
            .into_iter()
            .filter(|f| f != "version" && !slurm.contains(f))
            .collect();
        assert!(
            missing.is_empty(),
            "{shim} --help lacks options of {command}: {missing:?}"
        );
        assert!(
            man_section(page, "DESCRIPTION").contains(&format!(".BR {command} (1)")),
            "{page} does not point {shim} to {command}(1)"
        );
    }
}

#[test]
fn man_pages_have_the_usual_sections() {
    for (_, page) in PAGES.iter().chain(&[
        ("", "man/ysched.toml.5"),
        ("", "man/ysched-slurm.1"),
        ("", "man/ysstepd.8"),
    ]) {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
        // Slurm's sections; a file format has no options, environment or
        // exit status.
        let sections: &[&str] = if page.ends_with(".5") {
            &[
                "NAME",
                "SYNOPSIS",
                "DESCRIPTION",
                "FILES",
                "EXAMPLES",
                "SEE ALSO",
            ]
        } else {
            &[
                "NAME",
                "SYNOPSIS",
                "DESCRIPTION",
                "OPTIONS",
                "ENVIRONMENT",
                "EXIT STATUS",
                "FILES",
                "EXAMPLES",
                "SEE ALSO",
            ]
        };
        for section in sections {
            assert!(
                text.contains(&format!(".SH {section}"))
                    || text.contains(&format!(".SH \"{section}\"")),
                "{page} lacks {section}"
            );
        }
    }
}

#[test]
fn man_pages_pass_mandoc_lint_where_mandoc_is_installed() {
    let Ok(probe) = Command::new("mandoc").arg("-V").output() else {
        common::skip(
            module_path!(),
            "mandoc is not installed (.ci/run installs it)",
        );
        return;
    };
    let _ = probe;
    for (_, page) in PAGES.iter().chain(&[
        ("", "man/ysched.toml.5"),
        ("", "man/ysched-slurm.1"),
        ("", "man/ysstepd.8"),
    ]) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
        let out = Command::new("mandoc")
            .args(["-T", "lint", "-W", "warning"])
            .arg(&path)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && report.trim().is_empty(),
            "mandoc -T lint {page}:\n{report}"
        );
    }
}

#[test]
fn the_example_config_parses_and_declares_what_it_says() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/ysched.toml");
    let config = ysched::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.spool_dir, Path::new("/var/spool/ysched"));
    assert_eq!(config.gpus[0].gpu_type, "a100");
    assert_eq!(config.gpus[0].count, 4);
    assert_eq!(config.kill_wait, 30);
    assert_eq!(config.qos.len(), 4);
}

#[test]
fn the_simulator_config_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/sim/a100-16.toml");
    let config = ysched::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.gpus[0].count, 16);
}

#[test]
fn the_example_node_config_parses_as_a_node() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/ysnoded.toml");
    let config = ysched::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.node_name, "gpu02");
    assert!(config.pool.listen.is_none(), "a node does not listen");
}

#[test]
fn the_config_man_page_names_every_key_the_config_takes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/config/raw.rs")).unwrap();
    let page = std::fs::read_to_string(root.join("man/ysched.toml.5")).unwrap();
    let example = std::fs::read_to_string(root.join("etc/ysched.toml")).unwrap();
    // The fields of the Raw* structs serde reads the file into.
    let mut keys = Vec::new();
    let mut in_raw = false;
    let mut rename: Option<String> = None;
    for line in source.lines() {
        if line.starts_with("pub(super) struct Raw") {
            in_raw = true;
        } else if line == "}" {
            in_raw = false;
        } else if in_raw {
            let trimmed = line.trim();
            let field = line
                .strip_prefix("    pub(super) ")
                .map(|f| format!("    {f}"));
            let line = field.as_deref().unwrap_or(line);
            if let Some(r) = trimmed.split("rename = \"").nth(1) {
                rename = r.split('"').next().map(str::to_string);
            } else if let Some((name, _)) = line.trim().split_once(':') {
                if line.starts_with("    ") && !line.starts_with("     ") && !name.contains(' ') {
                    keys.push(rename.take().unwrap_or_else(|| name.to_string()));
                }
            }
        }
    }
    assert!(keys.len() > 40, "found only {keys:?}");
    // Named as a whole word (not as part of a longer key).
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let documented = |key: &str| {
        page.match_indices(key).any(|(i, _)| {
            !word(page[..i].chars().next_back()) && !word(page[i + key.len()..].chars().next())
        })
    };
    let missing: Vec<&String> = keys.iter().filter(|k| !documented(k)).collect();
    assert!(
        missing.is_empty(),
        "man/ysched.toml.5 does not document {missing:?}"
    );
    for top in [
        "timezone",
        "min_job_age_secs",
        "purge_after_months",
        "private_data",
        "notify_command",
        "metrics_listen",
    ] {
        assert!(
            example.contains(&format!("{top} =")),
            "etc/ysched.toml lacks {top}"
        );
    }
}

/// The scope table of Slurm's own test suite in
/// contrib/slurm-compat/README.md is conformance/scope.tsv, row for row,
/// and every test in expected-pass.txt is in a file in scope.
#[test]
fn the_conformance_scope_table_is_the_one_the_runner_reads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/slurm-compat");
    let tsv = std::fs::read_to_string(root.join("conformance/scope.tsv")).unwrap();
    let rows: Vec<(String, String, String)> = tsv
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut cells = l.split('\t');
            let mut next = || cells.next().unwrap_or("").to_string();
            (next(), next(), next())
        })
        .collect();
    assert!(rows.len() > 100, "{} rows", rows.len());
    for (path, scope, reason) in &rows {
        assert!(scope == "in" || scope == "out", "{path}: scope '{scope}'");
        assert_eq!(
            scope == "out",
            !reason.is_empty(),
            "{path}: out needs a reason, in none"
        );
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let table: Vec<(String, String, String)> = readme
        .lines()
        .filter(|l| l.starts_with("| `tests/"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (
                cells[0].trim_matches('`').to_string(),
                cells[1].to_string(),
                cells.get(2).copied().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        table, rows,
        "README's scope table and conformance/scope.tsv differ"
    );
    let expected = std::fs::read_to_string(root.join("conformance/expected-pass.txt")).unwrap();
    for test in expected
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let file = test.split("::").next().unwrap();
        assert!(
            rows.iter().any(|(p, s, _)| p == file && s == "in"),
            "{test} is expected to pass but its file is not in scope"
        );
    }
}
