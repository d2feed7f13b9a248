use std::path::Path;
use std::process::Command;

use chrono::{NaiveDate, NaiveDateTime};

use super::*;
use crate::{DEFAULT_MAX_PIXELS, RootFolder, ToolLimits};

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
    for bad in ["THU FOO 28 11:22:33 2010", "MON FEB 30 11:22:33 2010", "THU OCT 28 25:22:33 2010", "THU OCT 28", ""] {
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
    pes_packets(pid, 0xe0, es)
}

/// [`packets`] of a PES packet of stream id `stream` (0xE0 to 0xEF video, 0xC0 to 0xDF audio).
fn pes_packets(pid: u16, stream: u8, es: &[u8]) -> Vec<u8> {
    let mut pes = vec![0, 0, 1, stream, 0, 0, 0x80, 0, 0];
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

/// The date `VideoStreams` finds in `es`, carried as one PES packet after a first PES packet of three bytes.
fn streamed_date(es: &[u8]) -> Option<Stamp> {
    let stream = [packets(0x1011, &[0u8; 3]), packets(0x1011, es)].concat();
    let mut streams = VideoStreams::default();
    stream.chunks_exact(188).find_map(|p| streams.push(p))
}

#[test]
fn an_mdpm_message_is_read_wherever_the_packets_split_it() {
    // Midnight, 2000-01-01: zeros that the stream must escape.
    let date = [0x20, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00];
    let (mut message_split, mut escape_split, mut start_code_split) = (false, false, false);
    for filler in 250..=450 {
        let es = camcorder_picture(filler, date);
        // Packet k carries the PES's bytes 184k to 184(k + 1), and the PES's header is 9 bytes.
        let split = |at: usize, len: usize| (9 + at) / 184 != (9 + at + len - 1) / 184;
        let found = |needle: &[u8]| memchr::memmem::find_iter(&es, needle).collect::<Vec<_>>();
        message_split |= found(&MDPM_UUID).iter().any(|&at| split(at, MDPM_UUID.len() + 4 + 16));
        escape_split |= found(&[0, 0, 3]).iter().any(|&at| split(at, 3));
        start_code_split |= found(&[0, 0, 1]).iter().any(|&at| split(at, 3));
        let stamp = streamed_date(&es).unwrap_or_else(|| panic!("no date with {filler} bytes before it"));
        assert_eq!((stamp.local, stamp.offset_minutes), (local(2000, 1, 1, 0, 0, 0), Some(0)), "{filler}");
    }
    assert!(message_split && escape_split && start_code_split, "the fillers split each across packets");
}

#[test]
fn a_long_slice_before_the_date_is_passed_over_and_a_long_sei_unit_is_not_looked_into() {
    let date = [0x20, 0x10, 0x10, 0x28, 0x11, 0x22, 0x33];
    let expected = Some(local(2010, 10, 28, 11, 22, 33));
    // A picture's slice of 300 KB (not kept while it arrives), then the camcorder's picture.
    let es = [nal(0x65, &vec![0x11; 300_000]), camcorder_picture(0, date)].concat();
    assert_eq!(streamed_date(&es).map(|s| s.local), expected, "after a long slice");
    assert_eq!(streamed_date(&camcorder_picture(60_000, date)).map(|s| s.local), expected, "an SEI unit of 60 KB");
    assert_eq!(streamed_date(&camcorder_picture(70_000, date)).map(|s| s.local), None, "an SEI unit of 70 KB");
    // An SEI unit right after a long one, wherever the packets split it.
    for filler in (60_000..60_000 + 184).step_by(7) {
        let es = [nal(0x09, &[0xf0]), sei_unit(filler, None), sei_unit(0, Some(date)), nal(0x09, &[0xf0])];
        assert_eq!(streamed_date(&es.concat()).map(|s| s.local), expected, "after an SEI unit of {filler} bytes");
    }
}

#[tokio::test]
async fn probe_video_gives_an_avis_idit_date_and_an_avchd_date() {
    let dir = tempfile::tempdir().unwrap();
    avi(&dir.path().join("a.avi"));
    with_idit(&dir.path().join("a.avi"), b"THU OCT 28 11:22:33 2010\n\0");
    transport_stream(&dir.path().join("b.mts"), Some(&mdpm(0x02, [0x20, 0x10, 0x10, 0x28, 0x11, 0x22, 0x33])), true);
    let root = RootFolder::open(dir.path()).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    for (name, at) in [("a.avi", local(2010, 10, 28, 11, 22, 33)), ("b.mts", local(2010, 10, 28, 10, 22, 33))] {
        let original = root.open_file(name.as_bytes()).unwrap();
        let facts = crate::probe_video(&original, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap();
        let created = facts.created.unwrap_or_else(|| panic!("{name}: no capture time"));
        assert_eq!((created.at.naive_utc(), created.source), (at, CaptureSource::Container), "{name}");
    }
}

/// A RIFF chunk: its id, its size, its data padded to an even length.
fn chunk(id: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = id.to_vec();
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
    out.resize(out.len() + (data.len() & 1), 0);
    out
}

/// A `LIST` (or, with `b"RIFF"`, the file's own chunk) of `kind` holding `chunks`.
fn list(id: &[u8; 4], kind: &[u8; 4], chunks: &[Vec<u8>]) -> Vec<u8> {
    chunk(id, &[kind.to_vec(), chunks.concat()].concat())
}

/// The capture time `embedded_video_date` finds in a file holding `bytes`.
fn date_in(bytes: &[u8]) -> Option<NaiveDateTime> {
    let file = tempfile::tempfile().unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0).unwrap();
    embedded_video_date(&file).map(|c| c.at.naive_utc())
}

#[test]
fn an_avis_idit_is_found_in_its_header_list_and_at_its_top_level_before_the_frames() {
    let idit = |text: &[u8]| chunk(b"IDIT", text);
    let avih = chunk(b"avih", &(0..56).collect::<Vec<u8>>());
    // An odd-sized chunk is padded to an even length: the next one starts after the padding.
    let odd = chunk(b"ISFT", b"Lavf5");
    let frames = list(b"LIST", b"movi", &[chunk(b"00dc", &[0; 100])]);
    let header = list(b"LIST", b"hdrl", &[avih.clone(), odd.clone(), idit(b"2010:10:28 11:22:33")]);
    let in_header = list(b"RIFF", b"AVI ", &[header, frames.clone()]);
    assert_eq!(date_in(&in_header), Some(local(2010, 10, 28, 11, 22, 33)), "in the header list");
    // At the top level, after the header list and 300 KB of padding, and after a list of another kind whose
    // chunks are not the RIFF's.
    let info = list(b"LIST", b"INFO", &[idit(b"1999:01:01 00:00:00")]);
    let header = list(b"LIST", b"hdrl", &[avih.clone(), odd.clone()]);
    let junk = chunk(b"JUNK", &vec![0; 300_000]);
    let top = list(b"RIFF", b"AVI ", &[header, junk, info, odd, idit(b"2011:01:02 03:04:05"), frames]);
    assert_eq!(date_in(&top), Some(local(2011, 1, 2, 3, 4, 5)), "at the top level");
}

#[test]
fn nothing_past_an_avis_frames_its_end_or_its_first_mebibyte_is_taken_for_its_date() {
    let idit = chunk(b"IDIT", b"2010:10:28 11:22:33");
    let header = list(b"LIST", b"hdrl", &[chunk(b"avih", &[0; 56])]);
    let frames = list(b"LIST", b"movi", &[chunk(b"00dc", &[0; 100])]);
    let riff = |chunks: &[Vec<u8>]| list(b"RIFF", b"AVI ", chunks);
    let whole = riff(&[header.clone(), idit.clone()]);
    assert_eq!(date_in(&whole), Some(local(2010, 10, 28, 11, 22, 33)), "the control");
    // A chunk that runs past the end of the header list: the top level goes on after the list, not after the
    // chunk (inside the next one, here a decoy).
    let decoy = chunk(b"JUNK", &chunk(b"IDIT", b"1999:01:01 00:00:00"));
    let past = [&b"hdrl"[..], &chunk(b"avih", &[0; 56]), b"JUNK", &8u32.to_le_bytes()].concat();
    let past = riff(&[chunk(b"LIST", &past), decoy, idit.clone(), frames.clone()]);
    assert_eq!(date_in(&past), Some(local(2010, 10, 28, 11, 22, 33)), "a chunk past the header list's end");
    // A header list that ends with bytes that are no chunk: the top level goes on after it.
    for tail in [2, 4, 12] {
        let avih = chunk(b"avih", &[0; 56]);
        let ragged = chunk(b"LIST", &[&b"hdrl"[..], &avih, &vec![0; tail]].concat());
        let after_it = riff(&[ragged, idit.clone(), frames.clone()]);
        assert_eq!(date_in(&after_it), Some(local(2010, 10, 28, 11, 22, 33)), "a header list ending in {tail} bytes");
    }
    let after_frames = riff(&[header.clone(), frames.clone(), idit.clone()]);
    assert_eq!(date_in(&after_frames), None, "after the frames");
    for chunks in [vec![header.clone(), frames], vec![header.clone()]] {
        let after_the_riff = [riff(&chunks), idit.clone()].concat();
        assert_eq!(date_in(&after_the_riff), None, "after the RIFF's end ({} chunks)", chunks.len());
    }
    let far = riff(&[header.clone(), chunk(b"JUNK", &vec![0; 1 << 20]), idit.clone()]);
    assert_eq!(date_in(&far), None, "past the first mebibyte");
    let wave = list(b"RIFF", b"WAVE", &[chunk(b"fmt ", &[0; 16]), idit.clone()]);
    assert_eq!(date_in(&wave), None, "a RIFF that is not an AVI");
    // Files cut short anywhere give nothing, and never a panic.
    for len in 0..whole.len() - 2 {
        assert_eq!(date_in(&whole[..len]), None, "cut at {len}");
    }
}

#[test]
fn a_folder_or_an_empty_file_has_no_embedded_date() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(embedded_video_date(&std::fs::File::open(dir.path()).unwrap()), None);
    assert_eq!(date_in(b""), None);
    assert_eq!(read_head(&std::fs::File::open(dir.path()).unwrap(), 0, 16), b"", "a folder reads as nothing");
}

