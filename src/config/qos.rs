//! The `[[qos]]` tables: priorities, usage factors, reserves, time
//! limits, preemption (whom, how, with what grace), who may use each;
//! without any, the four default levels.

use std::collections::HashSet;

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::{valid_name, RawQos};
use super::types::{default_qos, default_qos_levels, Account, Qos, QosAccess, Reserve};
use crate::model::units;

/// What a QoS names that is checked once all are known: its name, whom
/// it preempts, the accounts it admits.
type References = (
    String,
    Option<Spanned<Vec<String>>>,
    Option<Spanned<Vec<String>>>,
);

/// The QoS levels, each name once, or the defaults.
pub(super) fn levels(
    raws: Vec<RawQos>,
    accounts: &[Account],
    src: &Source,
) -> Result<Vec<Qos>, ConfigError> {
    let mut qos = Vec::new();
    let mut seen = HashSet::new();
    let mut refs = Vec::new();
    for raw in raws {
        let name = raw.name.get_ref().clone();
        if !valid_name(&name) {
            return Err(src.fail(
                Some(raw.name.span()),
                "name",
                format!("invalid QoS name '{name}' (letters, digits, '-', '_', '.')"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(src.fail(
                Some(raw.name.span()),
                "name",
                format!("QoS '{name}' is declared twice"),
            ));
        }
        let (level, named) = level(raw, src)?;
        qos.push(level);
        refs.push(named);
    }
    if qos.is_empty() {
        qos = default_qos_levels();
    }
    // Defaults name the default levels; keep those that exist here.
    let names: Vec<String> = qos.iter().map(|q| q.name.clone()).collect();
    for q in &mut qos {
        q.preempt.retain(|p| names.contains(p));
    }
    for (name, preempt, accounts_allowed) in refs {
        if let Some(p) = preempt {
            if let Some(bad) = p
                .get_ref()
                .iter()
                .find(|v| !qos.iter().any(|q| q.name == **v))
            {
                return Err(src.fail(
                    Some(p.span()),
                    "preempt",
                    format!(
                        "QoS '{name}' preempts unknown QoS '{bad}' (known: {})",
                        qos.iter()
                            .map(|q| q.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            if p.get_ref().contains(&name) {
                return Err(src.fail(
                    Some(p.span()),
                    "preempt",
                    format!("QoS '{name}' may not preempt its own jobs"),
                ));
            }
        }
        if let Some(a) = accounts_allowed {
            if let Some(bad) = a
                .get_ref()
                .iter()
                .find(|v| !accounts.iter().any(|x| x.name == **v))
            {
                return Err(src.fail(
                    Some(a.span()),
                    "accounts",
                    format!("QoS '{name}' names unknown account '{bad}'"),
                ));
            }
        }
    }
    Ok(qos)
}

/// One QoS, and what it names.
fn level(raw: RawQos, src: &Source) -> Result<(Qos, References), ConfigError> {
    let name = raw.name.get_ref().clone();
    let usage_factor = match &raw.usage_factor {
        Some(f) if !f.get_ref().is_finite() || *f.get_ref() < 0.0 => {
            return Err(src.fail(
                Some(f.span()),
                "usage_factor",
                format!("usage_factor must be 0 or more, not {}", f.get_ref()),
            ))
        }
        Some(f) => *f.get_ref(),
        None => 1.0,
    };
    let reserve = reserve(&raw, src)?;
    let (default_time, max_time) = (raw.default_time.flatten(), raw.max_time.flatten());
    if let (Some(d), Some(m)) = (default_time, max_time) {
        if d > m {
            return Err(src.fail(
                Some(raw.name.span()),
                "default_time",
                format!(
                    "QoS '{name}': default_time ({}) is above its max_time ({})",
                    units::format_duration(d),
                    units::format_duration(m)
                ),
            ));
        }
    }
    let defaults = default_qos_levels()
        .into_iter()
        .find(|q| q.name == name)
        .unwrap_or_else(|| default_qos(&name, raw.priority));
    let allowed = if raw.users.is_some() || raw.accounts.is_some() || raw.coordinators.is_some() {
        Some(QosAccess {
            users: raw.users.clone().unwrap_or_default(),
            accounts: raw
                .accounts
                .as_ref()
                .map(|a| a.get_ref().clone())
                .unwrap_or_default(),
            coordinators: raw.coordinators.unwrap_or(false),
        })
    } else {
        defaults.allowed.clone()
    };
    let grace_time = match raw.grace_time {
        Some(None) => {
            return Err(src.fail(
                Some(raw.name.span()),
                "grace_time",
                format!("QoS '{name}': grace_time must be a duration, not UNLIMITED"),
            ))
        }
        Some(Some(g)) => g,
        None => defaults.grace_time,
    };
    let refs = (name.clone(), raw.preempt.clone(), raw.accounts.clone());
    let level = Qos {
        name,
        priority: raw.priority,
        usage_factor,
        reserve,
        lend_reserve: raw.lend_reserve.unwrap_or(false),
        default_time,
        max_time,
        max_gpus_per_user: raw.max_gpus_per_user,
        preempt: raw
            .preempt
            .map(|p| p.into_inner())
            .unwrap_or(defaults.preempt),
        preempt_mode: raw.preempt_mode.unwrap_or(defaults.preempt_mode),
        grace_time,
        preemptible: raw.preemptible.unwrap_or(defaults.preemptible),
        min_run_time: raw.min_run_time.flatten().unwrap_or(defaults.min_run_time),
        allowed,
    };
    Ok((level, refs))
}

/// GPUs kept free for the QoS: a number, or a share like "25%".
fn reserve(raw: &RawQos, src: &Source) -> Result<Option<Reserve>, ConfigError> {
    Ok(match &raw.reserve {
        None => None,
        Some(r) => {
            let bad = |why: String| src.fail(Some(r.span()), "reserve", why);
            match r.get_ref() {
                toml::Value::Integer(n) => Some(Reserve::Gpus(u32::try_from(*n).map_err(|_| {
                    bad(format!("reserve is a number of GPUs (0 or more) or a percentage like \"25%\", not {n}"))
                })?)),
                toml::Value::String(s) => {
                    let fraction = s
                        .trim()
                        .strip_suffix('%')
                        .and_then(|p| p.trim().parse::<f64>().ok())
                        .filter(|p| (0.0..=100.0).contains(p))
                        .ok_or_else(|| bad(format!("reserve is a number of GPUs or a percentage from 0% to 100%, not \"{s}\"")))?;
                    Some(Reserve::Fraction(fraction / 100.0))
                }
                other => return Err(bad(format!(
                    "reserve is a number of GPUs or a percentage like \"25%\", not {other}"
                ))),
            }
        }
    })
}
