//! What a tool writes, read with a bound: a damaged or crafted file can make ffmpeg report an error for every
//! frame, or ffprobe describe a million tags, for as long as the tool's time limit lets it run, and a NAS
//! with a gigabyte of memory must not keep all of it. The standard output, which the Worker parses, is read up
//! to [`MOST_TOOL_OUTPUT`]; past it, the tool is stopped. Of the standard error, which the Worker reads only
//! for the tool's last words, the end is kept ([`ERROR_TAIL`]), and the rest is read and dropped, so the tool
//! never waits on a full pipe.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::MediaError;
use crate::error::Picture;

/// The most a tool may write to its standard output: far more than any file's description takes (ffprobe's
/// JSON of a file's streams and tags, heif-info's list of images, a few kilobytes for a camera's file).
/// docs/media.md gives it (checked by a test).
pub(crate) const MOST_TOOL_OUTPUT: usize = 16 << 20;

/// How much of the end of a tool's standard error is kept. docs/media.md gives it (checked by a test).
pub(crate) const ERROR_TAIL: usize = 64 << 10;

/// How a read of a tool's output ended early.
#[derive(Debug)]
pub(crate) enum Unread {
    /// The pipe could not be read.
    Io(std::io::Error),
    /// The tool wrote more than [`MOST_TOOL_OUTPUT`].
    TooMuch,
}

/// Reads `from` to its end into `out`, or stops once more than `most` bytes came.
pub(crate) async fn read_at_most(
    from: &mut (impl AsyncRead + Unpin),
    out: &mut Vec<u8>,
    most: usize,
) -> Result<(), Unread> {
    let read = from.take(most as u64 + 1).read_to_end(out).await.map_err(Unread::Io)?;
    if read > most { Err(Unread::TooMuch) } else { Ok(()) }
}

/// Reads `from` to its end, keeping in `tail` at most its last `keep` bytes (cut at a line's start when one is
/// within them and a line follows it, so the first line kept is whole and the last is never lost).
pub(crate) async fn read_tail(
    from: &mut (impl AsyncRead + Unpin),
    tail: &mut Vec<u8>,
    keep: usize,
) -> Result<(), Unread> {
    let mut chunk = vec![0; 8192];
    loop {
        let n = from.read(&mut chunk).await.map_err(Unread::Io)?;
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > 2 * keep {
            tail.drain(..tail.len() - keep);
        }
    }
    if tail.len() > keep {
        let over = tail.len() - keep;
        let start = if tail[over - 1] == b'\n' {
            over
        } else {
            match tail[over..].iter().position(|&b| b == b'\n') {
                Some(at) if over + at + 1 < tail.len() => over + at + 1,
                _ => over,
            }
        };
        tail.drain(..start);
    }
    Ok(())
}

/// What a decoder writes when a picture is larger than it was told to allow (libavcodec's option `max_pixels`,
/// which the Worker gives ffmpeg and ffprobe from `storage.max_image_megapixels`), in either wording:
/// libavutil's, for every decoder of libavcodec ("Picture size 16384x8192 exceeds specified max pixel count
/// 100000000, see the documentation if you wish to increase it"), and dav1d's, the AV1 decoder ffmpeg prefers,
/// which is given the same limit ("Frame size 16384x8192 exceeds limit 100000000"). Its width, height and the
/// limit, from the last such line of `log`; `None` when there is none.
pub(crate) fn pixel_limit_refusal(log: &[u8]) -> Option<(u32, u32, u64)> {
    const WORDINGS: [(&str, &str); 2] =
        [("Picture size ", " exceeds specified max pixel count "), ("Frame size ", " exceeds limit ")];
    let text = String::from_utf8_lossy(log);
    text.lines().rev().find_map(|line| {
        WORDINGS.iter().find_map(|(before, between)| {
            let (_, size) = line.split_once(before)?;
            let (size, rest) = size.split_once(between)?;
            let (width, height) = size.split_once('x')?;
            let limit: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Some((width.parse().ok()?, height.parse().ok()?, limit.parse().ok()?))
        })
    })
}

/// What libheif's `heif-convert` writes when it could not write its output ("could not write image", after the
/// writer's own words: libjpeg's "Output file write error --- out of disk space?" for any failed write): it then ends
/// with success all the same, its output cut short. Its words, the lines from the writer's on; `None` when it wrote
/// its output.
pub(crate) fn write_refusal(log: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(log);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let at = lines.iter().rposition(|l| *l == "could not write image")?;
    Some(lines[at.saturating_sub(1)..=at].join(": "))
}

