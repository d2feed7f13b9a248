use std::io::Read;
use std::path::Path;

use almanac_domain::ContentHash;

use tokio_util::sync::CancellationToken;

use crate::MediaError;

/// A content hash and how many bytes were read to make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedBytes {
    /// BLAKE3 of the content.
    pub hash: ContentHash,
    /// Bytes read.
    pub bytes: u64,
}

/// Hashes a file with BLAKE3, streaming in 256 KiB blocks: never the whole file in memory.
/// Opens the path, following links: for files of ours (proxies), never for originals, which are opened
/// beneath their root ([`crate::RootFolder`]) and hashed with [`hash_reader`].
pub fn hash_file(path: &Path) -> Result<HashedBytes, MediaError> {
    let file = std::fs::File::open(path).map_err(|e| MediaError::io(path, e))?;
    hash_reader(file, path, &CancellationToken::new())
}

/// Hashes what `reader` yields to its end with BLAKE3, streaming in 256 KiB blocks (an original opened
/// beneath its root is hashed through its open file, never by path). Checks `cancel` between blocks, so a
/// huge (or sparse, or endless) file cannot hold a cancelled crawl. `path` is for messages only.
pub fn hash_reader(mut file: impl Read, path: &Path, cancel: &CancellationToken) -> Result<HashedBytes, MediaError> {
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut bytes = 0u64;
    loop {
        if cancel.is_cancelled() {
            return Err(MediaError::Cancelled);
        }
        let n = file.read(&mut buffer).map_err(|e| MediaError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok(HashedBytes { hash: ContentHash::from_bytes(*hasher.finalize().as_bytes()), bytes })
}

/// Hashes content already in memory.
pub fn hash_bytes(content: &[u8]) -> HashedBytes {
    HashedBytes { hash: ContentHash::from_bytes(*blake3::hash(content).as_bytes()), bytes: content.len() as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_memory_hashes_agree_and_count_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let content: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let from_file = hash_file(&path).unwrap();
        assert_eq!(from_file, hash_bytes(&content));
        assert_eq!(from_file.bytes, 700_000);
        assert_eq!(hash_bytes(b"").hash.as_hex(), "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
        assert_ne!(hash_bytes(b"a").hash, hash_bytes(b"b").hash);
    }

    #[test]
    fn an_endless_file_stops_at_cancellation() {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        // An endless stream of zeros, like a sparse file of exabytes: cancelled after some blocks.
        let mut served = 0u64;
        let endless = std::iter::repeat_with(move || {
            served += 1;
            if served == 40 {
                trigger.cancel();
            }
        });
        struct Zeros<I>(I);
        impl<I: Iterator<Item = ()>> Read for Zeros<I> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.0.next();
                buf.fill(0);
                Ok(buf.len())
            }
        }
        let err = hash_reader(Zeros(endless), Path::new("huge.mp4"), &cancel).unwrap_err();
        assert!(matches!(err, MediaError::Cancelled), "{err:?}");
    }

    #[test]
    fn missing_file_is_an_error_naming_it() {
        let err = hash_file(Path::new("/nonexistent/photo.jpg")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/photo.jpg"));
    }
}
