use std::os::unix::process::ExitStatusExt;
use std::time::Instant;

use super::*;

/// What /proc says of a process: its parent, its state and its start time (which tells a reused pid
/// apart). `None` once it is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProcStat {
    parent: u32,
    state: char,
    started: u64,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: the name may hold spaces and parentheses, so read after the last `)`.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some(ProcStat {
        state: fields[0].chars().next()?,
        parent: fields[1].parse().ok()?,
        started: fields[19].parse().ok()?,
    })
}

/// Whether the process that had `stat` has ended (gone, a zombie nobody reaped yet, or its pid reused).
fn has_ended(pid: u32, stat: &ProcStat) -> bool {
    proc_stat(pid).is_none_or(|now| now.started != stat.started || matches!(now.state, 'Z' | 'X'))
}

/// Whether SIGKILL is pending for the process (sent, not yet acted upon).
fn kill_pending(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().filter_map(|l| l.strip_prefix("SigPnd:").or_else(|| l.strip_prefix("ShdPnd:"))).any(|mask| {
        u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & (1 << (rustix::process::Signal::KILL.as_raw() - 1)) != 0)
    })
}

/// Polls `done` every 50 ms for up to a minute: long enough for a machine loaded by builds beside us.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const HELPER: &str = "ALMANAC_TOOL_TEST_HELPER";

/// Not a test of its own: the process the next test starts (this test binary again, with [`HELPER`] set),
/// which runs a long `sleep` through [`run_tool`] on a runtime like the Worker's, until it is killed.
#[test]
fn helper_running_a_tool_until_killed() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let cancel = CancellationToken::new();
    let hour = Duration::from_secs(3600);
    let ran = runtime.block_on(run_tool(
        "sleep",
        "coreutils",
        vec!["3600".into()],
        Given::default(),
        Path::new("x"),
        hour,
        &cancel,
    ));
    panic!("the tool ended before its parent was killed: {ran:?}");
}

/// docs/safety.md, invariant 11: a tool started through `run_tool` dies with its parent, even when the parent is
/// killed with SIGKILL and has no chance to kill it (the tool is in a process group of its own, which the parent's
/// death does not reach).
#[test]
fn a_tool_dies_when_its_parent_is_killed_with_sigkill() {
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tool::tests::helper_running_a_tool_until_killed", "--nocapture", "--test-threads=1"])
        .env(HELPER, "1")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let parent = helper.id();
    let mut tool = None;
    wait_until("the helper's tool to start", || {
        tool = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep"))
            .find_map(|pid| proc_stat(pid).filter(|s| s.parent == parent).map(|s| (pid, s)));
        tool.is_some() || helper.try_wait().unwrap().is_some()
    });
    let (pid, stat) = tool.expect("the helper ended before its tool started");
    helper.kill().unwrap();
    assert_eq!(helper.wait().unwrap().signal(), Some(9));
    wait_until("the orphaned tool to die", || has_ended(pid, &stat));
}

/// The death signal follows the thread that forked the child. A tool must therefore not be forked on a
/// thread that ends before the Worker: started from such a thread, the tool outlives it.
#[test]
fn a_tool_outlives_the_thread_that_asked_for_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let handle = runtime.handle().clone();
    let (mut forked_here, mut started) = std::thread::spawn(move || {
        // The trap, for comparison: a child forked right on this thread with the same death signal.
        let forked_here = {
            let _in_runtime = handle.enter();
            let mut command = tokio::process::Command::new("sleep");
            command.arg("3600").kill_on_drop(true);
            die_with_the_worker(&mut command);
            command.spawn().unwrap()
        };
        let mut command = CommandWrap::with_new("sleep", |c| {
            c.arg("3600");
            die_with_the_worker(c);
        });
        command.wrap(KillOnDrop);
        (forked_here, handle.block_on(start(command)).unwrap())
    })
    .join()
    .unwrap();
    runtime.block_on(async {
        // The thread's end reached the child forked on it: the kernel has dealt with every child of that
        // thread...
        let ended = tokio::time::timeout(Duration::from_secs(60), forked_here.wait()).await;
        let status = ended.expect("a child forked on an ended thread lived on for a minute").unwrap();
        assert_eq!(status.signal(), Some(9), "the child forked on the thread was killed by its death signal");
        // ...and the tool `start` started was not among them.
        let pid = started.id().unwrap();
        assert!(started.try_wait().unwrap().is_none(), "the tool ended with the thread that asked for it");
        assert!(!kill_pending(pid), "the tool was sent SIGKILL when the thread that asked for it ended");
        Box::into_pin(started.kill()).await.unwrap();
    });
}

