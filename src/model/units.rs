//! Units shared by the config, job scripts and the commands: Slurm's time
//! limit syntax, memory sizes, and how durations and timestamps are shown.

use thiserror::Error;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum UnitError {
    #[error(
        "invalid time limit '{0}' (formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED)"
    )]
    TimeLimit(String),
    #[error("invalid memory size '{0}' (a number with an optional unit K, M, G, T; e.g. 4G, 512M, 80GiB)")]
    Memory(String),
    #[error("invalid time '{0}' (formats: now+N[seconds|minutes|hours|days|weeks], HH:MM[:SS], YYYY-MM-DD[THH:MM[:SS]], today, tomorrow, midnight, noon)")]
    BeginTime(String),
    #[error("invalid signal number {0}")]
    SignalNumber(i32),
    #[error("invalid signal '{0}' (e.g. TERM, USR1, 10)")]
    Signal(String),
}

/// A job's time limit in seconds; `None` is UNLIMITED.
pub type TimeLimit = Option<u64>;

/// Parses Slurm's time limit formats: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`,
/// `D-H:M:S`, and `UNLIMITED`/`INFINITE`. A bare number is minutes, as in Slurm.
/// Zero is refused: Slurm reads `-t 0` as "no limit", which surprises people who
/// typed it by mistake; `UNLIMITED` says it plainly.
pub fn parse_time_limit(text: &str) -> Result<TimeLimit, UnitError> {
    let err = || UnitError::TimeLimit(text.to_string());
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    let num = |s: &str| -> Result<u64, UnitError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 9 {
            return Err(err());
        }
        s.parse::<u64>().map_err(|_| err())
    };
    let seconds = if let Some((days, rest)) = t.split_once('-') {
        let days = num(days)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (h, m, s) = match parts.as_slice() {
            [h] => (num(h)?, 0, 0),
            [h, m] => (num(h)?, num(m)?, 0),
            [h, m, s] => (num(h)?, num(m)?, num(s)?),
            _ => return Err(err()),
        };
        days * 86_400 + h * 3_600 + m * 60 + s
    } else {
        let parts: Vec<&str> = t.split(':').collect();
        match parts.as_slice() {
            [m] => num(m)? * 60,
            [m, s] => num(m)? * 60 + num(s)?,
            [h, m, s] => num(h)? * 3_600 + num(m)? * 60 + num(s)?,
            _ => return Err(err()),
        }
    };
    if seconds == 0 {
        return Err(err());
    }
    Ok(Some(seconds))
}

/// Formats seconds the way squeue does: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`.
pub fn format_duration(seconds: u64) -> String {
    let mut text = String::new();
    write_duration(&mut text, seconds);
    text
}

