//! Slurm's long listing formats and their field lists: `squeue
//! -O/--Format` read as the `-o` format it stands for (each field as its
//! `%` letter, its width and justification kept, its suffix as the text
//! after it), and `--helpformat` of sacct and squeue.

use std::ffi::OsString;
use std::fmt::Write as _;

/// squeue 22.05's `-O` fields, each with the `%` letter that shows it;
/// a letter ysched keeps nothing for shows `N/A`, as squeue shows a
/// value it does not have.
const SQUEUE_FIELDS: &[(&str, char)] = &[
    ("Account", 'a'),
    ("AllocNodes", 'O'),
    ("ArrayJobID", 'F'),
    ("ArrayTaskID", 'K'),
    ("BatchHost", 'B'),
    ("Command", 'o'),
    ("Comment", 'k'),
    ("Contiguous", 'O'),
    ("Cores", 'I'),
    ("CoreSpec", 'X'),
    ("Dependency", 'E'),
    ("EndTime", 'e'),
    ("Feature", 'f'),
    ("GroupID", 'G'),
    ("GroupName", 'g'),
    ("JobArrayID", 'i'),
    ("JobID", 'A'),
    ("Licenses", 'W'),
    ("MinCpus", 'c'),
    ("MinMemory", 'm'),
    ("MinTmpDisk", 'd'),
    ("Name", 'j'),
    ("Nice", 'y'),
    ("NodeList", 'N'),
    ("NumCPUs", 'C'),
    ("NumNodes", 'D'),
    ("OverSubscribe", 'h'),
    ("Partition", 'P'),
    ("Priority", 'Q'),
    ("QOS", 'q'),
    ("Reason", 'r'),
    ("ReasonList", 'R'),
    ("ReqNodes", 'n'),
    ("Reservation", 'v'),
    ("SCT", 'z'),
    ("Sockets", 'H'),
    ("StartTime", 'S'),
    ("State", 'T'),
    ("StateCompact", 't'),
    ("SubmitTime", 'V'),
    ("Threads", 'J'),
    ("TimeLeft", 'L'),
    ("TimeLimit", 'l'),
    ("TimeUsed", 'M'),
    ("tres-per-node", 'b'),
    ("UserID", 'U'),
    ("UserName", 'u'),
    ("WCKey", 'w'),
    ("WorkDir", 'Z'),
];

/// Why a long format does not read, in squeue's words.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LongFormatError {
    #[error("Invalid job format specification: {0}")]
    Unknown(String),
    #[error("option '{0}' requires an argument")]
    NoValue(String),
}

/// squeue's default width of a `-O` field.
const DEFAULT_WIDTH: usize = 20;

/// The `-o` format `spec` (squeue's `-O`: `FIELD[:[.][SIZE][SUFFIX]],...`)
/// stands for; or why it does not read, in squeue's words.
pub fn squeue_long_format(spec: &str) -> Result<String, LongFormatError> {
    let mut format = String::new();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let (name, size) = item.split_once(':').unwrap_or((item, ""));
        let Some(&(_, letter)) = SQUEUE_FIELDS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
        else {
            return Err(LongFormatError::Unknown(name.to_string()));
        };
        let (right, size) = match size.strip_prefix('.') {
            Some(rest) => (true, rest),
            None => (false, size),
        };
        let digits: String = size.chars().take_while(char::is_ascii_digit).collect();
        let suffix = &size[digits.len()..];
        let width = digits.parse().unwrap_or(DEFAULT_WIDTH);
        let _ = write!(
            format,
            "%{}{width}{letter}{suffix}",
            if right { "." } else { "" }
        );
    }
    if format.is_empty() {
        return Err(LongFormatError::Unknown(spec.to_string()));
    }
    Ok(format)
}

/// `args` with squeue's `-O`/`--Format` given as the `-o` it stands for.
pub fn with_long_format(args: Vec<OsString>) -> Result<Vec<OsString>, LongFormatError> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        let spec = if text == "-O" || text == "--Format" {
            match args.next() {
                Some(value) => value.to_string_lossy().into_owned(),
                None => return Err(LongFormatError::NoValue(text.into_owned())),
            }
        } else if let Some(value) = text.strip_prefix("--Format=") {
            value.to_string()
        } else if let Some(value) = text.strip_prefix("-O").filter(|v| !v.is_empty()) {
            value.to_string()
        } else {
            out.push(arg);
            continue;
        };
        out.push("-o".into());
        out.push(squeue_long_format(&spec)?.into());
    }
    Ok(out)
}

/// What `name --helpformat` prints: its fields, four to a line, as
/// Slurm's commands print them; `None` for a command without one.
pub fn helpformat(name: &str) -> Option<String> {
    let mut names: Vec<&str> = match name {
        "sacct" => crate::report::Field::SACCT
            .iter()
            .map(|(n, _)| *n)
            .chain(crate::report::SACCT_NOT_KEPT.iter().copied())
            .collect(),
        "squeue" => SQUEUE_FIELDS.iter().map(|(n, _)| *n).collect(),
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
    fn squeue_long_fields_read_as_their_letters_with_widths_and_suffixes() {
        assert_eq!(
            squeue_long_format("JobID,name:30,StateCompact:.4|,reason").unwrap(),
            "%20A%30j%.4t|%20r"
        );
        assert_eq!(
            squeue_long_format("JobID,Bogus").unwrap_err().to_string(),
            "Invalid job format specification: Bogus"
        );
        let args: Vec<OsString> = ["-h", "--Format=jobarrayid:8", "-O", "State"]
            .iter()
            .map(OsString::from)
            .collect();
        let read: Vec<String> = with_long_format(args)
            .unwrap()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(read, ["-h", "-o", "%8i", "-o", "%20T"]);
        let sacct = helpformat("sacct").unwrap();
        assert!(
            sacct.starts_with("Account             AdminComment"),
            "{sacct}"
        );
        assert!(sacct.contains("MaxRSS"));
        assert_eq!(helpformat("sinfo"), None);
    }
}
