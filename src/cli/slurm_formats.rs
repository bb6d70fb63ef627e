//! `--helpformat` of sacct and squeue: their field names, four to a
//! line, as Slurm's commands print them.

use std::fmt::Write as _;

/// What `name --helpformat` prints; `None` for a command without one.
pub fn helpformat(name: &str) -> Option<String> {
    let mut names: Vec<&str> = match name {
        "sacct" => crate::report::Field::SACCT
            .iter()
            .map(|(n, _)| *n)
            .chain(crate::report::SACCT_NOT_KEPT.iter().copied())
            .collect(),
        "squeue" => crate::report::squeue_long::FIELDS
            .iter()
            .map(|(n, _)| *n)
            .collect(),
        _ => return None,
    };
    names.sort_by_key(|n| n.to_ascii_lowercase());
    names.dedup();
    let mut out = String::new();
    for row in names.chunks(4) {
        let line: String = row.iter().map(|n| format!("{n:<20}")).collect();
        let _ = writeln!(out, "{}", line.trim_end());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_are_listed_four_to_a_line() {
        let sacct = helpformat("sacct").unwrap();
        assert!(
            sacct.starts_with("Account             AdminComment"),
            "{sacct}"
        );
        assert!(sacct.split_whitespace().any(|f| f == "MaxRSS"));
        let squeue = helpformat("squeue").unwrap();
        assert!(
            squeue.starts_with("Account             AccrueTime"),
            "{squeue}"
        );
        assert_eq!(helpformat("sinfo"), None);
    }
}
