//! Dates in file names, as phones, messengers and screenshot tools write them.

use almanac_domain::{CaptureSource, CaptureTime};
use chrono::{NaiveDate, NaiveDateTime, NaiveTime, Utc};

use super::{Stamp, digits};

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
    // Where a run of digits starts.
    let mut runs = (0..b.len()).filter(|&i| b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_digit()));
    let local = runs.find_map(|i| date_at(b, i))?;
    Some(Stamp { local, offset_minutes: None }.capture(CaptureSource::FileName))
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
    // A time starts with a digit, and none follows the date itself (its run ended there): with no separator,
    // no time.
    let time = time_at(b, &mut t).unwrap_or(NaiveTime::MIN);
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
