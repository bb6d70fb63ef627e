//! Retention (`purge_after_months`): a month whose jobs all ended more than
//! that many months ago is summarised — per account and user, the sums a
//! report needs, and its waste ranking — and its job rows (with their
//! scripts and events) are then deleted a batch per loop turn, so the
//! loop never stalls on a million deletions. Reports take a purged month
//! from its summary from the moment it is written, in the same
//! transaction that marks the month purged: a crash between batches
//! leaves rows that the next turn deletes, never a month counted twice
//! or not at all.

use std::collections::BTreeMap;

use crate::db;
use crate::report::usage::{self, Builder, Period, Summary};

use super::effects::{Purge, Row};
use super::error::DaemonError;
use super::state::Daemon;

/// Job rows deleted per loop turn.
const PURGE_BATCH: u32 = 5_000;

/// The jobs a stored waste ranking holds idle longer than this (ysreport's
/// default `--waste-after`).
const STORED_WASTE_AFTER_SECS: u64 = 3_600;

impl Daemon {
    /// One step of retention; `true` when more work waits.
    pub(super) fn retention_step(&mut self, now: i64) -> Result<bool, DaemonError> {
        if let Some(days) = self.core.config.keep_payloads_days {
            let before = now - i64::from(days) * 86_400;
            if db::payloads_ended_before(self.tx()?, before)? {
                self.write(Row::Purge(Purge::Payloads {
                    before,
                    limit: PURGE_BATCH,
                }))?;
                return Ok(true);
            }
        }
        let Some(months) = self.core.config.purge_after_months else {
            return Ok(false);
        };
        let tz = self.core.config.timezone().clone();
        let tx = self.tx()?;
        if let Some((start, end)) = db::purged_month_with_rows(tx)? {
            self.write(Row::Purge(Purge::Batch {
                start,
                end,
                limit: PURGE_BATCH,
            }))?;
            return Ok(true);
        }
        let Some(cutoff) = months_ago(now, months, &tz) else {
            return Ok(false);
        };
        let Some(oldest) = db::oldest_end_before(tx, cutoff)? else {
            return Ok(false);
        };
        let Some(period) = month_of(oldest, &tz) else {
            return Ok(false);
        };
        let mut summaries: BTreeMap<(String, String), Summary> = BTreeMap::new();
        let mut ranking = Builder::new(period.clone(), STORED_WASTE_AFTER_SECS);
        let mut jobs = 0u64;
        db::for_each_ended(tx, period.from, period.to, |job| {
            jobs += 1;
            summaries
                .entry((job.account.clone(), job.user.clone()))
                .or_default()
                .add(&job, &period);
            ranking.add(&job);
        })?;
        let month = db::PurgedMonth {
            month: period.label.clone(),
            start: period.from,
            end: period.to,
            jobs,
            waste: ranking.waste_so_far(),
        };
        let detail = format!(
            "{} jobs of {} summarised ({} account/user lines); their rows are being purged (purge_after_months = {months})",
            jobs,
            period.label,
            summaries.len()
        );
        self.write(Row::Purge(Purge::Month {
            month: Box::new(month),
            summaries,
            cutoff,
            time: now,
        }))?;
        tracing::info!(target: "ysched::db", "{detail}");
        self.audit(now, "ysctld", "purge", None, &detail)?;
        Ok(true)
    }
}

/// The start of the month `months` months before the one holding `now`.
fn months_ago(now: i64, months: u32, tz: &jiff::tz::TimeZone) -> Option<i64> {
    let today = jiff::Timestamp::from_second(now)
        .ok()?
        .to_zoned(tz.clone())
        .date();
    let first = today
        .first_of_month()
        .checked_sub(jiff::Span::new().months(i64::from(months)))
        .ok()?;
    Some(first.to_zoned(tz.clone()).ok()?.timestamp().as_second())
}

/// The calendar month holding `t`, as a report period.
fn month_of(t: i64, tz: &jiff::tz::TimeZone) -> Option<Period> {
    let date = jiff::Timestamp::from_second(t)
        .ok()?
        .to_zoned(tz.clone())
        .date();
    let first = date.first_of_month();
    let next = first.last_of_month().tomorrow().ok()?;
    let at = |d: jiff::civil::Date| Some(d.to_zoned(tz.clone()).ok()?.timestamp().as_second());
    let (from, to) = (at(first)?, at(next)?);
    Some(Period {
        from,
        to,
        label: format!("{:04}-{:02}", first.year(), first.month()),
        days: usage::day_starts(from, to, tz).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_count_back_from_the_one_in_progress() {
        let tz = jiff::tz::TimeZone::UTC;
        let nov_29 = 1_795_996_800; // 2026-11-29T00:00:00Z
        assert_eq!(months_ago(nov_29, 1, &tz), Some(1_790_812_800)); // 2026-10-01
        assert_eq!(months_ago(nov_29, 12, &tz), Some(1_761_955_200)); // 2025-11-01
        let march = month_of(1_740_787_200 + 86_400, &tz).unwrap();
        assert_eq!(march.label, "2025-03");
        assert_eq!(march.to - march.from, 31 * 86_400);
        assert_eq!(march.days.len(), 31);
    }
}
