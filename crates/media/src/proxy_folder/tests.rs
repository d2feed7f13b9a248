use std::cell::RefCell;

use super::ours::{OwnersOfWhatWeMake, owned_alone};
use super::*;
use crate::fixtures::names;
use crate::tool::{Given, run_tool};

/// What a test does where the scratch folder was just made.
type Hook = Box<dyn FnMut(&Path)>;

thread_local! {
    /// Run by [`ProxyFolder::scratch`] on this thread between making the scratch folder and opening it: where another
    /// user could put their own folder in its place.
    pub(super) static BEFORE_OPENING_SCRATCH: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

/// A proxy's folders are made one at a time; a link or a file where one should be is refused, and nothing is made
/// through the link; the proxy root itself may be a link.
#[test]
fn a_proxys_folders_are_made_without_following_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let (disk, outside) = (dir.path().join("disk"), dir.path().join("outside"));
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let root = dir.path().join("proxies");
    std::os::unix::fs::symlink(&disk, &root).unwrap();
    let made = make_proxy_folder(&root, Path::new("c1/ab/abcd")).unwrap();
    assert_eq!(made.path(), root.join("c1/ab/abcd"));
    assert!(disk.join("c1/ab/abcd").is_dir(), "made through the proxy root's own link");
    std::os::unix::fs::symlink(&outside, disk.join("c1/cd")).unwrap();
    std::fs::write(disk.join("c1/ef"), b"x").unwrap();
    for (at, what) in [("c1/cd", "a link"), ("c1/ef", "a file")] {
        let refused = make_proxy_folder(&root, &Path::new(at).join("cdef")).unwrap_err();
        let MediaError::ProxyFolderNotAFolder { path, what: found } = &refused else { panic!("{refused}") };
        assert_eq!((path, *found), (&root.join(at), what), "{refused}");
        assert!(refused.to_string().contains("storage.proxy_root"), "{refused}");
    }
    for relative in ["../c1", "/c1", ""] {
        let refused = make_proxy_folder(&root, Path::new(relative)).unwrap_err().to_string();
        assert!(refused.contains("is not a folder beneath the proxy root"), "{relative}: {refused}");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing made through the link");
}

#[test]
fn writes_through_a_temporary_name_and_replaces_debris() {
    let dir = tempfile::tempdir().unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("a/b")).unwrap();
    let dest = folder.path().join("preview.jpg");
    std::fs::write(
        crate::fixtures::left_scratch_folder(folder.path()).join(".preview.jpg.tmp"),
        b"debris of an earlier attempt",
    )
    .unwrap();
    std::fs::write(&dest, b"old").unwrap();
    folder.write_proxies(&[(ProxyType::Preview, b"new")]).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), b"new");
    assert_eq!(names(folder.path()), ["preview.jpg"], "the scratch folder is gone with its debris");
}

/// A link placed at a proxy's temporary name (by anyone who can write the proxy tree), in the proxy folder or in a
/// scratch folder a killed Worker left, is never written through: the file it points to, outside, is left as it was,
/// and the proxy is a file of its own.
#[test]
fn a_link_at_the_temporary_name_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, b"someone else's file").unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("proxies/ab/abcdef")).unwrap();
    let left = crate::fixtures::left_scratch_folder(folder.path());
    for at in [folder.path(), left.as_path()] {
        let at = |proxy: ProxyType| at.join(proxy.temporary_file_name().unwrap());
        std::os::unix::fs::symlink(&outside, at(ProxyType::Preview)).unwrap();
        std::os::unix::fs::symlink("../../../outside.txt", at(ProxyType::Thumbnail)).unwrap();
    }
    let (preview, thumbnail) = (&b"preview"[..], &b"thumb"[..]);
    folder.write_proxies(&[(ProxyType::Preview, preview), (ProxyType::Thumbnail, thumbnail)]).unwrap();
    assert_eq!(std::fs::read(&outside).unwrap(), b"someone else's file");
    for (proxy, bytes) in [(ProxyType::Preview, preview), (ProxyType::Thumbnail, thumbnail)] {
        let dest = folder.path().join(proxy.file_name().unwrap());
        assert!(std::fs::symlink_metadata(&dest).unwrap().is_file(), "{} is a file, not the link", dest.display());
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    }
    assert!(!left.exists(), "the scratch folder is gone with the links in it");
}

