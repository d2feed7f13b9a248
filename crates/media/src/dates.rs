//! Dates as files write them: EXIF's `2019:07:04 12:34:56`, XMP's ISO 8601 forms, and the dates phones,
//! messengers and screenshot tools put in file names. Tolerant of the variants writers produce, strict about
//! the calendar: a date that does not exist is no date.

use almanac_domain::{CaptureSource, CaptureTime};
use chrono::{NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

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

/// Years a capture date may have. Earlier "dates" are unset clocks (`1970:01:01`, `0000:00:00`) or noise.
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
            let start = at;
            while b.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            nanos = fraction_nanos(&s[start..at])?;
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

/// Years a date in a file name may have: digital photos and phones. Narrower than [`YEARS`], because a file
/// name's digits are more often something else (a counter, an id).
const NAME_YEARS: std::ops::RangeInclusive<i32> = 1990..=2099;

/// The date (and time, when there is one) in a file name, as phones, messengers, screenshot tools and
/// uploaders write them:
///
/// - `IMG_20190704_123456.jpg`, `VID_20190704_123456.mp4`, `20190704_123456.jpg`, `PXL_20190704_123456789.jpg`
/// - `IMG-20190704-WA0001.jpg` (a date only: midnight)
/// - `Screenshot_2019-07-04-12-34-56.png`, `2019-07-04 12.34.56.jpg`,
///   `WhatsApp Image 2019-07-04 at 12.34.56.jpeg`, `Screenshot 2019-07-04 at 1.02.03 PM.png`
/// - `signal-2019-07-04-123456.jpg`, `20190704123456.jpg`
///
/// The date must stand alone: not part of a longer number (a Unix timestamp such as `1562243696000`, a
/// counter), and it must exist in the calendar. The time is read as written, with no offset (phones name
/// files in local time; Pixel's `PXL_` names are in UTC, which the offset-less reading also keeps).
pub fn date_in_file_name(name: &str) -> Option<CaptureTime> {
    let b = name.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit()
            && (i == 0 || !b[i - 1].is_ascii_digit())
            && let Some(local) = date_at(b, i)
        {
            return Some(Stamp { local, offset_minutes: None }.capture(CaptureSource::FileName));
        }
        i += 1;
    }
    None
}

/// A date starting at `start` (the first digit of a run).
fn date_at(b: &[u8], start: usize) -> Option<NaiveDateTime> {
    let run = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut at = start;
    let date = match run {
        // YYYYMMDD or YYYYMMDDHHMMSS.
        8 | 14 => {
            let year = digits(b, &mut at, 4)?;
            let month = digits(b, &mut at, 2)?;
            let day = digits(b, &mut at, 2)?;
            let date = name_date(year, month, day)?;
            if run == 14 {
                let time = hms(b, &mut at)?;
                return Some(date.and_time(time));
            }
            date
        }
        // YYYY-MM-DD (or with `_` or `.`).
        4 => {
            let year = digits(b, &mut at, 4)?;
            let sep = *b.get(at)?;
            if !matches!(sep, b'-' | b'_' | b'.') {
                return None;
            }
            at += 1;
            let month = digits(b, &mut at, 2)?;
            if b.get(at) != Some(&sep) {
                return None;
            }
            at += 1;
            let day = digits(b, &mut at, 2)?;
            if b.get(at).is_some_and(u8::is_ascii_digit) {
                return None;
            }
            name_date(year, month, day)?
        }
        _ => return None,
    };
    // An optional time right after: `_123456`, `-12-34-56`, ` 12.34.56`, ` at 12.34.56 PM`, `T123456`.
    let mut t = at;
    let after = &b[t..];
    let skip = if after.starts_with(b" at ") {
        4
    } else if matches!(after.first(), Some(b'_' | b'-' | b' ' | b'T' | b'.')) {
        1
    } else {
        0
    };
    t += skip;
    let time = (skip > 0).then(|| time_at(b, &mut t)).flatten().unwrap_or(NaiveTime::MIN);
    Some(date.and_time(time))
}

fn name_date(year: u32, month: u32, day: u32) -> Option<NaiveDate> {
    // Not in the future either: `2048_10_10.png` is a name, not a date.
    let next_year = chrono::Datelike::year(&Utc::now()) + 1;
    let year = i32::try_from(year).ok().filter(|y| NAME_YEARS.contains(y) && *y <= next_year)?;
    NaiveDate::from_ymd_opt(year, month, day)
}

/// `HHMMSS` (optionally followed by milliseconds, as Pixel writes), or `H.MM.SS`/`HH-MM-SS`/`HH:MM:SS` with an
/// optional ` AM`/` PM`.
fn time_at(b: &[u8], at: &mut usize) -> Option<NaiveTime> {
    let run = b[*at..].iter().take_while(|c| c.is_ascii_digit()).count();
    if (6..=9).contains(&run) {
        return hms(b, at);
    }
    if !(1..=2).contains(&run) {
        return None;
    }
    let mut hour = digits(b, at, run)?;
    let sep = *b.get(*at)?;
    if !matches!(sep, b'.' | b'-' | b':' | b'_') {
        return None;
    }
    *at += 1;
    let minute = digits(b, at, 2)?;
    if b.get(*at) != Some(&sep) {
        return None;
    }
    *at += 1;
    let second = digits(b, at, 2)?;
    if b.get(*at).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let rest = &b[*at..];
    if (rest.starts_with(b" PM") || rest.starts_with(b"\xe2\x80\xafPM")) && (1..12).contains(&hour) {
        hour += 12;
    } else if (rest.starts_with(b" AM") || rest.starts_with(b"\xe2\x80\xafAM")) && hour == 12 {
        hour = 0;
    }
    NaiveTime::from_hms_opt(hour, minute, second)
}

