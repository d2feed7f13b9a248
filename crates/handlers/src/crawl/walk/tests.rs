use super::*;

#[test]
fn a_folder_with_the_avoided_identity_is_passed_over_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ann");
    for rel in ["2019/IMG_1.jpg", "proxies/ab/thumbnail.jpg", "2020/IMG_2.JPG"] {
        std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
        std::fs::write(root.join(rel), b"x").unwrap();
    }
    // The proxy root, as a bind mount inside the library would show it: the same folder, seen in the walk.
    let avoid = almanac_media::identity(&root.join("proxies"));
    let folder = RootFolder::open(&root).unwrap();
    let (files, report) = list_tree(&folder, avoid, &CancellationToken::new());
    let rels: Vec<_> = files.iter().map(|f| String::from_utf8_lossy(&f.rel).into_owned()).collect();
    assert_eq!(rels, ["2019/IMG_1.jpg", "2020/IMG_2.JPG"]);
    assert_eq!(report.proxy_root_inside.len(), 1);
    assert!(report.proxy_root_inside[0].ends_with("ann/proxies"), "{:?}", report.proxy_root_inside);
    let (all, _) = list_tree(&folder, None, &CancellationToken::new());
    assert_eq!(all.len(), 3, "without it, the folder is walked");
}

#[test]
fn what_is_not_a_media_file_is_counted_and_never_handed_over() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lib");
    std::fs::create_dir_all(root.join("2019")).unwrap();
    for rel in ["2019/IMG_1.jpg", "2019/IMG_1.xmp", "2019/IMG_2.jpg", "2019/notes.txt"] {
        std::fs::write(root.join(rel), b"x").unwrap();
    }
    // A folder named like IMG_2.jpg's sidecar is a folder, not its sidecar.
    std::fs::create_dir(root.join("2019/IMG_2.xmp")).unwrap();
    // A FIFO with a photo's name (never opened: a read would block) and a link: passed over, counted.
    let status = std::process::Command::new("mkfifo").arg(root.join("2019/pipe.jpg")).status().unwrap();
    assert!(status.success());
    std::os::unix::fs::symlink(root.join("2019/IMG_1.jpg"), root.join("2019/link.jpg")).unwrap();
    let folder = RootFolder::open(&root).unwrap();
    let (files, report) = list_tree(&folder, None, &CancellationToken::new());
    let rels: Vec<_> = files.iter().map(|f| String::from_utf8_lossy(&f.rel).into_owned()).collect();
    assert_eq!(rels, ["2019/IMG_1.jpg", "2019/IMG_2.jpg"]);
    assert_eq!(files[0].sidecar.as_ref().map(|s| s.path.as_slice()), Some(&b"2019/IMG_1.xmp"[..]));
    assert_eq!(files[1].sidecar, None, "a folder is never a sidecar");
    assert_eq!((report.unsupported, report.links), (2, 1), "the FIFO and the text file; the link: {report:?}");
}

#[test]
fn the_walk_hands_over_paths_in_byte_order_whatever_the_names() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lib");
    let names: [&[u8]; 12] = [
        b"a.jpg",
        b"a/b.jpg",
        b"a/b/c.jpg",
        b"a/b0.jpg",
        b"a-b.jpg",
        b"a b/x.jpg",
        b"a0.jpg",
        b"B.jpg",
        b"b.jpg",
        b"\xe9t\xe9/\xff.jpg",
        b"z/z/z/z.jpg",
        b"z.jpg",
    ];
    for rel in names {
        let path = root.join(OsStr::from_bytes(rel));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }
    let folder = RootFolder::open(&root).unwrap();
    let (files, _) = list_tree(&folder, None, &CancellationToken::new());
    let walked: Vec<&[u8]> = files.iter().map(|f| &f.rel[..]).collect();
    let mut sorted = names.to_vec();
    sorted.sort();
    assert_eq!(walked, sorted, "the order the catalogue pages its known files in");
}

#[test]
fn a_folder_sorts_as_its_name_and_a_slash() {
    let entry = |name: &[u8], kind| Entry {
        name: OsStr::from_bytes(name).to_owned(),
        kind,
        size: 0,
        mtime: DateTime::<Utc>::UNIX_EPOCH,
        identity: (0, 0),
        changed: DateTime::<Utc>::UNIX_EPOCH,
    };
    let (folder, file) = (EntryKind::Folder, EntryKind::File);
    use std::cmp::Ordering::{Equal, Greater, Less};
    let cases = [
        (entry(b"a", folder), entry(b"a0.jpg", file), Less),
        (entry(b"a", folder), entry(b"a.jpg", file), Greater),
        (entry(b"a", folder), entry(b"a", file), Greater),
        (entry(b"a", folder), entry(b"a b", folder), Greater),
        (entry(b"a", folder), entry(b"a", folder), Equal),
        (entry(b"a.jpg", file), entry(b"a.jpg", file), Equal),
        (entry(b"a", file), entry(b"a.jpg", file), Less),
        (entry(b"b", file), entry(b"a\xff", folder), Greater),
    ];
    for (a, b, expected) in cases {
        assert_eq!(walk_order(&a, &b), expected, "{a:?} against {b:?}");
        assert_eq!(walk_order(&b, &a), expected.reverse(), "{b:?} against {a:?}");
    }
}

#[test]
fn a_walk_asked_to_stop_stops_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for rel in ["a/1.jpg", "a/2.jpg", "b/3.jpg"] {
        std::fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
        std::fs::write(dir.path().join(rel), b"x").unwrap();
    }
    let folder = RootFolder::open(dir.path()).unwrap();
    let mut handed = 0;
    let report = walk_tree(&folder, None, &CancellationToken::new(), |_| {
        handed += 1;
        handed < 2
    });
    assert!(report.stopped);
    assert_eq!(handed, 2);
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert!(walk_tree(&folder, None, &cancel, |_| true).stopped, "cancelled before the first folder");
}

#[test]
fn a_folder_renamed_while_the_walk_runs_leaves_the_walk_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    for rel in ["a.jpg", "b/1.jpg", "c/2.jpg"] {
        std::fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
        std::fs::write(dir.path().join(rel), b"x").unwrap();
    }
    let folder = RootFolder::open(dir.path()).unwrap();
    // `b` is renamed to a name the walk has passed, after the root was listed and before `b` is opened.
    let report = walk_tree(&folder, None, &CancellationToken::new(), |entry| {
        if entry.rel == b"a.jpg" {
            std::fs::rename(dir.path().join("b"), dir.path().join("0")).unwrap();
        }
        true
    });
    assert!(!report.stopped);
    assert_eq!(report.unreadable.len(), 1, "{report:?}");
    let b = &report.unreadable[0];
    assert!(b.path.ends_with("/b") && b.rel == b"b" && b.reason.contains("vanished"), "{report:?}");
}
