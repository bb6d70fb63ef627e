//! Time windows for limits: "on weekday mornings this account may hold 14
//! GPUs" (`days = "mon-fri", hours = "06:00-12:00"`), in the server's local
//! time. Only new starts are limited: running jobs are never stopped when
//! a window closes.

use jiff::civil::Time;
use jiff::tz::TimeZone;
use jiff::Timestamp;

#[cfg(test)]
use crate::model::policy::parse_days;
use crate::model::policy::Window;

/// A limit that holds on some days, between two times of day.
/// The weekday (0 = Monday) and minute of the day of `now` in `tz`.
pub fn local(now: i64, tz: &TimeZone) -> (usize, u32) {
    let zoned = Timestamp::from_second(now)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_zoned(tz.clone());
    let weekday = zoned.weekday().to_monday_zero_offset() as usize;
    (weekday, zoned.hour() as u32 * 60 + zoned.minute() as u32)
}

/// The limit in force at `now`: the first window that holds, else `base`.
pub fn max_gpus_at(windows: &[Window], base: Option<u32>, now: i64, tz: &TimeZone) -> Option<u32> {
    if windows.is_empty() {
        return base;
    }
    let (weekday, minute) = local(now, tz);
    windows
        .iter()
        .find(|w| w.holds(weekday, minute))
        .map(|w| w.max_gpus)
        .or(base)
}

/// The next time after `now` at which the limit in force changes (within
/// the next eight days), for the scheduler to look again then.
pub fn next_change(windows: &[Window], now: i64, tz: &TimeZone) -> Option<i64> {
    let today = Timestamp::from_second(now)
        .ok()?
        .to_zoned(tz.clone())
        .date();
    let mut best: Option<i64> = None;
    for offset in 0..9 {
        let Ok(date) = today.checked_add(jiff::Span::new().days(offset)) else {
            continue;
        };
        for w in windows {
            for minute in [w.start, w.end] {
                let time = if minute >= 24 * 60 {
                    // 24:00: midnight at the end of the day.
                    let Ok(next) = date.tomorrow() else { continue };
                    next.to_datetime(Time::midnight())
                } else {
                    date.to_datetime(
                        Time::new((minute / 60) as i8, (minute % 60) as i8, 0, 0)
                            .unwrap_or(Time::midnight()),
                    )
                };
                let Ok(at) = time.to_zoned(tz.clone()) else {
                    continue;
                };
                let at = at.timestamp().as_second();
                // Only where the limit in force changes (not on a day the
                // window skips).
                let changes =
                    max_gpus_at(windows, None, at - 60, tz) != max_gpus_at(windows, None, at, tz);
                if changes && at > now && best.is_none_or(|b| at < b) {
                    best = Some(at);
                }
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::policy::describe_days;

    fn utc() -> TimeZone {
        TimeZone::UTC
    }

    /// 2026-11-30 is a Monday.
    fn at(day: i64, hh: i64, mm: i64) -> i64 {
        let monday = jiff::civil::date(2026, 11, 30)
            .to_zoned(TimeZone::UTC)
            .unwrap()
            .timestamp()
            .as_second();
        monday + day * 86_400 + hh * 3600 + mm * 60
    }

    #[test]
    fn weekday_mornings() {
        let w = Window::parse("mon-fri", "06:00-12:00", 14).unwrap();
        let windows = [w];
        assert_eq!(
            max_gpus_at(&windows, Some(8), at(0, 6, 0), &utc()),
            Some(14)
        );
        assert_eq!(
            max_gpus_at(&windows, Some(8), at(4, 11, 59), &utc()),
            Some(14)
        );
        assert_eq!(
            max_gpus_at(&windows, Some(8), at(0, 12, 0), &utc()),
            Some(8)
        );
        assert_eq!(
            max_gpus_at(&windows, Some(8), at(5, 9, 0), &utc()),
            Some(8),
            "Saturday"
        );
        assert_eq!(max_gpus_at(&windows, None, at(0, 5, 59), &utc()), None);
        // Monday 05:00 → opens at 06:00; Monday 07:00 → closes at 12:00;
        // Friday 13:00 → opens again on Monday.
        assert_eq!(
            next_change(&windows, at(0, 5, 0), &utc()),
            Some(at(0, 6, 0))
        );
        assert_eq!(
            next_change(&windows, at(0, 7, 0), &utc()),
            Some(at(0, 12, 0))
        );
        assert_eq!(
            next_change(&windows, at(4, 13, 0), &utc()),
            Some(at(7, 6, 0))
        );
    }

    #[test]
    fn overnight_windows_and_day_lists() {
        let w = Window::parse("fri,sat", "22:00-06:00", 16).unwrap();
        assert!(w.holds(4, 23 * 60), "Friday night");
        assert!(w.holds(5, 3 * 60), "Saturday early: Friday's window");
        assert!(w.holds(6, 60), "Sunday early: Saturday's window");
        assert!(!w.holds(0, 60), "Monday early: Sunday has none");
        assert!(!w.holds(4, 12 * 60));
        let w = Window::parse("sat-mon", "00:00-24:00", 1).unwrap();
        assert_eq!(describe_days(&w.days), "mon,sat,sun");
        assert!(w.holds(0, 23 * 60 + 59));
        assert_eq!(parse_days("all").unwrap(), [true; 7],);
    }

    #[test]
    fn bad_windows_say_what_is_wrong() {
        let err = |d: &str, h: &str| Window::parse(d, h, 1).unwrap_err().to_string();
        assert!(err("mon-fry", "06:00-12:00").contains("'fry' is not a day"));
        assert!(err("mon", "6-12").contains("'6' is not a time of day"));
        assert!(err("mon", "06:00").contains("not a range"));
        assert!(err("mon", "25:00-26:00").contains("'25:00' is not a time of day"));
        assert!(err("mon", "06:00-06:00").contains("empty range"));
    }
}