/// What stands where the scratch folder goes: a link to a folder outside is removed, never followed, and the proxies
/// are written through a scratch folder made anew, as they are after a folder of the Worker's own, even one others
/// may write, is emptied; a folder the Worker did not leave (a sticky one, another user's: a shared folder moved
/// there) is not emptied, and the file is refused naming it; nor is one holding a folder.
#[test]
fn what_stands_where_the_scratch_folder_goes_is_removed_only_when_a_worker_left_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"someone else's file").unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("c1/ab/abcd")).unwrap();
    let at = folder.path().join(PROXY_SCRATCH_FOLDER);
    std::os::unix::fs::symlink(&outside, &at).unwrap();
    folder.write_proxies(&[(ProxyType::Preview, b"made")]).unwrap();
    assert_eq!(names(&outside), ["keep"], "nothing removed through the link");
    assert_eq!(std::fs::read(folder.path().join("preview.jpg")).unwrap(), b"made");
    assert_eq!(names(folder.path()), ["preview.jpg"], "the link is gone, and the scratch folder made anew too");

    std::fs::create_dir(&at).unwrap();
    std::fs::write(at.join(".web.tmp.mp4"), b"a killed Worker's").unwrap();
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o777)).unwrap();
    folder.write_proxies(&[(ProxyType::Preview, b"again")]).unwrap();
    assert_eq!(names(folder.path()), ["preview.jpg"], "the Worker's own, emptied and made anew");

    let someone_else = (crate::effective_user() == 0).then_some(4321);
    for (what, mode, owner) in [("sticky", 0o1777, None), ("another's", 0o700, someone_else)] {
        if what == "another's" && owner.is_none() {
            continue;
        }
        std::fs::create_dir(&at).unwrap();
        std::fs::write(at.join("theirs"), b"not ours to delete").unwrap();
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&at, Some(uid), None).unwrap();
        }
        let refused = folder.write_proxies(&[(ProxyType::Preview, b"x")]).unwrap_err().to_string();
        assert!(refused.contains("that the Worker did not leave") && refused.contains("rm -r"), "{what}: {refused}");
        assert!(!refused.contains("may be full"), "a refusal, not a full or read-only volume: {refused}");
        assert_eq!(std::fs::read(at.join("theirs")).unwrap(), b"not ours to delete", "{what}");
        assert_eq!(std::fs::read(folder.path().join("preview.jpg")).unwrap(), b"again", "{what}");
        std::fs::remove_dir_all(&at).unwrap();
    }
    std::fs::create_dir_all(at.join("a folder")).unwrap();
    let refused = folder.write_proxies(&[(ProxyType::Preview, b"x")]).unwrap_err().to_string();
    assert!(refused.contains("that the Worker did not leave"), "{refused}");
}

/// The scratch folder is judged on the volume by a file made in it: the folder the Worker made for itself (0700) is
/// its own; one shown as others may write is taken when empty and made 0700 (where the volume keeps no modes, NTFS or
/// CIFS with dir_mode=0777, the mode stays and the Worker says so), and refused when it holds anything (another of the
/// Worker's folders, put in its place with links in it); one owned by someone else (put in its place before it was
/// opened) is refused, and the file made to judge it is removed.
#[test]
fn a_scratch_folder_is_judged_by_a_file_made_in_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let held = |mode: u32, owner: Option<u32>| {
        let path = dir.path().join(format!("{mode:o}-{owner:?}"));
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&path, Some(uid), None).unwrap();
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        Held { fd: rustix::fs::openat(CWD, &path, flags, Mode::empty()).unwrap(), path }
    };
    let ours = held(0o700, None);
    ours_alone(&ours).unwrap();
    assert_eq!(names(&ours.path), Vec::<String>::new(), "nothing is left in it");
    let open_to_others = held(0o777, None);
    ours_alone(&open_to_others).unwrap();
    let mode = std::fs::metadata(&open_to_others.path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "made the Worker's alone");
    let holding = held(0o775, None);
    std::os::unix::fs::symlink("/etc", holding.path.join(".web.tmp.mp4")).unwrap();
    let refused = ours_alone(&holding).unwrap_err().to_string();
    assert!(refused.contains("shows mode 775 and holds files"), "{refused}");
    assert_eq!(names(&holding.path), [".web.tmp.mp4"], "what it holds is not the Worker's to remove");
    if crate::effective_user() == 0 {
        let theirs = held(0o777, Some(4321));
        let refused = ours_alone(&theirs).unwrap_err().to_string();
        assert!(refused.contains("it is not the folder the Worker made (owner 4321"), "{refused}");
        assert_eq!(names(&theirs.path), Vec::<String>::new(), "the file judged by is removed");
    }
}

