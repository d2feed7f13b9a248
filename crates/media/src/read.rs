//! Reading an original for ingest: opened beneath its root with no link followed, its format confirmed by its
//! content (not only its name), and hashed through the open file, which the tools then read.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use almanac_domain::{ContentHash, MediaType};
use tokio_util::sync::CancellationToken;

use crate::{MAGIC_LEN, MAX_XMP_BYTES, MediaError, MediaFormat, OpenError, Original, RootFolder, detect_format};

/// Stills larger than this are not read (a 12 MP JPEG is about 5 MB; a still is decoded from memory).
pub const MAX_STILL_BYTES: u64 = 256 * 1024 * 1024;

/// What of an original's content was kept when it was read.
#[derive(Debug)]
pub enum Content {
    /// A still: all of it, read once (its decoder needs the whole file anyway).
    Still(Vec<u8>),
    /// A video: streamed through the hash, and read again by the tools through the open file.
    Video,
}

/// An original opened beneath its root and hashed.
#[derive(Debug)]
pub struct ReadOriginal {
    /// The open file, for the tools that read it next.
    pub original: Original,
    /// Its format, by name and content.
    pub format: MediaFormat,
    /// A still's bytes, or that it is a video.
    pub content: Content,
    /// BLAKE3 of the content.
    pub hash: ContentHash,
    /// Bytes read to hash it.
    pub bytes: u64,
}

/// Why an original was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// It vanished since the folder was listed: passed over.
    #[error("vanished during the crawl")]
    Vanished,
    /// Its content is not the supported image or video its name says: passed over.
    #[error("not a supported image or video by its content")]
    NotMedia,
    /// It could not be read, or is too large for a still.
    #[error("{0}")]
    Unreadable(String),
    /// The crawl was cancelled while it was hashed.
    #[error("cancelled")]
    Cancelled,
}

impl From<MediaError> for ReadError {
    fn from(e: MediaError) -> Self {
        match e {
            MediaError::Cancelled => ReadError::Cancelled,
            other => ReadError::Unreadable(other.to_string()),
        }
    }
}

/// Opens `rel` beneath `root` (no link followed), reads its first bytes to confirm its format, and hashes it
/// through the open file: a still is read into memory once, at most `max_still_bytes` even if it grows
/// meanwhile ([`MAX_STILL_BYTES`] in the crawl); a video is streamed, checking `cancel` between blocks. Read
/// at the Worker's low priority ([`crate::gently`]). Blocking.
pub fn read_original(
    root: &RootFolder,
    rel: &[u8],
    max_still_bytes: u64,
    cancel: &CancellationToken,
) -> Result<ReadOriginal, ReadError> {
    crate::gently(|| read_original_now(root, rel, max_still_bytes, cancel))
}

fn read_original_now(
    root: &RootFolder,
    rel: &[u8],
    max_still_bytes: u64,
    cancel: &CancellationToken,
) -> Result<ReadOriginal, ReadError> {
    let original = root.open_file(rel).map_err(|e| match e {
        OpenError::Vanished(_) => ReadError::Vanished,
        other => ReadError::Unreadable(other.to_string()),
    })?;
    let cannot_read = |e: std::io::Error| ReadError::Unreadable(format!("cannot read: {e}"));
    // Each read a call into the share (`RootFolder::answers`), so a share that stops answering is told apart from a
    // slow one.
    let mut file = original.reader();
    let mut head = Vec::with_capacity(MAGIC_LEN);
    (&mut file).take(MAGIC_LEN as u64).read_to_end(&mut head).map_err(cannot_read)?;
    let format = detect_format(Path::new(std::ffi::OsStr::from_bytes(rel)), &head).ok_or(ReadError::NotMedia)?;
    // From the start again: the hash covers the whole file.
    file.seek(SeekFrom::Start(0)).map_err(cannot_read)?;
    let (content, hashed) = match format.media_type() {
        MediaType::Image => {
            // Refused before anything is read (a still is held in memory whole).
            let len = original.size_and_mtime().map_err(cannot_read)?.0;
            if len > max_still_bytes {
                return Err(ReadError::Unreadable(format!(
                    "{len} bytes is too large for a still (at most {max_still_bytes})"
                )));
            }
            // Bounded at one byte past the limit: a file that grows while it is read is not read without end,
            // and that byte tells it apart from one that ends at the limit.
            let mut content = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
            (&mut file).take(max_still_bytes.saturating_add(1)).read_to_end(&mut content).map_err(cannot_read)?;
            let within_limit = content.len() as u64 <= max_still_bytes;
            if !within_limit {
                return Err(ReadError::Unreadable(format!(
                    "it grew past {max_still_bytes} bytes while it was read, too large for a still"
                )));
            }
            let hashed = crate::hash_bytes(&content);
            (Content::Still(content), hashed)
        }
        MediaType::Video => (Content::Video, crate::hash_reader(file, original.path(), cancel)?),
    };
    Ok(ReadOriginal { original, format, content, hash: hashed.hash, bytes: hashed.bytes })
}

