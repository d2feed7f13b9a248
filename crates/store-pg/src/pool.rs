//! The store's connection pools: its own, whose connections are checked with a round trip only when they have
//! not been used for a while ([`Checked`]), or a pool of the web backend's (diesel-async's deadpool, checked as
//! its owner configured it).
//!
//! A pool checks a connection before handing it out. diesel-async's check (`RecyclingMethod::Verified`) is a
//! `SELECT` on every checkout: one round trip of the four a claim took, and of the two a read takes, on a busy
//! Worker. A connection whose backend was terminated, or whose socket closed, is known without it once its
//! driver task has seen the close (at once on an idle machine, within milliseconds on a loaded one): the
//! connection then reports itself closed, which the pool asks first. What only a round trip finds is a peer
//! gone silently: a firewall that dropped an idle connection (which takes time without use), or a host that
//! vanished without a reset. So a connection taken from the pool (or made) within [`Checked::RECENT`] is
//! handed out as it is, and an older one is checked as before. A statement that meets a connection lost in
//! between fails as one that met it right after the check did: an outage, placed and retried (ADR 0010); on a
//! silent loss it waits for the TCP user timeout first (`conninfo`, 30 s unless the string sets its own), as a
//! statement already sent always did. Deadpool hands out its least recently used connection first, so on a
//! quiet Worker most connections are older than a second and still checked: the round trip is saved under
//! load, where it counts.

use std::time::Duration;

use deadpool::managed::{Manager, Metrics, RecycleResult};
use diesel_async::AsyncPgConnection;
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, PoolError, PoolableConnection};

/// A pool of the store's connections.
#[derive(Clone)]
pub(crate) enum ConnPool {
    /// The store's own.
    Ours(deadpool::managed::Pool<Checked>),
    /// The caller's ([`crate::PgStore::from_pool`]).
    Theirs(diesel_async::pooled_connection::deadpool::Pool<AsyncPgConnection>),
}

/// A connection taken from a [`ConnPool`].
pub(crate) enum Pooled {
    /// From the store's own pool.
    Ours(deadpool::managed::Object<Checked>),
    /// From the caller's pool.
    Theirs(diesel_async::pooled_connection::deadpool::Object<AsyncPgConnection>),
}

impl ConnPool {
    /// A connection, checked as the pool checks them.
    pub(crate) async fn get(&self) -> Result<Pooled, deadpool::managed::PoolError<PoolError>> {
        Ok(match self {
            ConnPool::Ours(pool) => Pooled::Ours(pool.get().await?),
            ConnPool::Theirs(pool) => Pooled::Theirs(pool.get().await?),
        })
    }

    /// The pool's size and use.
    pub(crate) fn status(&self) -> deadpool::Status {
        match self {
            ConnPool::Ours(pool) => pool.status(),
            ConnPool::Theirs(pool) => pool.status(),
        }
    }
}

impl Pooled {
    /// Takes the connection out of its pool for good: dropped, it is closed, never handed out again.
    pub(crate) fn detach(self) -> AsyncPgConnection {
        match self {
            Pooled::Ours(object) => deadpool::managed::Object::take(object),
            Pooled::Theirs(object) => deadpool::managed::Object::take(object),
        }
    }
}

impl std::ops::Deref for Pooled {
    type Target = AsyncPgConnection;
    fn deref(&self) -> &AsyncPgConnection {
        match self {
            Pooled::Ours(object) => object,
            Pooled::Theirs(object) => object,
        }
    }
}

impl std::ops::DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut AsyncPgConnection {
        match self {
            Pooled::Ours(object) => object,
            Pooled::Theirs(object) => object,
        }
    }
}

/// The store's own connection manager: diesel-async's (which makes each connection through the store's setup
/// and checks it with a `SELECT`), except that a connection used within [`Checked::RECENT`] and not closed is
/// handed out without that round trip.
pub(crate) struct Checked {
    inner: AsyncDieselConnectionManager<AsyncPgConnection>,
}

impl Checked {
    /// How recently a connection must have been taken from the pool (or made) to be handed out unchecked.
    pub(crate) const RECENT: Duration = Duration::from_secs(1);

    pub(crate) fn new(inner: AsyncDieselConnectionManager<AsyncPgConnection>) -> Self {
        Self { inner }
    }
}

/// Whether a connection last taken (or made) `idle` ago, closed or not, needs the check's round trip.
pub(crate) fn needs_check(idle: Duration, closed: bool) -> bool {
    closed || idle >= Checked::RECENT
}

impl Manager for Checked {
    type Type = AsyncPgConnection;
    type Error = PoolError;

    async fn create(&self) -> Result<AsyncPgConnection, PoolError> {
        self.inner.create().await
    }

    async fn recycle(&self, conn: &mut AsyncPgConnection, metrics: &Metrics) -> RecycleResult<PoolError> {
        // `last_used` counts from the connection's last checkout (or its making), never less than its idle time.
        // It reads the monotonic clock, which stops while the machine is suspended: a connection used just
        // before a suspend looks recent after it, and meets a dropped peer as an outage (or the user timeout).
        if needs_check(metrics.last_used(), conn.is_broken()) {
            // diesel-async's own: refuses a broken or closed connection, then runs the check.
            return self.inner.recycle(conn, metrics).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_idle_for_a_while_or_closed_is_checked() {
        assert!(!needs_check(Duration::ZERO, false));
        assert!(!needs_check(Checked::RECENT - Duration::from_millis(1), false));
        assert!(needs_check(Checked::RECENT, false));
        assert!(needs_check(Duration::from_secs(3600), false));
        assert!(needs_check(Duration::ZERO, true), "a closed connection is refused however recent");
    }
}
