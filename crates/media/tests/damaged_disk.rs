//! A disk whose inode table took a bad write: a folder lists a name the kernel then refuses to look up
//! ("Structure needs cleaning"). The volume is an ext4 file system in an image file, damaged with `debugfs`;
//! where it cannot be made or mounted (not root, no loop devices) the test says SKIPPED and passes.

use std::ffi::OsString;

use almanac_media::scratch_volume::ScratchVolume;
use almanac_media::{EntryKind, OpenError, RootFolder};

#[test]
fn a_damaged_entry_is_handed_back_beside_the_others_and_fails_a_whole_listing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut volume) = ScratchVolume::ext4(&dir.path().join("disk")) else { return };
    std::fs::create_dir(volume.path().join("trip")).unwrap();
    for name in ["a.jpg", "b.jpg", "c.jpg"] {
        std::fs::write(volume.path().join("trip").join(name), name).unwrap();
    }
    volume.damage_inode("trip/b.jpg");
    let looked = std::fs::symlink_metadata(volume.path().join("trip/b.jpg")).unwrap_err();
    assert_eq!(looked.raw_os_error(), Some(117), "EUCLEAN, as the kernel says of a damaged inode: {looked}");

    let root = RootFolder::open(volume.path()).unwrap();
    let folder = root.open_folder(b"trip").unwrap();
    let listing = root.list_each(&folder, b"trip").unwrap();
    let mut names: Vec<OsString> = listing.entries.iter().map(|e| e.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["a.jpg", "c.jpg"]);
    assert_eq!(listing.unexamined.len(), 1, "{listing:?}");
    let damaged = &listing.unexamined[0];
    assert_eq!(damaged.name, "b.jpg");
    assert_eq!(damaged.listed_as, Some(EntryKind::File), "ext4 gives each name's type in its folder");
    assert_eq!(damaged.error.raw_os_error(), Some(117));

    // A damaged entry may be there: only what is known to be gone is not.
    assert!(root.exists(b"trip/b.jpg") && root.exists(b"trip/a.jpg") && !root.exists(b"trip/gone.jpg"));

    // The listing that must know the whole folder or nothing of it fails, naming the entry.
    match root.list(&folder, b"trip") {
        Err(OpenError::Io { path, source }) => {
            assert!(path.ends_with("trip/b.jpg"), "{}", path.display());
            assert_eq!(source.raw_os_error(), Some(117));
        }
        other => panic!("a whole listing of a folder with a damaged entry: {other:?}"),
    }
}
