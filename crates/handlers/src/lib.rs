//! Almanac Worker's handlers. Each implements the executor's [`almanac_executor::Handler`] contract: it
//! honours its cancellation token between steps, writes files idempotently (temporary name, then rename) and
//! never touches an original.
//!
//! **Architecture invariant:** handlers depend on the domain's ports, never on the PostgreSQL adapter.

pub mod crawl;

pub use crawl::{CrawlHandler, CrawlSettings};
