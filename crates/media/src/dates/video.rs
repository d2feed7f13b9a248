//! The recording dates videos carry where ffprobe does not look: an AVI's `IDIT` chunk and an AVCHD
//! camcorder's date in its H.264 stream.

use almanac_domain::{CaptureSource, CaptureTime};

use chrono::NaiveTime;

use super::{Stamp, calendar_date, parse_date_text};

/// A video's recording date that ffprobe does not give: an AVI's RIFF `IDIT` chunk (in all the forms cameras
/// write) and the date an AVCHD camcorder writes into its H.264 stream (MTS, M2TS). Read from the open file
/// (never its path), from its first few megabytes; nothing for other containers or when no date is found.
pub(crate) fn embedded_video_date(file: &std::fs::File) -> Option<CaptureTime> {
    let stamp = match read_head(file, 0, 12)[..] {
        [b'R', b'I', b'F', b'F', _, _, _, _, b'A', b'V', b'I', b' '] => avi_date(file),
        _ => avchd_date(file),
    };
    stamp.map(|s| s.capture(CaptureSource::Container))
}

/// [`embedded_video_date`] of an open original, read off the async threads. Nothing when the file cannot be read
/// again (ffprobe's facts stand; the capture time then comes from the file name or the mtime).
pub(crate) async fn read_embedded_video_date(original: &crate::Original) -> Option<CaptureTime> {
    let file = original.handle_for_tool().ok()?;
    tokio::task::spawn_blocking(move || embedded_video_date(&file)).await.ok().flatten()
}

/// The `len` bytes of `file` at `offset`, fewer where it ends first, none when they cannot be read. Positioned
/// reads: the file's offset, shared with the tools that read it, is left alone.
fn read_head(file: &std::fs::File, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let there = file.metadata().map_or(0, |m| m.len()).saturating_sub(offset);
    let mut buf = vec![0; usize::try_from(there).map_or(len, |there| there.min(len))];
    if file.read_exact_at(&mut buf, offset).is_err() {
        buf.clear();
    }
    buf
}

/// How far into an AVI its `IDIT` chunk is looked for: cameras write it in the header list (`hdrl`), before
/// the frames.
const AVI_HEADER_LIMIT: u64 = 1 << 20;

