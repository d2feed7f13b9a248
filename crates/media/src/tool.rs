//! Running ffmpeg, ffprobe and friends: in a process group of their own, with a time limit, killed with
//! their whole tree on cancellation or timeout.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::MediaError;

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
    });
    command.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let mut child = command.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MediaError::ToolMissing { tool, package, path: path.to_owned() },
        _ => MediaError::io(path, e),
    })?;
    let mut stdout = child.stdout().take().expect("piped");
    let mut stderr = child.stderr().take().expect("piped");
    let mut out = Vec::new();
    let mut err = Vec::new();
    let ended = {
        let run = async {
            let (o, e, status) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err), child.wait());
            o.and(e).and(status)
        };
        tokio::select! {
            status = run => Ok(status),
            () = cancel.cancelled() => Err(MediaError::Cancelled),
            () = tokio::time::sleep(limit) => {
                Err(MediaError::TimedOut { tool, path: path.to_owned(), seconds: limit.as_secs() })
            }
        }
    };
    let status = match ended {
        Ok(status) => status.map_err(|e| MediaError::io(path, e))?,
        Err(stopped) => {
            // Kill the whole group (ffmpeg and anything it started) and reap it before returning.
            let _ = Box::into_pin(child.kill()).await;
            return Err(stopped);
        }
    };
    if status.success() {
        Ok(out)
    } else {
        let text = String::from_utf8_lossy(&err);
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message").trim().to_owned();
        Err(MediaError::Tool { tool, path: path.to_owned(), message: format!("{status}: {last}") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn survivors(marker: &str) -> String {
        let out = std::process::Command::new("pgrep").args(["-f", marker]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
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
        assert_eq!(survivors(&marker), "", "a process of the tool's tree survived");
    }

    #[tokio::test]
    async fn a_hung_tool_is_killed_with_its_tree_at_its_time_limit() {
        let marker = format!("almanac-slow-tool-{}", std::process::id());
        let cancel = CancellationToken::new();
        let limit = Duration::from_millis(300);
        let err = run_tool("sh", "dash", hanging_tool(&marker), None, Path::new("x.heic"), limit, &cancel).await;
        assert!(matches!(err, Err(MediaError::TimedOut { tool: "sh", .. })), "{err:?}");
        assert_eq!(survivors(&marker), "", "a process of the tool's tree survived");
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
