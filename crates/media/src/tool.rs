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

impl Default for ToolLimits {
    fn default() -> Self {
        Self { quick: Duration::from_secs(120), transcode: Duration::from_secs(3600) }
    }
}

/// Runs `tool` with `args` for the media file `path`. Returns its standard output. On cancellation or timeout
/// the whole process group is killed before this returns.
pub(crate) async fn run_tool(
    tool: &'static str,
    package: &'static str,
    args: Vec<OsString>,
    path: &Path,
    limit: Duration,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, MediaError> {
    let mut command = CommandWrap::with_new(tool, |c| {
        c.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
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