/// As `format_duration`, appended to `out`.
pub fn write_duration(out: &mut String, seconds: u64) {
    use std::fmt::Write as _;
    let (d, rem) = (seconds / 86_400, seconds % 86_400);
    let (h, m, s) = (rem / 3_600, (rem % 3_600) / 60, rem % 60);
    // Writing to a String cannot fail.
    let _ = if d > 0 {
        write!(out, "{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        write!(out, "{h}:{m:02}:{s:02}")
    } else {
        write!(out, "{m}:{s:02}")
    };
}

/// Formats seconds as sacct's Elapsed: always `HH:MM:SS`, with `D-` in front
/// from one day on.
pub fn format_elapsed(seconds: u64) -> String {
    let (d, rem) = (seconds / 86_400, seconds % 86_400);
    let (h, m, s) = (rem / 3_600, (rem % 3_600) / 60, rem % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// CPU time as sacct's TotalCPU: `MM:SS.mmm` under an hour, then
/// `HH:MM:SS`, with `D-` from a day on.
pub fn format_cpu_time(usec: u64) -> String {
    let seconds = usec / 1_000_000;
    if seconds < 3_600 {
        format!(
            "{:02}:{:02}.{:03}",
            seconds / 60,
            seconds % 60,
            (usec / 1_000) % 1_000
        )
    } else {
        format_elapsed(seconds)
    }
}

/// Bytes as sacct's MaxRSS: kibibytes with a `K`.
pub fn format_rss(bytes: u64) -> String {
    format!("{}K", bytes.div_ceil(1024))
}

pub fn format_time_limit(limit: TimeLimit) -> String {
    match limit {
        None => "UNLIMITED".to_string(),
        Some(s) => format_duration(s),
    }
}

/// Parses a memory size into MiB. A bare number is MiB (Slurm's `--mem`
/// default unit); suffixes K, M, G, T, with optional `B`, `iB`; all binary.
pub fn parse_memory_mb(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError::Memory(text.to_string());
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() || digits.len() > 15 {
        return Err(err());
    }
    let value: u64 = digits.parse().map_err(|_| err())?;
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit
        .strip_suffix("IB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(&unit);
    let kib = match unit {
        "K" => value,
        "" | "M" => value.checked_mul(1 << 10).ok_or_else(err)?,
        "G" => value.checked_mul(1 << 20).ok_or_else(err)?,
        "T" => value.checked_mul(1 << 30).ok_or_else(err)?,
        _ => return Err(err()),
    };
    Ok(kib.div_ceil(1 << 10))
}

/// Shows MiB in the largest unit that keeps it whole-ish: `80G`, `512M`.
pub fn format_memory_mb(mb: u64) -> String {
    if mb >= 1 << 20 && mb.is_multiple_of(1 << 20) {
        format!("{}T", mb >> 20)
    } else if mb >= 1 << 10 && mb.is_multiple_of(1 << 10) {
        format!("{}G", mb >> 10)
    } else {
        format!("{mb}M")
    }
}

/// Resolves a `--begin` value to Unix seconds, relative to `now` in the local
/// time zone. The client resolves it at submit time, so `now+1hour` means an
/// hour after the submission, whenever the daemon reads it.
pub fn parse_begin_time(text: &str, now: jiff::Zoned) -> Result<i64, UnitError> {
    parse_point_in_time(text, now, ClockTime::Next)
}

/// What a bare clock time (`17:30`) means: the next such time (`--begin`), or
/// that time today (`-S`/`-E` filters look back, not ahead).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClockTime {
    Next,
    Today,
}

fn parse_point_in_time(
    text: &str,
    now: jiff::Zoned,
    clock_time: ClockTime,
) -> Result<i64, UnitError> {
    use jiff::civil::{Date, DateTime, Time};
    let err = || UnitError::BeginTime(text.to_string());
    let t = text.trim().to_ascii_lowercase();
    if t == "now" {
        return Ok(now.timestamp().as_second());
    }
    if let Some(rest) = t.strip_prefix("now+") {
        let split = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, unit) = rest.split_at(split);
        let n: i64 = digits.parse().map_err(|_| err())?;
        let scale = match unit {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hour" | "hours" => 3_600,
            "d" | "day" | "days" => 86_400,
            "w" | "week" | "weeks" => 604_800,
            _ => return Err(err()),
        };
        return n
            .checked_mul(scale)
            .and_then(|d| now.timestamp().as_second().checked_add(d))
            .ok_or_else(err);
    }
    let tz = now.time_zone().clone();
    let today = now.date();
    let at = |date: Date, time: Time| -> Result<i64, UnitError> {
        DateTime::from_parts(date, time)
            .to_zoned(tz.clone())
            .map(|z| z.timestamp().as_second())
            .map_err(|_| err())
    };
    let tomorrow = today.tomorrow().map_err(|_| err())?;
    match t.as_str() {
        "today" => return at(today, Time::midnight()),
        "midnight" | "tomorrow" => return at(tomorrow, Time::midnight()),
        "noon" => {
            let noon = Time::new(12, 0, 0, 0).map_err(|_| err())?;
            let day = if now.time() < noon { today } else { tomorrow };
            return at(day, noon);
        }
        _ => {}
    }
    let parse_clock = |s: &str| -> Result<Time, UnitError> {
        let parts: Vec<&str> = s.split(':').collect();
        let field = |p: &str, max: i8| -> Result<i8, UnitError> {
            let v: i8 = p.parse().map_err(|_| err())?;
            if p.len() > 2 || !(0..=max).contains(&v) {
                return Err(err());
            }
            Ok(v)
        };
        match parts.as_slice() {
            [h, m] => Time::new(field(h, 23)?, field(m, 59)?, 0, 0).map_err(|_| err()),
            [h, m, s] => {
                Time::new(field(h, 23)?, field(m, 59)?, field(s, 59)?, 0).map_err(|_| err())
            }
            _ => Err(err()),
        }
    };
    if let Some((date, clock)) = t.split_once('t') {
        let date: Date = date.parse().map_err(|_| err())?;
        return at(date, parse_clock(clock)?);
    }
    if t.contains('-') {
        let date: Date = t.parse().map_err(|_| err())?;
        return at(date, Time::midnight());
    }
    let clock = parse_clock(&t)?;
    let day = if clock_time == ClockTime::Today || now.time() < clock {
        today
    } else {
        tomorrow
    };
    at(day, clock)
}

/// Formats Unix seconds in local time as Slurm does: `2026-11-29T16:45:00`.
pub fn format_timestamp(seconds: i64) -> String {
    match jiff::Timestamp::from_second(seconds) {
        Ok(ts) => ts
            .to_zoned(jiff::tz::TimeZone::system())
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string(),
        Err(_) => "Unknown".to_string(),
    }
}

/// Parses a `-S/-E` time filter: a date, a date and time, `now`, or
/// `now-N[units]`, in the local time zone.
pub fn parse_time_filter(text: &str, now: jiff::Zoned) -> Result<i64, UnitError> {
    let t = text.trim().to_ascii_lowercase();
    if let Some(rest) = t.strip_prefix("now-") {
        let ahead = parse_begin_time(&format!("now+{rest}"), now.clone())?;
        let now_s = now.timestamp().as_second();
        return Ok(now_s - (ahead - now_s));
    }
    if t.len() == 7 && t.as_bytes()[4] == b'-' {
        // YYYY-MM: the first day of that month.
        return parse_point_in_time(&format!("{t}-01"), now, ClockTime::Today);
    }
    parse_point_in_time(&t, now, ClockTime::Today)
}

/// A signal by name or number: `TERM`, `SIGTERM`, `term` or `15`.
pub fn parse_signal(text: &str) -> Result<i32, UnitError> {
    use std::str::FromStr;
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        return nix::sys::signal::Signal::try_from(n)
            .map(|s| s as i32)
            .map_err(|_| UnitError::SignalNumber(n));
    }
    let upper = t.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    nix::sys::signal::Signal::from_str(&name)
        .map(|s| s as i32)
        .map_err(|_| UnitError::Signal(t.to_string()))
}

/// A signal's short name: `USR1` for 10.
pub fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().trim_start_matches("SIG").to_string())
        .unwrap_or_else(|_| signal.to_string())
}

