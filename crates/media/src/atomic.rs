use std::io::Write;
use std::path::Path;

use crate::MediaError;

/// Writes `bytes` to `dest` so that `dest` only ever holds a complete file: write a temporary file beside it,
/// flush, then rename over `dest`. A retry overwrites its own debris.
pub fn write_atomically(dest: &Path, bytes: &[u8]) -> Result<(), MediaError> {
    let dir = dest.parent().ok_or_else(|| MediaError::io(dest, std::io::Error::other("no parent folder")))?;
    write_all_atomically(dir, &[(dest.file_name().map(Path::new).unwrap_or(dest), bytes)])
}

/// [`write_atomically`] for several files of one folder: each is written and flushed under its temporary name,
/// then all are renamed into place and the folder is made durable once (one folder flush instead of one per
/// file).
pub fn write_all_atomically(dir: &Path, files: &[(&Path, &[u8])]) -> Result<(), MediaError> {
    std::fs::create_dir_all(dir).map_err(|e| MediaError::io(dir, e))?;
    for (name, bytes) in files {
        let tmp = temporary_name(&dir.join(name));
        let mut file = std::fs::File::create(&tmp).map_err(|e| MediaError::io(&tmp, e))?;
        file.write_all(bytes).map_err(|e| MediaError::io(&tmp, e))?;
        file.sync_data().map_err(|e| MediaError::io(&tmp, e))?;
    }
    for (name, _) in files {
        let dest = dir.join(name);
        std::fs::rename(temporary_name(&dest), &dest).map_err(|e| MediaError::io(&dest, e))?;
    }
    sync_folder(dir)
}

/// Makes a folder's entries durable (after a rename into it), so a power cut cannot leave a proxy row
/// pointing at a name that never reached the disk.
pub fn sync_folder(dir: &Path) -> Result<(), MediaError> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(|e| MediaError::io(dir, e))
}

/// Flushes a finished file to disk before it is renamed into place.
pub(crate) fn sync_file(path: &Path) -> Result<(), MediaError> {
    std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(|e| MediaError::io(path, e))
}

/// The temporary name used for `dest` while it is being written: hidden, in the same folder.
pub(crate) fn temporary_name(dest: &Path) -> std::path::PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dest.with_file_name(format!(".{name}.tmp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_through_a_temporary_name_and_replaces_debris() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("a/b/preview.jpg");
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(temporary_name(&dest), b"debris of an earlier attempt").unwrap();
        std::fs::write(&dest, b"old").unwrap();
        write_atomically(&dest, b"new").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        assert!(!temporary_name(&dest).exists());
        let expected = almanac_domain::ProxyType::Preview.temporary_file_name().unwrap();
        assert_eq!(temporary_name(&dest).file_name().unwrap(), expected, "the name the proxy sweep knows as ours");
    }
}