/// An AVI's `IDIT` chunk, found in its header list (`LIST hdrl`) or among the RIFF's top-level chunks before
/// the frames (`LIST movi`), within the RIFF and no further than [`AVI_HEADER_LIMIT`].
fn avi_date(file: &std::fs::File) -> Option<Stamp> {
    // Chunks: a four-letter id, a little-endian size, the data padded to an even length.
    let chunk_at = |offset: u64| -> Option<([u8; 4], u32)> {
        let head = read_head(file, offset, 8);
        let (id, size) = head.split_first_chunk::<4>()?;
        Some((*id, u32::from_le_bytes(size.try_into().ok()?)))
    };
    // A chunk's data is padded to an even length: the next chunk starts after the padding.
    let after = |data: u64, size: u32| data + u64::from(size) + u64::from(size & 1);
    let end = (8 + u64::from(chunk_at(0)?.1)).min(AVI_HEADER_LIMIT);
    // After "RIFF", its size and "AVI ".
    let mut at = 12;
    // Once the header list is entered, where it is found: where its chunks end, and where the top level goes on
    // after it.
    let mut header = None;
    loop {
        while at + 8 <= header.map_or(end, |(list_end, _)| list_end) {
            // A file cut short ends the walk.
            let (id, size) = chunk_at(at)?;
            let data = at + 8;
            match &id {
                b"IDIT" => {
                    // Its first 64 bytes at most, and none of a file cut short inside it.
                    let want = (size as usize).min(64);
                    let text = read_head(file, data, want);
                    return (text.len() == want).then(|| parse_avi_date(&String::from_utf8_lossy(&text))).flatten();
                }
                b"LIST" => match &read_head(file, data, 4)[..] {
                    b"hdrl" => {
                        header = Some(((data + u64::from(size)).min(end), after(data, size)));
                        at = data + 4;
                        continue;
                    }
                    b"movi" => return None,
                    _ => {}
                },
                _ => {}
            }
            at = after(data, size);
        }
        // What is left of the header list (or of the RIFF) holds no chunk.
        at = header.take()?.1;
    }
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

/// How much of a transport stream the AVCHD date is looked for in: this many reads of [`PACKETS_PER_READ`]
/// packets (about 4 MiB). Camcorders write it with every picture (Panasonic's not with the first), so it is found
/// within the first frames, a few hundred kilobytes.
const AVCHD_READS: u64 = 22;

/// Packets read at a time from a transport stream.
const PACKETS_PER_READ: usize = 1024;

/// The identifier of the camcorders' "MDPM" metadata in an H.264 SEI message of unregistered user data.
const MDPM_UUID: [u8; 16] =
    [0x17, 0xee, 0x8c, 0x60, 0xf8, 0x4d, 0x11, 0xd9, 0x8c, 0xd6, 0x08, 0x00, 0x20, 0x0c, 0x9a, 0x66];

/// The recording date of an AVCHD video (an MPEG transport stream of 188-byte packets, or of 192 with a
/// 4-byte timestamp before each, as M2TS and AVCHD's MTS are): the video stream's payloads are joined and its
/// H.264 SEI messages searched for the MDPM metadata.
fn avchd_date(file: &std::fs::File) -> Option<Stamp> {
    let head = read_head(file, 0, 4 * 192);
    let synced = |start: usize, size: usize| (0..4).all(|i| head.get(start + i * size) == Some(&0x47));
    let (start, size) = [(0, 188), (4, 192)].into_iter().find(|&(start, size)| synced(start, size))?;
    let mut streams = VideoStreams::default();
    let chunk = PACKETS_PER_READ * size;
    for read in 0..AVCHD_READS {
        let bytes = read_head(file, read * chunk as u64, chunk);
        if bytes.is_empty() {
            break;
        }
        for packet in bytes.chunks_exact(size) {
            if let Some(stamp) = streams.push(&packet[start..start + 188]) {
                return Some(stamp);
            }
        }
    }
    None
}

/// The H.264 bytes of a transport stream's video streams, by packet id, as far as they were read.
#[derive(Default)]
struct VideoStreams {
    /// Packet id → the bytes of its elementary stream not yet searched.
    streams: std::collections::HashMap<u16, Vec<u8>>,
}

impl VideoStreams {
    /// Takes one 188-byte packet; the MDPM date once a complete SEI message holding it has arrived.
    fn push(&mut self, packet: &[u8]) -> Option<Stamp> {
        let [0x47, flags, pid, control, rest @ ..] = packet else { return None };
        let pid = u16::from_be_bytes([flags & 0x1f, *pid]);
        let unit_start = flags & 0x40 != 0;
        let payload = match (control >> 4) & 0x3 {
            1 => rest,
            // An adaptation field first, its length in its first byte.
            3 => rest.get(1 + usize::from(*rest.first()?)..)?,
            // No payload (2), or reserved (0).
            _ => return None,
        };
        let (bytes, payload) = if unit_start {
            // A PES packet starts here: a video stream's (ids 0xE0 to 0xEF), its header's optional fields
            // skipped by their length, or something else's.
            let [0, 0, 1, 0xe0..=0xef, _, _, _, _, optional, ..] = payload else {
                self.streams.remove(&pid);
                return None;
            };
            let payload = payload.get(9 + usize::from(*optional)..)?;
            (self.streams.entry(pid).or_default(), payload)
        } else {
            // The rest of a video stream's PES packet; or of one whose header was not seen (before the first
            // one read, or not a video stream's), which is not ours.
            (self.streams.get_mut(&pid)?, payload)
        };
        bytes.extend_from_slice(payload);
        let (found, done) = find_mdpm_date(bytes);
        bytes.drain(..done);
        found
    }
}

/// Searches H.264 Annex B bytes for an SEI message holding the MDPM date. Looks only at NAL units whose end was
/// seen (a start code follows); returns the date, if found, and how many bytes need no second look.
fn find_mdpm_date(bytes: &[u8]) -> (Option<Stamp>, usize) {
    // Where each start code (`00 00 01`) begins: a unit runs from after one to the next. (A 4-byte start code's
    // extra zero is left at the end of the unit before it, where the SEI's trailing bits have ended it already.)
    let codes: Vec<usize> = memchr::memmem::find_iter(bytes, &[0, 0, 1]).collect();
    for pair in codes.windows(2) {
        if let [header, payload @ ..] = &bytes[pair[0] + 3..pair[1]]
            && header & 0x1f == 6
            && let Some(stamp) = sei_mdpm_date(&unescape(payload))
        {
            return (Some(stamp), pair[1]);
        }
    }
    // What lies before the last start code was searched. The unit after it may be incomplete: it is kept while it
    // is an SEI unit (or its type has not arrived) of at most MAX_SEI bytes; of any other (a slice of a picture,
    // hundreds of kilobytes, searched again with every packet otherwise), only the last two bytes, which may
    // begin the next start code.
    let keep_from = match codes.last() {
        Some(&last) if bytes.len() - last <= MAX_SEI && bytes.get(last + 3).is_none_or(|h| h & 0x1f == 6) => last,
        _ => bytes.len().saturating_sub(2),
    };
    (None, keep_from)
}

/// The longest SEI unit looked into: camcorders' are a few hundred bytes.
const MAX_SEI: usize = 64 << 10;

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
        let run = sei.get(*at..)?.iter().take_while(|&&b| b == 0xff).count();
        let last = *sei.get(*at + run)?;
        *at += run + 1;
        Some(255 * run + usize::from(last))
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
mod tests;
