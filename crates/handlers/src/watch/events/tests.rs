use super::*;
use std::path::PathBuf;

fn event(kind: EventKind, paths: &[&Path]) -> notify::Result<Event> {
    Ok(paths.iter().fold(Event::new(kind), |e, p| e.add_path(p.to_path_buf())))
}

/// What the watcher does as a window closes: files someone may still be writing are not read at once.
fn confirm(root: &Path, window: &mut Window) {
    let candidates = window.unconfirmed();
    window.still_written(still_written(root, candidates).0);
}

fn folders_of(window: &mut Window) -> Vec<String> {
    window.take().map(|b| b.folders).unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_file_counts_for_its_folder_and_a_folder_for_itself() {
    let root = PathBuf::from("/lib");
    let mut w = Window::default();
    let at = Instant::now();
    let create = event(EventKind::Create(CreateKind::File), &[&root.join("2026/a.jpg")]);
    assert_eq!(handle(&root, create, &mut w, at), Handled::Changed);
    assert_eq!(w.pending_files(), 1);
    assert_eq!(folders_of(&mut w), [] as [&str; 0], "being written: not before it is closed or settles");
    let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
    handle(&root, event(closed, &[&root.join("2026/a.jpg")]), &mut w, at);
    assert_eq!(folders_of(&mut w), ["2026"]);
    let made = event(EventKind::Create(CreateKind::Folder), &[&root.join("2026/trip")]);
    handle(&root, made, &mut w, at);
    assert_eq!(folders_of(&mut w), ["2026/trip"]);
    let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    handle(&root, event(rename, &[&root.join("a/x.jpg"), &root.join("b/x.jpg")]), &mut w, at);
    assert_eq!(folders_of(&mut w), ["a", "b"], "both ends of a rename");
}

#[tokio::test(start_paused = true)]
async fn reads_hidden_and_temporary_files_and_nas_folders_are_ignored() {
    let root = PathBuf::from("/lib");
    let mut w = Window::default();
    let at = Instant::now();
    let ignored = [
        (EventKind::Access(AccessKind::Open(AccessMode::Any)), "a/x.jpg"),
        (EventKind::Access(AccessKind::Close(AccessMode::Read)), "a/x.jpg"),
        (EventKind::Create(CreateKind::File), "a/@eaDir/x.jpg/SYNOPHOTO_THUMB_M.jpg"),
        (EventKind::Create(CreateKind::Folder), "@eaDir"),
        (EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any)), "a/.DS_Store"),
        (EventKind::Create(CreateKind::File), "a/.x.jpg.Ab12Cd"),
        (EventKind::Create(CreateKind::File), "a/x.jpg.part"),
        (EventKind::Create(CreateKind::File), "a/x.jpg.crdownload"),
        (EventKind::Other, "a"),
    ];
    for (kind, path) in ignored {
        assert_eq!(handle(&root, event(kind, &[&root.join(path)]), &mut w, at), Handled::Ignored, "{path}");
    }
    let elsewhere = event(EventKind::Create(CreateKind::File), &[Path::new("/other/x.jpg")]);
    assert_eq!(handle(&root, elsewhere, &mut w, at), Handled::Ignored);
    assert!(w.is_empty());
}

