//! `--helpformat` of sacct, squeue and sinfo: their field names, four to
//! a line, as Slurm's commands print them; and sinfo's `-O/--Format` read
//! as the `-o` format it stands for.

use std::fmt::Write as _;

use crate::report::squeue_long::LongItem;

/// sinfo 22.05's `-O` fields, each with the `%` letter that shows it (a
/// letter of what ysched does not keep shows `N/A`).
const SINFO_FIELDS: &[(&str, char)] = &[
    ("All", 'V'),
    ("AllocMem", 'V'),
    ("AllocNodes", 'S'),
    ("Available", 'a'),
    ("Cluster", 'V'),
    ("Comment", 'V'),
    ("Cores", 'Y'),
    ("CPUs", 'c'),
    ("CPUsLoad", 'O'),
    ("CPUsState", 'C'),
    ("DefaultTime", 'L'),
    ("Disk", 'd'),
    ("Extra", 'V'),
    ("Features", 'f'),
    ("features_act", 'b'),
    ("FreeMem", 'e'),
    ("Gres", 'G'),
    ("GresUsed", 'V'),
    ("Groups", 'g'),
    ("MaxCPUsPerNode", 'B'),
    ("Memory", 'm'),
    ("NodeAddr", 'o'),
    ("NodeAI", 'A'),
    ("NodeAIOT", 'F'),
    ("NodeHost", 'n'),
    ("NodeList", 'N'),
    ("Nodes", 'D'),
    ("OverSubscribe", 'h'),
    ("Partition", 'P'),
    ("PartitionName", 'R'),
    ("Port", 'V'),
    ("PreemptMode", 'M'),
    ("PriorityJobFactor", 'I'),
    ("PriorityTier", 'p'),
    ("Reason", 'E'),
    ("Root", 'r'),
    ("Size", 's'),
    ("SocketCoreThread", 'z'),
    ("Sockets", 'X'),
    ("StateCompact", 't'),
    ("StateComplete", 'T'),
    ("StateLong", 'T'),
    ("Threads", 'Z'),
    ("Time", 'l'),
    ("TimeStamp", 'H'),
    ("User", 'u'),
    ("UserLong", 'U'),
    ("Version", 'v'),
    ("Weight", 'w'),
];

/// Why sinfo's long format does not read, in sinfo's words.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("Invalid node format specification: {0}")]
pub struct UnknownNodeField(pub String);

/// The `-o` format sinfo's `-O` format `spec`
/// (`FIELD[:[.][SIZE][SUFFIX]],...`) stands for.
pub fn sinfo_long_format(spec: &str) -> Result<String, UnknownNodeField> {
    let mut format = String::new();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let read = LongItem::read(item).map_err(|_| UnknownNodeField(item.to_string()))?;
        let Some(&(_, letter)) = SINFO_FIELDS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(read.name))
        else {
            return Err(UnknownNodeField(read.name.to_string()));
        };
        let right = if read.right { "." } else { "" };
        let _ = write!(format, "%{right}{}{letter}{}", read.width, read.suffix);
    }
    if format.is_empty() {
        return Err(UnknownNodeField(spec.to_string()));
    }
    Ok(format)
}

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
        "sinfo" => SINFO_FIELDS.iter().map(|(n, _)| *n).collect(),
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
        assert!(helpformat("sinfo").unwrap().starts_with("All "));
        assert_eq!(helpformat("srun"), None);
    }

    #[test]
    fn sinfo_long_fields_read_as_their_letters() {
        assert_eq!(
            sinfo_long_format("NodeList:10,StateLong:.9 ,Gres").unwrap(),
            "%10N%.9T %20G"
        );
        assert_eq!(
            sinfo_long_format("Bogus").unwrap_err().to_string(),
            "Invalid node format specification: Bogus"
        );
    }
}
