//! A library share whose server stopped answering (an NFS or SMB mount of a NAS that was turned off: every look
//! beneath it waits in the kernel, for ever on a hard mount), with the real `almanac-worker` binary: the crawls of
//! the libraries on it wait, and nothing else does. Needs root and FUSE (`tests/support/hung_share.py`, Python's
//! llfuse); prints SKIPPED otherwise.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use almanac_media::fixtures::{self, FixtureExif};
use almanac_testdb::TestDatabase;
use support::{Worker, http_get};

/// The share, mounted while it lives: ended (as its server going away for good) and unmounted when dropped.
struct StoppedAnswering {
    daemon: Child,
    at: PathBuf,
}

impl StoppedAnswering {
    /// Mounts it at `at`, hiding what is there ([`may_mount_fuse`] said it can be): nothing beneath its root answers.
    fn mount(at: &Path) -> Self {
        Self::mount_with(at, &[])
    }

    /// Mounts at `at` the folder `source` as a share that stops answering when a folder or a file whose name holds
    /// `stops-answering` is listed or read, each such wait noted in `log` (`waiting <path>`).
    fn midway(at: &Path, source: &Path, log: &Path) -> Self {
        Self::mount_with(at, &[source, log])
    }

    fn mount_with(at: &Path, args: &[&Path]) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("support/hung_share.py");
        let mut daemon = Command::new("/usr/bin/python3")
            .arg(&script)
            .arg(at)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(daemon.stdout.take().expect("piped")).read_line(&mut first).unwrap();
        if first.trim() != "mounted" {
            let _ = daemon.kill();
            let mut why = String::new();
            let _ = std::io::Read::read_to_string(&mut daemon.stderr.take().expect("piped"), &mut why);
            panic!("the stopped share could not be mounted at {}: {why}", at.display());
        }
        Self { daemon, at: at.to_owned() }
    }
}

