//! Running ffmpeg, ffprobe and friends: in a process group of their own, with a time limit, killed with
//! their whole tree on cancellation or timeout, and killed by the kernel if the Worker dies (even by
//! `kill -9`). Every external tool the Worker runs is started here, by [`run_tool`].

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::MediaError;
use crate::proxy_folder::Scratch;
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

/// What a tool is given besides its arguments.
#[derive(Default)]
pub(crate) struct Given<'a> {
    /// Its standard input: the open original (see [`OPEN_ORIGINAL`]).
    pub stdin: Option<std::fs::File>,
    /// The scratch folder it writes into or reads from, open in the tool too: its arguments name the files there
    /// through the handle ([`Scratch::for_tool`]), never by the folder's path.
    pub folder: Option<&'a Scratch<'a>>,
}

impl Given<'_> {
    /// A tool that reads the open original `stdin`.
    pub(crate) fn input(stdin: std::fs::File) -> Self {
        Given { stdin: Some(stdin), folder: None }
    }
}

/// Runs `tool` with `args` for the media file `path` (named for messages only), with what it is `given`. Returns
/// its standard output. On cancellation or timeout the whole process group is killed before this returns.
pub(crate) async fn run_tool(
    tool: &'static str,
    package: &'static str,
    args: Vec<OsString>,
    given: Given<'_>,
    path: &Path,
    limit: Duration,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, MediaError> {
    let Given { stdin, folder } = given;
    let HandedDown { given: args, shown, copy, words } = hand_down_to(folder, args)?;
    let mut child = start(command(tool, &args, stdin, copy)).await.map_err(|e| match e.kind() {
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
    if let Some((tools, known)) = &words {
        err = String::from_utf8_lossy(&err).replace(tools.as_str(), known).into_bytes();
    }
    if let Some(refusal) = crate::tool_output::refused_however_it_ended(tool, package, &shown, path, &err) {
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

/// A tool's arguments as it is given them and as the operator is shown them, and the folder handed down to it: a
/// copy of its handle, and how the tool names the folder with the folder's path, to put back in its words.
struct HandedDown {
    given: Vec<OsString>,
    shown: Vec<OsString>,
    copy: Option<std::os::fd::OwnedFd>,
    words: Option<(String, String)>,
}

/// `args` as the tool is given them and as the operator is shown them, and the `folder` handed down. The folder's
/// handle is copied for the tool: the command owns the copy until the tool is started, so the number the tool is
/// given names this folder whatever becomes of the call that asked for it. Its names for the operator, in the
/// tool's arguments and words, are the folder's path.
fn hand_down_to(folder: Option<&Scratch<'_>>, args: Vec<OsString>) -> Result<HandedDown, MediaError> {
    let Some(folder) = folder else {
        return Ok(HandedDown { given: args.clone(), shown: args, copy: None, words: None });
    };
    let (fd, at) = folder.handle();
    let copy = rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| MediaError::write(at, e.into()))?;
    let (ours, tools) = (through_handle(fd.as_raw_fd(), ""), through_handle(copy.as_raw_fd(), ""));
    let known = format!("{}/", at.display());
    let given = args.iter().map(|a| replaced(a, &ours, &tools)).collect();
    let shown = args.iter().map(|a| replaced(a, &ours, &known)).collect();
    Ok(HandedDown { given, shown, copy: Some(copy), words: Some((tools, known)) })
}

/// How a process names `name` in the folder it holds open at `fd`: the kernel resolves it through the handle,
/// whatever stands at the folder's path.
pub(crate) fn through_handle(fd: std::os::fd::RawFd, name: &str) -> String {
    format!("/proc/self/fd/{fd}/{name}")
}

/// `arg` with `from` replaced by `to`.
fn replaced(arg: &OsString, from: &str, to: &str) -> OsString {
    arg.to_str().map_or_else(|| arg.clone(), |a| a.replace(from, to).into())
}

/// The command that runs `tool` with `args`, `stdin` and the folder `handed` down to it, in a process group of its
/// own, killed when dropped, with the Worker or at its time limit.
fn command(
    tool: &'static str,
    args: &[OsString],
    stdin: Option<std::fs::File>,
    handed: Option<std::os::fd::OwnedFd>,
) -> CommandWrap {
    let mut command = CommandWrap::with_new(tool, |c| {
        let input = stdin.map_or_else(Stdio::null, Stdio::from);
        c.args(args).stdin(input).stdout(Stdio::piped()).stderr(Stdio::piped());
        die_with_the_worker(c);
        lower_priority(c, crate::priority::priority());
        if let Some(fd) = handed {
            hand_down(c, fd);
        }
    });
    command.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    command
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

/// Keeps the open folder `fd` open in the tool, which the kernel would close at exec (every handle of ours is
/// opened close-on-exec): the tool then reaches the folder as `/proc/self/fd/<fd>`, the same number as ours. The
/// command owns `fd` until it is dropped, after the tool was started.
fn hand_down(command: &mut tokio::process::Command, fd: std::os::fd::OwnedFd) {
    let hook = move || {
        // SAFETY: `fcntl(F_SETFD)` on a handle the hook owns, in the child's own copy of the Worker's handles.
        #[allow(unsafe_code)]
        let set = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
        if set == -1 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
    };
    // SAFETY: the hook runs in the child between fork and exec. It makes one system call (no allocation, no lock;
    // `last_os_error` reads errno) on a handle it owns, so open until the command, and with it the hook, is dropped.
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
mod tests;