/// 188-byte packets of the null stream (packet id 0x1FFF), which carries nothing.
fn null_packets(count: usize) -> Vec<u8> {
    let mut packet = vec![0x47, 0x1f, 0xff, 0x10];
    packet.resize(188, 0xff);
    packet.repeat(count)
}

/// A transport stream's 188-byte packets as M2TS writes them: 192 bytes, a 4-byte time stamp first (its first
/// byte `stamp`, the rest zeros).
fn m2ts(ts: &[u8], stamp: u8) -> Vec<u8> {
    ts.chunks_exact(188).flat_map(|p| [&[stamp, 0, 0, 0][..], p].concat()).collect()
}

/// The elementary stream of a camcorder's first picture: an access unit delimiter, an SEI unit
/// ([`sei_unit`]), a slice; then the next picture's delimiter, which ends the slice's unit.
fn camcorder_picture(filler: usize, date: [u8; 7]) -> Vec<u8> {
    [nal(0x09, &[0xf0]), sei_unit(filler, Some(date)), nal(0x65, &[0x88, 0x84, 0x21]), nal(0x09, &[0xf0])].concat()
}

/// An SEI unit holding `filler` bytes of another message and then, with a `date` (`YYYYMMDDhhmmss` in BCD), the
/// MDPM message of that date.
fn sei_unit(filler: usize, date: Option<[u8; 7]>) -> Vec<u8> {
    // An SEI number: a run of 0xFF bytes (255 each) and a last byte added to them.
    fn number(sei: &mut Vec<u8>, n: usize) {
        sei.extend(std::iter::repeat_n(0xff, n / 255));
        sei.push((n % 255) as u8);
    }
    let mut sei = Vec::new();
    if filler > 0 {
        number(&mut sei, 4);
        number(&mut sei, filler);
        sei.extend(std::iter::repeat_n(0x55, filler));
    }
    if let Some(date) = date {
        let mut message = MDPM_UUID.to_vec();
        message.extend(mdpm(0x00, date));
        number(&mut sei, 5);
        number(&mut sei, message.len());
        sei.extend_from_slice(&message);
    }
    sei.push(0x80);
    nal(0x06, &sei)
}

