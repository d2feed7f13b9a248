//! Quiet hours: a daily window of a Worker's local time (or a fixed offset) in which no scheduled work starts
//! (`schedule.quiet_hours`, see docs/operations.md, "A NAS left to rest"). Pure decisions: the time comes in.

use almanac_domain::Zone;
use chrono::{DateTime, Days, FixedOffset, Local, NaiveDate, NaiveTime, TimeZone, Utc};

/// A daily window, `start` included, `end` excluded; it crosses midnight when `end` is before `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    start: NaiveTime,
    end: NaiveTime,
    zone: Zone,
}

impl QuietHours {
    /// Reads `"HH:MM-HH:MM"`, optionally followed by a zone (`UTC` or an offset such as `+01:00`); without
    /// one, the Worker's local time zone. An empty text is no window. The error says what is wrong and how to
    /// write it (the caller names the setting).
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let example = "write it as \"01:00-06:30\" (the Worker's local time), \"01:00-06:30 UTC\" or \
                       \"01:00-06:30 +01:00\", or leave it empty for none";
        let (window, zone) = match text.split_once(char::is_whitespace) {
            Some((window, zone)) => (window, Some(zone.trim())),
            None => (text, None),
        };
        let zone = match zone {
            None => Zone::Local,
            Some(z) if z.eq_ignore_ascii_case("utc") => Zone::Fixed(FixedOffset::east_opt(0).expect("zero")),
            Some(z) => Zone::Fixed(
                DateTime::parse_from_str(&format!("2000-01-01 00:00 {z}"), "%Y-%m-%d %H:%M %:z")
                    .map(|d| *d.offset())
                    .map_err(|_| format!("{z:?} is not a zone this Worker reads: {example}"))?,
            ),
        };
        let time = |t: &str| {
            NaiveTime::parse_from_str(t.trim(), "%H:%M").map_err(|_| format!("{t:?} is not a time of day: {example}"))
        };
        let Some((start, end)) = window.split_once('-') else {
            return Err(format!("{text:?} is not a window: {example}"));
        };
        let (start, end) = (time(start)?, time(end)?);
        if start == end {
            return Err(format!("{text:?} starts and ends at the same time: {example}"));
        }
        Ok(Some(Self { start, end, zone }))
    }

    /// When the window that holds `now` ends; `None` when `now` is outside the window.
    pub fn ends(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self.zone {
            Zone::Local => self.ends_in(&Local, now),
            Zone::Fixed(offset) => self.ends_in(&offset, now),
        }
    }

    /// When the next window starts after `now` (later than `now`, even inside a window).
    pub fn next_start(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self.zone {
            Zone::Local => next(&Local, now, self.start),
            Zone::Fixed(offset) => next(&offset, now, self.start),
        }
    }

    fn ends_in<Tz: TimeZone>(&self, zone: &Tz, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let time = now.with_timezone(zone).time();
        let inside = match self.start.cmp(&self.end) {
            std::cmp::Ordering::Less => self.start <= time && time < self.end,
            // Across midnight (`parse` refuses a window that starts when it ends).
            _ => self.start <= time || time < self.end,
        };
        inside.then(|| next(zone, now, self.end))
    }
}

/// The first instant after `now` at which the clock of `zone` reads `time`. A time that a daylight saving
/// change skips that day is taken as the first instant after the gap; a time it repeats, as its first reading.
fn next<Tz: TimeZone>(zone: &Tz, now: DateTime<Utc>, time: NaiveTime) -> DateTime<Utc> {
    let today = now.with_timezone(zone).date_naive();
    [today, today + Days::new(1)]
        .into_iter()
        .filter_map(|day| at(zone, day, time))
        .find(|t| *t > now)
        .expect("a time of day comes round by tomorrow")
}