/// Reads an XMP sidecar beneath `root` like an original (no link followed), at most [`MAX_XMP_BYTES`] and
/// one byte more (so that the parser can tell one too large). Blocking.
pub fn read_sidecar(root: &RootFolder, rel: &[u8]) -> Result<Vec<u8>, ReadError> {
    let original = root.open_file(rel).map_err(|e| match e {
        OpenError::Vanished(_) => ReadError::Vanished,
        other => ReadError::Unreadable(other.to_string()),
    })?;
    let mut bytes = Vec::new();
    original
        .reader()
        .take(MAX_XMP_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Unreadable(format!("cannot read: {e}")))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(files: &[(&str, &[u8])]) -> (tempfile::TempDir, RootFolder) {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        let root = RootFolder::open(dir.path()).unwrap();
        (dir, root)
    }

    fn mp4(rest: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 24];
        v.extend_from_slice(b"ftypisom");
        v.extend_from_slice(&[0; 12]);
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn a_still_is_kept_whole_and_a_video_only_hashed_both_as_hashing_the_file_would() {
        let jpeg = crate::fixtures::jpeg(64, 48, 1, false, &crate::fixtures::FixtureExif::default());
        let video = mp4(&[7u8; 300_000]);
        let (dir, root) = root_with(&[("a.jpg", &jpeg), ("b.mp4", &video)]);
        let cancel = CancellationToken::new();
        let still = read_original(&root, b"a.jpg", MAX_STILL_BYTES, &cancel).unwrap();
        assert_eq!(still.format, MediaFormat::Jpeg);
        assert!(matches!(&still.content, Content::Still(bytes) if *bytes == jpeg));
        assert_eq!((still.hash, still.bytes), (crate::hash_bytes(&jpeg).hash, jpeg.len() as u64));
        let clip = read_original(&root, b"b.mp4", MAX_STILL_BYTES, &cancel).unwrap();
        assert!(matches!(clip.content, Content::Video));
        let by_path = crate::hash_file(&dir.path().join("b.mp4")).unwrap();
        assert_eq!((clip.hash, clip.bytes), (by_path.hash, by_path.bytes));
    }

    #[test]
    fn a_name_that_lies_a_vanished_file_and_a_link_are_not_read() {
        let (dir, root) = root_with(&[("notes.jpg", b"plain text, not a picture"), ("real.jpg", b"\xFF\xD8\xFF\xE0")]);
        std::os::unix::fs::symlink(dir.path().join("real.jpg"), dir.path().join("link.jpg")).unwrap();
        let cancel = CancellationToken::new();
        assert!(matches!(read_original(&root, b"notes.jpg", MAX_STILL_BYTES, &cancel), Err(ReadError::NotMedia)));
        assert!(matches!(read_original(&root, b"gone.jpg", MAX_STILL_BYTES, &cancel), Err(ReadError::Vanished)));
        assert!(matches!(read_original(&root, b"link.jpg", MAX_STILL_BYTES, &cancel), Err(ReadError::Unreadable(_))));
        assert!(matches!(read_sidecar(&root, b"link.jpg"), Err(ReadError::Unreadable(_))));
    }

    #[test]
    fn a_still_too_large_is_refused_before_it_is_read_and_a_cancelled_video_stops() {
        let (dir, root) = root_with(&[("huge.jpg", b"\xFF\xD8\xFF\xE0"), ("long.mp4", &mp4(&[1u8; 1024]))]);
        // Sparse: the length is what counts, nothing is written.
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("huge.jpg"))
            .unwrap()
            .set_len(MAX_STILL_BYTES + 1)
            .unwrap();
        let cancel = CancellationToken::new();
        let e = read_original(&root, b"huge.jpg", MAX_STILL_BYTES, &cancel).unwrap_err();
        assert!(e.to_string().contains("too large for a still"), "{e}");
        cancel.cancel();
        assert!(matches!(read_original(&root, b"long.mp4", MAX_STILL_BYTES, &cancel), Err(ReadError::Cancelled)));
    }

    /// A JPEG's signature followed by `len - 4` bytes of padding: a still by its content, `len` bytes long.
    fn still_of(len: usize) -> Vec<u8> {
        let mut v = b"\xFF\xD8\xFF\xE0".to_vec();
        v.resize(len, 7);
        v
    }

    #[test]
    fn a_still_of_the_limit_is_read_whole_and_one_byte_more_is_refused_saying_its_size() {
        let (_dir, root) = root_with(&[("at.jpg", &still_of(1000)), ("over.jpg", &still_of(1005))]);
        let cancel = CancellationToken::new();
        let at = read_original(&root, b"at.jpg", 1000, &cancel).unwrap();
        assert!(matches!(&at.content, Content::Still(bytes) if bytes.len() == 1000));
        assert_eq!((at.hash, at.bytes), (crate::hash_bytes(&still_of(1000)).hash, 1000));
        let e = read_original(&root, b"over.jpg", 1000, &cancel).unwrap_err().to_string();
        assert!(e.contains("1005 bytes is too large for a still (at most 1000)"), "{e}");
        // A video has no such limit: it is streamed.
        let (_dir, root) = root_with(&[("clip.mp4", &mp4(&[3u8; 5000]))]);
        assert_eq!(read_original(&root, b"clip.mp4", 1000, &cancel).unwrap().bytes, 5024);
    }

    #[test]
    fn the_crawl_s_limit_takes_a_large_still() {
        // 40 MB: a large TIFF or a RAW's worth, well under the limit.
        let (_dir, root) = root_with(&[("big.jpg", &still_of(40_000_000))]);
        let read = read_original(&root, b"big.jpg", MAX_STILL_BYTES, &CancellationToken::new()).unwrap();
        assert_eq!(read.bytes, 40_000_000);
    }

    #[test]
    fn a_sidecar_is_read_up_to_one_byte_past_the_limit() {
        let big = vec![b'x'; MAX_XMP_BYTES + 100];
        let (_dir, root) = root_with(&[("a.xmp", b"<x:xmpmeta/>"), ("big.xmp", &big)]);
        assert_eq!(read_sidecar(&root, b"a.xmp").unwrap(), b"<x:xmpmeta/>");
        assert_eq!(read_sidecar(&root, b"big.xmp").unwrap().len(), MAX_XMP_BYTES + 1);
        assert!(matches!(read_sidecar(&root, b"none.xmp"), Err(ReadError::Vanished)));
    }
}