#[test]
fn an_avchd_date_is_looked_for_in_the_first_reads_in_either_packet_size() {
    let picture = packets(0x1011, &camcorder_picture(0, [0x20, 0x10, 0x10, 0x28, 0x11, 0x22, 0x33]));
    let expected = Some(local(2010, 10, 28, 11, 22, 33));
    // 1,100 packets of something else first: past the first read.
    let late = [null_packets(1_100), picture.clone()].concat();
    assert_eq!(date_in(&late), expected, "188-byte packets");
    assert_eq!(date_in(&m2ts(&late, 0)), expected, "192-byte packets");
    // A time stamp may begin with the sync byte: the packets are told by four sync bytes in a row.
    assert_eq!(date_in(&m2ts(&late, 0x47)), expected, "192-byte packets, stamps starting 0x47");
    let reads = AVCHD_READS as usize * PACKETS_PER_READ;
    let last = [null_packets(reads - 1), picture.clone()].concat();
    assert_eq!(date_in(&last), expected, "in the last packet read");
    let past = [null_packets(reads), picture].concat();
    assert_eq!(date_in(&past), None, "past the last read");
}

#[test]
fn a_pes_headers_optional_fields_and_other_streams_packets_are_not_the_video() {
    let real = camcorder_picture(0, [0x20, 0x10, 0x10, 0x28, 0x11, 0x22, 0x33]);
    let decoy = camcorder_picture(0, [0x20, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00]);
    let expected = Some(local(2010, 10, 28, 11, 22, 33));
    // A PES header whose optional fields (here 0xFF stuffing around a decoy) are skipped by their length.
    let mut pes = vec![0, 0, 1, 0xe0, 0, 0, 0x80, 0, (decoy.len() + 2) as u8, 0xff];
    pes.extend_from_slice(&decoy);
    pes.push(0xff);
    pes.extend_from_slice(&real);
    let mut stream = Vec::new();
    for (i, part) in pes.chunks(184).enumerate() {
        let mut packet = vec![0x47, if i == 0 { 0x50 } else { 0x10 }, 0x11, 0x10 | i as u8];
        packet.extend_from_slice(part);
        packet.resize(188, 0xff);
        stream.extend(packet);
    }
    assert_eq!(date_in(&[null_packets(4), stream].concat()), expected, "the header's fields skipped");
    // An audio stream (PES id 0xC0) carrying the decoy is not a video stream; nor is a video stream's packet
    // with no payload (an adaptation field only, as PCR packets are) part of its bytes, however it goes on.
    let audio = pes_packets(0x1100, 0xc0, &decoy);
    let mut adaptation_only = vec![0x47, 0x10, 0x11, 0x20, 183, 0];
    adaptation_only.extend_from_slice(&decoy[..40]);
    adaptation_only.resize(188, 0xff);
    let video = packets(0x1011, &camcorder_picture(400, [0x20, 0x10, 0x10, 0x28, 0x11, 0x22, 0x33]));
    let (first, rest) = video.split_at(188);
    let mixed = [null_packets(4), audio, first.to_vec(), adaptation_only, rest.to_vec()].concat();
    assert_eq!(date_in(&mixed), expected, "other streams' packets left out");
    assert_eq!(date_in(&[null_packets(4), video].concat()), expected, "the control");
}