fn at<Tz: TimeZone>(zone: &Tz, day: NaiveDate, time: NaiveTime) -> Option<DateTime<Utc>> {
    let local = day.and_time(time);
    // A gap is at most a few hours: the first minute after it.
    (0..=240)
        .find_map(|minutes| zone.from_local_datetime(&(local + chrono::Duration::minutes(minutes))).earliest())
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, h, m, 0).unwrap()
    }

    fn window(text: &str) -> QuietHours {
        QuietHours::parse(text).unwrap().unwrap()
    }

    #[test]
    fn a_window_holds_from_its_start_up_to_its_end() {
        let w = window("01:00-06:30 UTC");
        assert_eq!(w.ends(utc(0, 59)), None);
        assert_eq!(w.ends(utc(1, 0)), Some(utc(6, 30)));
        assert_eq!(w.ends(utc(6, 29)), Some(utc(6, 30)));
        assert_eq!(w.ends(utc(6, 30)), None);
        assert_eq!(w.next_start(utc(0, 59)), utc(1, 0));
        assert_eq!(w.next_start(utc(1, 0)), utc(1, 0) + Days::new(1));
    }

    #[test]
    fn a_window_crossing_midnight_holds_on_both_sides_of_it() {
        let w = window("22:00-06:00 UTC");
        assert_eq!(w.ends(utc(21, 59)), None);
        assert_eq!(w.ends(utc(22, 0)), Some(utc(6, 0) + Days::new(1)));
        assert_eq!(w.ends(utc(3, 0)), Some(utc(6, 0)));
        assert_eq!(w.ends(utc(6, 0)), None);
        assert_eq!(w.ends(utc(12, 0)), None);
        assert_eq!(w.next_start(utc(3, 0)), utc(22, 0));
    }

    /// A zone at +01:00 that moves to +02:00 at 01:00 UTC on 2026-03-29 (its clocks go from 02:00 to 03:00).
    #[derive(Debug, Clone, Copy)]
    struct Spring;

    impl Spring {
        const SWITCH: NaiveDate = NaiveDate::from_ymd_opt(2026, 3, 29).unwrap();
        fn before() -> FixedOffset {
            FixedOffset::east_opt(3600).unwrap()
        }
        fn after() -> FixedOffset {
            FixedOffset::east_opt(7200).unwrap()
        }
    }

    impl TimeZone for Spring {
        type Offset = FixedOffset;
        fn from_offset(_: &FixedOffset) -> Self {
            Spring
        }
        fn offset_from_local_date(&self, _: &NaiveDate) -> chrono::LocalResult<FixedOffset> {
            unimplemented!("not used")
        }
        fn offset_from_local_datetime(&self, local: &chrono::NaiveDateTime) -> chrono::LocalResult<FixedOffset> {
            let switch = Self::SWITCH.and_hms_opt(2, 0, 0).unwrap();
            match *local {
                l if l < switch => chrono::LocalResult::Single(Self::before()),
                l if l < switch + chrono::Duration::hours(1) => chrono::LocalResult::None,
                _ => chrono::LocalResult::Single(Self::after()),
            }
        }
        fn offset_from_utc_date(&self, _: &NaiveDate) -> FixedOffset {
            unimplemented!("not used")
        }
        fn offset_from_utc_datetime(&self, utc: &chrono::NaiveDateTime) -> FixedOffset {
            if *utc < Self::SWITCH.and_hms_opt(1, 0, 0).unwrap() { Self::before() } else { Self::after() }
        }
    }

    #[test]
    fn a_time_the_clocks_skip_is_the_first_instant_after_the_gap() {
        let half_past_two = NaiveTime::from_hms_opt(2, 30, 0).unwrap();
        let three_local_in_utc = Utc.with_ymd_and_hms(2026, 3, 29, 1, 0, 0).unwrap();
        assert_eq!(at(&Spring, Spring::SWITCH, half_past_two), Some(three_local_in_utc));
        let night_before = Utc.with_ymd_and_hms(2026, 3, 28, 23, 0, 0).unwrap();
        assert_eq!(next(&Spring, night_before, half_past_two), three_local_in_utc);
        // The day after, 02:30 is there again, at +02:00.
        let day_after = Utc.with_ymd_and_hms(2026, 3, 30, 0, 30, 0).unwrap();
        assert_eq!(next(&Spring, three_local_in_utc, half_past_two), day_after);
    }

    #[test]
    fn a_fixed_offset_moves_the_window() {
        // 01:00-02:00 at +01:00 is 00:00-01:00 UTC.
        let w = window("01:00-02:00 +01:00");
        assert_eq!(w.ends(utc(0, 30)), Some(utc(1, 0)));
        assert_eq!(w.ends(utc(1, 30)), None);
        let local = window("01:00-02:00");
        assert_eq!(local.zone, Zone::Local);
    }

    #[test]
    fn empty_is_none_and_bad_windows_say_how_to_write_one() {
        assert_eq!(QuietHours::parse("").unwrap(), None);
        assert_eq!(QuietHours::parse("  ").unwrap(), None);
        for bad in ["1am-6am", "01:00", "01:00-25:00", "01:00-01:00", "01:00-06:00 Mars", "01:00-06:00 +1"] {
            let message = QuietHours::parse(bad).unwrap_err();
            assert!(message.contains("\"01:00-06:30\""), "{bad}: {message}");
        }
    }
}
