//! The TCP settings of our connections that a connection string may leave to us: keepalives and the user
//! timeout, so that a peer gone without a reset is noticed in about a minute, not hours, whether the connection
//! was idle or waiting for its bytes to be acknowledged.

use std::time::Duration;

use crate::StoreError;

/// The keepalive settings; a string that sets any of them keeps its own.
pub(super) const KEEPALIVE_KEYS: [&str; 4] =
    ["keepalives", "keepalives_idle", "keepalives_interval", "keepalives_retries"];

/// The TCP settings a connection string leaves to us, or sets.
#[derive(Debug, Clone, Copy)]
pub(super) struct Own {
    /// The string sets keepalives of its own.
    pub(super) keepalives: bool,
    /// The user timeout to set: ours, the string's, or none (the string's `0`: the system's default).
    pub(super) user_timeout: Option<Duration>,
}

/// The user timeout a string's `tcp_user_timeout` asks for, read as libpq reads it: milliseconds, `0` for the
/// system's default. The driver would read the number as seconds (a libpq string's `5000` would wait 83
/// minutes), so the key is taken out of the string and set here. [`TCP_USER_TIMEOUT`] when it is not given.
pub(super) fn user_timeout_of(value: Option<&str>) -> Result<Option<Duration>, StoreError> {
    let Some(value) = value else { return Ok(Some(TCP_USER_TIMEOUT)) };
    match value.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(ms) => Ok(Some(Duration::from_millis(ms))),
        Err(_) => Err(StoreError::Config(format!(
            "tcp_user_timeout={value:?} is not a number of milliseconds (as libpq reads it; 0 leaves the system's \
             default)"
        ))),
    }
}

/// How long bytes sent on a TCP connection may go unacknowledged before the connection is given up
/// (`TCP_USER_TIMEOUT`), unless the string sets `tcp_user_timeout` (libpq's milliseconds). Keepalives only probe an idle connection;
/// one that sent a statement to a peer that vanished without a reset (a host powered off, a partition) would
/// otherwise wait for the kernel's retransmissions, about 15 minutes, with the attempt's catalogue statement in
/// it. A statement the server is still running is not affected: its bytes were acknowledged.
pub(super) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

impl Own {
    /// Sets on `config` what the string left to us: keepalives (idle 30 s, then a probe every 10 s, 3 probes)
    /// and the user timeout.
    pub(super) fn apply(self, config: &mut tokio_postgres::Config) {
        if !self.keepalives {
            config
                .keepalives(true)
                .keepalives_idle(Duration::from_secs(30))
                .keepalives_interval(Duration::from_secs(10))
                .keepalives_retries(3);
        }
        if let Some(timeout) = self.user_timeout {
            config.tcp_user_timeout(timeout);
        }
    }
}