fn survivors(marker: &str) -> String {
    let out = std::process::Command::new("pgrep").args(["-f", marker]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits for every process of the tool's tree to be gone: a process killed is gone only once the kernel has
/// torn it down, which a loaded machine does late (its command line reads until then); one that was not
/// killed (its sleep is an hour) stays, and the wait fails.
fn tree_gone(marker: &str) {
    wait_until("every process of the tool's tree to be gone", || survivors(marker).is_empty());
}

/// A stand-in tool that hangs with a child of its own (the child's command line carries the marker, and
/// `; true` keeps each shell alive beside its sleep).
fn hanging_tool(marker: &str) -> Vec<OsString> {
    vec!["-c".into(), format!("sh -c 'sleep 3600; true {marker}' & sleep 3600; true {marker}").into()]
}

#[tokio::test]
async fn a_hung_tool_is_killed_with_its_tree_on_cancellation() {
    let marker = format!("almanac-hung-tool-{}", std::process::id());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let limit = Duration::from_secs(3600);
    let err =
        run_tool("sh", "dash", hanging_tool(&marker), Given::default(), Path::new("x.heic"), limit, &cancel).await;
    assert!(matches!(err, Err(MediaError::Cancelled)), "{err:?}");
    tree_gone(&marker);
}

#[tokio::test]
async fn a_hung_tool_is_killed_with_its_tree_at_its_time_limit() {
    let marker = format!("almanac-slow-tool-{}", std::process::id());
    let cancel = CancellationToken::new();
    let limit = Duration::from_millis(300);
    let err =
        run_tool("sh", "dash", hanging_tool(&marker), Given::default(), Path::new("x.heic"), limit, &cancel).await;
    assert!(matches!(err, Err(MediaError::TimedOut { tool: "sh", .. })), "{err:?}");
    tree_gone(&marker);
}

/// A tool that writes without end to its output (a crafted file's description, a tool gone wrong) is stopped
/// with its tree once it has written more than the Worker keeps, and the file fails saying so; it does not
/// run on to its time limit with the Worker's memory growing.
#[tokio::test]
async fn a_tool_that_floods_its_output_is_stopped_with_its_tree() {
    let marker = format!("almanac-flooding-tool-{}", std::process::id());
    let script = format!("yes {marker}; true {marker}");
    let (cancel, limit) = (CancellationToken::new(), Duration::from_secs(3600));
    let err =
        run_tool("sh", "dash", vec!["-c".into(), script.into()], Given::default(), Path::new("x.mp4"), limit, &cancel);
    match err.await {
        Err(MediaError::Tool { tool: "sh", message, .. }) => {
            assert!(message.contains("more than 16 MiB of output"), "{message}");
        }
        other => panic!("a flooding tool: {other:?}"),
    }
    tree_gone(&marker);
}

/// A tool that writes far more to its standard error than the Worker keeps (ffmpeg reporting every damaged
/// frame of a long video) runs to its end, and its last words are still what the failure says.
#[tokio::test]
async fn a_tool_that_floods_its_errors_runs_to_its_end_and_its_last_words_are_kept() {
    let script = "yes '[h264 @ 0x1] error while decoding MB 12 7' | head -c 50000000 >&2; \
                  echo 'Conversion failed!' >&2; exit 3";
    let (cancel, limit) = (CancellationToken::new(), Duration::from_secs(3600));
    let err =
        run_tool("sh", "dash", vec!["-c".into(), script.into()], Given::default(), Path::new("x.mp4"), limit, &cancel);
    match err.await {
        Err(MediaError::Tool { tool: "sh", message, .. }) => {
            assert!(message.ends_with("Conversion failed!"), "{message}");
            assert!(message.contains("3"), "the exit status is said: {message}");
        }
        other => panic!("a tool flooding its errors: {other:?}"),
    }
}

/// A stand-in tool that prints its own /proc stat line and its I/O priority as `ionice` reads it: the tools
/// run at the Worker's low priority (the default: nice 10, best effort at level 7), and the thread that
/// forks them is not lowered.
#[tokio::test]
async fn a_tool_runs_at_the_low_priority_and_its_starting_thread_keeps_its_own() {
    assert_eq!(crate::priority::priority(), crate::Priority::default(), "no test here changes the setting");
    let script = "cat /proc/$$/stat; ionice -p $$";
    let cancel = CancellationToken::new();
    let limit = Duration::from_secs(60);
    let out =
        run_tool("sh", "dash", vec!["-c".into(), script.into()], Given::default(), Path::new("x"), limit, &cancel);
    let out = String::from_utf8(out.await.unwrap()).unwrap();
    let (stat, ionice) = out.split_once('\n').unwrap();
    let nice_of = |stat: &str| -> i32 {
        stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(16).unwrap().parse().unwrap()
    };
    // The test may itself run lowered (`nice cargo test`): priorities only go down, never up.
    let own = nice_of(&std::fs::read_to_string("/proc/self/stat").unwrap());
    assert_eq!(nice_of(stat), own.max(10), "{stat}");
    assert_eq!(ionice.trim(), "best-effort: prio 7");
    let tools = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|t| t.unwrap().path())
        .find(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim() == "almanac-tools"))
        .expect("the thread that starts tools");
    let stat = std::fs::read_to_string(tools.join("stat")).unwrap();
    assert_eq!(nice_of(&stat), own, "the thread that starts tools keeps the Worker's own: {stat}");
}

#[tokio::test]
async fn the_tool_reads_the_open_file_not_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jpg");
    std::fs::write(&path, b"what was opened").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"what was swapped in").unwrap();
    let cancel = CancellationToken::new();
    let out = run_tool(
        "cat",
        "coreutils",
        vec![OPEN_ORIGINAL.into()],
        Given::input(file),
        &path,
        Duration::from_secs(10),
        &cancel,
    );
    assert_eq!(out.await.unwrap(), b"what was opened");
}