impl Drop for StoppedAnswering {
    fn drop(&mut self) {
        // Every call waiting on it fails once it is gone; then the mount goes.
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

fn may_mount_fuse() -> bool {
    let root = almanac_media::effective_user() == 0;
    let llfuse = Command::new("/usr/bin/python3").args(["-c", "import llfuse"]).status().is_ok_and(|s| s.success());
    root && llfuse && Path::new("/dev/fuse").exists()
}

/// As many libraries on the stopped share as the Worker's runtime has threads (one crawl on each would hold every
/// thread if any look at a library's files ran on them), and one library on a disk that answers. The Worker, with a
/// slot for each, crawls the one that answers while the others wait (here for an hour at most, past the test's end:
/// [`a_crawl_of_a_share_that_does_not_answer_gives_its_slot_up_and_looks_at_it_once`] shows what the limit does);
/// its page answers; told to stop, it stops, handing the waiting crawls back, though the calls they made never
/// return.
#[test]
fn a_share_that_stops_answering_holds_only_the_crawls_of_its_libraries() {
    let Some((db, dir)) = set_up() else { return };
    let cli = |args: &[&str]| drop(cli(db.url(), args));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let share = dir.path().join("nas");
    let stopped: Vec<String> = (0..threads).map(|i| share.join(format!("photos-{i}")).display().to_string()).collect();
    let library = dir.path().join("library");
    std::fs::create_dir_all(&library).unwrap();
    for i in 0..3 {
        photo(&library.join(format!("IMG_{i}.JPG")), i);
    }
    for root in &stopped {
        std::fs::create_dir_all(root).unwrap();
        cli(&["config", "add", "--user", "ann", "--root", root]);
    }
    cli(&["config", "add", "--user", "ann", "--root", library.to_str().unwrap()]);
    // A library on the share the operator deactivated before it stopped answering, and activates again now.
    let resting = share.join("photos-off").display().to_string();
    std::fs::create_dir_all(&resting).unwrap();
    cli(&["config", "add", "--user", "ann", "--root", &resting]);
    cli(&["config", "deactivate", &resting]);
    let nas = StoppedAnswering::mount(&share);
    // Oldest first: the stopped share's crawls are claimed before the library's, or with it. A command naming a
    // library on the share as registered (a trailing `/` aside) never waits for it; one naming it another way gives
    // up on the file system, saying what to give instead.
    for root in &stopped {
        cli(&["enqueue", "crawl", "--config", &format!("{root}/")]);
    }
    std::os::unix::fs::symlink(&share, dir.path().join("nas-link")).unwrap();
    let spelled = format!("{}/nas-link/photos-0", dir.path().display());
    let said_at = dir.path().join("pause.err");
    let mut pause = support::worker()
        .args(["pause", "--config", &spelled])
        .env("DATABASE_URL", db.url())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&said_at).unwrap())
        .spawn()
        .unwrap();
    let said = almanac_testdb::patience::wait_for("the command to give up", Duration::from_secs(10), EVERY, || {
        Some(std::fs::read_to_string(&said_at).unwrap_or_default()).filter(|s| s.contains("did not answer within"))
    });
    assert!(said.contains("by its id or by its root exactly as registered"), "{said}");
    // Its call into the share stays until the share ends (FUSE keeps a process whose call was taken until it is
    // answered; NFS lets it go): it has said what it had to, and ends with an error then.
    until_its_main_thread_ended(&pause.id().to_string(), Duration::from_secs(20));
    cli(&["enqueue", "crawl", "--config", library.to_str().unwrap()]);
    // While the Worker starts: the commands an operator runs, each given up on within its limit, saying so.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let on_the_share = share.join("proxies").display().to_string();
    let commands = Commands::start(
        dir.path(),
        db.url(),
        &[
            ("status", &["status", "--json"], None),
            ("add beside", &["config", "add", "--user", "bob", "--root", elsewhere.to_str().unwrap()], None),
            (
                "add on",
                &["config", "add", "--user", "bob", "--root", &share.join("photos-new").display().to_string()],
                None,
            ),
            ("activate", &["config", "activate", &resting], None),
            ("check", &["config", "check"], Some(&on_the_share)),
            ("run", &["run"], Some(&on_the_share)),
        ],
    );

    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let worker = start_worker(db.url(), dir.path(), "beside-a-stopped-share", threads + 1, |run| {
        // Its runtime has as many threads as libraries on the share, whatever the shell running the tests says; its
        // crawls wait on the share as long as the test runs.
        run.env("TOKIO_WORKER_THREADS", threads.to_string())
            .env("ALMANAC__STORAGE__ROOT_ANSWER_LIMIT", "1h")
            .env("ALMANAC__HTTP__ENABLED", "true")
            .env("ALMANAC__HTTP__ADDRESS", format!("127.0.0.1:{port}"));
    });

    let library_crawled = format!(
        "SELECT 1 FROM work_items w JOIN storage_configs c ON c.id = w.storage_config_id
          WHERE w.kind = 'crawl' AND w.status = 'succeeded' AND c.root_path = '{}'",
        library.display()
    );
    support::wait_for(db.url(), &library_crawled, Duration::from_secs(60));
    let assets = support::query(db.url(), "SELECT count(*) FROM media_assets");
    assert_eq!(assets, [["3"]], "the library that answers is crawled whole");
    let waiting = support::query(
        db.url(),
        "SELECT count(*) FROM work_items w JOIN storage_configs c ON c.id = w.storage_config_id
          WHERE w.kind = 'crawl' AND w.status = 'running' AND c.root_path LIKE '%/nas/photos-%'",
    );
    assert_eq!(waiting, [[threads.to_string()]], "every crawl of the stopped share is running, waiting on it");
    let page = http_get(port, "/");
    assert!(page.starts_with("HTTP/1.1 200"), "the page answers: {}", page.lines().next().unwrap_or_default());

