//! The part of an Almanac Worker that claims work items and runs their handlers, keeping rules 5–9 of the
//! work queue (ADR 0008): fenced writes, leases renewed by heartbeats, the self-stop, outcomes and shutdown.
//!
//! **Architecture invariants:** the executor depends only on the domain's ports (never on the PostgreSQL
//! adapter); every timer (poll, heartbeat, per-call timeout, self-stop deadline, grace) comes from tokio's clock,
//! so tests drive it with paused time; it never reads the wall clock; every write after a claim is fenced by
//! (id, attempt), and an attempt that was lost or self-stopped writes nothing more.

mod attempt;
mod completer;
mod config;
mod handler;
pub mod metrics;
mod pace;
mod worker;

pub use config::{ConfigError, ExecutorConfig};
pub use handler::{BoxFuture, Handler, HandlerContext, HandlerError, HandlerRegistry, ProgressReporter, WorkHandler};
pub use worker::{Executor, ShutdownReport};