/// The owner a volume gives what the Worker makes is learnt from one file made there and kept: a folder showing it
/// is judged without another file; any other owner is judged by a new one, so a folder of the Worker's own number on
/// a volume that squashes it (its server's user of that number) is refused, and a volume remounted with another
/// mapping is learnt again rather than refused.
#[test]
fn the_owner_a_volume_gives_what_the_worker_makes_is_learnt_once_and_again_when_it_changes() {
    let owners = OwnersOfWhatWeMake::default();
    let made = std::cell::Cell::new(0);
    let judge = |device: u64, owner: u32, made_by_us: u32| {
        let file = || {
            made.set(made.get() + 1);
            Ok(made_by_us)
        };
        let refuse = |why: String| MediaError::ProxyScratchRefused { path: "/p".into(), reason: why };
        owners.judge(device, owner, file, refuse).map_err(|e| e.to_string())
    };
    let (us, squashed, them) = (0, 65534, 1001);
    assert_eq!(judge(1, us, us), Ok(()));
    assert_eq!((judge(1, us, us), made.get()), (Ok(()), 1), "known: no second file made");
    let refused = judge(1, them, us).unwrap_err();
    assert!(refused.contains("owner 1001, where what the Worker makes is owned by 0"), "{refused}");
    assert_eq!(made.get(), 2, "another owner is judged by a new file");
    assert_eq!(judge(1, squashed, squashed), Ok(()), "remounted squashing the Worker's user: learnt again");
    let refused = judge(1, us, squashed).unwrap_err();
    assert!(refused.contains("owner 0, where what the Worker makes is owned by 65534"), "{refused}");
    assert_eq!((judge(1, squashed, squashed), made.get()), (Ok(()), 4));
    assert_eq!(judge(2, us, us), Ok(()), "each volume its own");
    assert_eq!((judge(1, squashed, squashed), made.get()), (Ok(()), 5), "the first volume still known");
}

/// The rule itself, for the volumes a test here cannot mount: an NFS export that squashes the Worker's user shows
/// what it makes as another's, and a CIFS, FAT or NTFS mount shows one owner for everything.
#[test]
fn a_scratch_folder_is_ours_by_the_owner_the_volume_gives_what_we_make() {
    let (us, squashed, them) = (1000, 65534, 1001);
    assert_eq!(owned_alone(us, us), Ok(()), "owners kept");
    assert_eq!(owned_alone(squashed, squashed), Ok(()), "an NFS export squashing the Worker's user");
    let refused = owned_alone(them, us).unwrap_err();
    assert!(refused.contains("owner 1001, where what the Worker makes is owned by 1000"), "{refused}");
}