/// A file the crawl does not read (an app's database and its journal, a text) asks for no crawl however it
/// changes; a sidecar does, and so does a folder of any name, and a path gone that may have been a folder.
#[tokio::test(start_paused = true)]
async fn changes_of_files_the_crawl_does_not_read_ask_for_nothing_and_folders_of_any_name_do() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("a/trip.db")).unwrap();
    std::fs::write(root.join("a/notes.txt"), b"x").unwrap();
    let data = EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any));
    let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
    let (at, mut w) = (Instant::now(), Window::default());
    let ignored = [
        (EventKind::Create(CreateKind::File), "digikam4.db-journal"),
        (data, "digikam4.db"),
        (closed, "digikam4.db"),
        (EventKind::Remove(RemoveKind::File), "digikam4.db-journal"),
        (data, "a/Lightroom Catalog.lrcat-wal"),
        (EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)), "a/notes.txt"),
        (EventKind::Modify(ModifyKind::Name(RenameMode::To)), "a/notes.txt"),
        (EventKind::Modify(ModifyKind::Any), "a/notes.txt"),
    ];
    for (kind, path) in ignored {
        assert_eq!(handle(root, event(kind, &[&root.join(path)]), &mut w, at), Handled::Ignored, "{kind:?} {path}");
    }
    assert!(w.is_empty());
    let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    let asked = [
        (event(closed, &[&root.join("a/IMG_1.JPG")]), vec!["a"]),
        (event(closed, &[&root.join("a/IMG_1.xmp")]), vec!["a"]),
        (event(EventKind::Remove(RemoveKind::File), &[&root.join("e/IMG_2.jpg")]), vec!["e"]),
        (event(EventKind::Remove(RemoveKind::Folder), &[&root.join("b/2019.01 Trip")]), vec!["b/2019.01 Trip"]),
        (event(EventKind::Create(CreateKind::Folder), &[&root.join("a/trip.db")]), vec!["a/trip.db"]),
        // Renamed to a name the crawl skips, or gone: a file or a folder, no telling which.
        (event(EventKind::Modify(ModifyKind::Name(RenameMode::From)), &[&root.join("c/old.db")]), vec!["c"]),
        (event(EventKind::Remove(RemoveKind::Any), &[&root.join("c/gone.db")]), vec!["c"]),
        (event(rename, &[&root.join("d/x.db"), &root.join("a/notes.txt")]), vec!["d"]),
        (event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[&root.join("a/trip.db")]), vec!["a/trip.db"]),
    ];
    for (event, folders) in asked {
        let what = format!("{event:?}");
        assert_eq!(handle(root, event, &mut w, at), Handled::Changed, "{what}");
        assert_eq!(folders_of(&mut w), folders, "{what}");
    }
}

/// A sync tool's file closed under a temporary name and renamed to a name the crawl does not read is nothing
/// (before, the window held it as closed with no folder: a crawl of the whole root); renamed to a photo's name, it
/// is read at once with its folder. A hard link made is complete at once. Where closed files settle, a close
/// asks for nothing until the file settles.
#[tokio::test(start_paused = true)]
async fn a_synced_file_the_crawl_does_not_read_a_hard_link_and_a_settling_close_ask_for_what_they_should() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("a")).unwrap();
    let (at, mut w) = (Instant::now(), Window::default());
    let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
    let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    for (tmp, to, asked) in
        [(".syncthing.digikam4.db.tmp", "digikam4.db", None), (".IMG_1.jpg.x1", "a/IMG_1.jpg", Some("a"))]
    {
        std::fs::write(root.join(tmp), b"synced").unwrap();
        assert_eq!(handle(root, event(closed, &[&root.join(tmp)]), &mut w, at), Handled::Ignored, "{tmp}");
        std::fs::rename(root.join(tmp), root.join(to)).unwrap();
        handle(root, event(rename, &[&root.join(tmp), &root.join(to)]), &mut w, at);
        match asked {
            None => assert!(w.is_empty(), "{to}: nothing"),
            Some(folder) => {
                let batch = w.take().unwrap();
                assert_eq!((batch.folders, batch.closed.len()), (vec![folder.to_owned()], 1), "{to}");
            }
        }
    }
    std::fs::hard_link(root.join("a/IMG_1.jpg"), root.join("a/IMG_1 copy.jpg")).unwrap();
    handle(root, event(EventKind::Create(CreateKind::File), &[&root.join("a/IMG_1 copy.jpg")]), &mut w, at);
    let batch = w.take().unwrap();
    assert_eq!((batch.folders, batch.closed.len()), (vec!["a".to_owned()], 1), "a hard link is complete");
    w.settle_closed_files();
    assert_eq!(handle(root, event(closed, &[&root.join("a/IMG_1.jpg")]), &mut w, at), Handled::Changed);
    assert!(w.is_empty(), "where closed files settle, a close is a write");
    w.settle_written(at, std::time::Duration::ZERO);
    assert_eq!(folders_of(&mut w), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_limit_reached_says_which_limit_and_other_errors_say_events_were_lost() {
    let root = PathBuf::from("/lib");
    let mut w = Window::default();
    let limit = Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch));
    let Handled::FallBack(why) = handle(&root, limit, &mut w, Instant::now()) else { panic!("no fall-back") };
    assert!(why.contains("fs.inotify.max_user_watches"), "{why}");
    let other = Err(notify::Error::generic("the queue broke"));
    let Handled::FallBack(why) = handle(&root, other, &mut w, Instant::now()) else { panic!("no fall-back") };
    assert!(why.contains("could not be read") && why.contains("the queue broke"), "{why}");
    assert!(!why.contains("max_user_watches"), "{why}");
}