/// Seconds since the epoch: the clock of the records and the reports.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_time_limit_formats() {
        assert_eq!(parse_time_limit("30"), Ok(Some(1_800)));
        assert_eq!(parse_time_limit("30:15"), Ok(Some(1_815)));
        assert_eq!(parse_time_limit("2:00:01"), Ok(Some(7_201)));
        assert_eq!(parse_time_limit("1-2"), Ok(Some(93_600)));
        assert_eq!(parse_time_limit("1-2:30"), Ok(Some(95_400)));
        assert_eq!(parse_time_limit("1-0:0:5"), Ok(Some(86_405)));
        assert_eq!(parse_time_limit("UNLIMITED"), Ok(None));
        assert_eq!(parse_time_limit("infinite"), Ok(None));
    }

    #[test]
    fn bad_time_limits_are_refused() {
        for bad in [
            "",
            "abc",
            "-5",
            "1:2:3:4",
            "1-",
            "1-2:3:4:5",
            "0",
            "5m",
            "99999999999",
        ] {
            assert!(parse_time_limit(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn durations_format_like_squeue_and_sacct() {
        assert_eq!(format_duration(42), "0:42");
        assert_eq!(format_duration(3_723), "1:02:03");
        assert_eq!(format_duration(90_061), "1-01:01:01");
        assert_eq!(format_elapsed(42), "00:00:42");
        assert_eq!(format_elapsed(90_061), "1-01:01:01");
        assert_eq!(format_cpu_time(61_234_567), "01:01.234");
        assert_eq!(format_cpu_time(3_723_000_000), "01:02:03");
        assert_eq!(format_rss(1_048_577), "1025K");
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory_mb("512"), Ok(512));
        assert_eq!(parse_memory_mb("4G"), Ok(4_096));
        assert_eq!(parse_memory_mb("80GiB"), Ok(81_920));
        assert_eq!(parse_memory_mb("1T"), Ok(1_048_576));
        assert_eq!(parse_memory_mb("1536K"), Ok(2));
        assert_eq!(parse_memory_mb("16gb"), Ok(16_384));
        assert!(parse_memory_mb("G").is_err());
        assert!(parse_memory_mb("4X").is_err());
        assert!(parse_memory_mb("-1G").is_err());
        assert_eq!(format_memory_mb(81_920), "80G");
        assert_eq!(format_memory_mb(1_500), "1500M");
    }

    #[test]
    fn begin_times() {
        let now: jiff::Zoned = "2026-11-29T16:00:00[UTC]".parse().unwrap();
        let base = now.timestamp().as_second();
        assert_eq!(parse_begin_time("now+90", now.clone()), Ok(base + 90));
        assert_eq!(
            parse_begin_time("now+2hours", now.clone()),
            Ok(base + 7_200)
        );
        assert_eq!(parse_begin_time("17:30", now.clone()), Ok(base + 5_400));
        // A clock time already past today means tomorrow.
        assert_eq!(
            parse_begin_time("15:00", now.clone()),
            Ok(base + 23 * 3_600)
        );
        assert_eq!(
            parse_begin_time("2026-11-30", now.clone()),
            Ok(base + 8 * 3_600)
        );
        assert_eq!(
            parse_begin_time("2026-11-30T01:02:03", now.clone()),
            Ok(base + 9 * 3_600 + 123)
        );
        assert_eq!(
            parse_begin_time("tomorrow", now.clone()),
            Ok(base + 8 * 3_600)
        );
        assert!(parse_begin_time("next tuesday", now.clone()).is_err());
        assert!(parse_begin_time("25:00", now).is_err());
    }
}
