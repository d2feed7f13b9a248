//! Running ffmpeg, ffprobe and friends: in a process group of their own, with a time limit, killed with
//! their whole tree on cancellation or timeout, and killed by the kernel if the Worker dies (even by
//! `kill -9`). Every external tool the Worker runs is started here, by [`run_tool`].

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::MediaError;
use crate::tool_output::{ERROR_TAIL, MOST_TOOL_OUTPUT, Unread, read_at_most, read_tail};

/// Time limits for external tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// For probing a file and making a poster frame.
    pub quick: Duration,
    /// For transcoding a web video.
    pub transcode: Duration,
}

impl ToolLimits {
    /// The longest a file's proxies can sit on disk before its rows are committed: a probe, two tries at a
    /// poster, then the transcode. The proxy sweep's age floor must exceed it, or it could take a long
    /// video's poster for an orphan.
    pub fn longest_proxy_write(&self) -> Duration {
        self.quick * 3 + self.transcode
    }
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self { quick: Duration::from_secs(120), transcode: Duration::from_secs(3600) }
    }
}

/// What a tool reads an original through: its standard input is the open file, and it opens this name,
/// which the kernel resolves to that same open file (never the original's path).
pub(crate) const OPEN_ORIGINAL: &str = "/proc/self/fd/0";

/// Runs `tool` with `args` for the media file `path` (named for messages only), with `stdin` as its standard
/// input (the open original, see [`OPEN_ORIGINAL`]). Returns its standard output. On cancellation or timeout
/// the whole process group is killed before this returns.
pub(crate) async fn run_tool(
    tool: &'static str,
    package: &'static str,
    args: Vec<OsString>,
    stdin: Option<std::fs::File>,
    path: &Path,
    limit: Duration,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, MediaError> {
    let mut command = CommandWrap::with_new(tool, |c| {
        let input = stdin.map_or_else(Stdio::null, Stdio::from);
        c.args(&args).stdin(input).stdout(Stdio::piped()).stderr(Stdio::piped());
        die_with_the_worker(c);
        lower_priority(c, crate::priority::priority());
    });
    command.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let mut child = start(command).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MediaError::ToolMissing { tool, package, path: path.to_owned() },
        _ => MediaError::io(path, e),
    })?;
    let mut stdout = child.stdout().take().expect("piped");
    let mut stderr = child.stderr().take().expect("piped");
    let mut out = Vec::new();
    let mut err = Vec::new();
    let ended = {
        // Reading ends early, and stops the tool, when the pipe fails or the tool writes too much to its output.
        let run = async {
            let (_, _, status) = tokio::try_join!(
                read_at_most(&mut stdout, &mut out, MOST_TOOL_OUTPUT),
                read_tail(&mut stderr, &mut err, ERROR_TAIL),
                async { child.wait().await.map_err(Unread::Io) },
            )
            .map_err(|unread| match unread {
                Unread::Io(e) => MediaError::io(path, e),
                Unread::TooMuch => MediaError::Tool {
                    tool,
                    path: path.to_owned(),
                    message: format!(
                        "it wrote more than {} MiB of output, more than any file's description takes, and was \
                         stopped; the file is damaged or not a photo or video",
                        MOST_TOOL_OUTPUT >> 20
                    ),
                    signal: None,
                },
            })?;
            Ok(status)
        };
        tokio::select! {
            status = run => status,
            () = cancel.cancelled() => Err(MediaError::Cancelled),
            () = tokio::time::sleep(limit) => {
                Err(MediaError::TimedOut { tool, path: path.to_owned(), seconds: limit.as_secs() })
            }
        }
    };
    let status = match ended {
        Ok(status) => status,
        Err(stopped) => {
            // Kill the whole group (ffmpeg and anything it started) and reap it before returning.
            let _ = Box::into_pin(child.kill()).await;
            return Err(stopped);
        }
    };
    if let Some(refusal) = crate::tool_output::refused_however_it_ended(tool, package, &args, path, &err) {
        return Err(refusal);
    }
    if status.success() {
        Ok(out)
    } else {
        let text = String::from_utf8_lossy(&err);
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message").trim().to_owned();
        let (message, signal) = (format!("{status}: {last}{}", killed(status)), status.signal());
        Err(MediaError::Tool { tool, path: path.to_owned(), message, signal })
    }
}

/// What to say of a tool killed by SIGKILL that the Worker did not kill (it kills only on a cancel or a time limit,
/// which answer otherwise): most often the kernel's out-of-memory killer, on a machine short of memory for the file.
fn killed(status: std::process::ExitStatus) -> &'static str {
    if status.signal() == Some(9) {
        ". It was killed by something other than the Worker: most often the kernel's out-of-memory killer (see \
         `journalctl -k` or `dmesg`), the machine short of memory for this file beside the others being read. \
         Lower worker.max_concurrent_files or storage.max_image_megapixels, or give the machine more memory"
    } else {
        ""
    }
}

