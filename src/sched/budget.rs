//! Budgets: tokens (billing-hours: GPU-hours × the GPU type's billing
//! weight × the QoS's usage factor) an account, with everything below it,
//! may spend per period. A submission is judged on its worst case — its
//! time limit on its GPUs — against what is left: the budget, less what
//! jobs that ended in the period were charged, less the worst case of the
//! account's jobs still pending or running. Over budget, a job is refused
//! with the numbers, or (as the account's config says) admitted at the
//! lowest QoS: it runs only when nobody else wants the GPUs.

use crate::config::Config;
use crate::model::gpu::Gpu;
use crate::model::job::GpuRequest;

use crate::model::policy::{OverBudget, Period, TOKEN};

/// The most a job can cost, in billing-seconds: its time limit on its GPUs
/// (for a job that names no type, the dearest type that could run it) ×
/// the QoS's usage factor. `None` without a time limit: no worst case.
pub fn worst_case(
    gpus: &GpuRequest,
    time_limit: Option<u64>,
    usage_factor: f64,
    inventory: &[Gpu],
    config: &Config,
) -> Option<i64> {
    let seconds = time_limit? as f64;
    let weight_of = |t: &str| config.billing.get(t).copied().unwrap_or(1.0);
    let weight = match &gpus.gpu_type {
        Some(t) => weight_of(t),
        None => inventory
            .iter()
            .map(|g| weight_of(&g.gpu_type))
            .fold(0.0, f64::max)
            .max(if inventory.is_empty() { 1.0 } else { 0.0 }),
    };
    // A shard job pays its slots' part of the card; on the least-shared
    // card it could get, for the worst case.
    let cards = if gpus.shard {
        let slots = inventory
            .iter()
            .filter(|g| gpus.accepts(g))
            .map(|g| g.shards)
            .min()
            .unwrap_or(1)
            .max(1);
        f64::from(gpus.count) / f64::from(slots)
    } else {
        f64::from(gpus.count)
    };
    Some((seconds * cards * weight * usage_factor).round() as i64)
}

/// An account's position in its budget, in billing-seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Standing {
    pub budget: i64,
    /// Charged for jobs that ended in this period.
    pub spent: i64,
    /// The worst case of its pending and running jobs.
    pub committed: i64,
}

impl Standing {
    pub fn left(&self) -> i64 {
        self.budget - self.spent - self.committed
    }

    pub fn used_fraction(&self) -> f64 {
        if self.budget <= 0 {
            1.0
        } else {
            (self.spent + self.committed) as f64 / self.budget as f64
        }
    }
}

/// The verdict on one submission.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Fits,
    /// Fits, but the account is past its warning threshold.
    Warn(String),
    Refuse(String),
    /// Over budget, admitted at the lowest QoS.
    Downgrade(String),
}

/// Billing-seconds as tokens (billing-hours) for messages: one decimal,
/// or as many as it takes for a cost below one token not to read as 0.
pub fn format_tokens(billing_seconds: i64) -> String {
    let t = billing_seconds as f64 / TOKEN;
    if billing_seconds == 0 || t.abs() >= 0.05 {
        return format!("{t:.1}");
    }
    let decimals = ((-t.abs().log10()).floor() as usize + 2).min(6);
    format!("{t:.decimals$}")
}

