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

/// A video's recording date that ffprobe does not give: an AVI's RIFF `IDIT` chunk (in all the forms cameras
/// write) and the date an AVCHD camcorder writes into its H.264 stream (MTS, M2TS). Read from the open file
/// (never its path), from its first few megabytes; nothing for other containers or when no date is found.
pub(crate) fn embedded_video_date(file: &std::fs::File) -> Option<CaptureTime> {
    let head = read_head(file, 0, 16)?;
    if head.starts_with(b"RIFF") && head[8..12] == *b"AVI " {
        avi_date(file).map(|s| s.capture(CaptureSource::Container))
    } else {
        avchd_date(file).map(|s| s.capture(CaptureSource::Container))
    }
}

/// [`embedded_video_date`] of an open original, read off the async threads. Nothing when the file cannot be read
/// again (ffprobe's facts stand; the capture time then comes from the file name or the mtime).
pub(crate) async fn read_embedded_video_date(original: &crate::Original) -> Option<CaptureTime> {
    let file = original.handle_for_tool().ok()?;
    tokio::task::spawn_blocking(move || embedded_video_date(&file)).await.ok().flatten()
}

/// Up to `len` bytes of `file` at `offset` (fewer at its end), or `None` when not one could be read. Positioned
/// reads: the file's offset, shared with the tools that read it, is left alone.
fn read_head(file: &std::fs::File, offset: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    buf.truncate(got);
    (got > 0).then_some(buf)
}

/// How far into an AVI its `IDIT` chunk is looked for: cameras write it in the header list (`hdrl`), before
/// the frames.
const AVI_HEADER_LIMIT: u64 = 1 << 20;

/// An AVI's `IDIT` chunk, found in its header list (`LIST hdrl`) or among the RIFF's top-level chunks before
/// the frames, no deeper and no further than [`AVI_HEADER_LIMIT`].
fn avi_date(file: &std::fs::File) -> Option<Stamp> {
    // Chunks: a four-letter id, a little-endian size, the data padded to an even length.
    let chunk_at = |offset: u64| -> Option<([u8; 4], u32)> {
        let head = read_head(file, offset, 12)?;
        let id: [u8; 4] = head.get(..4)?.try_into().ok()?;
        Some((id, u32::from_le_bytes(head.get(4..8)?.try_into().ok()?)))
    };
    let riff_end = 8 + u64::from(chunk_at(0)?.1);
    // Lists to walk: the RIFF's top level (after "RIFF", size, "AVI "), then the header list once found.
    let mut lists = vec![(12u64, riff_end.min(AVI_HEADER_LIMIT))];
    while let Some((mut at, end)) = lists.pop() {
        while at + 8 <= end {
            // A file cut short ends this list; the header list may still hold the date.
            let Some((id, size)) = chunk_at(at) else { break };
            let data = at + 8;
            match &id {
                b"IDIT" => {
                    let text = read_head(file, data, (size as usize).min(64))?;
                    return parse_avi_date(&String::from_utf8_lossy(&text));
                }
                b"LIST" => {
                    let kind = read_head(file, data, 4)?;
                    if kind == b"movi" {
                        break;
                    }
                    if kind == b"hdrl" {
                        lists.push((data + 4, (data + u64::from(size)).min(end)));
                    }
                }
                _ => {}
            }
            at = data + u64::from(size) + u64::from(size & 1);
        }
    }
    None
}

/// An AVI `IDIT` date as cameras write it: C's `asctime` form (`THU OCT 28 11:22:33 2010`, any case, with a
/// trailing newline or NUL), `2010/10/28 11:22:33`, or the EXIF and ISO forms of [`parse_date_text`]. No
/// offset is ever written.
pub(crate) fn parse_avi_date(text: &str) -> Option<Stamp> {
    let s = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    if let Some(stamp) = parse_date_text(&s.replace('/', "-")) {
        return Some(stamp);
    }
    // Weekday, month name, day, time, year.
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [_weekday, month, day, time, year] = parts[..] else { return None };
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as u32 + 1;
    let day: u32 = day.parse().ok().filter(|_| day.len() <= 2)?;
    let year: u32 = year.parse().ok().filter(|_| year.len() == 4)?;
    let date = calendar_date(year, month, day)?;
    let time = NaiveTime::parse_from_str(time, "%H:%M:%S").ok()?;
    Some(Stamp { local: date.and_time(time), offset_minutes: None })
}