/// What a tool's messages (`log`) say it refused, however it ended: ffmpeg or ffprobe refusing a picture over the
/// limit it was given (it fails when the stream's first picture is over it, but ends with success on a stream that
/// grows past it midway, having left out every picture from there: a web video cut short); heif-convert unable to
/// write its output (a full volume), which ends with success all the same, leaving its output cut short: the proxy
/// volume's failure, at the output it was given last (`args`), not the file's.
pub(crate) fn refused_however_it_ended(
    tool: &str,
    package: &str,
    args: &[OsString],
    path: &Path,
    log: &[u8],
) -> Option<MediaError> {
    if package == "ffmpeg"
        && let Some((width, height, limit)) = pixel_limit_refusal(log)
    {
        return Some(MediaError::too_many_pixels(path, Picture::VideoFrame, width, height, limit));
    }
    let said = write_refusal(log).filter(|_| tool == "heif-convert")?;
    let output = args.last().map_or_else(|| path.to_owned(), PathBuf::from);
    Some(MediaError::write(output, std::io::Error::other(said)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heif_converts_refusal_to_write_is_read_with_the_writers_words() {
        let full = b"Output file write error --- out of disk space?\ncould not write image\n";
        assert_eq!(
            write_refusal(full).as_deref(),
            Some("Output file write error --- out of disk space?: could not write image")
        );
        assert_eq!(write_refusal(b"could not write image\n").as_deref(), Some("could not write image"));
        assert_eq!(write_refusal(b"File contains 1 image\nWritten to out.jpg\n"), None);
        assert_eq!(write_refusal(b""), None);
    }

    #[test]
    fn libavcodecs_refusal_of_a_picture_gives_its_size_and_the_limit() {
        let log = b"[h264 @ 0x55e6] [IMGUTILS @ 0x7ffe] Picture size 16384x8192 exceeds specified max pixel count \
                    100000000, see the documentation if you wish to increase it\n[h264 @ 0x55e6] no frame!\n\
                    Error while decoding stream #0:0: Invalid data found when processing input\n";
        assert_eq!(pixel_limit_refusal(log), Some((16384, 8192, 100_000_000)));
        let dav1d = b"[libdav1d @ 0x55] Frame size 7680x4320 exceeds limit 1000000\n[libdav1d @ 0x55] Error\n";
        assert_eq!(pixel_limit_refusal(dav1d), Some((7680, 4320, 1_000_000)));
        let other = b"[h264 @ 0x1] error while decoding MB 12 7\nPicture size is what it is\nFrame size exceeds\n";
        assert_eq!(pixel_limit_refusal(other), None);
        assert_eq!(pixel_limit_refusal(b""), None);
    }

    /// A reader of `total` bytes of `line` over and over, then `last`.
    fn flood(line: &[u8], total: usize, last: &[u8]) -> std::io::Cursor<Vec<u8>> {
        let mut bytes: Vec<u8> = line.iter().copied().cycle().take(total).collect();
        bytes.extend_from_slice(last);
        std::io::Cursor::new(bytes)
    }

    /// docs/media.md gives both bounds as they are.
    #[test]
    fn the_docs_give_the_bounds_as_they_are() {
        let docs = include_str!("../../../docs/media.md").split_whitespace().collect::<Vec<_>>().join(" ");
        let output = format!("up to {} MiB, past which the tool is stopped", MOST_TOOL_OUTPUT >> 20);
        let errors = format!("only the last {} KiB are kept", ERROR_TAIL >> 10);
        assert!(docs.contains(&output), "docs/media.md should say a tool's output is read {output}");
        assert!(docs.contains(&errors), "docs/media.md should say of a tool's errors {errors}");
    }

    #[tokio::test]
    async fn the_tail_keeps_the_last_words_of_a_flood_within_its_bound() {
        let mut from = flood(b"[h264 @ 0x1] error while decoding MB 12 7\n", 5 << 20, b"last words\n");
        let mut tail = Vec::new();
        read_tail(&mut from, &mut tail, 1024).await.unwrap();
        assert!(tail.len() <= 1024, "{} bytes kept", tail.len());
        assert!(tail.ends_with(b"last words\n"));
        assert!(tail.starts_with(b"[h264"), "the first line kept is whole: {:?}", String::from_utf8_lossy(&tail));
    }

    /// A last line longer than what is kept, or the only newline at the very end: its end is kept, never nothing.
    #[tokio::test]
    async fn a_last_line_longer_than_the_tail_keeps_its_end() {
        for last in [&b"\n"[..], b""] {
            let mut from = flood(b"x", 5000, &[&b"the end"[..], last].concat());
            let mut tail = Vec::new();
            read_tail(&mut from, &mut tail, 1024).await.unwrap();
            assert_eq!(tail.len(), 1024);
            assert!(tail.starts_with(b"x") && tail.ends_with(&[&b"the end"[..], last].concat()));
        }
        // A first line that is whole where the cut falls is kept whole.
        let mut from = flood(b"", 0, &[vec![b'a'; 2000], b"\n".to_vec(), vec![b'b'; 1023], b"\n".to_vec()].concat());
        let mut tail = Vec::new();
        read_tail(&mut from, &mut tail, 1024).await.unwrap();
        assert_eq!(tail, [vec![b'b'; 1023], b"\n".to_vec()].concat());
    }

    #[tokio::test]
    async fn the_tail_of_a_short_error_is_all_of_it() {
        let mut from = flood(b"", 0, b"one line\ntwo lines\n");
        let mut tail = Vec::new();
        read_tail(&mut from, &mut tail, 1024).await.unwrap();
        assert_eq!(tail, b"one line\ntwo lines\n");
    }

    #[tokio::test]
    async fn an_output_of_the_bound_is_read_and_one_byte_more_is_too_much() {
        let mut out = Vec::new();
        read_at_most(&mut flood(b"x", 100, b""), &mut out, 100).await.unwrap();
        assert_eq!(out.len(), 100);
        let mut out = Vec::new();
        let over = read_at_most(&mut flood(b"x", 101, b""), &mut out, 100).await;
        assert!(matches!(over, Err(Unread::TooMuch)), "{over:?}");
        assert!(out.len() <= 101);
    }
}