/// Judges a job that may cost `cost` (billing-seconds; `None`: unbounded)
/// against `account`'s standing for the period holding `now`.
pub fn judge(
    account: &str,
    cost: Option<i64>,
    standing: &Standing,
    warning: f64,
    over: OverBudget,
    period: Period,
    now: i64,
) -> Verdict {
    let tokens = format_tokens;
    let when = period.name(now);
    let over_message = |why: String| match over {
        OverBudget::Refuse => Verdict::Refuse(why),
        OverBudget::LowestQos => Verdict::Downgrade(format!(
            "{why}; admitted at the lowest QoS: it runs only when nobody else wants the GPUs"
        )),
    };
    let Some(cost) = cost else {
        return over_message(format!(
            "account '{account}' has a budget, and a job without a time limit has no bound on its cost; give it a time limit (-t)"
        ));
    };
    if cost > standing.left() {
        return over_message(format!(
            "account '{account}' is over budget: the job may cost {} tokens, but {} of its {} for {when} are left ({} spent, {} held by its pending and running jobs)",
            tokens(cost),
            tokens(standing.left().max(0)),
            tokens(standing.budget),
            tokens(standing.spent),
            tokens(standing.committed)
        ));
    }
    let after = Standing {
        committed: standing.committed + cost,
        ..*standing
    };
    if after.used_fraction() >= warning {
        return Verdict::Warn(format!(
            "account '{account}' has used or holds {:.0}% of its {}-token budget for {when}",
            after.used_fraction() * 100.0,
            tokens(standing.budget)
        ));
    }
    Verdict::Fits
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn periods_start_in_utc() {
        let t = 1_795_910_400 + 12 * 3_600; // 2026-11-29 12:00 UTC, a Sunday
        assert_eq!(Period::Day.start(t), 1_795_910_400);
        assert_eq!(
            Period::Week.start(t),
            1_795_910_400 - 6 * 86_400,
            "Monday the 23rd"
        );
        assert_eq!(
            Period::Month.start(t),
            1_795_910_400 - 28 * 86_400,
            "the 1st"
        );
        assert_eq!(Period::Month.name(t), "2026-11");
        assert_eq!(Period::Week.name(t), "the week of 2026-11-23");
    }

    #[test]
    fn small_costs_do_not_read_as_nothing() {
        assert_eq!(format_tokens(0), "0.0");
        assert_eq!(format_tokens(36_000), "10.0");
        assert_eq!(format_tokens(3_600), "1.0");
        assert_eq!(format_tokens(1_800), "0.5");
        assert_eq!(format_tokens(60), "0.017");
        assert_eq!(format_tokens(1), "0.00028");
        assert_eq!(format_tokens(-10), "-0.0028");
    }

    #[test]
    fn worst_cases() {
        let c = Config::parse(
            "[[gpus]]\ntype = \"a100\"\ncount = 2\nmemory = \"80G\"\n[[gpus]]\ntype = \"t4\"\ncount = 2\nmemory = \"16G\"\n[billing]\na100 = 5\nt4 = 1\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let inv = crate::gpu::Inventory::declared(&c);
        let req = |n, t: Option<&str>| GpuRequest {
            count: n,
            gpu_type: t.map(String::from),
            ..GpuRequest::default()
        };
        assert_eq!(
            worst_case(&req(2, Some("t4")), Some(3_600), 1.0, &inv.gpus, &c),
            Some(7_200)
        );
        assert_eq!(
            worst_case(&req(2, None), Some(3_600), 1.0, &inv.gpus, &c),
            Some(36_000),
            "the dearest type"
        );
        assert_eq!(
            worst_case(&req(1, Some("a100")), Some(3_600), 0.5, &inv.gpus, &c),
            Some(9_000)
        );
        assert_eq!(worst_case(&req(1, None), None, 1.0, &inv.gpus, &c), None);
    }

    #[test]
    fn verdicts_with_the_numbers() {
        let s = Standing {
            budget: 100 * 3_600,
            spent: 60 * 3_600,
            committed: 10 * 3_600,
        };
        let now = 1_795_910_400;
        assert_eq!(
            judge(
                "vision",
                Some(3_600),
                &s,
                0.9,
                OverBudget::Refuse,
                Period::Month,
                now
            ),
            Verdict::Fits
        );
        match judge(
            "vision",
            Some(25 * 3_600),
            &s,
            0.9,
            OverBudget::Refuse,
            Period::Month,
            now,
        ) {
            Verdict::Warn(m) => assert!(
                m.contains("95% of its 100.0-token budget for 2026-11"),
                "{m}"
            ),
            v => panic!("{v:?}"),
        }
        match judge("vision", Some(40 * 3_600), &s, 0.9, OverBudget::Refuse, Period::Month, now) {
            Verdict::Refuse(m) => assert_eq!(
                m,
                "account 'vision' is over budget: the job may cost 40.0 tokens, but 30.0 of its 100.0 for 2026-11 are left (60.0 spent, 10.0 held by its pending and running jobs)"
            ),
            v => panic!("{v:?}"),
        }
        assert!(matches!(
            judge(
                "vision",
                Some(40 * 3_600),
                &s,
                0.9,
                OverBudget::LowestQos,
                Period::Month,
                now
            ),
            Verdict::Downgrade(_)
        ));
        assert!(
            matches!(judge("vision", None, &s, 0.9, OverBudget::Refuse, Period::Month, now), Verdict::Refuse(m) if m.contains("no bound"))
        );
    }
}
