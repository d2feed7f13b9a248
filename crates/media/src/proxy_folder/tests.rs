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

/// The scratch folder a killed Worker left (its own, for itself alone), with its debris.
fn left_behind(folder: &ProxyFolder) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let left = folder.path().join(PROXY_SCRATCH_FOLDER);
    std::fs::create_dir(&left).unwrap();
    std::fs::set_permissions(&left, std::fs::Permissions::from_mode(0o700)).unwrap();
    left
}

#[test]
fn writes_through_a_temporary_name_and_replaces_debris() {
    let dir = tempfile::tempdir().unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("a/b")).unwrap();
    let dest = folder.path().join("preview.jpg");
    std::fs::write(left_behind(&folder).join(".preview.jpg.tmp"), b"debris of an earlier attempt").unwrap();
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
    let left = left_behind(&folder);
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

/// Whatever stands where the scratch folder goes (a link to a folder outside, or a folder others may write with a link
/// in it, as someone else who may write the proxy folder could place them) is removed, never written into or
/// through, and the proxies are written through a scratch folder made anew. One that cannot be emptied is refused.
#[test]
fn whatever_stands_where_the_scratch_folder_goes_is_removed_never_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"someone else's file").unwrap();
    let folder = make_proxy_folder(dir.path(), Path::new("c1/ab/abcd")).unwrap();
    let at = folder.path().join(PROXY_SCRATCH_FOLDER);
    for placed in ["a link", "a folder others may write"] {
        if placed == "a link" {
            std::os::unix::fs::symlink(&outside, &at).unwrap();
        } else {
            std::fs::create_dir(&at).unwrap();
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o777)).unwrap();
            std::os::unix::fs::symlink(outside.join("keep"), at.join(".preview.jpg.tmp")).unwrap();
        }
        folder.write_proxies(&[(ProxyType::Preview, b"made")]).unwrap();
        assert_eq!(names(&outside), ["keep"], "{placed}");
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"someone else's file", "{placed}");
        assert_eq!(std::fs::read(folder.path().join("preview.jpg")).unwrap(), b"made", "{placed}");
        assert_eq!(names(folder.path()), ["preview.jpg"], "{placed}: nothing of the scratch folder is left");
    }
    std::fs::create_dir_all(at.join("a folder")).unwrap();
    let refused = folder.write_proxies(&[(ProxyType::Preview, b"x")]).unwrap_err().to_string();
    assert!(refused.contains("could not be emptied and removed") && refused.contains("rm -r"), "{refused}");
}

/// A scratch folder is this process's alone when owned by whoever the volume says owns what it makes, and, where the
/// volume keeps modes, open to nobody else: on a volume that keeps owners and modes, an NFS export that squashes the
/// Worker's user to another, and a CIFS or FAT mount that keeps neither (every file shows the mount's `uid=` and
/// mode). A folder of another owner (someone else's put in its place) is not, nor one others may write.
#[test]
fn a_scratch_folder_is_ours_alone_by_the_owner_and_mode_the_volume_gives_what_we_make() {
    let (us, squashed, them) = (1000, 65534, 1001);
    for (volume, folder, probe) in [
        ("owners and modes kept", (us, 0o40700), (us, 0o100600)),
        ("an NFS export squashing the Worker's user", (squashed, 0o40700), (squashed, 0o100600)),
        ("a CIFS or FAT mount", (us, 0o40755), (us, 0o100755)),
    ] {
        assert!(owned_alone(folder, probe), "{volume}");
    }
    for (what, folder, probe) in [
        ("someone else's folder", (them, 0o40700), (us, 0o100600)),
        ("someone else's folder others may write", (them, 0o40777), (us, 0o100600)),
        ("a folder of ours others may write", (us, 0o40777), (us, 0o100600)),
        ("someone else's on a CIFS mount", (them, 0o40755), (us, 0o100755)),
    ] {
        assert!(!owned_alone(folder, probe), "{what}");
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
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
        assert_eq!(scratch.read(".web.tmp.mp4").unwrap(), b"made");
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
