//! Slurm's hostlists: `gpu[01-03],cpu1` for gpu01, gpu02, gpu03 and cpu1,
//! expanded to names and names compressed again as Slurm writes them
//! (`SLURM_JOB_NODELIST`, `sinfo`). Written here: of the crates there
//! are, `hostlist` only expands, and `hostlist_iter` (0.1) drops the zero
//! padding Slurm keeps (gpu01 came back as gpu1) and reorders names. The
//! expansion is bounded: a hostlist is user input, and `n[1-4000000000]`
//! is a few bytes long.

use thiserror::Error;

/// The most names one hostlist may stand for.
pub const MAX_HOSTS: usize = 4096;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum HostlistError {
    #[error("'{0}' has an unclosed '['")]
    Unclosed(String),
    #[error("'{0}': a range is N or N-M, with N <= M")]
    Range(String),
    #[error("'{0}': an empty name")]
    Empty(String),
    #[error("names more than {MAX_HOSTS} nodes")]
    TooMany,
}

/// The names `hostlist` stands for, in its order, each once.
pub fn expand(hostlist: &str) -> Result<Vec<String>, HostlistError> {
    let mut names: Vec<String> = Vec::new();
    for item in split_top_level(hostlist.trim())? {
        for name in expand_one(item)? {
            if !names.contains(&name) {
                names.push(name);
            }
            if names.len() > MAX_HOSTS {
                return Err(HostlistError::TooMany);
            }
        }
    }
    Ok(names)
}

/// Splits at the commas outside brackets.
fn split_top_level(text: &str) -> Result<Vec<&str>, HostlistError> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unclosed(text.to_string()));
    }
    items.push(&text[start..]);
    Ok(items)
}

/// `prefix[ranges]suffix` (one bracket; the suffix may hold another).
fn expand_one(item: &str) -> Result<Vec<String>, HostlistError> {
    let item = item.trim();
    if item.is_empty() {
        return Err(HostlistError::Empty(item.to_string()));
    }
    let Some(open) = item.find('[') else {
        return Ok(vec![item.to_string()]);
    };
    let close = item[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| HostlistError::Unclosed(item.to_string()))?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let tails = if rest.is_empty() {
        vec![String::new()]
    } else {
        expand_one(rest)?
    };
    let mut out = Vec::new();
    for range in ranges.split(',') {
        for number in numbers(range, item)? {
            for tail in &tails {
                out.push(format!("{prefix}{number}{tail}"));
                if out.len() > MAX_HOSTS {
                    return Err(HostlistError::TooMany);
                }
            }
        }
    }
    Ok(out)
}

/// `01-03` → 01, 02, 03 (the width of the first number kept); `7` → 7.
fn numbers(range: &str, item: &str) -> Result<Vec<String>, HostlistError> {
    let bad = || HostlistError::Range(item.to_string());
    let (low, high) = range.split_once('-').unwrap_or((range, range));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(low) || !digits(high) {
        return Err(bad());
    }
    let (from, to): (u64, u64) = (
        low.parse().map_err(|_| bad())?,
        high.parse().map_err(|_| bad())?,
    );
    if from > to {
        return Err(bad());
    }
    if to - from >= MAX_HOSTS as u64 {
        return Err(HostlistError::TooMany);
    }
    let width = low.len();
    Ok((from..=to).map(|n| format!("{n:0width$}")).collect())
}

/// `names` as Slurm writes a node list: names that differ only in a
/// number at the end run together: gpu01, gpu02, gpu03, gpu05 →
/// `gpu[01-03,05]`; node9, node10 → `node[9-10]`. Zero-padded numbers
/// keep their width (an unpadded number of that width joins them). The
/// order of first appearance of each prefix is kept.
pub fn compress<S: AsRef<str>>(names: &[S]) -> String {
    let split = |name: &str| -> Option<(String, usize, u64)> {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || digits == name.len() {
            return None;
        }
        let number = name[name.len() - digits..].parse::<u64>().ok()?;
        Some((name[..name.len() - digits].to_string(), digits, number))
    };
    let padded = |digits: usize, number: u64| digits > 1 && number.to_string().len() < digits;
    // The widths zero-padded numbers use, per prefix.
    let mut widths: Vec<(String, usize)> = Vec::new();
    for (prefix, digits, number) in names.iter().filter_map(|n| split(n.as_ref())) {
        if padded(digits, number) && !widths.contains(&(prefix.clone(), digits)) {
            widths.push((prefix, digits));
        }
    }
    // (prefix, width: 0 for unpadded) → numbers, in order of first appearance.
    let mut groups: Vec<((String, usize), Vec<u64>)> = Vec::new();
    let mut parts: Vec<String> = Vec::new();
    for name in names.iter().map(AsRef::as_ref) {
        let Some((prefix, digits, number)) = split(name) else {
            parts.push(name.to_string());
            continue;
        };
        let joins_padded = widths.contains(&(prefix.clone(), digits));
        let key = (prefix, if joins_padded { digits } else { 0 });
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ns)) => ns.push(number),
            None => groups.push((key, vec![number])),
        }
    }
    for ((prefix, width), mut ns) in groups {
        ns.sort_unstable();
        ns.dedup();
        parts.push(if ns.len() == 1 {
            format!("{prefix}{:0width$}", ns[0])
        } else {
            format!("{prefix}[{}]", runs(&ns, width))
        });
    }
    parts.join(",")
}

/// Sorted numbers as runs: 1, 2, 3, 5 → `1-3,5`, each `width` wide.
fn runs(ns: &[u64], width: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ns.len() {
        let mut j = i;
        while j + 1 < ns.len() && ns[j + 1] == ns[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            format!("{:0width$}", ns[i])
        } else {
            format!("{:0width$}-{:0width$}", ns[i], ns[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand_and_compress_as_slurm_writes_them() {
        assert_eq!(
            expand("gpu[01-03],cpu1").unwrap(),
            vec!["gpu01", "gpu02", "gpu03", "cpu1"]
        );
        assert_eq!(expand("gpu01").unwrap(), vec!["gpu01"]);
        assert_eq!(
            expand("n[1,3-4]a").unwrap(),
            vec!["n1a", "n3a", "n4a"],
            "a list in brackets, a suffix"
        );
        assert_eq!(
            expand("r[1-2]n[1-2]").unwrap(),
            vec!["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert_eq!(compress(&["gpu01", "gpu02", "gpu03"]), "gpu[01-03]");
        assert_eq!(compress(&["gpu03", "gpu01", "gpu05"]), "gpu[01,03,05]");
        assert_eq!(compress(&["a", "gpu7"]), "a,gpu7");
        assert_eq!(compress(&["x1", "x10"]), "x[1,10]");
        let names = ["node9", "node10", "node11"];
        assert_eq!(compress(&names), "node[9-11]");
        let names = ["gpu09", "gpu10", "gpu11"];
        assert_eq!(
            compress(&names),
            "gpu[09-11]",
            "10 and 11 join the padded width"
        );
        assert!(matches!(expand("gpu[3-1]"), Err(HostlistError::Range(_))));
        assert!(matches!(expand("gpu[1-"), Err(HostlistError::Unclosed(_))));
        assert!(matches!(expand("gpu[a]"), Err(HostlistError::Range(_))));
        assert!(matches!(expand("a,,b"), Err(HostlistError::Empty(_))));
        assert_eq!(expand("n[1-4000000000]"), Err(HostlistError::TooMany));
        assert!(expand("n[1-9999999999999999999999]").is_err());
    }
}