    let commands = commands.ended();
    let (status, lines) = stop(worker, nas);
    commands.said_what_did_not_answer(&stopped, &share);
    let bob = support::query(
        db.url(),
        "SELECT count(*) FROM storage_configs c JOIN users u ON u.id = c.user_id
                                         WHERE u.username = 'bob'",
    );
    assert_eq!(bob, [["0"]], "nothing was registered");
    assert!(status.success(), "stopped when told to: {status}");
    assert!(lines.iter().any(|l| l["fields"]["event"] == "shutdown_grace_over"), "the waiting crawls were stopped");
    let handed_back =
        support::query(db.url(), "SELECT count(*) FROM work_items WHERE kind = 'crawl' AND status = 'running'");
    assert_eq!(handed_back, [["0"]], "no crawl is left running");
    assert!(!pause.wait().unwrap().success(), "the command that gave up ended with an error");
}

const EVERY: Duration = Duration::from_millis(100);

/// What each test starts from: a migrated database and a fresh folder; `None` (said) where FUSE cannot be mounted.
fn set_up() -> Option<(TestDatabase, tempfile::TempDir)> {
    if !may_mount_fuse() {
        eprintln!("SKIPPED: mounting a FUSE file system needs root, /dev/fuse and Python's llfuse");
        return None;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = rt.block_on(TestDatabase::create());
    cli(db.url(), &["migrate"]);
    Some((db, tempfile::tempdir().unwrap()))
}

/// `almanac-worker args` against the database at `url`, which must succeed; what it printed.
fn cli(url: &str, args: &[&str]) -> String {
    let out = support::worker().args(args).env("DATABASE_URL", url).output().unwrap();
    assert!(out.status.success(), "almanac-worker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A camera's JPEG at `path` (its folders made), the `i`th of a test's.
fn photo(path: &Path, i: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let exif = FixtureExif::camera(&format!("2021:03:0{} 10:00:00", i + 1), "+01:00");
    std::fs::write(path, fixtures::jpeg(640, 480, i, true, &exif)).unwrap();
}

/// `almanac-worker run` as Worker `name` with `slots`, under `dir` ([`Worker::start`]), quick to poll and to stop, as
/// `more` adds.
fn start_worker(url: &str, dir: &Path, name: &str, slots: usize, more: impl FnOnce(&mut Command)) -> Worker {
    Worker::start(url, dir, name, |run| {
        run.env("ALMANAC__WORKER__SLOTS", slots.to_string())
            .env("ALMANAC__STORAGE__SETTLE_TIME", "0s")
            .env("ALMANAC__QUEUE__POLL_INTERVAL", "200ms")
            .env("ALMANAC__QUEUE__SHUTDOWN_GRACE", "1s");
        more(run);
    })
}

/// A Worker with one slot, a library on a share and one on a disk, both crawled once; then the share stops answering,
/// and a crawl of each is queued, the share's first. The share's crawl gives its slot up after its limit
/// (`storage.root_answer_limit`, 3 s here), saying its root did not answer and that nothing was read, and the
/// library's crawl runs.
/// Tried again, the share's crawl is refused at once while the first look still waits: no second look, so no second
/// thread left waiting. Then the proxy volume stops answering too: the library's crawl gives up, naming the proxy
/// root and saying that every library waits for it.
#[test]
fn a_crawl_of_a_share_that_does_not_answer_gives_its_slot_up_and_looks_at_it_once() {
    let Some((db, dir)) = set_up() else { return };
    let cli = |args: &[&str]| drop(cli(db.url(), args));
    let (share, library) = (dir.path().join("nas"), dir.path().join("library"));
    let on_the_share = share.join("photos");
    photo(&on_the_share.join("IMG_0.JPG"), 0);
    photo(&library.join("IMG_1.JPG"), 1);
    for root in [&on_the_share, &library] {
        cli(&["config", "add", "--user", "ann", "--root", root.to_str().unwrap()]);
        // Not watched: the crawls are the only readers of the share.
        cli(&["config", "watch", root.to_str().unwrap(), "off"]);
    }
    // Started while the share answers (its start-up look at every root passes at once), one slot, tried again soon:
    // the first crawls of both libraries run before the share stops answering.
    let worker = start_worker(db.url(), dir.path(), "one-slot", 1, |run| {
        run.env("ALMANAC__QUEUE__RETRY_BASE", "1s")
            .env("ALMANAC__STORAGE__ROOT_ANSWER_LIMIT", "3s")
            .env("ALMANAC__STORAGE__PROXY_ROOT", dir.path().join("volume/proxies"));
    });
    let crawled =
        "SELECT 1 FROM work_items WHERE kind = 'crawl' HAVING count(*) = 2 AND bool_and(status = 'succeeded')";
    support::wait_for(db.url(), crawled, Duration::from_secs(30));
    let nas = StoppedAnswering::mount(&share);
    photo(&library.join("IMG_2.JPG"), 2);
    for root in [&on_the_share, &library] {
        cli(&["enqueue", "crawl", "--config", root.to_str().unwrap()]);
    }

    // Within the limit, and a little more: the library's crawl waited in the queue for the share's.
    support::wait_for(
        db.url(),
        "SELECT 1 FROM media_assets WHERE display_path LIKE '%IMG_2.JPG'",
        Duration::from_secs(30),
    );
    let given_up = worker.events("retry_scheduled");
    let first = given_up.first().map(|l| l["fields"]["error"].as_str().unwrap_or_default().to_owned());
    let first = first.expect("the share's crawl gave its slot up");
    let said = format!("{} did not answer within 3 s", on_the_share.display());
    assert!(first.contains(&said) && first.contains("Nothing was read"), "{first}");
    // Its next try (a second or so on) is refused without looking again.
    let again = format!(
        "SELECT w.last_error FROM work_items w JOIN storage_configs c ON c.id = w.storage_config_id
          WHERE w.kind = 'crawl' AND c.root_path = '{}' AND w.failures >= 2",
        on_the_share.display()
    );
    let rows = support::wait_for(db.url(), &again, Duration::from_secs(30));
    assert!(rows[0][0].contains("has not answered since a look made"), "{:?}", rows[0]);
    assert!(rows[0][0].contains("pause --config"), "{:?}", rows[0]);

    // Then the proxy volume stops answering too: the library's next crawl names it, not the library. The share's
    // library is paused first, so that only the library's crawl looks at the volume.
    cli(&["pause", "--config", on_the_share.to_str().unwrap()]);
    let share_idle = format!(
        "SELECT 1 FROM storage_configs c WHERE c.root_path = '{}' AND NOT EXISTS (SELECT 1 FROM work_items w
          WHERE w.storage_config_id = c.id AND w.status = 'running')",
        on_the_share.display()
    );
    support::wait_for(db.url(), &share_idle, Duration::from_secs(30));
    let volume = StoppedAnswering::mount(&dir.path().join("volume"));
    cli(&["enqueue", "crawl", "--config", library.to_str().unwrap()]);
    let proxies = format!(
        "SELECT w.last_error FROM work_items w JOIN storage_configs c ON c.id = w.storage_config_id
          WHERE w.kind = 'crawl' AND c.root_path = '{}' AND w.last_error LIKE '%looking at the proxy root%'",
        library.display()
    );
    let rows = support::wait_for(db.url(), &proxies, Duration::from_secs(30));
    let said = format!("{}/volume/proxies did not answer within 3 s", dir.path().display());
    assert!(rows[0][0].contains(&said), "{:?}", rows[0]);
    assert!(rows[0][0].contains("every library's crawls wait for the proxy volume"), "{:?}", rows[0]);

    let (status, _) = stop(worker, (nas, volume));
    assert!(status.success(), "stopped when told to: {status}");
}

/// A share that stops answering in the middle of two crawls: one while it lists a folder, one while it reads a photo.
/// What was found before is catalogued; the crawl waiting in its walk is cancelled when asked (its slot freed), and
/// the Worker, told to stop, stops and hands back the crawl waiting on its read. Nothing is written for the photo
/// that was never read, nor is it counted as failed.
#[test]
fn a_share_that_stops_answering_in_the_middle_of_a_crawl_holds_that_crawl_only_until_it_is_stopped() {
    let Some((db, dir)) = set_up() else { return };
    let cli = |args: &[&str]| cli(db.url(), args);
    let source = dir.path().join("source");
    for (i, rel) in ["walk/IMG_0.JPG", "walk/stops-answering/IMG_1.JPG", "read/IMG_2.JPG", "read/stops-answering.JPG"]
        .into_iter()
        .enumerate()
    {
        photo(&source.join(rel), i as u32);
    }
    let (share, waits) = (dir.path().join("nas"), dir.path().join("waits.log"));
    std::fs::create_dir_all(&share).unwrap();
    let nas = StoppedAnswering::midway(&share, &source, &waits);
    let roots = [share.join("walk"), share.join("read")];
    for root in &roots {
        cli(&["config", "add", "--user", "ann", "--root", root.to_str().unwrap()]);
        // Not watched: the crawls are the only readers of the share, so each wait it notes is a crawl's.
        cli(&["config", "watch", root.to_str().unwrap(), "off"]);
        cli(&["enqueue", "crawl", "--config", root.to_str().unwrap()]);
    }

    // Held for the whole test: [`a_share_that_stops_answering_in_the_middle_of_a_crawl_gives_its_slot_up`] shows what
    // the limit does.
    let worker = start_worker(db.url(), dir.path(), "midway", 3, |run| {
        run.env("ALMANAC__STORAGE__ROOT_ANSWER_LIMIT", "1h");
    });
    // Each crawl waits on the share, and what each found before it stopped answering is catalogued.
    almanac_testdb::patience::wait_for("both crawls to wait on the share", Duration::from_secs(60), EVERY, || {
        let waiting = std::fs::read_to_string(&waits).unwrap_or_default();
        (waiting.contains("walk/stops-answering\n") && waiting.contains("read/stops-answering.JPG")).then_some(())
    });
    support::wait_for(db.url(), "SELECT 1 FROM media_assets HAVING count(*) = 2", Duration::from_secs(60));
    let item_of = |root: &Path| {
        let sql = format!(
            "SELECT w.id FROM work_items w JOIN storage_configs c ON c.id = w.storage_config_id
              WHERE w.kind = 'crawl' AND w.status = 'running' AND c.root_path = '{}'",
            root.display()
        );
        support::query(db.url(), &sql).concat().concat()
    };
    let (walking, reading) = (item_of(&roots[0]), item_of(&roots[1]));
    assert!(!walking.is_empty() && !reading.is_empty(), "both crawls run, waiting");

    cli(&["cancel", &walking]);
    let cancelled = format!("SELECT 1 FROM work_items WHERE id = '{walking}' AND status = 'cancelled'");
    support::wait_for(db.url(), &cancelled, Duration::from_secs(30));

    let (status, lines) = stop(worker, nas);
    assert!(status.success(), "stopped when told to: {status}");
    let failed =
        lines.iter().filter(|l| l["fields"]["event"] == "file_failed").map(|l| l["fields"]["path"].to_string());
    assert_eq!(failed.collect::<Vec<_>>(), Vec::<String>::new(), "no file is counted as failed");
    let statuses = support::query(
        db.url(),
        &format!("SELECT status FROM work_items WHERE id IN ('{walking}', '{reading}') ORDER BY status"),
    );
    assert_eq!(statuses, [["cancelled"], ["queued"]], "the crawl waiting on its read was handed back");
    let written = support::query(
        db.url(),
        "SELECT (SELECT count(*) FROM media_assets WHERE display_path LIKE '%stops-answering%'),
                (SELECT count(*) FROM failed_files)",
    );
    assert_eq!(written, [["0", "0"]], "nothing is written, nor remembered as failed, for what was never read");
}

/// A Worker with one slot; two libraries on a share that stops answering in the middle of their crawls (one while
/// its walk lists a folder, one while it reads a photo, after the walk), and one on a disk, crawled in that order.
/// Each crawl of the share gives its slot up once none of its calls answered for four limits
/// (`storage.root_answer_limit`, 3 s here), keeping what it found before and writing nothing for what it did not
/// read, and the disk's crawl runs. Tried again, each is refused at once without a look, its thread still waiting.
#[test]
fn a_share_that_stops_answering_in_the_middle_of_a_crawl_gives_its_slot_up() {
    let Some((db, dir)) = set_up() else { return };
    let cli = |args: &[&str]| cli(db.url(), args);
    let (source, library) = (dir.path().join("source"), dir.path().join("library"));
    let files = ["walk/IMG_0.JPG", "walk/stops-answering/IMG_1.JPG", "read/IMG_2.JPG", "read/stops-answering.JPG"];
    for (i, rel) in files.into_iter().enumerate() {
        photo(&source.join(rel), i as u32);
    }
    photo(&library.join("IMG_4.JPG"), 4);
    let (share, waits) = (dir.path().join("nas"), dir.path().join("waits.log"));
    std::fs::create_dir_all(&share).unwrap();
    let nas = StoppedAnswering::midway(&share, &source, &waits);
    let roots = [share.join("walk"), share.join("read"), library];
    for root in &roots {
        cli(&["config", "add", "--user", "ann", "--root", root.to_str().unwrap()]);
        // Not watched: the crawls are the only readers of the share.
        cli(&["config", "watch", root.to_str().unwrap(), "off"]);
        cli(&["enqueue", "crawl", "--config", root.to_str().unwrap()]);
    }

    let worker = start_worker(db.url(), dir.path(), "one-slot", 1, |run| {
        run.env("ALMANAC__QUEUE__RETRY_BASE", "1s").env("ALMANAC__STORAGE__ROOT_ANSWER_LIMIT", "3s");
    });
    // The disk's crawl ran: each crawl of the share gave its slot up.
    support::wait_for(
        db.url(),
        "SELECT 1 FROM media_assets WHERE display_path LIKE '%IMG_4.JPG'",
        Duration::from_secs(120),
    );
    let waiting = std::fs::read_to_string(&waits).unwrap();
    assert!(waiting.contains("walk/stops-answering\n") && waiting.contains("read/stops-answering.JPG"), "{waiting}");
    // Each tried again at least once since.
    for root in &roots[..2] {
        let tried = format!(
            "SELECT 1 FROM work_items w JOIN storage_configs c ON c.id = w.storage_config_id
              WHERE w.kind = 'crawl' AND c.root_path = '{}' AND w.failures >= 2",
            root.display()
        );
        support::wait_for(db.url(), &tried, Duration::from_secs(60));
    }
    let (status, lines) = stop(worker, nas);
    assert!(status.success(), "stopped when told to: {status}");
    let errors: Vec<_> = lines
        .iter()
        .filter(|l| l["fields"]["event"] == "retry_scheduled")
        .filter_map(|l| l["fields"]["error"].as_str())
        .collect();
    for root in &roots[..2] {
        let (said, refused) = (
            format!("the library's share at {} stopped answering in the middle of the crawl", root.display()),
            format!("{} has not answered since a look made", root.display()),
        );
        let given_up = errors.iter().position(|e| e.contains(&said) && e.contains("within 12 s"));
        let given_up = given_up.unwrap_or_else(|| panic!("{root:?} given up on: {errors:?}"));
        assert!(errors[given_up..].iter().any(|e| e.contains(&refused)), "{root:?} then refused: {errors:?}");
    }
    let failed: Vec<_> = lines.iter().filter(|l| l["fields"]["event"] == "file_failed").collect();
    assert!(failed.is_empty(), "no file is counted as failed: {failed:?}");
    let written = support::query(
        db.url(),
        "SELECT (SELECT string_agg(c.root_path || '/' || a.display_path, ' ' ORDER BY c.root_path)
                   FROM media_assets a JOIN storage_configs c ON c.id = a.storage_config_id),
                (SELECT count(*) FROM failed_files)",
    );
    let found =
        format!("{} {1}/read/IMG_2.JPG {1}/walk/IMG_0.JPG", roots[2].join("IMG_4.JPG").display(), share.display());
    let expected = [[found, "0".to_owned()]];
    assert_eq!(written, expected, "what was found before is kept; nothing is written for what was never read");
}

/// The commands run while the share answers nothing, by name: each its process, and where its output goes.
struct Commands(Vec<(&'static str, Child, PathBuf)>);

impl Commands {
    /// Starts each command (name, arguments, the proxy root it is given if not the default), its standard output
    /// and errors in one file under `dir`.
    fn start(dir: &Path, url: &str, commands: &[(&'static str, &[&str], Option<&str>)]) -> Self {
        let started = commands.iter().map(|(name, args, proxy_root)| {
            let said = dir.join(format!("{}.out", name.replace(' ', "-")));
            let out = std::fs::File::create(&said).unwrap();
            let mut command = support::worker();
            command.args(*args).env("DATABASE_URL", url).env("ALMANAC__WORKER__ID", format!("command-{name}"));
            command.env("ALMANAC__STORAGE__PROXY_ROOT", proxy_root.map_or(dir.join("proxies"), PathBuf::from));
            let child = command.stdout(out.try_clone().unwrap()).stderr(out).spawn().unwrap();
            (*name, child, said)
        });
        Self(started.collect())
    }

    /// Waits until each has ended but for its calls into the share: within its limits (a look at every root at
    /// once, then at those that answered), not for ever.
    fn ended(self) -> Self {
        for (_, child, _) in &self.0 {
            until_its_main_thread_ended(&child.id().to_string(), Duration::from_secs(100));
        }
        self
    }

    /// Once the share has ended: each command's exit and words. `status` lists every root on the share as not
    /// answering and ends well; the others are refused, exit 1 (try again), nothing done.
    fn said_what_did_not_answer(self, stopped: &[String], share: &Path) {
        for (name, mut child, said) in self.0 {
            let exit = child.wait().unwrap().code();
            let said = std::fs::read_to_string(said).unwrap();
            if name == "status" {
                assert_eq!(exit, Some(0), "status: {said}");
                let json: serde_json::Value = serde_json::from_str(&said).unwrap();
                let problems = json["root_problems"].to_string();
                for root in stopped {
                    assert!(problems.contains(&format!("{root} did not answer within 30s")), "{problems}");
                }
                continue;
            }
            assert_eq!(exit, Some(1), "{name}: {said}");
            assert!(said.contains("did not answer within 30s"), "{name}: {said}");
            let expected = match name {
                "add beside" => format!("{}/photos-", share.display()),
                "add on" => format!("--root {}/photos-new", share.display()),
                "activate" => format!("the storage root {}/photos-off did not answer", share.display()),
                _ => format!("storage.proxy_root {}/proxies", share.display()),
            };
            assert!(said.contains(&expected), "{name}: {said}");
        }
    }
}

/// Waits until the process `pid` has ended but for threads caught in a call into the stopped share: its main thread
/// is gone (the process shows as a zombie while such threads wait), or the whole process.
fn until_its_main_thread_ended(pid: &str, within: Duration) {
    almanac_testdb::patience::wait_for("the process to end", within, EVERY, || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        matches!(state, None | Some(Some('Z' | 'X'))).then_some(())
    });
}

/// SIGTERM, then, once its main thread has ended (threads caught in calls into the stopped share stay until it ends:
/// see [`until_its_main_thread_ended`]), the shares ended (`nas`: one, or a tuple of them), and the Worker's exit and
/// its log.
fn stop(mut worker: Worker, nas: impl Sized) -> (std::process::ExitStatus, Vec<serde_json::Value>) {
    let pid = worker.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    until_its_main_thread_ended(&pid, Duration::from_secs(20));
    drop(nas);
    let status = worker.child.wait().unwrap();
    (status, support::log_lines(&worker.log))
}