/// The folder, or one above it, swapped for a link to a folder outside after it was made (as someone who may write
/// the proxy volume can while a still waits for the pixel budget or a video is transcoded): our writes, a tool's
/// output and the folder's removal all go to the folder that was made, wherever it went; nothing reaches the link's
/// target; and `still_in_place` says the folder is no longer at its path. Before, every write went by path.
#[tokio::test]
async fn a_folder_swapped_for_a_link_after_it_was_made_redirects_nothing() {
    for swapped in ["c1/ab/abcd", "c1/ab", "c1"] {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("proxies"), dir.path().join("outside"));
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let folder = make_proxy_folder(&root, Path::new("c1/ab/abcd")).unwrap();
        folder.still_in_place().unwrap();
        let moved = dir.path().join("moved");
        std::fs::rename(root.join(swapped), &moved).unwrap();
        std::os::unix::fs::symlink(&outside, root.join(swapped)).unwrap();
        // The folder made, wherever it is now.
        let real = moved.join(Path::new("c1/ab/abcd").strip_prefix(swapped).unwrap());

        folder.write_proxies(&[(ProxyType::Preview, b"preview")]).unwrap();
        let scratch = folder.scratch().unwrap();
        let script = r#"printf made > "$1""#;
        let args = vec!["-c".into(), script.into(), "sh".into(), scratch.for_tool(".web.tmp.mp4")];
        let given = Given { stdin: None, folder: Some(&scratch) };
        let limit = std::time::Duration::from_secs(60);
        let cancel = tokio_util::sync::CancellationToken::new();
        run_tool("sh", "dash", args, given, Path::new("x.mp4"), limit, &cancel).await.unwrap();
        assert_eq!(scratch.read(".web.tmp.mp4").await.unwrap(), b"made");
        scratch.place(".web.tmp.mp4", "web.mp4").unwrap();
        drop(scratch);

        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "{swapped}: nothing written through the link");
        assert_eq!(std::fs::read(real.join("preview.jpg")).unwrap(), b"preview", "{swapped}");
        assert_eq!(std::fs::read(real.join("web.mp4")).unwrap(), b"made", "{swapped}");
        assert_eq!(names(&real), ["preview.jpg", "web.mp4"], "{swapped}: the scratch folder is gone");
        let refused = folder.still_in_place().unwrap_err();
        assert!(matches!(&refused, MediaError::ProxyFolderMoved { path } if path == folder.path()), "{refused}");
        assert!(refused.to_string().contains("must be the Worker's alone"), "{refused}");

        // Emptied, it is removed where it is; the link and what it points to stay.
        std::fs::remove_file(real.join("web.mp4")).unwrap();
        std::fs::remove_file(real.join("preview.jpg")).unwrap();
        folder.remove_if_empty();
        assert!(std::fs::symlink_metadata(root.join(swapped)).unwrap().is_symlink(), "{swapped}");
        assert!(outside.is_dir(), "{swapped}");
        // Through the handle on its parent: a folder moved away from it (swapped itself) stays where it went.
        assert_eq!(real.exists(), swapped == "c1/ab/abcd", "{swapped}: the folder made is removed from its parent");
    }
}

/// Another folder made at the path (the folder removed and made again by someone else) is not the folder written.
#[test]
fn a_folder_made_again_at_the_path_is_not_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("c1/ab/abcd")).unwrap();
    std::fs::rename(folder.path(), dir.path().join("elsewhere")).unwrap();
    std::fs::create_dir(folder.path()).unwrap();
    assert!(matches!(folder.still_in_place(), Err(MediaError::ProxyFolderMoved { .. })));
    std::fs::remove_dir(folder.path()).unwrap();
    assert!(matches!(folder.still_in_place(), Err(MediaError::ProxyFolderMoved { .. })), "removed");
    // A folder with something in it is not removed.
    std::fs::write(dir.path().join("elsewhere/keep"), b"x").unwrap();
    folder.remove_if_empty();
    assert!(dir.path().join("elsewhere/keep").is_file());
}

