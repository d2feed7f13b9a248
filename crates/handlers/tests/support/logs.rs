//! The log lines (JSON) a future writes while it runs: for tests that assert an event was logged, once.

use std::sync::{Arc, Mutex};

use tracing::instrument::WithSubscriber;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with a JSON subscriber of its own, and answers the lines it logged (INFO and above) with its output.
///
/// tracing decides once per process whether a log line's call site is wanted, asking the subscriber of the
/// thread that first reaches it. A test running beside this one without a subscriber would have the line
/// marked unwanted for every thread, this capture's too (it happened under plain `cargo test`: a watcher's
/// `watch_started` went missing). So every thread without a subscriber of its own writes to a process-wide one
/// that wants INFO and above and throws the lines away.
pub async fn capture<T>(f: impl Future<Output = T>) -> (Vec<serde_json::Value>, T) {
    static WANTED: std::sync::Once = std::sync::Once::new();
    WANTED.call_once(|| {
        let discard =
            tracing_subscriber::fmt().with_max_level(tracing::Level::INFO).with_writer(std::io::sink).finish();
        // Another test's global subscriber, if one was set first, serves as well.
        let _ = tracing::subscriber::set_global_default(discard);
    });
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let out = f.with_subscriber(subscriber).await;
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (text.lines().map(|l| serde_json::from_str(l).unwrap()).collect(), out)
}

/// The lines of `lines` that log `event` (its `event` field), in order.
pub fn events<'a>(lines: &'a [serde_json::Value], event: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["fields"]["event"] == event).collect()
}