/// How far into a transport stream the AVCHD date is looked for. Camcorders write it with every picture
/// (Panasonic's not with the first), so it is found within the first frames, a few hundred kilobytes.
const AVCHD_SCAN_LIMIT: u64 = 4 << 20;

/// The identifier of the camcorders' "MDPM" metadata in an H.264 SEI message of unregistered user data.
const MDPM_UUID: [u8; 16] =
    [0x17, 0xee, 0x8c, 0x60, 0xf8, 0x4d, 0x11, 0xd9, 0x8c, 0xd6, 0x08, 0x00, 0x20, 0x0c, 0x9a, 0x66];

/// The recording date of an AVCHD video (an MPEG transport stream of 188-byte packets, or of 192 with a
/// 4-byte timestamp before each, as M2TS and AVCHD's MTS are): the video stream's payloads are joined and its
/// H.264 SEI messages searched for the MDPM metadata.
fn avchd_date(file: &std::fs::File) -> Option<Stamp> {
    let head = read_head(file, 0, 4 * 192 + 8)?;
    let synced = |start: usize, size: usize| (0..4).all(|i| head.get(start + i * size) == Some(&0x47));
    let (start, size) = [(0, 188), (4, 192)].into_iter().find(|&(start, size)| synced(start, size))?;
    let mut streams = VideoStreams::default();
    let chunk = 1024 * size;
    let mut offset = 0u64;
    while offset < AVCHD_SCAN_LIMIT {
        let bytes = read_head(file, offset, chunk)?;
        for packet in bytes.chunks_exact(size) {
            if let Some(stamp) = streams.push(&packet[start..start + 188]) {
                return Some(stamp);
            }
        }
        if bytes.len() < chunk {
            break;
        }
        offset += chunk as u64;
    }
    None
}

/// The H.264 bytes of a transport stream's video streams, by packet id, as far as they were read.
#[derive(Default)]
struct VideoStreams {
    /// Packet id → its elementary stream so far, and how much of it was searched.
    streams: std::collections::HashMap<u16, (Vec<u8>, usize)>,
    /// Packet ids seen to carry something else.
    others: std::collections::HashSet<u16>,
}

impl VideoStreams {
    /// Takes one 188-byte packet; the MDPM date once a complete SEI message holding it has arrived.
    fn push(&mut self, packet: &[u8]) -> Option<Stamp> {
        if packet[0] != 0x47 {
            return None;
        }
        let pid = u16::from_be_bytes([packet[1] & 0x1f, packet[2]]);
        let unit_start = packet[1] & 0x40 != 0;
        let control = (packet[3] >> 4) & 0x3;
        if control & 1 == 0 || self.others.contains(&pid) {
            return None;
        }
        let mut payload = &packet[4..];
        if control & 2 != 0 {
            payload = payload.get(1 + usize::from(*payload.first()?)..)?;
        }
        if unit_start {
            // A PES packet starts here: a video stream (ids 0xE0 to 0xEF) or something else.
            if payload.len() < 9 || payload[..3] != [0, 0, 1] {
                self.others.insert(pid);
                self.streams.remove(&pid);
                return None;
            }
            if !(0xe0..=0xef).contains(&payload[3]) {
                self.others.insert(pid);
                self.streams.remove(&pid);
                return None;
            }
            payload = payload.get(9 + usize::from(payload[8])..)?;
        }
        let (bytes, searched) = match self.streams.get_mut(&pid) {
            Some(stream) => stream,
            // Bytes before the first PES header are the tail of a packet we did not see.
            None if unit_start => self.streams.entry(pid).or_default(),
            None => return None,
        };
        bytes.extend_from_slice(payload);
        let (found, done) = find_mdpm_date(&bytes[*searched..]);
        *searched += done;
        found
    }
}

