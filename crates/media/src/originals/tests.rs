use std::io::Read;
use std::os::unix::fs::symlink;

use super::*;

fn read_all(root: &RootFolder, rel: &str) -> Result<Vec<u8>, OpenError> {
    let original = root.open_file(rel.as_bytes())?;
    let mut out = Vec::new();
    original.file().read_to_end(&mut out).unwrap();
    Ok(out)
}

/// A root with `a/photo.jpg`, and a secret outside it.
fn layout() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ann");
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::write(root.join("a/photo.jpg"), b"ann's photo").unwrap();
    let outside = dir.path().join("bob");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.jpg"), b"bob's photo").unwrap();
    (dir, root, outside)
}

#[test]
fn files_beneath_the_root_are_read() {
    let (_dir, root, _) = layout();
    let root = RootFolder::open(&root).unwrap();
    assert_eq!(read_all(&root, "a/photo.jpg").unwrap(), b"ann's photo");
    assert!(root.exists(b"a/photo.jpg") && root.exists(b"a") && !root.exists(b"a/none.jpg"));
}

#[test]
fn a_file_or_folder_swapped_for_a_link_is_never_followed() {
    let (_dir, root_path, outside) = layout();
    let root = RootFolder::open(&root_path).unwrap();
    // A file swapped for a link to a file outside.
    std::fs::remove_file(root_path.join("a/photo.jpg")).unwrap();
    symlink(outside.join("secret.jpg"), root_path.join("a/photo.jpg")).unwrap();
    assert!(matches!(read_all(&root, "a/photo.jpg"), Err(OpenError::Escapes(_))));
    // A folder swapped for a link to a folder outside.
    std::fs::remove_dir_all(root_path.join("a")).unwrap();
    symlink(&outside, root_path.join("a")).unwrap();
    assert!(matches!(read_all(&root, "a/secret.jpg"), Err(OpenError::Escapes(_))));
    assert!(matches!(root.open_folder(b"a"), Err(OpenError::Escapes(_))));
    // A link inside the root that stays inside is refused as well: no link is followed at all.
    std::fs::create_dir_all(root_path.join("b")).unwrap();
    std::fs::write(root_path.join("b/real.jpg"), b"x").unwrap();
    symlink("real.jpg", root_path.join("b/alias.jpg")).unwrap();
    assert!(matches!(read_all(&root, "b/alias.jpg"), Err(OpenError::Escapes(_))));
    // `..` never leaves the root.
    assert!(matches!(read_all(&root, "../bob/secret.jpg"), Err(OpenError::Escapes(_))));
}

#[test]
fn a_root_reached_through_a_link_is_refused() {
    let (dir, root_path, outside) = layout();
    // Ann replaces her own root (in a folder she can write) with a link to bob's folder.
    let real = dir.path().join("ann-real");
    std::fs::rename(&root_path, &real).unwrap();
    symlink(&outside, &root_path).unwrap();
    let err = RootFolder::open(&root_path).unwrap_err();
    let refused = [Errno::LOOP, Errno::NOTDIR].map(|e| Some(e.raw_os_error()));
    assert!(refused.contains(&err.raw_os_error()), "{err}");
    // A link higher up the path is refused as well.
    symlink(dir.path(), dir.path().join("up")).unwrap();
    assert!(RootFolder::open(&dir.path().join("up/ann-real")).is_err());
    assert!(RootFolder::open(&real).is_ok());
    assert!(RootFolder::open(Path::new("relative")).is_err());
}