fn hms(b: &[u8], at: &mut usize) -> Option<NaiveTime> {
    let hour = digits(b, at, 2)?;
    let minute = digits(b, at, 2)?;
    let second = digits(b, at, 2)?;
    NaiveTime::from_hms_opt(hour, minute, second)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d).unwrap().and_hms_opt(h, mi, s).unwrap()
    }

    #[test]
    fn exif_and_xmp_date_forms() {
        let at = |s: &str| parse_date_text(s).map(|st| (st.local, st.offset_minutes));
        assert_eq!(at("2019:07:04 12:34:56"), Some((local(2019, 7, 4, 12, 34, 56), None)));
        assert_eq!(at("2019:07:04 12:34:56\0"), Some((local(2019, 7, 4, 12, 34, 56), None)), "trailing NUL");
        assert_eq!(at("2019-07-04T12:34:56+02:00"), Some((local(2019, 7, 4, 12, 34, 56), Some(120))));
        assert_eq!(at("2019-07-04T12:34:56Z"), Some((local(2019, 7, 4, 12, 34, 56), Some(0))));
        assert_eq!(at("2019-07-04T12:34-0530"), Some((local(2019, 7, 4, 12, 34, 0), Some(-330))));
        assert_eq!(at("2019-07-04"), Some((local(2019, 7, 4, 0, 0, 0), None)));
        let fraction = parse_date_text("2019-07-04T12:34:56.25").unwrap();
        assert_eq!(parse_date_text("2019:07:04 12:34:56.5").unwrap().local.and_utc().timestamp_subsec_millis(), 500);
        assert_eq!(fraction.local, local(2019, 7, 4, 12, 34, 56) + chrono::Duration::milliseconds(250));
        for blank in ["", "    :  :     :  :  ", "0000:00:00 00:00:00", "2019:02:30 10:00:00", "2019:13:01 00:00:00"] {
            assert_eq!(at(blank), None, "{blank:?}");
        }
        assert_eq!(at("2019:07:04 25:00:00"), None);
        assert_eq!(at("2019:07:04 12:34:56 +99:00"), None, "an offset beyond 14 hours");
        assert_eq!(at("2019"), None, "a year alone is no day");
    }

    #[test]
    fn offsets() {
        assert_eq!(parse_offset("+02:00"), Some(120));
        assert_eq!(parse_offset("-05:30"), Some(-330));
        assert_eq!(parse_offset("+0100"), Some(60));
        assert_eq!(parse_offset("Z"), Some(0));
        assert_eq!(parse_offset("   :  "), None);
        assert_eq!(parse_offset("+2:00"), None);
    }

    #[test]
    fn file_name_patterns_of_phones_messengers_and_screenshots() {
        let at = |s: &str| date_in_file_name(s).map(|c| c.at.naive_utc());
        assert_eq!(at("IMG_20190704_123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("VID_20190704_123456.mp4"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("PXL_20190704_123456789.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("20190704_123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("IMG-20190704-WA0001.jpg"), Some(local(2019, 7, 4, 0, 0, 0)));
        assert_eq!(at("Screenshot_2019-07-04-12-34-56.png"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("Screenshot_20190704-123456.png"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("2019-07-04 12.34.56.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("WhatsApp Image 2019-07-04 at 12.34.56.jpeg"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("Screenshot 2019-07-04 at 1.02.03 PM.png"), Some(local(2019, 7, 4, 13, 2, 3)));
        assert_eq!(at("Screenshot 2019-07-04 at 12.02.03 AM.png"), Some(local(2019, 7, 4, 0, 2, 3)));
        assert_eq!(at("signal-2019-07-04-123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("20190704123456.jpg"), Some(local(2019, 7, 4, 12, 34, 56)));
        assert_eq!(at("holiday_2019_07_04.jpg"), Some(local(2019, 7, 4, 0, 0, 0)));
        assert_eq!(at("IMG_20190704_999999.jpg"), Some(local(2019, 7, 4, 0, 0, 0)), "a bad time keeps the date");
        assert_eq!(date_in_file_name("IMG_20190704_1.jpg").unwrap().source, CaptureSource::FileName);
    }

    #[test]
    fn numbers_that_are_not_dates_give_nothing() {
        for name in [
            "IMG_1234.JPG",
            "DSC01234.jpg",
            "1562243696000.jpg",
            "1562243696.jpg",
            "IMG_20191304_123456.jpg",
            "IMG_20190230.jpg",
            "120190704.jpg",
            "201907041.jpg",
            "P1000234.JPG",
            "2019-7-4.jpg",
            "2019-07_04.jpg",
            "18000101_000000.jpg",
            "2090_10_10.png",
            "",
        ] {
            assert_eq!(date_in_file_name(name), None, "{name}");
        }
    }
}
