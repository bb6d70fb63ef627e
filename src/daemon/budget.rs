//! Budgets, as the daemon keeps them: what each budgeted account spent in
//! its current period, updated at every charge; the verdict on a
//! submission comes from `sched::budget`.

use crate::model::gpu::Gpu;
use crate::sched::budget::{self, Standing, Verdict};
use crate::sched::limits::Policy;

use super::effects::Effects;
use super::error::DaemonError;
use super::reads::Reads;
use super::state::{Core, Spending};

impl Core {
    /// Sums, from the records, each budgeted account's spending in its
    /// current period (at start, and after a reload).
    pub(super) fn load_budgets(&mut self, reads: &dyn Reads, now: i64) -> Result<(), DaemonError> {
        let mut spending = Spending::new();
        let policy = Policy::new(&self.config);
        for account in self.config.accounts.iter().filter(|a| a.budget.is_some()) {
            let since = account.budget.as_ref().map_or(0, |b| b.period.start(now));
            let mut spent = 0;
            for (charged_to, billing) in reads.billing_since(since)? {
                if policy
                    .chain(&charged_to)
                    .iter()
                    .any(|a| a.name == account.name)
                {
                    spent += billing;
                }
            }
            spending.insert(account.name.clone(), (since, spent));
        }
        self.policy.budgets = spending;
        Ok(())
    }
}

impl Core {
    /// `account`'s standing now, if it has a budget: spent this period, and
    /// the worst case of the active jobs at or below it.
    pub(super) fn standing(
        &self,
        pool: &[Gpu],
        account: &str,
        policy: &Policy,
        now: i64,
    ) -> Option<Standing> {
        let a = self.config.accounts.iter().find(|a| a.name == account)?;
        let b = a.budget.as_ref()?;
        let spent = match self.policy.budgets.get(account) {
            Some(&(start, spent)) if start == b.period.start(now) => spent,
            _ => 0,
        };
        let committed = self
            .jobs
            .all()
            .filter(|j| policy.chain(&j.account).iter().any(|x| x.name == account))
            .map(|j| {
                self.worst_case(pool, &j.gpus, j.time_limit, &j.qos)
                    .unwrap_or(0)
            })
            .sum();
        Some(Standing {
            budget: b.amount,
            spent,
            committed,
        })
    }

    pub(super) fn worst_case(
        &self,
        pool: &[Gpu],
        gpus: &crate::model::job::GpuRequest,
        time_limit: Option<u64>,
        qos: &str,
    ) -> Option<i64> {
        let factor = self.config.qos_named(qos).map_or(1.0, |q| q.usage_factor);
        budget::worst_case(gpus, time_limit, factor, pool, &self.config)
    }

    /// The verdict on a job of `account` that may cost `cost`: the most
    /// severe of the budgets at and above the account.
    pub(super) fn judge_budget(
        &self,
        pool: &[Gpu],
        account: &str,
        cost: Option<i64>,
        now: i64,
    ) -> Verdict {
        let policy = Policy::new(&self.config);
        let mut verdict = Verdict::Fits;
        for a in policy.chain(account) {
            let (Some(b), Some(standing)) = (&a.budget, self.standing(pool, &a.name, &policy, now))
            else {
                continue;
            };
            let this = budget::judge(&a.name, cost, &standing, b.warning, b.over, b.period, now);
            verdict = match (verdict, this) {
                (Verdict::Refuse(m), _) | (_, Verdict::Refuse(m)) => Verdict::Refuse(m),
                (Verdict::Downgrade(m), _) | (_, Verdict::Downgrade(m)) => Verdict::Downgrade(m),
                (Verdict::Warn(m), _) | (_, Verdict::Warn(m)) => Verdict::Warn(m),
                (Verdict::Fits, Verdict::Fits) => Verdict::Fits,
            };
        }
        verdict
    }
    /// Adds a charge to every budgeted account at or above `account`,
    /// starting a new period where one began; logs and notifies when an
    /// account crosses its warning threshold or spends its budget.
    pub(super) fn spend(&mut self, account: &str, billing: i64, now: i64, fx: &mut Effects) {
        let policy = Policy::new(&self.config);
        let mut crossed = Vec::new();
        for a in policy.chain(account) {
            let Some(b) = &a.budget else { continue };
            let start = b.period.start(now);
            let entry = self
                .policy
                .budgets
                .entry(a.name.clone())
                .or_insert((start, 0));
            if entry.0 != start {
                *entry = (start, 0);
            }
            let before = entry.1 as f64 / b.amount.max(1) as f64;
            entry.1 += billing;
            let after = entry.1 as f64 / b.amount.max(1) as f64;
            if before < b.warning && after >= b.warning {
                tracing::warn!(
                    target: "ysched::daemon",
                    "account {} has spent {:.0}% of its {:.1}-token budget for {}",
                    a.name,
                    after * 100.0,
                    b.amount as f64 / crate::model::policy::TOKEN,
                    b.period.name(now)
                );
            }
            let event = if before < 1.0 && after >= 1.0 {
                Some("budget_exhausted")
            } else if before < b.warning && after >= b.warning {
                Some("budget_warning")
            } else {
                None
            };
            if let Some(event) = event {
                // Told: the account's coordinators, else the admins.
                let to = if a.coordinators.is_empty() {
                    &self.config.admins
                } else {
                    &a.coordinators
                };
                crossed.push(super::notifications::Notification {
                    event: event.to_string(),
                    time: now,
                    cluster: self.config.node_name.clone(),
                    mail_user: if to.is_empty() {
                        "root".into()
                    } else {
                        to.join(",")
                    },
                    subject: format!(
                        "ysched account {} has used {:.0}% of its {:.1}-token budget for {}",
                        a.name,
                        after * 100.0,
                        b.amount as f64 / crate::model::policy::TOKEN,
                        b.period.name(now)
                    ),
                    job: None,
                    budget: Some(super::notifications::BudgetFacts {
                        account: a.name.clone(),
                        period: b.period.name(now),
                        budget_tokens: b.amount as f64 / crate::model::policy::TOKEN,
                        used_tokens: entry.1 as f64 / crate::model::policy::TOKEN,
                        used_fraction: after,
                    }),
                });
            }
        }
        if self.config.notify_command.is_some() {
            for n in crossed {
                fx.out(super::effects::Out::Notify(Box::new(n)));
            }
        }
    }
}
