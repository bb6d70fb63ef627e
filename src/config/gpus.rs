//! The `[[gpus]]` tables: one per type, with its count or device files,
//! memory, NVLink group size, features and shards.

use std::collections::HashSet;
use std::path::PathBuf;

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::{valid_name, RawGpu};
use super::types::GpuDecl;

/// Why a `devices` pattern does not name device files.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid device pattern '{pattern}': {why} (e.g. /dev/nvidia[0-3])")]
pub struct PatternError {
    pub pattern: String,
    pub why: &'static str,
}

/// Every `[[gpus]]` table, each type once.
pub(super) fn decls(raws: &[Spanned<RawGpu>], src: &Source) -> Result<Vec<GpuDecl>, ConfigError> {
    let mut gpus = Vec::new();
    let mut seen_types = HashSet::new();
    for spanned in raws {
        let gpu = decl(spanned, src)?;
        let gpu_type = gpu.gpu_type.clone();
        let raw = spanned.get_ref();
        if !seen_types.insert(gpu_type.clone()) {
            return Err(src.fail(
                Some(raw.gpu_type.span()),
                "type",
                format!(
                    "GPU type '{gpu_type}' is declared twice; give one [[gpus]] table per type"
                ),
            ));
        }
        gpus.push(gpu);
    }
    Ok(gpus)
}

/// One `[[gpus]]` table.
fn decl(spanned: &Spanned<RawGpu>, src: &Source) -> Result<GpuDecl, ConfigError> {
    let span = spanned.span();
    let raw = spanned.get_ref();
    let gpu_type = raw.gpu_type.get_ref().clone();
    if !valid_name(&gpu_type) {
        return Err(src.fail(
            Some(raw.gpu_type.span()),
            "type",
            format!("invalid GPU type '{gpu_type}' (letters, digits, '-', '_', '.')"),
        ));
    }
    let devices = match &raw.devices {
        Some(pattern) => expand_device_pattern(pattern.get_ref())
            .map_err(|e| src.fail(Some(pattern.span()), "devices", e.to_string()))?,
        None => Vec::new(),
    };
    let count = match (raw.count, devices.len()) {
        (Some(0), _) => {
            return Err(src.fail(Some(span), "count", "count must be at least 1".into()))
        }
        (Some(c), 0) => c,
        (Some(c), n) if c as usize == n => c,
        (Some(c), n) => {
            return Err(src.fail(
                Some(span),
                "count",
                format!("count = {c} but devices names {n} device files"),
            ))
        }
        (None, 0) => {
            return Err(src.fail(Some(span), "count", "missing count (or devices)".into()))
        }
        (None, n) => n as u32,
    };
    if count > 1024 {
        return Err(src.fail(
            Some(span),
            "count",
            format!("count = {count} is not a plausible number of GPUs"),
        ));
    }
    let group_size = match &raw.group_size {
        Some(g) if *g.get_ref() == 0 || *g.get_ref() > count => {
            return Err(src.fail(
                Some(g.span()),
                "group_size",
                format!("group_size = {} must be 1 to count ({count})", g.get_ref()),
            ))
        }
        Some(g) => Some(*g.get_ref()),
        None => None,
    };
    let features = raw
        .features
        .as_ref()
        .map(|f| f.get_ref().clone())
        .unwrap_or_default();
    if let Some(bad) = features.iter().find(|f| !valid_name(f)) {
        return Err(src.fail(
            raw.features.as_ref().map(|f| f.span()),
            "features",
            format!("invalid feature name '{bad}' (letters, digits, '-', '_', '.')"),
        ));
    }
    let shards = match &raw.shards {
        Some(s) if !(2..=128).contains(s.get_ref()) => {
            return Err(src.fail(
                Some(s.span()),
                "shards",
                format!(
                    "shards = {} must be 2 to 128 (leave it out for GPUs that are not shared)",
                    s.get_ref()
                ),
            ))
        }
        Some(s) => *s.get_ref(),
        None => 0,
    };
    Ok(GpuDecl {
        gpu_type,
        count,
        memory_mb: raw.memory,
        devices,
        group_size,
        features,
        shards,
    })
}

/// Expands `/dev/nvidia[0-3]` or `/dev/nvidia[0,2-3]` into one path per device.
pub fn expand_device_pattern(pattern: &str) -> Result<Vec<PathBuf>, PatternError> {
    let bad = |why: &'static str| PatternError {
        pattern: pattern.to_string(),
        why,
    };
    let Some(open) = pattern.find('[') else {
        if pattern.contains(']') {
            return Err(bad("unmatched ']'"));
        }
        return Ok(vec![PathBuf::from(pattern)]);
    };
    let close = pattern[open..]
        .find(']')
        .map(|i| i + open)
        .ok_or_else(|| bad("missing ']'"))?;
    let (prefix, ranges, suffix) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    if suffix.contains('[') || suffix.contains(']') {
        return Err(bad("only one [...] range is supported"));
    }
    let mut out = Vec::new();
    for part in ranges.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let lo: u32 = lo
            .trim()
            .parse()
            .map_err(|_| bad("range bounds must be numbers"))?;
        let hi: u32 = hi
            .trim()
            .parse()
            .map_err(|_| bad("range bounds must be numbers"))?;
        if lo > hi || hi - lo > 1024 {
            return Err(bad("range is empty or too large"));
        }
        for n in lo..=hi {
            out.push(PathBuf::from(format!("{prefix}{n}{suffix}")));
        }
    }
    let unique: HashSet<&PathBuf> = out.iter().collect();
    if unique.len() != out.len() {
        return Err(bad("a device is listed twice"));
    }
    Ok(out)
}