/// A rename's two paths: where the file was counts for its folder only, where it is as a file that arrived.
#[tokio::test(start_paused = true)]
async fn a_renamed_file_arrives_where_it_is_renamed_to_and_only_there() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("b")).unwrap();
    std::fs::write(dir.path().join("b/x.jpg"), b"12345").unwrap();
    let mut w = Window::default();
    let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    let (from, to) = (dir.path().join("a/x.jpg"), dir.path().join("b/x.jpg"));
    assert_eq!(handle(dir.path(), event(rename, &[&from, &to]), &mut w, Instant::now()), Handled::Changed);
    assert_eq!(w.unconfirmed(), [("b/x.jpg".to_owned(), true)]);
    assert_eq!(w.pending_files(), 1);
    assert_eq!(folders_of(&mut w), ["a", "b"]);
}

/// A sync tool's way: written under a hidden name, closed, renamed. Renamed unchanged, the file is as closed
/// after writing under its new name; changed in between, it only arrived.
#[tokio::test(start_paused = true)]
async fn a_file_written_under_a_hidden_name_and_renamed_unchanged_is_closed_after_writing() {
    let dir = tempfile::tempdir().unwrap();
    let (aside, file) = (dir.path().join(".x.jpg.Ab12Cd"), dir.path().join("x.jpg"));
    let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
    let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    for changed_between in [false, true] {
        let mut w = Window::default();
        std::fs::write(&aside, b"12345").unwrap();
        assert_eq!(handle(dir.path(), event(close, &[&aside]), &mut w, Instant::now()), Handled::Ignored);
        if changed_between {
            std::fs::write(&aside, b"123456").unwrap();
        }
        std::fs::rename(&aside, &file).unwrap();
        handle(dir.path(), event(rename, &[&aside, &file]), &mut w, Instant::now());
        assert_eq!(w.unconfirmed(), [("x.jpg".to_owned(), changed_between)], "changed between: {changed_between}");
    }
    // Closed under a name the crawl reads, then renamed: read as closed under that name, and only arrived
    // under the new one.
    let mut w = Window::default();
    let (y, z) = (dir.path().join("y.jpg"), dir.path().join("z.jpg"));
    std::fs::write(&y, b"12345").unwrap();
    handle(dir.path(), event(close, &[&y]), &mut w, Instant::now());
    std::fs::rename(&y, &z).unwrap();
    handle(dir.path(), event(rename, &[&y, &z]), &mut w, Instant::now());
    assert_eq!(w.unconfirmed(), [("y.jpg".to_owned(), false), ("z.jpg".to_owned(), true)]);
}

/// Before a window reads files at once: a file seen closed is trusted when whether anyone writes it cannot
/// be told; one that only arrived is not. Both for a file that is no regular file and, as root, for another
/// user's file asked about without `CAP_LEASE` (which is also reported).
#[test]
fn a_file_that_cannot_be_told_is_trusted_when_seen_closed_and_not_when_it_only_arrived() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = rustix::fs::FileType::Fifo;
    for name in ["closed.jpg", "arrived.jpg"] {
        rustix::fs::mknodat(rustix::fs::CWD, dir.path().join(name), fifo, rustix::fs::Mode::RUSR, 0).unwrap();
    }
    let candidates = || vec![("closed.jpg".to_owned(), false), ("arrived.jpg".to_owned(), true)];
    assert_eq!(still_written(dir.path(), candidates()), (vec!["arrived.jpg".to_owned()], false));
    if !rustix::process::getuid().is_root() {
        return;
    }
    let others = tempfile::tempdir().unwrap();
    for name in ["closed.jpg", "arrived.jpg"] {
        std::fs::write(others.path().join(name), b"12345").unwrap();
        rustix::fs::chown(others.path().join(name), Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
    }
    let root = others.path().to_owned();
    let answer = std::thread::spawn(move || {
        almanac_media::fixtures::without_cap_lease();
        still_written(&root, candidates())
    });
    assert_eq!(answer.join().unwrap(), (vec!["arrived.jpg".to_owned()], true));
}