/// Searches H.264 Annex B bytes for an SEI message holding the MDPM date. Looks only at NAL units whose end was
/// seen (a start code follows); returns the date, if found, and how many bytes need no second look.
fn find_mdpm_date(bytes: &[u8]) -> (Option<Stamp>, usize) {
    let starts: Vec<usize> = memchr::memmem::find_iter(bytes, &[0, 0, 1]).map(|at| at + 3).collect();
    for pair in starts.windows(2) {
        let (unit, next) = (pair[0], pair[1]);
        // The next start code begins 3 bytes before `next`, perhaps with one more zero (a 4-byte start code).
        let end = next - 3;
        if bytes.get(unit).is_some_and(|header| header & 0x1f == 6)
            && let Some(stamp) = sei_mdpm_date(&unescape(&bytes[unit + 1..end]))
        {
            return (Some(stamp), end);
        }
    }
    // What lies before the last start code was searched; the last unit may be incomplete.
    (None, starts.last().map_or(bytes.len().saturating_sub(3), |last| last - 3))
}

/// A NAL unit's payload with its emulation prevention bytes removed (`00 00 03` becomes `00 00`).
fn unescape(escaped: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut zeros = 0;
    for &b in escaped {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

/// The MDPM date in an SEI NAL unit's payload (unescaped), if one of its messages holds it.
fn sei_mdpm_date(sei: &[u8]) -> Option<Stamp> {
    let mut at = 0;
    // A number is a run of 0xFF bytes (255 each) and a last byte added to them.
    let number = |at: &mut usize| -> Option<usize> {
        let mut n = 0;
        loop {
            let b = *sei.get(*at)?;
            *at += 1;
            n += usize::from(b);
            if b != 0xff {
                return Some(n);
            }
        }
    };
    // Messages until the trailing bits (0x80) or the end.
    while sei.get(at).is_some_and(|b| *b != 0x80) {
        let kind = number(&mut at)?;
        let size = number(&mut at)?;
        let message = sei.get(at..at + size)?;
        at += size;
        if kind == 5
            && let Some(rest) = message.strip_prefix(&MDPM_UUID)
            && let Some(entries) = rest.strip_prefix(b"MDPM")
        {
            return mdpm_date(entries);
        }
    }
    None
}

/// The date of MDPM entries: a count, then entries of a tag byte and four data bytes. Tag 0x18 holds a time zone
/// byte and the year (two bytes) and month, tag 0x19 the day, hour, minute and second, all in BCD. The time zone
/// byte: 0x20 a negative sign, bits 1 to 4 the hours, 0x01 half an hour more, 0x40 daylight saving time, 0x80
/// unused; cameras write it inconsistently, so the offset is taken only when the byte is plausible and says no
/// daylight saving (whether its hours then include the hour of summer time is not known). The date itself is
/// the camera's local wall clock either way.
fn mdpm_date(entries: &[u8]) -> Option<Stamp> {
    let count = usize::from(*entries.first()?);
    let entry =
        |tag: u8| -> Option<&[u8]> { entries[1..].chunks_exact(5).take(count).find(|e| e[0] == tag).map(|e| &e[1..]) };
    let (first, second) = (entry(0x18)?, entry(0x19)?);
    let bcd =
        |b: u8| -> Option<u32> { (b >> 4 <= 9 && b & 0xf <= 9).then(|| u32::from(b >> 4) * 10 + u32::from(b & 0xf)) };
    let year = bcd(first[1])? * 100 + bcd(first[2])?;
    let date = calendar_date(year, bcd(first[3])?, bcd(second[0])?)?;
    let time = NaiveTime::from_hms_opt(bcd(second[1])?, bcd(second[2])?, bcd(second[3])?)?;
    let zone = first[0];
    let hours = i32::from((zone >> 1) & 0x0f);
    let offset_minutes = (zone & 0xc0 == 0 && hours <= 14).then(|| {
        let minutes = hours * 60 + if zone & 1 != 0 { 30 } else { 0 };
        if zone & 0x20 != 0 { -minutes } else { minutes }
    });
    Some(Stamp { local: date.and_time(time), offset_minutes })
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

#[cfg(test)]
mod video_date_tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;
    use crate::{RootFolder, ToolLimits};

    fn local(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d).unwrap().and_hms_opt(h, mi, s).unwrap()
    }

    fn ffmpeg(args: &[&std::ffi::OsStr]) {
        let out = Command::new("ffmpeg").args(["-v", "error", "-y"]).args(args).output().expect("ffmpeg");
        assert!(out.status.success(), "ffmpeg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A one-second AVI as ffmpeg writes it (a `JUNK` chunk at the end of its header list, no `IDIT`).
    fn avi(path: &Path) {
        let args = ["-f", "lavfi", "-i", "testsrc=size=160x120:rate=10", "-t", "1", "-c:v", "mjpeg"];
        let mut args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        args.push(path.as_os_str());
        ffmpeg(&args);
    }

    /// Writes an `IDIT` chunk holding `date` where a camera puts it, the end of the header list, in the
    /// place of the `JUNK` chunk ffmpeg leaves there (the frames keep their offsets).
    fn with_idit(path: &Path, date: &[u8]) {
        let mut bytes = std::fs::read(path).unwrap();
        let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        assert_eq!(&bytes[12..16], b"LIST");
        assert_eq!(&bytes[20..24], b"hdrl");
        let end = 20 + u32_at(&bytes, 16);
        let mut at = 24;
        let junk = loop {
            assert!(at < end, "no JUNK chunk at the top of the header list");
            if &bytes[at..at + 4] == b"JUNK" {
                break at;
            }
            let size = u32_at(&bytes, at + 4);
            at += 8 + size + (size & 1);
        };
        let room = 8 + u32_at(&bytes, junk + 4);
        let padded = date.len() + (date.len() & 1);
        let rest = room - 8 - padded - 8;
        let mut chunks = b"IDIT".to_vec();
        chunks.extend_from_slice(&(date.len() as u32).to_le_bytes());
        chunks.extend_from_slice(date);
        chunks.resize(8 + padded, 0);
        chunks.extend_from_slice(b"JUNK");
        chunks.extend_from_slice(&(rest as u32).to_le_bytes());
        chunks.resize(room, 0);
        bytes.splice(junk..junk + room, chunks);
        std::fs::write(path, bytes).unwrap();
    }

    /// The MDPM metadata of a camcorder recording at `date` (`YYYYMMDDhhmmss` in BCD) in time zone byte `zone`.
    fn mdpm(zone: u8, date: [u8; 7]) -> Vec<u8> {
        let mut data = b"MDPM".to_vec();
        data.extend_from_slice(&[3, 0x13, 0x10, 0x20, 0x30, 0x40]);
        data.extend_from_slice(&[0x18, zone, date[0], date[1], date[2]]);
        data.extend_from_slice(&[0x19, date[3], date[4], date[5], date[6]]);
        data
    }

    /// A one-second H.264 transport stream (188-byte packets, or 192 as M2TS and AVCHD's MTS) whose first
    /// picture carries `user_data` as the camcorders' MDPM SEI message (ffmpeg's h264_metadata filter; the
    /// data holds no NUL, `:`, `=` or `\`, which its option parser would take).
    fn transport_stream(path: &Path, user_data: Option<&[u8]>, m2ts: bool) {
        use std::os::unix::ffi::OsStrExt;
        let mut filter = b"h264_metadata=sei_user_data=17ee8c60-f84d-11d9-8cd6-0800200c9a66+".to_vec();
        let mode = if m2ts { "1" } else { "0" };
        let args = ["-f", "lavfi", "-i", "testsrc=size=160x120:rate=10", "-t", "1", "-c:v", "libx264", "-f", "mpegts"];
        let mode = ["-mpegts_m2ts_mode", mode];
        let mut args: Vec<&std::ffi::OsStr> = args.iter().chain(&mode).map(std::ffi::OsStr::new).collect();
        if let Some(data) = user_data {
            assert!(!data.iter().any(|b| b"\0:=\\".contains(b)), "not passable through the filter's options");
            filter.extend_from_slice(data);
            args.extend([std::ffi::OsStr::new("-bsf:v"), std::ffi::OsStr::from_bytes(&filter)]);
        }
        args.push(path.as_os_str());
        ffmpeg(&args);
    }

    fn date_of(path: &Path) -> Option<CaptureTime> {
        embedded_video_date(&std::fs::File::open(path).unwrap())
    }

    #[test]
    fn avi_dates_in_the_forms_cameras_write() {
        let at = |s: &str| parse_avi_date(s).map(|st| (st.local, st.offset_minutes));
        let expected = Some((local(2010, 10, 28, 11, 22, 33), None));
        for text in [
            "THU OCT 28 11:22:33 2010\n",
            "Thu Oct 28 11:22:33 2010\0",
            "2010/10/28 11:22:33",
            "2010:10:28 11:22:33",
            "2010-10-28T11:22:33",
            "  2010-10-28 11:22:33\n\0",
        ] {
            assert_eq!(at(text), expected, "{text:?}");
        }
        assert_eq!(at("Fri Oct  8 01:02:03 2010"), Some((local(2010, 10, 8, 1, 2, 3), None)), "a padded day");
        for bad in
            ["THU FOO 28 11:22:33 2010", "MON FEB 30 11:22:33 2010", "THU OCT 28 25:22:33 2010", "THU OCT 28", ""]
        {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_avis_idit_chunk_is_its_capture_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("MVI_0001.AVI");
        avi(&path);
        assert_eq!(date_of(&path), None, "ffmpeg writes no IDIT");
        with_idit(&path, b"THU OCT 28 11:22:33 2010\n\0");
        let found = date_of(&path).expect("the IDIT date");
        assert_eq!((found.at.naive_utc(), found.offset_minutes), (local(2010, 10, 28, 11, 22, 33), None));
        assert_eq!(found.source, CaptureSource::Container);
        let other = dir.path().join("MVI_0002.AVI");
        avi(&other);
        with_idit(&other, b"2011:01:02 03:04:05");
        assert_eq!(date_of(&other).unwrap().at.naive_utc(), local(2011, 1, 2, 3, 4, 5), "an EXIF-like IDIT");
    }

    #[test]
    fn an_avchd_videos_mdpm_date_is_its_capture_time_in_188_and_192_byte_packets() {
        let dir = tempfile::tempdir().unwrap();
        for m2ts in [false, true] {
            let path = dir.path().join(format!("0000{}.MTS", u8::from(m2ts)));
            transport_stream(&path, None, m2ts);
            assert_eq!(date_of(&path), None, "no MDPM, no date (m2ts: {m2ts})");
            // 2010-10-28 11:22:33 at UTC+01:00 (zone byte 0x02: one hour, positive, no daylight saving).
            transport_stream(&path, Some(&mdpm(0x02, [0x20, 0x10, 0x10, 0x28, 0x11, 0x22, 0x33])), m2ts);
            let found = date_of(&path).expect("the MDPM date");
            assert_eq!(found.offset_minutes, Some(60), "m2ts: {m2ts}");
            assert_eq!(found.at.naive_utc(), local(2010, 10, 28, 10, 22, 33), "the instant (m2ts: {m2ts})");
        }
    }

    #[test]
    fn mdpm_time_zone_bytes() {
        let date = |zone: u8| mdpm_date(&mdpm(zone, [0x20, 0x19, 0x07, 0x04, 0x12, 0x34, 0x56])[4..]).unwrap();
        assert_eq!(date(0x02).offset_minutes, Some(60));
        assert_eq!(date(0x23).offset_minutes, Some(-90), "negative, with half an hour");
        assert_eq!(date(0x00).offset_minutes, Some(0));
        assert_eq!(date(0x42).offset_minutes, None, "daylight saving: the offset is not trusted");
        assert_eq!(date(0xff).offset_minutes, None, "an unset zone byte");
        assert_eq!(date(0xff).local, local(2019, 7, 4, 12, 34, 56), "the wall clock stands");
        assert_eq!(mdpm_date(&mdpm(0x02, [0x20, 0x19, 0x02, 0x30, 0x12, 0x34, 0x56])[4..]), None, "February 30th");
        assert_eq!(mdpm_date(&mdpm(0x02, [0x20, 0x1a, 0x07, 0x04, 0x12, 0x34, 0x56])[4..]), None, "not BCD");
    }

    /// Packets of a transport stream carrying `es` as one PES packet of a video stream on `pid`, its payload
    /// split across packets at 184-byte boundaries (the last one padded by an adaptation field).
    fn packets(pid: u16, es: &[u8]) -> Vec<u8> {
        let mut pes = vec![0, 0, 1, 0xe0, 0, 0, 0x80, 0, 0];
        pes.extend_from_slice(es);
        let mut out = Vec::new();
        for (i, chunk) in pes.chunks(184).enumerate() {
            let start = if i == 0 { 0x40 } else { 0 };
            out.extend_from_slice(&[0x47, start | (pid >> 8) as u8, pid as u8]);
            if chunk.len() == 184 {
                out.push(0x10 | (i as u8 & 0xf));
            } else {
                let stuffing = 184 - chunk.len() - 1;
                out.push(0x30 | (i as u8 & 0xf));
                out.push(stuffing as u8);
                if stuffing > 0 {
                    out.push(0);
                    out.resize(out.len() + stuffing - 1, 0xff);
                }
            }
            out.extend_from_slice(chunk);
        }
        out
    }

    /// A NAL unit with its start code, `00 00 0x` sequences of its payload escaped as the standard demands.
    fn nal(header: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0, 0, 0, 1, header];
        let mut zeros = 0;
        for &b in payload {
            if zeros >= 2 && b <= 3 {
                out.push(3);
                zeros = 0;
            }
            zeros = if b == 0 { zeros + 1 } else { 0 };
            out.push(b);
        }
        out
    }

    #[test]
    fn an_mdpm_message_split_across_packets_and_escaped_is_read() {
        // Midnight, 2000-01-01: zeros that the stream must escape. After 400 bytes of another SEI message, so
        // that the MDPM message straddles two packets.
        let mut sei = vec![4, 0xff, (400 - 255) as u8];
        sei.extend(std::iter::repeat_n(0x55, 400));
        let mut message = MDPM_UUID.to_vec();
        message.extend(mdpm(0x00, [0x20, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00]));
        sei.extend_from_slice(&[5, message.len() as u8]);
        sei.extend_from_slice(&message);
        sei.push(0x80);
        let mut es = nal(0x09, &[0xf0]);
        es.extend(nal(0x06, &sei));
        es.extend(nal(0x65, &[0x88, 0x84, 0, 0, 0, 0x21]));
        let mut stream = packets(0x1011, &[0u8; 3]);
        stream.extend(packets(0x1011, &es));
        stream.extend(packets(0x1011, &nal(0x09, &[0xf0])));
        let mut streams = VideoStreams::default();
        let found = stream.chunks_exact(188).find_map(|p| streams.push(p)).expect("the date");
        assert_eq!((found.local, found.offset_minutes), (local(2000, 1, 1, 0, 0, 0), Some(0)));
        assert!(nal(0x06, &sei).windows(3).any(|w| w == [0, 0, 3]), "the test's stream holds an escape");
    }

    #[tokio::test]
    async fn probe_video_gives_an_avis_idit_date_and_an_avchd_date() {
        let dir = tempfile::tempdir().unwrap();
        avi(&dir.path().join("a.avi"));
        with_idit(&dir.path().join("a.avi"), b"THU OCT 28 11:22:33 2010\n\0");
        transport_stream(
            &dir.path().join("b.mts"),
            Some(&mdpm(0x02, [0x20, 0x10, 0x10, 0x28, 0x11, 0x22, 0x33])),
            true,
        );
        let root = RootFolder::open(dir.path()).unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        for (name, at) in [("a.avi", local(2010, 10, 28, 11, 22, 33)), ("b.mts", local(2010, 10, 28, 10, 22, 33))] {
            let original = root.open_file(name.as_bytes()).unwrap();
            let facts = crate::probe_video(&original, ToolLimits::default(), &cancel).await.unwrap();
            let created = facts.created.unwrap_or_else(|| panic!("{name}: no capture time"));
            assert_eq!((created.at.naive_utc(), created.source), (at, CaptureSource::Container), "{name}");
        }
    }
}
