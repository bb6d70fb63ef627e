//! The `[[accounts]]` tables: names, shares and members, limits (also by
//! GPU type and time of day), budgets, approval; parents that exist and
//! form a tree.

use std::collections::HashSet;
use std::ops::Range;

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::{valid_name, RawAccount, RawGpu};
use super::types::{Account, AccountLimits, Approval, Budget};
use crate::model::policy::{OverBudget, Period, Window, TOKEN};

/// The accounts, checked one by one and then as a tree.
pub(super) fn accounts(
    raws: Vec<RawAccount>,
    gpus: &[Spanned<RawGpu>],
    pool_size: Option<u32>,
    src: &Source,
) -> Result<Vec<Account>, ConfigError> {
    let declared: Vec<&str> = gpus
        .iter()
        .map(|g| g.get_ref().gpu_type.get_ref().as_str())
        .collect();
    let mut accounts = Vec::new();
    let mut seen = HashSet::new();
    for raw in raws {
        let name = raw.name.get_ref().clone();
        if !valid_name(&name) {
            return Err(src.fail(
                Some(raw.name.span()),
                "name",
                format!("invalid account name '{name}' (letters, digits, '-', '_', '.')"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(src.fail(
                Some(raw.name.span()),
                "name",
                format!("account '{name}' is declared twice"),
            ));
        }
        let borrow_span = raw.borrow_limit.as_ref().map(|b| b.span());
        let (account, parent_span) = account(raw, &declared, src)?;
        if let (Some(size), Some(borrow)) = (pool_size, account.limits.borrow_limit) {
            if borrow > size {
                return Err(src.fail(
                    borrow_span,
                    "borrow_limit",
                    format!("account '{name}' may borrow {borrow} GPUs, more than the {size} the [[gpus]] tables declare"),
                ));
            }
        }
        accounts.push((account, parent_span));
    }
    check_tree(&accounts, src)?;
    Ok(accounts.into_iter().map(|(a, _)| a).collect())
}

/// One account, with where its `parent` is named (for the tree's errors).
fn account(
    mut raw: RawAccount,
    declared: &[&str],
    src: &Source,
) -> Result<(Account, Option<Range<usize>>), ConfigError> {
    let name = raw.name.get_ref().clone();
    let shares = match &raw.shares {
        Some(s) if !s.get_ref().is_finite() || *s.get_ref() < 0.0 => {
            return Err(src.fail(
                Some(s.span()),
                "shares",
                format!("shares must be a number of 0 or more, not {}", s.get_ref()),
            ))
        }
        Some(s) => *s.get_ref(),
        None => 1.0,
    };
    let mut limits = limits(&name, &mut raw, declared, src)?;
    (limits.borrow_limit, limits.lend_limit) = elastic(&name, &raw, limits.max_gpus, src)?;
    let budget = budget(&name, &raw, src)?;
    let approval = approval(&name, &mut raw, declared, src)?;
    let account = Account {
        name,
        parent: raw.parent.as_ref().map(|p| p.get_ref().clone()),
        shares,
        users: raw.users,
        limits,
        budget,
        coordinators: raw.coordinators,
        approval,
    };
    Ok((account, raw.parent.map(|p| p.span())))
}

/// Its limits: on GPUs (in all, by type, by time of day), jobs and time.
fn limits(
    name: &str,
    raw: &mut RawAccount,
    declared: &[&str],
    src: &Source,
) -> Result<AccountLimits, ConfigError> {
    let mut max_gpus_by_type = std::collections::BTreeMap::new();
    for (gpu_type, max) in std::mem::take(&mut raw.max_gpus_by_type) {
        if !declared.is_empty() && !declared.contains(&gpu_type.as_str()) {
            return Err(src.fail(
                Some(max.span()),
                "max_gpus_by_type",
                format!("account '{name}' limits GPU type '{gpu_type}', which no [[gpus]] table declares"),
            ));
        }
        max_gpus_by_type.insert(gpu_type, max.into_inner());
    }
    let mut max_gpus_windows = Vec::new();
    for w in std::mem::take(&mut raw.max_gpus_windows) {
        let span = w.span();
        let w = w.into_inner();
        let window = Window::parse(&w.days, &w.hours, w.max_gpus).map_err(|e| {
            src.fail(
                Some(span),
                "max_gpus_windows",
                format!("account '{name}': {e}"),
            )
        })?;
        max_gpus_windows.push(window);
    }
    Ok(AccountLimits {
        max_gpus: raw.max_gpus,
        max_gpus_windows,
        max_gpus_by_type,
        max_running_jobs: raw.max_running_jobs,
        max_submitted_jobs: raw.max_submitted_jobs,
        max_gpus_per_job: raw.max_gpus_per_job,
        max_time: raw.max_time.flatten(),
        max_gpus_per_user: raw.max_gpus_per_user,
        max_running_jobs_per_user: raw.max_running_jobs_per_user,
        ..AccountLimits::default()
    })
}

/// Its elastic quota: how far beyond its guarantee (`max_gpus`) it may
/// borrow, and how much of its idle guarantee it lends.
fn elastic(
    name: &str,
    raw: &RawAccount,
    guarantee: Option<u32>,
    src: &Source,
) -> Result<(Option<u32>, Option<u32>), ConfigError> {
    let count = |key: &str, value: &Spanned<i64>| -> Result<u32, ConfigError> {
        u32::try_from(*value.get_ref()).map_err(|_| {
            src.fail(
                Some(value.span()),
                key,
                format!(
                    "account '{name}': {key} is a number of GPUs, 0 or more, not {}",
                    value.get_ref()
                ),
            )
        })
    };
    let needs_guarantee = |key: &str, span| {
        src.fail(
            Some(span),
            key,
            format!("account '{name}' sets {key} but no max_gpus: {key} applies to the GPUs guaranteed by max_gpus"),
        )
    };
    let borrow_limit = match &raw.borrow_limit {
        Some(b) if guarantee.is_none() => return Err(needs_guarantee("borrow_limit", b.span())),
        Some(b) => Some(count("borrow_limit", b)?),
        None => None,
    };
    let lend_limit = match (&raw.lend, &raw.lend_limit) {
        (Some(lend), Some(limit)) if !*lend.get_ref() => {
            return Err(src.fail(
                Some(limit.span()),
                "lend_limit",
                format!("account '{name}' sets lend = false and a lend_limit: it lends nothing, or at most lend_limit GPUs, not both"),
            ))
        }
        (_, Some(limit)) => {
            let Some(guarantee) = guarantee else {
                return Err(needs_guarantee("lend_limit", limit.span()));
            };
            let n = count("lend_limit", limit)?;
            if n > guarantee {
                return Err(src.fail(
                    Some(limit.span()),
                    "lend_limit",
                    format!("account '{name}' lends up to {n} GPUs but is guaranteed only {guarantee} (max_gpus): lend_limit is at most max_gpus"),
                ));
            }
            Some(n)
        }
        (Some(lend), None) if !*lend.get_ref() => {
            if guarantee.is_none() {
                return Err(needs_guarantee("lend", lend.span()));
            }
            Some(0)
        }
        _ => None,
    };
    Ok((borrow_limit, lend_limit))
}

/// Its budget of tokens per period, if it has one.
fn budget(name: &str, raw: &RawAccount, src: &Source) -> Result<Option<Budget>, ConfigError> {
    let Some(b) = &raw.budget else {
        if raw.budget_period.is_some() || raw.over_budget.is_some() || raw.budget_warning.is_some()
        {
            return Err(src.fail(
                Some(raw.name.span()),
                "budget",
                format!("account '{name}' sets budget_period, over_budget or budget_warning but no budget"),
            ));
        }
        return Ok(None);
    };
    if !b.get_ref().is_finite() || *b.get_ref() < 0.0 {
        return Err(src.fail(
            Some(b.span()),
            "budget",
            format!(
                "a budget is a number of tokens, 0 or more, not {}",
                b.get_ref()
            ),
        ));
    }
    let warning = match &raw.budget_warning {
        Some(w) if !(0.0..=1.0).contains(w.get_ref()) => {
            return Err(src.fail(
                Some(w.span()),
                "budget_warning",
                format!(
                    "budget_warning is a fraction from 0 to 1, not {}",
                    w.get_ref()
                ),
            ))
        }
        Some(w) => *w.get_ref(),
        None => 0.8,
    };
    Ok(Some(Budget {
        amount: (b.get_ref() * TOKEN).round() as i64,
        period: raw.budget_period.unwrap_or(Period::Month),
        over: raw.over_budget.unwrap_or(OverBudget::Refuse),
        warning,
    }))
}

/// Which of its jobs wait for a coordinator's approval.
fn approval(
    name: &str,
    raw: &mut RawAccount,
    declared: &[&str],
    src: &Source,
) -> Result<Approval, ConfigError> {
    let above_gpu_hours = match &raw.approval_above_gpu_hours {
        Some(h) if !h.get_ref().is_finite() || *h.get_ref() < 0.0 => {
            return Err(src.fail(
                Some(h.span()),
                "approval_above_gpu_hours",
                format!(
                    "approval_above_gpu_hours is a number of GPU-hours, 0 or more, not {}",
                    h.get_ref()
                ),
            ))
        }
        h => h.as_ref().map(|h| *h.get_ref()),
    };
    let mut gpu_types = Vec::new();
    for t in std::mem::take(&mut raw.approval_gpu_types) {
        if !declared.contains(&t.get_ref().as_str()) {
            return Err(src.fail(
                Some(t.span()),
                "approval_gpu_types",
                format!(
                    "account '{name}' names GPU type '{}', which no [[gpus]] table declares",
                    t.get_ref()
                ),
            ));
        }
        gpu_types.push(t.into_inner());
    }
    Ok(Approval {
        above_gpu_hours,
        gpu_types,
    })
}

/// Parents must exist, and the accounts must form a tree.
fn check_tree(
    accounts: &[(Account, Option<Range<usize>>)],
    src: &Source,
) -> Result<(), ConfigError> {
    for (account, span) in accounts {
        let Some(parent) = &account.parent else {
            continue;
        };
        if !accounts.iter().any(|(a, _)| &a.name == parent) {
            return Err(src.fail(
                span.clone(),
                "parent",
                format!(
                    "account '{}' names an unknown parent account '{parent}'",
                    account.name
                ),
            ));
        }
        let mut seen_on_path = HashSet::new();
        let mut at = Some(account.name.clone());
        while let Some(name) = at {
            if !seen_on_path.insert(name.clone()) {
                return Err(src.fail(
                    span.clone(),
                    "parent",
                    format!("accounts form a cycle through '{}'", account.name),
                ));
            }
            at = accounts
                .iter()
                .find(|(a, _)| a.name == name)
                .and_then(|(a, _)| a.parent.clone());
        }
    }
    Ok(())
}