#[test]
fn the_fallback_without_openat2_refuses_the_same_paths() {
    let (_dir, root_path, outside) = layout();
    let root = RootFolder::open(&root_path).unwrap();
    let open = |rel: &str| open_component_by_component(&root.dir, rel.as_bytes(), OFlags::RDONLY);
    assert!(open("a/photo.jpg").is_ok());
    symlink(outside.join("secret.jpg"), root_path.join("a/link.jpg")).unwrap();
    assert_eq!(open("a/link.jpg").unwrap_err(), Errno::LOOP);
    symlink(&outside, root_path.join("c")).unwrap();
    assert_eq!(open("c/secret.jpg").unwrap_err(), Errno::NOTDIR);
    for bad in ["../bob/secret.jpg", "a/../a/photo.jpg", "./a/photo.jpg", "a//photo.jpg", ""] {
        assert!(open(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let (_dir, root_path, _) = layout();
    let fifo = root_path.join("a/pipe.jpg");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let root = RootFolder::open(&root_path).unwrap();
    assert!(matches!(read_all(&root, "a/pipe.jpg"), Err(OpenError::NotAFile(_))));
    let listed = root.list(&root.open_folder(b"a").unwrap(), b"a").unwrap();
    let kinds: Vec<_> = listed.iter().map(|e| (e.name.to_str().unwrap().to_owned(), e.kind)).collect();
    assert!(kinds.contains(&("pipe.jpg".into(), EntryKind::Other)), "{kinds:?}");
    assert!(kinds.contains(&("photo.jpg".into(), EntryKind::File)), "{kinds:?}");
    // A listing holds the folder's entries only: never `.` (the folder itself) or `..` (its parent).
    for folder in [&b""[..], b"a"] {
        let names: Vec<_> =
            root.list(&root.open_folder(folder).unwrap(), folder).unwrap().into_iter().map(|e| e.name).collect();
        assert!(!names.iter().any(|n| n == "." || n == ".."), "{folder:?}: {names:?}");
    }
}

#[test]
fn removal_stays_beneath_the_root_and_rechecks_right_before_the_unlink() {
    let (_dir, root_path, outside) = layout();
    let root = RootFolder::open(&root_path).unwrap();
    assert_eq!(root.remove_file(b"a/photo.jpg", |_| false).unwrap(), Removal::Kept);
    assert!(root_path.join("a/photo.jpg").exists());
    // A folder swapped for a link: nothing outside is removed.
    symlink(&outside, root_path.join("b")).unwrap();
    assert!(matches!(root.remove_file(b"b/secret.jpg", |_| true), Err(OpenError::Escapes(_))));
    assert!(outside.join("secret.jpg").exists());
    // A link as the last component: the link goes, never its target.
    symlink(outside.join("secret.jpg"), root_path.join("a/link.jpg")).unwrap();
    let seen = std::cell::Cell::new(None);
    let removed = root.remove_file(b"a/link.jpg", |e| {
        seen.set(Some(e.kind));
        true
    });
    assert_eq!((removed.unwrap(), seen.get()), (Removal::Removed, Some(EntryKind::Link)));
    assert!(outside.join("secret.jpg").exists() && !root_path.join("a/link.jpg").exists());
    assert_eq!(root.remove_file(b"a/photo.jpg", |e| e.kind == EntryKind::File).unwrap(), Removal::Removed);
    assert_eq!(root.remove_file(b"a/photo.jpg", |_| true).unwrap(), Removal::Gone);
    assert_eq!(root.remove_file(b"a", |_| true).unwrap(), Removal::Kept, "folders are never unlinked");
    std::fs::create_dir_all(root_path.join("c/d/e")).unwrap();
    std::fs::write(root_path.join("c/keep.jpg"), b"x").unwrap();
    root.remove_empty_folders(b"c/d/e");
    assert!(!root_path.join("c/d").exists() && root_path.join("c/keep.jpg").exists());
    root.remove_empty_folders(b"a");
    assert!(!root_path.join("a").exists() && root_path.exists(), "the root itself stays");
}

#[test]
fn a_plain_folder_is_not_a_mount_point_and_proc_is() {
    let (_dir, root_path, _) = layout();
    assert!(!RootFolder::open(&root_path).unwrap().is_mount_point().unwrap());
    assert!(RootFolder::open(Path::new("/proc")).unwrap().is_mount_point().unwrap());
    assert!(RootFolder::open(Path::new("/")).unwrap().is_mount_point().unwrap(), "/ is its own parent");
}

/// An mtime the catalogue cannot hold (before PostgreSQL's first day, or past chrono's last) is the epoch, and the
/// largest seconds with nanoseconds do not overflow; any other is kept to the microsecond.
#[test]
fn an_mtime_the_catalogue_cannot_hold_is_taken_as_unknown() {
    let epoch = DateTime::<Utc>::UNIX_EPOCH;
    let earliest = EARLIEST_TIME.timestamp();
    assert_eq!(mtime_of(1_700_000_000, 123_456_789), DateTime::from_timestamp(1_700_000_000, 123_456_000).unwrap());
    assert_eq!(mtime_of(earliest, 0), EARLIEST_TIME, "the first time PostgreSQL holds is kept");
    assert_eq!(mtime_of(earliest - 1, 999_999_999), epoch, "a microsecond before it is not");
    assert_eq!(mtime_of(i64::MIN, 999_999_999), epoch);
    assert_eq!(mtime_of(i64::MAX, 999_999_999), epoch, "past chrono's last year, and no overflow");
}

#[test]
fn a_name_joins_its_folder_with_one_slash_and_the_root_with_none() {
    assert_eq!(join_beneath(b"", b"ab"), b"ab");
    assert_eq!(join_beneath(b"cfg/ab", b"x.jpg"), b"cfg/ab/x.jpg");
}
