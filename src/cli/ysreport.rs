//! `ysreport`: usage reports — by default for the last full month — per
//! account and per user, as text, CSV or JSON.

use clap::Parser;

use super::{load_config, print, query, split_list, CliError, CliResult};
use crate::model::units;
use crate::proto::{Query, Reply};
use crate::report::usage::{self, Period};

#[derive(Parser, Debug)]
#[command(
    name = "ysreport",
    version,
    about = "Usage reports: GPU-hours, tokens, waits and outcomes per account and user",
    long_about = "Report the usage of the jobs that ended in a period (by default the last full \
                  month, in the config's time zone): per account and per user, the jobs, GPU-hours \
                  over all their runs, billed tokens (billing-hours), share of the period's GPU-hours, \
                  mean, median and 95th-percentile wait, preemptions suffered, and how many failed, \
                  timed out, ran out of memory or were cancelled. Root and admins see everyone; \
                  other users see their own jobs.",
    after_help = "Examples:\n  ysreport\n  ysreport --month 2026-11 --csv\n  ysreport -S 2026-11-01 -E 2026-11-08 -A vision"
)]
pub struct Args {
    /// Slurm's sreport shortcuts: `cluster utilization` (GPU-hours used of those the server had) or `user top` (users by GPU-hours)
    #[arg(value_name = "REPORT", num_args = 0..=2)]
    pub report: Vec<String>,
    /// The calendar month to report, YYYY-MM (default: the last full month)
    #[arg(long, value_name = "YYYY-MM", conflicts_with_all = ["start", "end"])]
    pub month: Option<String>,
    /// Start of the period: a date, a date and time, now-N[units]
    #[arg(short = 'S', long = "starttime", value_name = "TIME")]
    pub start: Option<String>,
    /// End of the period (not included; default: now)
    #[arg(short = 'E', long = "endtime", value_name = "TIME", requires = "start")]
    pub end: Option<String>,
    /// Only these accounts
    #[arg(short = 'A', long = "account", value_name = "ACCOUNT[,ACCOUNT]")]
    pub accounts: Vec<String>,
    /// Only these users
    #[arg(short = 'u', long = "user", value_name = "USER[,USER]")]
    pub users: Vec<String>,
    /// Rank jobs whose GPUs sat below the utilisation threshold longer than this (default 1:00:00)
    #[arg(long = "waste-after", value_name = "TIME", default_value = "1:00:00")]
    pub waste_after: String,
    /// Comma-separated values, one line per account, user and the total
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// The report as JSON
    #[arg(long)]
    pub json: bool,
    /// Also write the report as one self-contained HTML page with charts to FILE
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
}

/// The sreport-style shortcut the words name, if any.
fn shortcut_of(report: &[String]) -> Result<Option<Shortcut>, CliError> {
    Ok(match report
        .iter()
        .map(|w| w.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => None,
        [a, b] if a == "cluster" && b == "utilization" => Some(Shortcut::ClusterUtilization),
        [a, b] if a == "user" && b == "top" => Some(Shortcut::UserTop),
        _ => {
            return Err(CliError::usage(format!(
                "unknown report '{}': ysreport knows 'cluster utilization' and 'user top' (or none, for the full report)",
                report.join(" ")
            )))
        }
    })
}

