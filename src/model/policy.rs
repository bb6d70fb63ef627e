//! The policy values the config names and the scheduler applies: budget
//! periods and what happens over budget, the fair-share algorithm, time
//! windows for limits.

use serde::{Deserialize, Serialize};

/// One hour of billing-seconds: the unit budgets are given in.
pub const TOKEN: f64 = 3_600.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Week,
    Month,
}

impl Period {
    /// When the period holding `t` began (UTC).
    pub fn start(self, t: i64) -> i64 {
        let day = t.div_euclid(86_400);
        match self {
            Period::Day => day * 86_400,
            // 1970-01-01 was a Thursday; weeks start on Monday.
            Period::Week => (day - (day + 3).rem_euclid(7)) * 86_400,
            Period::Month => {
                let date = jiff::Timestamp::from_second(t)
                    .map(|ts| ts.to_zoned(jiff::tz::TimeZone::UTC).date())
                    .unwrap_or_default();
                date.first_of_month()
                    .to_zoned(jiff::tz::TimeZone::UTC)
                    .map(|z| z.timestamp().as_second())
                    .unwrap_or(day * 86_400)
            }
        }
    }

    /// How the period holding `t` is named: `2026-11-29`, `week of 2026-11-23`, `2026-11`.
    pub fn name(self, t: i64) -> String {
        let date = |s: i64| {
            jiff::Timestamp::from_second(s)
                .map(|ts| ts.to_zoned(jiff::tz::TimeZone::UTC).date().to_string())
                .unwrap_or_default()
        };
        let start = self.start(t);
        match self {
            Period::Day => date(start),
            Period::Week => format!("the week of {}", date(start)),
            Period::Month => date(start)[..7].to_string(),
        }
    }
}

/// What to do with a job its account's budget cannot cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverBudget {
    Refuse,
    LowestQos,
}

/// An (account, user) association.
pub type Association = (String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    FairTree,
    Classic,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Monday first.
    pub days: [bool; 7],
    /// Minutes after midnight; `end` before `start` runs past midnight
    /// (into the next day, whatever day that is).
    pub start: u32,
    pub end: u32,
    pub max_gpus: u32,
}

const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// What is wrong with a time window of a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("'{0}' is not a day (mon, tue, wed, thu, fri, sat, sun, or all)")]
    Day(String),
    #[error("hours '{0}' is not a range like 06:00-12:00")]
    NotARange(String),
    #[error("hours '{0}' is an empty range")]
    Empty(String),
    #[error("'{0}' is not a time of day (HH:MM)")]
    TimeOfDay(String),
}

impl Window {
    /// Parses `days` (`mon-fri`, `sat,sun`, `mon,wed-fri`, `all`) and
    /// `hours` (`06:00-12:00`, `22:00-06:00`).
    pub fn parse(days: &str, hours: &str, max_gpus: u32) -> Result<Window, WindowError> {
        Window {
            days: parse_days(days)?,
            start: 0,
            end: 0,
            max_gpus,
        }
        .with_hours(hours)
    }

    fn with_hours(mut self, hours: &str) -> Result<Window, WindowError> {
        let (a, b) = hours
            .split_once('-')
            .ok_or_else(|| WindowError::NotARange(hours.to_string()))?;
        self.start = parse_time_of_day(a)?;
        self.end = parse_time_of_day(b)?;
        if self.start == self.end {
            return Err(WindowError::Empty(hours.to_string()));
        }
        Ok(self)
    }

    /// Whether the window holds at `minute` of a day that is `weekday`
    /// (0 = Monday).
    pub fn holds(&self, weekday: usize, minute: u32) -> bool {
        if self.start < self.end {
            self.days[weekday] && (self.start..self.end).contains(&minute)
        } else {
            (self.days[weekday] && minute >= self.start)
                || (self.days[(weekday + 6) % 7] && minute < self.end)
        }
    }
}

pub(crate) fn parse_days(text: &str) -> Result<[bool; 7], WindowError> {
    let mut days = [false; 7];
    let index = |name: &str| {
        let name = name.trim().to_ascii_lowercase();
        DAY_NAMES
            .iter()
            .position(|d| name.starts_with(d) && name.len() >= 3)
            .ok_or(WindowError::Day(name))
    };
    for part in text.split(',') {
        let part = part.trim();
        if part.eq_ignore_ascii_case("all") || part == "*" {
            days = [true; 7];
            continue;
        }
        match part.split_once('-') {
            Some((a, b)) => {
                let (from, to) = (index(a)?, index(b)?);
                let mut d = from;
                loop {
                    days[d] = true;
                    if d == to {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => days[index(part)?] = true,
        }
    }
    Ok(days)
}

fn parse_time_of_day(text: &str) -> Result<u32, WindowError> {
    let text = text.trim();
    let bad = || WindowError::TimeOfDay(text.to_string());
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    // 24:00 is the end of the day.
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// The days of a window, for messages (`mon-fri`).
pub fn describe_days(days: &[bool; 7]) -> String {
    let names: Vec<&str> = (0..7).filter(|&d| days[d]).map(|d| DAY_NAMES[d]).collect();
    names.join(",")
}
