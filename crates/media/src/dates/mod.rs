//! Dates as files write them: EXIF's `2019:07:04 12:34:56`, XMP's ISO 8601 forms, and the dates phones,
//! messengers and screenshot tools put in file names. Tolerant of the variants writers produce, strict about
//! the calendar: a date that does not exist is no date.

mod file_name;
mod video;

use almanac_domain::{CaptureSource, CaptureTime};
use chrono::{NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

pub use file_name::date_in_file_name;
pub(crate) use video::read_embedded_video_date;

/// A wall-clock time and, when the writer said it, its UTC offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub local: NaiveDateTime,
    pub offset_minutes: Option<i32>,
}

impl Stamp {
    /// The instant: the local time at its offset, or read as UTC when the offset is unknown (the "on this
    /// day" index then takes the date as written).
    pub fn capture(self, source: CaptureSource) -> CaptureTime {
        let utc = self.local - chrono::Duration::minutes(i64::from(self.offset_minutes.unwrap_or(0)));
        CaptureTime { at: Utc.from_utc_datetime(&utc), offset_minutes: self.offset_minutes, source }
    }
}

/// Years a capture date may have. Outside them a "date" is noise (`0000:00:00` and the like). An unset camera clock's
/// `1970:01:01` is inside and read as a date: scans of old photos carry real dates as early, which a narrower range
/// would lose (videos, which have no such scans, drop dates before 1980).
const YEARS: std::ops::RangeInclusive<i32> = 1900..=2200;

/// Reads a date as EXIF or XMP writes it: `YYYY:MM:DD HH:MM:SS`, `YYYY-MM-DDTHH:MM:SS`, with optional
/// fractional seconds (`.123`) and offset (`Z`, `+02:00`, `+0200`); XMP may leave out the seconds or the whole
/// time (`2019-07-04`, a date with no time is taken at midnight). Surrounding NULs and spaces are ignored. Gives
/// nothing for blanks, unset clocks and impossible dates.
pub(crate) fn parse_date_text(text: &str) -> Option<Stamp> {
    let s = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    let b = s.as_bytes();
    let mut at = 0;
    let year = digits(b, &mut at, 4)?;
    let sep = |at: &mut usize, allowed: &[u8]| -> Option<()> {
        let c = *b.get(*at)?;
        allowed.contains(&c).then(|| *at += 1)
    };
    sep(&mut at, b":-")?;
    let month = digits(b, &mut at, 2)?;
    sep(&mut at, b":-")?;
    let day = digits(b, &mut at, 2)?;
    let date = calendar_date(year, month, day)?;
    if at == b.len() {
        return Some(Stamp { local: date.and_time(NaiveTime::MIN), offset_minutes: None });
    }
    sep(&mut at, b" T")?;
    let hour = digits(b, &mut at, 2)?;
    sep(&mut at, b":")?;
    let minute = digits(b, &mut at, 2)?;
    let mut second = 0;
    let mut nanos = 0;
    if b.get(at) == Some(&b':') {
        at += 1;
        second = digits(b, &mut at, 2)?;
        if matches!(b.get(at), Some(b'.' | b',')) {
            at += 1;
            let fraction = b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
            nanos = fraction_nanos(&s[at..at + fraction])?;
            at += fraction;
        }
    }
    let time = NaiveTime::from_hms_nano_opt(hour, minute, second, nanos)?;
    let rest = s[at..].trim_start();
    let offset_minutes = if rest.is_empty() { None } else { Some(parse_offset(rest)?) };
    Some(Stamp { local: date.and_time(time), offset_minutes })
}

/// Decimal fraction digits (`25` of `:56.25`, or an EXIF `SubSecTime`) as nanoseconds; digits past the ninth
/// are dropped. Nothing for an empty or non-digit fraction.
pub(crate) fn fraction_nanos(digits: &str) -> Option<u32> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.chars().chain(std::iter::repeat('0')).take(9).collect::<String>().parse().ok()
}

/// `Z`, `+02:00`, `-0530`, `+02`: minutes east of UTC, within ±14 hours.
pub(crate) fn parse_offset(text: &str) -> Option<i32> {
    let s = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    if s == "Z" || s == "z" {
        return Some(0);
    }
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let b = &s.as_bytes()[1..];
    let mut at = 0;
    let hours = digits(b, &mut at, 2)?;
    if b.get(at) == Some(&b':') {
        at += 1;
    }
    let minutes = if at == b.len() { 0 } else { digits(b, &mut at, 2)? };
    if at != b.len() || hours > 14 || minutes > 59 {
        return None;
    }
    Some(sign * (hours as i32 * 60 + minutes as i32))
}

fn digits(b: &[u8], at: &mut usize, n: usize) -> Option<u32> {
    let part = b.get(*at..*at + n)?;
    if !part.iter().all(u8::is_ascii_digit) {
        return None;
    }
    *at += n;
    part.iter().try_fold(0u32, |acc, d| Some(acc * 10 + u32::from(d - b'0')))
}

fn calendar_date(year: u32, month: u32, day: u32) -> Option<NaiveDate> {
    let year = i32::try_from(year).ok().filter(|y| YEARS.contains(y))?;
    NaiveDate::from_ymd_opt(year, month, day)
}

#[cfg(test)]
mod tests;