#[tokio::test(start_paused = true)]
async fn a_file_closed_after_writing_is_recorded_with_its_size_and_mtime() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a")).unwrap();
    let file = dir.path().join("a/x.jpg");
    std::fs::write(&file, b"12345").unwrap();
    let meta = std::fs::metadata(&file).unwrap();
    let mut w = Window::default();
    let closed = event(EventKind::Access(AccessKind::Close(AccessMode::Write)), &[&file]);
    assert_eq!(handle(dir.path(), closed, &mut w, Instant::now()), Handled::Changed);
    let batch = w.take().unwrap();
    assert_eq!(batch.folders, ["a"]);
    let expected = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
    assert_eq!(batch.closed, [ClosedFile { path: "a/x.jpg".into(), size: 5, mtime_ns: expected }]);
}

#[tokio::test(start_paused = true)]
async fn a_file_renamed_in_is_read_at_once_unless_someone_still_writes_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let (root, at) = (dir.path(), Instant::now());
    let mut w = Window::default();
    let close = |p: &Path| event(EventKind::Access(AccessKind::Close(AccessMode::Write)), &[p]);
    let both = |from: &Path, to: &Path| event(EventKind::Modify(ModifyKind::Name(RenameMode::Both)), &[from, to]);
    let to = |p: &Path| event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[p]);
    // a.jpg: written under a sync tool's temporary name, closed, renamed.
    std::fs::write(root.join(".a.jpg.Xy12"), b"12345").unwrap();
    assert_eq!(handle(root, close(&root.join(".a.jpg.Xy12")), &mut w, at), Handled::Ignored);
    std::fs::rename(root.join(".a.jpg.Xy12"), root.join("a.jpg")).unwrap();
    assert_eq!(handle(root, both(&root.join(".a.jpg.Xy12"), &root.join("a.jpg")), &mut w, at), Handled::Changed);
    // b.jpg: closed once under its temporary name, written again and renamed while still open for writing.
    std::fs::write(root.join("b.jpg.part"), b"12345").unwrap();
    handle(root, close(&root.join("b.jpg.part")), &mut w, at);
    let mut writing = std::fs::OpenOptions::new().append(true).open(root.join("b.jpg.part")).unwrap();
    std::io::Write::write_all(&mut writing, b"6").unwrap();
    std::fs::rename(root.join("b.jpg.part"), root.join("b.jpg")).unwrap();
    handle(root, both(&root.join("b.jpg.part"), &root.join("b.jpg")), &mut w, at);
    // c.jpg: moved in from outside the root (no close seen), no one writing to it.
    std::fs::write(outside.path().join("c.jpg"), b"123").unwrap();
    std::fs::rename(outside.path().join("c.jpg"), root.join("c.jpg")).unwrap();
    assert_eq!(handle(root, to(&root.join("c.jpg")), &mut w, at), Handled::Changed);
    confirm(root, &mut w);
    let batch = w.take().unwrap();
    let closed: Vec<(&str, u64)> = batch.closed.iter().map(|c| (c.path.as_str(), c.size)).collect();
    assert_eq!(closed, [("a.jpg", 5), ("c.jpg", 3)], "b.jpg is still being written");
    assert_eq!(w.pending_files(), 0);
    drop(writing);
}

#[tokio::test(start_paused = true)]
async fn a_file_closed_by_one_writer_while_another_writes_on_is_not_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (root, at) = (dir.path(), Instant::now());
    let file = root.join("x.jpg");
    std::fs::write(&file, b"1").unwrap();
    let other = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
    let mut w = Window::default();
    handle(root, event(EventKind::Access(AccessKind::Close(AccessMode::Write)), &[&file]), &mut w, at);
    confirm(root, &mut w);
    assert_eq!((w.pending_files(), w.take().unwrap().closed.len()), (1, 0));
    drop(other);
}

