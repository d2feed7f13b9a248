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
/// Tests beside it on threads of the same process cannot take its lines away
/// ([`almanac_testdb::logs::each_thread_chooses_its_lines`]).
pub async fn capture<T>(f: impl Future<Output = T>) -> (Vec<serde_json::Value>, T) {
    almanac_testdb::logs::each_thread_chooses_its_lines();
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
