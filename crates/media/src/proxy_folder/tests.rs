use super::*;
use crate::tool::{Given, run_tool};

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
    let (dest, tmp) = (folder.path().join("preview.jpg"), folder.path().join(".preview.jpg.tmp"));
    std::fs::write(&tmp, b"debris of an earlier attempt").unwrap();
    std::fs::write(&dest, b"old").unwrap();
    folder.write_proxies(&[(ProxyType::Preview, b"new")]).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), b"new");
    assert!(std::fs::symlink_metadata(&tmp).is_err(), "nothing left at the temporary name");
}

/// A link placed at a proxy's temporary name (by anyone who can write the proxy tree) is removed, never written
/// through: the file it points to, outside, is left as it was, and the proxy is a file of its own.
#[test]
fn a_link_at_the_temporary_name_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, b"someone else's file").unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("proxies/ab/abcdef")).unwrap();
    let at = |proxy: ProxyType| folder.path().join(proxy.temporary_file_name().unwrap());
    std::os::unix::fs::symlink(&outside, at(ProxyType::Preview)).unwrap();
    std::os::unix::fs::symlink("../../../outside.txt", at(ProxyType::Thumbnail)).unwrap();
    let (preview, thumbnail) = (&b"preview"[..], &b"thumb"[..]);
    folder.write_proxies(&[(ProxyType::Preview, preview), (ProxyType::Thumbnail, thumbnail)]).unwrap();
    assert_eq!(std::fs::read(&outside).unwrap(), b"someone else's file");
    for (proxy, bytes) in [(ProxyType::Preview, preview), (ProxyType::Thumbnail, thumbnail)] {
        let dest = folder.path().join(proxy.file_name().unwrap());
        assert!(std::fs::symlink_metadata(&dest).unwrap().is_file(), "{} is a file, not the link", dest.display());
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);
        assert!(std::fs::symlink_metadata(at(proxy)).is_err(), "nothing left at the temporary name");
    }
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
        let script = r#"printf made > "$1""#;
        let args = vec!["-c".into(), script.into(), "sh".into(), folder.for_tool("by-a-tool")];
        let given = Given { stdin: None, folder: Some(&folder) };
        let limit = std::time::Duration::from_secs(60);
        let cancel = tokio_util::sync::CancellationToken::new();
        run_tool("sh", "dash", args, given, Path::new("x.mp4"), limit, &cancel).await.unwrap();
        assert_eq!(folder.read("by-a-tool").unwrap(), b"made");

        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "{swapped}: nothing written through the link");
        assert_eq!(std::fs::read(real.join("preview.jpg")).unwrap(), b"preview", "{swapped}");
        assert_eq!(std::fs::read(real.join("by-a-tool")).unwrap(), b"made", "{swapped}");
        let refused = folder.still_in_place().unwrap_err();
        assert!(matches!(&refused, MediaError::ProxyFolderMoved { path } if path == folder.path()), "{refused}");
        assert!(refused.to_string().contains("must be the Worker's alone"), "{refused}");

        // Emptied, it is removed where it is; the link and what it points to stay.
        folder.remove("by-a-tool");
        folder.remove("preview.jpg");
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
    let script = r#"echo "$1: No space left on device" >&2; exit 1"#;
    let args = vec!["-c".into(), script.into(), "sh".into(), folder.for_tool(".web.tmp.mp4")];
    let given = Given { stdin: None, folder: Some(&folder) };
    let (limit, cancel) = (std::time::Duration::from_secs(60), tokio_util::sync::CancellationToken::new());
    let err = run_tool("sh", "dash", args, given, Path::new("x.mp4"), limit, &cancel).await.unwrap_err().to_string();
    let named = format!("{}: No space left on device", folder.path().join(".web.tmp.mp4").display());
    assert!(err.contains(&named) && !err.contains("/proc/self/fd"), "{err}");
}