#[tokio::test(start_paused = true)]
async fn a_folder_that_appears_is_named_and_its_files_found_as_written_or_complete() {
    let dir = tempfile::tempdir().unwrap();
    let (root, at) = (dir.path(), Instant::now());
    std::fs::create_dir_all(root.join("trip/@eaDir")).unwrap();
    let made = |p: &Path| event(EventKind::Create(CreateKind::Folder), &[p]).unwrap();
    assert_eq!(appeared_folder(root, &made(&root.join("trip"))), Some(root.join("trip")));
    assert_eq!(appeared_folder(root, &made(&root.join("trip/@eaDir"))), None, "a NAS's folder");
    assert_eq!(appeared_folder(root, &made(&root.join("gone"))), None);
    let file = event(EventKind::Create(CreateKind::File), &[&root.join("trip")]).unwrap();
    assert_eq!(appeared_folder(root, &file), None);
    // Made unreadable, then readable (its attributes changed); or said removed while one is there (replaced).
    let attrib =
        event(EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)), &[&root.join("trip")]);
    assert_eq!(appeared_folder(root, &attrib.unwrap()), Some(root.join("trip")));
    let removed = event(EventKind::Remove(RemoveKind::Folder), &[&root.join("trip")]).unwrap();
    assert_eq!(appeared_folder(root, &removed), Some(root.join("trip")));
    let root_attrib = event(EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)), &[root]);
    assert_eq!(appeared_folder(root, &root_attrib.unwrap()), None, "the root is watched from the start");
    // A folder may have a name a temporary file would have.
    std::fs::create_dir(root.join("Trip~")).unwrap();
    assert_eq!(appeared_folder(root, &made(&root.join("Trip~"))), Some(root.join("Trip~")));
    std::fs::write(root.join("trip/done.jpg"), b"12").unwrap();
    std::fs::write(root.join("trip/busy.jpg"), b"1").unwrap();
    let busy = std::fs::OpenOptions::new().append(true).open(root.join("trip/busy.jpg")).unwrap();
    let mut w = Window::default();
    for name in ["done.jpg", "busy.jpg"] {
        Found::in_root(root, &root.join("trip").join(name)).unwrap().record(&mut w, at);
    }
    assert!(Found::in_root(root, &root.join("trip/x.jpg.part")).is_none(), "a temporary name");
    assert_eq!(w.pending_files(), 2);
    confirm(root, &mut w);
    let batch = w.take().unwrap();
    assert_eq!(batch.folders, ["trip"]);
    let closed: Vec<&str> = batch.closed.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(closed, ["trip/done.jpg"]);
    drop(busy);
}

#[tokio::test(start_paused = true)]
async fn the_root_removed_or_renamed_falls_back() {
    let root = PathBuf::from("/lib");
    let mut w = Window::default();
    for kind in [EventKind::Remove(RemoveKind::Folder), EventKind::Modify(ModifyKind::Name(RenameMode::From))] {
        let handled = handle(&root, event(kind, &[&root]), &mut w, Instant::now());
        assert!(matches!(handled, Handled::FallBack(r) if r.contains("root was removed or renamed")), "{kind:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_overflow_or_the_watch_limit_falls_back() {
    let root = PathBuf::from("/lib");
    let mut w = Window::default();
    let at = Instant::now();
    let overflow = Ok(Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan));
    assert!(matches!(handle(&root, overflow, &mut w, at), Handled::FallBack(r) if r.contains("overflowed")));
    let limit = Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch));
    assert!(matches!(handle(&root, limit, &mut w, at), Handled::FallBack(r) if r.contains("max_user_watches")));
}

#[test]
fn a_name_that_is_not_utf8_cuts_the_path_to_its_folder() {
    use std::os::unix::ffi::OsStringExt;
    let root = PathBuf::from("/lib");
    let odd = root.join("a").join(std::ffi::OsString::from_vec(b"caf\xe9".to_vec())).join("x.jpg");
    let rel = Rel::of(&root, &odd).unwrap();
    assert_eq!((rel.path.as_str(), rel.whole, rel.parent()), ("a", false, "a".to_owned()));
    let plain = Rel::of(&root, &root.join("a/b/x.jpg")).unwrap();
    assert_eq!(plain.parent(), "a/b");
    assert_eq!(Rel::of(&root, &root).unwrap().parent(), "");
}

#[test]
fn a_flood_of_events_is_taken_a_few_thousand_at_a_time() {
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let any = || event(EventKind::Any, &[]);
    for _ in 0..EVENTS_PER_TURN + 9 {
        tx.send(any()).unwrap();
    }
    assert_eq!(one_turn(any(), &mut events).count(), EVENTS_PER_TURN, "the first and those waiting behind it");
    assert_eq!(events.len(), 10, "the rest left for the next turn");
    assert_eq!(one_turn(any(), &mut events).count(), 11);
    assert!(events.is_empty());
}