/// A tool's words name the folder as the operator knows it, not the handle it was given.
#[tokio::test]
async fn a_tools_words_name_the_folder_by_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("c1/ab/abcd")).unwrap();
    let scratch = folder.scratch().unwrap();
    let script = r#"echo "$1: No space left on device" >&2; exit 1"#;
    let args = vec!["-c".into(), script.into(), "sh".into(), scratch.for_tool(".web.tmp.mp4")];
    let given = Given { stdin: None, folder: Some(&scratch) };
    let (limit, cancel) = (std::time::Duration::from_secs(60), tokio_util::sync::CancellationToken::new());
    let err = run_tool("sh", "dash", args, given, Path::new("x.mp4"), limit, &cancel).await.unwrap_err().to_string();
    let named = format!("{}: No space left on device", scratch.join(".web.tmp.mp4").display());
    assert!(err.contains(&named) && !err.contains("/proc/self/fd"), "{err}");
}

/// The folder removed while its file waited (the sweep emptied it and removed it): nothing can be written into it, and
/// the answer says the folder went, not that the volume is full or read-only.
#[test]
fn a_folder_removed_while_its_file_waits_is_said_to_have_gone() {
    let dir = tempfile::tempdir().unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("c1/ab/abcd")).unwrap();
    std::fs::remove_dir(folder.path()).unwrap();
    let refused = folder.write_proxies(&[(ProxyType::Preview, b"x")]).unwrap_err();
    assert!(matches!(&refused, MediaError::ProxyFolderMoved { path } if path == folder.path()), "{refused}");
}

/// Another of the Worker's own folders, one its group may write (made where the Worker's umask allows it), put where
/// the scratch folder was just made with a link in it at the name a tool writes, is refused before anything is written
/// (the folder's owner is the Worker's, so only what it holds tells it apart from the one made); nothing is written
/// through the link, and what it holds is left.
#[test]
fn another_of_the_workers_folders_put_in_the_scratch_folders_place_with_links_in_it_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("c1/ab/abcd")).unwrap();
    let planted = outside.clone();
    BEFORE_OPENING_SCRATCH.with(|hook| {
        *hook.borrow_mut() = Some(Box::new(move |path: &Path| {
            std::fs::remove_dir(path).unwrap();
            std::fs::create_dir(path).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o775)).unwrap();
            std::os::unix::fs::symlink(planted.join("web.mp4"), path.join(".web.tmp.mp4")).unwrap();
        }))
    });
    let refused = folder.write_proxies(&[(ProxyType::Preview, b"x")]);
    BEFORE_OPENING_SCRATCH.with(|hook| *hook.borrow_mut() = None);
    let refused = refused.unwrap_err();
    assert!(matches!(refused, MediaError::ProxyScratchRefused { .. }), "{refused}");
    assert!(refused.to_string().contains("holds files"), "{refused}");
    assert_eq!(names(&outside), Vec::<String>::new(), "nothing written through the link");
    assert_eq!(names(&folder.path().join(PROXY_SCRATCH_FOLDER)), [".web.tmp.mp4"], "what it holds is left");
    assert!(!folder.path().join("preview.jpg").exists());
}

/// Another user's folder put where the scratch folder was just made, before it is opened (the window between `mkdirat`
/// and `open`), is refused, nothing is written into it, and, empty, it is removed. (Root only: the test gives the
/// folder to another user.)
#[test]
fn a_folder_put_in_the_scratch_folders_place_before_it_is_opened_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    if crate::effective_user() != 0 {
        eprintln!("SKIPPED: giving a folder to another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("c1/ab/abcd")).unwrap();
    BEFORE_OPENING_SCRATCH.with(|hook| {
        *hook.borrow_mut() = Some(Box::new(|path: &Path| {
            std::fs::remove_dir(path).unwrap();
            std::fs::create_dir(path).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
            std::os::unix::fs::chown(path, Some(4321), None).unwrap();
        }))
    });
    let refused = folder.write_proxies(&[(ProxyType::Preview, b"x")]);
    BEFORE_OPENING_SCRATCH.with(|hook| *hook.borrow_mut() = None);
    let refused = refused.unwrap_err().to_string();
    assert!(refused.contains("it is not the folder the Worker made (owner 4321"), "{refused}");
    let put = folder.path().join(PROXY_SCRATCH_FOLDER);
    assert!(!put.exists(), "nothing written into it, and, empty, it is removed");
    assert!(!folder.path().join("preview.jpg").exists());
}