/// The accounts and users asked for exist.
fn check_names(
    config: &crate::config::Config,
    accounts: &[String],
    users: &[String],
) -> Result<(), CliError> {
    if let Some(unknown) = accounts.iter().find(|a| {
        !config.accounts.iter().any(|x| x.name == **a)
            && a.as_str() != crate::config::DEFAULT_ACCOUNT
    }) {
        let known: Vec<&str> = config.accounts.iter().map(|a| a.name.as_str()).collect();
        return Err(CliError::usage(format!(
            "unknown account '{unknown}' (known: {})",
            if known.is_empty() {
                crate::config::DEFAULT_ACCOUNT.to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    if let Some(unknown) = users
        .iter()
        .find(|u| !matches!(nix::unistd::User::from_name(u), Ok(Some(_))))
    {
        return Err(CliError::usage(format!(
            "no user '{unknown}' on this system"
        )));
    }
    Ok(())
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    let shortcut = shortcut_of(&args.report)?;
    let now = jiff::Timestamp::now().to_zoned(config.timezone().clone());
    let period = period_of(&args, now).map_err(|e| CliError::usage(e.to_string()))?;
    let accounts = split_list(&args.accounts);
    let users = split_list(&args.users);
    check_names(&config, &accounts, &users)?;
    let reply = query(
        "ysreport",
        &config,
        Query::Usage {
            period,
            accounts,
            users,
            waste_after_secs: units::parse_time_limit(&args.waste_after)
                .ok()
                .flatten()
                .ok_or_else(|| {
                    CliError::usage(format!(
                        "--waste-after: '{}' is not a duration such as 1:00:00",
                        args.waste_after
                    ))
                })?,
        },
    )?;
    let Reply::Usage { mut report } = reply else {
        return Err(CliError::failed(format!(
            "unexpected reply from ysctld: {reply:?}"
        )));
    };
    if report.complete && args.start.is_none() {
        report.budgets = monthly_budgets(&report, &config);
    }
    match shortcut {
        Some(Shortcut::ClusterUtilization) => {
            let gpus = crate::gpu::Inventory::declared(&config).gpus.len();
            return print(&cluster_utilization(&report, gpus));
        }
        Some(Shortcut::UserTop) => return print(&user_top(&report)),
        None => {}
    }
    if let Some(path) = &args.html {
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "ysched".into());
        let page = crate::report::html::render(&report, &host);
        std::fs::write(path, page).map_err(|e| {
            CliError::failed(format!(
                "cannot write the HTML report to {}: {e}",
                path.display()
            ))
        })?;
        eprintln!("ysreport: wrote the HTML report to {}", path.display());
    }
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::failed(format!("cannot write JSON: {e}")))?;
        return print(&format!("{text}\n"));
    }
    if args.csv {
        return print(&usage::render_csv(&report));
    }
    print(&usage::render_text(&report))
}

/// Each account with a monthly budget: what the month used of it.
fn monthly_budgets(
    report: &usage::UsageReport,
    config: &crate::config::Config,
) -> Vec<usage::BudgetLine> {
    config
        .accounts
        .iter()
        .filter_map(|a| {
            let budget = a.budget.as_ref()?;
            if budget.period != crate::model::policy::Period::Month {
                return None;
            }
            // The account and every account below it.
            let mut subtree = vec![a.name.as_str()];
            let mut i = 0;
            while i < subtree.len() {
                let parent = subtree[i];
                subtree.extend(
                    config
                        .accounts
                        .iter()
                        .filter(|c| c.parent.as_deref() == Some(parent))
                        .map(|c| c.name.as_str()),
                );
                i += 1;
            }
            Some(usage::budget_line(
                report,
                &a.name,
                budget.amount as f64 / crate::model::policy::TOKEN,
                &subtree,
            ))
        })
        .collect()
}

/// sreport's shortcuts.
enum Shortcut {
    ClusterUtilization,
    UserTop,
}

/// GPU-hours the jobs used, of those the server's GPUs offered.
fn cluster_utilization(report: &usage::UsageReport, gpus: usize) -> String {
    let hours = (report.period.to - report.period.from) as f64 / 3600.0;
    let offered = hours * gpus as f64;
    let used = report.total.gpu_hours;
    let pct = if offered > 0.0 {
        format!("{:.1}%", used / offered * 100.0)
    } else {
        "n/a".into()
    };
    format!(
        "Cluster utilization {}\n  GPUs {gpus}, GPU-hours offered {offered:.2}, used {used:.2} ({pct}), idle {:.2}\n",
        report.period.label,
        (offered - used).max(0.0)
    )
}

/// Users by GPU-hours, most first (ten at most).
fn user_top(report: &usage::UsageReport) -> String {
    let mut users: Vec<&usage::Line> = report.users.iter().collect();
    users.sort_by(|a, b| {
        b.gpu_hours
            .total_cmp(&a.gpu_hours)
            .then(a.user.cmp(&b.user))
    });
    let mut out = format!("Top users {}\n", report.period.label);
    for (rank, l) in users.iter().take(10).enumerate() {
        out.push_str(&format!(
            "  {:>2}. {:<16} {:<16} {:>10.2} GPU-hours  {:>5.1}%  {} jobs\n",
            rank + 1,
            l.user,
            l.account,
            l.gpu_hours,
            l.share * 100.0,
            l.jobs
        ));
    }
    if users.is_empty() {
        out.push_str("  No job ended in this period.\n");
    }
    out
}

/// The period the options name, in the time zone of `now`.
fn period_of(args: &Args, now: jiff::Zoned) -> Result<Period, PeriodError> {
    if let Some(s) = &args.start {
        let from = units::parse_time_filter(s, now.clone()).map_err(|e| PeriodError::Time {
            option: "--starttime",
            why: e.to_string(),
        })?;
        let to = match &args.end {
            Some(e) => units::parse_time_filter(e, now.clone()).map_err(|e| PeriodError::Time {
                option: "--endtime",
                why: e.to_string(),
            })?,
            // Up to now, this second included.
            None => now.timestamp().as_second() + 1,
        };
        if to <= from {
            return Err(PeriodError::EndBeforeStart { from, to });
        }
        return Ok(Period {
            from,
            to,
            label: format!(
                "{} to {}",
                units::format_timestamp(from),
                units::format_timestamp(to)
            ),
            days: usage::day_starts(from, to, now.time_zone())?,
        });
    }
    let (year, month) = match &args.month {
        Some(m) => parse_month(m)?,
        None => {
            // The last full month.
            let first = now.date().first_of_month();
            let previous = first.yesterday()?;
            (previous.year(), previous.month())
        }
    };
    let tz = now.time_zone().clone();
    let start = jiff::civil::date(year, month, 1);
    let next = start.last_of_month().tomorrow()?;
    let at = |d: jiff::civil::Date| -> Result<i64, PeriodError> {
        Ok(d.to_zoned(tz.clone())?.timestamp().as_second())
    };
    let (from, to) = (at(start)?, at(next)?);
    Ok(Period {
        from,
        to,
        label: format!("{year:04}-{month:02}"),
        days: usage::day_starts(from, to, &tz)?,
    })
}

/// A period the options do not name well.
#[derive(Debug, thiserror::Error, PartialEq)]
enum PeriodError {
    #[error("{option}: {why}")]
    Time { option: &'static str, why: String },
    #[error(
        "the end ({}) is not after the start ({})",
        units::format_timestamp(*to),
        units::format_timestamp(*from)
    )]
    EndBeforeStart { from: i64, to: i64 },
    #[error("--month: '{0}' is not a month like 2026-11")]
    NotAMonth(String),
    #[error("--month: month {0} does not exist (1 to 12)")]
    NoSuchMonth(i8),
    /// A date outside what the calendar arithmetic covers.
    #[error("{0}")]
    Calendar(String),
}

impl From<jiff::Error> for PeriodError {
    fn from(e: jiff::Error) -> PeriodError {
        PeriodError::Calendar(e.to_string())
    }
}

/// `2026-11` → (2026, 11), with a clear error for `2026-13` or `Nov`.
fn parse_month(text: &str) -> Result<(i16, i8), PeriodError> {
    let bad = || PeriodError::NotAMonth(text.to_string());
    let (y, m) = text.trim().split_once('-').ok_or_else(bad)?;
    let year: i16 = y
        .parse()
        .ok()
        .filter(|y| (1970..=9999).contains(y))
        .ok_or_else(bad)?;
    let month: i8 = m.parse().map_err(|_| bad())?;
    if !(1..=12).contains(&month) {
        return Err(PeriodError::NoSuchMonth(month));
    }
    Ok((year, month))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_parse_and_refuse() {
        assert_eq!(parse_month("2026-11"), Ok((2026, 11)));
        assert!(parse_month("2026-13")
            .unwrap_err()
            .to_string()
            .contains("month 13 does not exist"));
        assert!(parse_month("Nov")
            .unwrap_err()
            .to_string()
            .contains("not a month like 2026-11"));
    }

    #[test]
    fn the_default_is_the_last_full_month() {
        let now = jiff::civil::date(2026, 1, 15)
            .at(12, 0, 0, 0)
            .to_zoned(jiff::tz::TimeZone::UTC)
            .unwrap();
        let args = Args::parse_from(["ysreport"]);
        let p = period_of(&args, now).unwrap();
        assert_eq!(p.label, "2025-12");
        assert_eq!(p.to - p.from, 31 * 86_400);
    }
}
