//! What the executor measures, through the `metrics` facade (the binary exports it to Prometheus; a library
//! user's own recorder gets it too, or nothing is recorded when none is installed): claim and heartbeat
//! latencies, by outcome. Measured with tokio's clock, so paused-time tests see the time they advance.

use tokio::time::Instant;

/// Histogram: seconds from sending a claim to its answer, by `outcome` (`claimed`, `empty`, `error`,
/// `timeout`). Only the claims of free slots: a claim made with a completion is in the completion.
pub const CLAIM_SECONDS: &str = "almanac_claim_duration_seconds";

/// Histogram: seconds from sending a heartbeat to its answer, by `outcome` (`renewed`, `lost`, `error`,
/// `timeout`).
pub const HEARTBEAT_SECONDS: &str = "almanac_heartbeat_duration_seconds";

/// Upper bounds (seconds) suited to both: a claim or heartbeat takes milliseconds when all is well, and is cut
/// off at one heartbeat interval (10 s by default).
pub const LATENCY_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Describes the executor's metrics to the installed recorder (HELP lines and units).
pub fn describe() {
    metrics::describe_histogram!(
        CLAIM_SECONDS,
        metrics::Unit::Seconds,
        "Time from sending a claim to its answer, by outcome (claimed, empty, error, timeout)."
    );
    metrics::describe_histogram!(
        HEARTBEAT_SECONDS,
        metrics::Unit::Seconds,
        "Time from sending a heartbeat to its answer, by outcome (renewed, lost, error, timeout)."
    );
}

pub(crate) fn claim(sent_at: Instant, outcome: &'static str) {
    metrics::histogram!(CLAIM_SECONDS, "outcome" => outcome).record(sent_at.elapsed().as_secs_f64());
}

/// A claim's outcome as its histogram labels it: `claimed`, `empty`, `error` or `timeout`.
pub(crate) fn claim_outcome<E, T>(answer: &Result<Result<Vec<T>, E>, tokio::time::error::Elapsed>) -> &'static str {
    match answer {
        Ok(Ok(claimed)) if claimed.is_empty() => "empty",
        Ok(Ok(_)) => "claimed",
        Ok(Err(_)) => "error",
        Err(_) => "timeout",
    }
}

pub(crate) fn heartbeat(sent_at: Instant, outcome: &'static str) {
    metrics::histogram!(HEARTBEAT_SECONDS, "outcome" => outcome).record(sent_at.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_labelled_by_what_it_came_to() {
        let claimed: Result<Result<Vec<u8>, ()>, tokio::time::error::Elapsed> = Ok(Ok(vec![1]));
        assert_eq!(claim_outcome(&claimed), "claimed");
        assert_eq!(claim_outcome(&Ok::<Result<Vec<u8>, ()>, _>(Ok(Vec::new()))), "empty");
        assert_eq!(claim_outcome(&Ok::<Result<Vec<u8>, ()>, _>(Err(()))), "error");
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_that_did_not_answer_in_time_is_labelled_timeout() {
        let late =
            tokio::time::timeout(std::time::Duration::from_millis(1), std::future::pending::<Result<Vec<u8>, ()>>());
        assert_eq!(claim_outcome(&late.await), "timeout");
    }
}