/// Asks the kernel to send the tool SIGKILL when the Worker dies, whatever kills it (`kill -9` included): its
/// process group and kill-on-drop only act while the Worker lives to use them, and an orphaned ffmpeg would
/// run with no time limit, writing to the temporary file a restarted Worker writes too.
///
/// The kernel sends the signal when the *thread* that started the child exits, not the process: see
/// [`start`], which is why every tool is started on one thread that lives as long as the Worker.
fn die_with_the_worker(command: &mut tokio::process::Command) {
    // Taken before the fork: the child compares it with its parent after asking for the signal.
    let worker = rustix::process::getpid();
    let hook = move || {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        // The Worker may have died between the fork and the line above, which then came too late to be
        // told: the child was given to another parent. It must not start the tool (the spawn fails).
        if rustix::process::getppid() != Some(worker) {
            return Err(rustix::io::Errno::SRCH.into());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec, where only async-signal-safe calls are
    // sound. It makes two system calls through rustix (no allocation, no lock) and builds its error from a raw
    // errno (no allocation); it captures one integer. The crate's unsafe code is listed in its Cargo.toml.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(hook);
    }
}

/// Runs the tool at `priority` (`worker.nice`, `worker.io_priority`): its child lowers itself before exec, so
/// the tool and everything it starts run low, and the thread that forks every tool keeps its own priority.
fn lower_priority(command: &mut tokio::process::Command, priority: crate::Priority) {
    if priority == crate::Priority::NORMAL {
        return;
    }
    // Best effort: a tool that cannot be lowered still runs (the error is dropped, never allocated).
    let hook = move || {
        let _ = crate::priority::lower_this_thread(priority);
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec. It makes system calls only (getpriority,
    // setpriority, ioprio_get, ioprio_set: rustix and raw syscalls, no allocation, no lock), on a copied value.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(hook);
    }
}

/// A request to the thread that starts tools: the command, the runtime its child belongs to (its reaping and
/// pipes), and where to hand the child back.
struct Start {
    command: CommandWrap,
    runtime: tokio::runtime::Handle,
    started: oneshot::Sender<std::io::Result<Box<dyn ChildWrapper>>>,
}

/// Starts `command` on the Worker's tool thread and hands its child back.
///
/// **Rule: a tool is never forked from a thread that may exit before the Worker.** The kernel's death signal
/// ([`die_with_the_worker`]) follows the thread that forked the child: a child started from a `spawn_blocking`
/// thread would be killed when that thread idles out (tokio ends them after ten seconds), and a tokio worker
/// thread can become such a thread after a `block_in_place`. So no caller's thread is used: one thread, made
/// at the first tool and never ended, forks every tool, whichever thread or runtime asks.
async fn start(command: CommandWrap) -> std::io::Result<Box<dyn ChildWrapper>> {
    static TOOL_THREAD: OnceLock<mpsc::Sender<Start>> = OnceLock::new();
    let tool_thread = TOOL_THREAD.get_or_init(|| {
        let (requests, received) = mpsc::channel::<Start>();
        // If the thread cannot be made, `received` is dropped here and every request fails below.
        let _ = std::thread::Builder::new().name("almanac-tools".into()).spawn(move || {
            for Start { mut command, runtime, started } in received {
                let _in_runtime = runtime.enter();
                // A caller that gave up (cancelled) drops the child unanswered: killed on drop, then reaped.
                let _ = started.send(command.spawn());
            }
        });
        requests
    });
    let (started, child) = oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    let gone = || {
        std::io::Error::other(
            "the Worker's thread that starts external tools could not be made or has ended (is the system out of \
             threads or memory?); restart the Worker",
        )
    };
    tool_thread.send(Start { command, runtime, started }).map_err(|_| gone())?;
    child.await.map_err(|_| gone())?
}

#[cfg(test)]
mod tests {
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
            u64::from_str_radix(mask.trim(), 16)
                .is_ok_and(|m| m & (1 << (rustix::process::Signal::KILL.as_raw() - 1)) != 0)
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
        let ran =
            runtime.block_on(run_tool("sleep", "coreutils", vec!["3600".into()], None, Path::new("x"), hour, &cancel));
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
        let err = run_tool("sh", "dash", hanging_tool(&marker), None, Path::new("x.heic"), limit, &cancel).await;
        assert!(matches!(err, Err(MediaError::Cancelled)), "{err:?}");
        tree_gone(&marker);
    }

    #[tokio::test]
    async fn a_hung_tool_is_killed_with_its_tree_at_its_time_limit() {
        let marker = format!("almanac-slow-tool-{}", std::process::id());
        let cancel = CancellationToken::new();
        let limit = Duration::from_millis(300);
        let err = run_tool("sh", "dash", hanging_tool(&marker), None, Path::new("x.heic"), limit, &cancel).await;
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
        let err = run_tool("sh", "dash", vec!["-c".into(), script.into()], None, Path::new("x.mp4"), limit, &cancel);
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
        let err = run_tool("sh", "dash", vec!["-c".into(), script.into()], None, Path::new("x.mp4"), limit, &cancel);
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
        let out = run_tool("sh", "dash", vec!["-c".into(), script.into()], None, Path::new("x"), limit, &cancel);
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
            Some(file),
            &path,
            Duration::from_secs(10),
            &cancel,
        );
        assert_eq!(out.await.unwrap(), b"what was opened");
    }
}
