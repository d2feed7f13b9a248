//! Operator actions and the reading of their arguments, shared by the CLI and the operator's page: every rule
//! of what an operator may do lives here. Each action says in its error ([`OpError`]) what was wrong, and
//! changes nothing then; the CLI and the page only render what it returns.

mod configs;
mod error;
mod items;
mod parse;
pub mod roots;
mod watch;
mod work;

#[cfg(test)]
mod tests;

pub use configs::{Activation, activate_config, add_config, deactivate_config, plan_removal, remove_config};
pub use error::OpError;
pub use items::{
    FailedFiles, PauseTarget, cancel_item, failed_files, find_item, item_filter, progress_text, retry_failed,
    retry_item, set_paused,
};
pub use parse::{kind_name, parse_config_id, parse_item_id, parse_kind};
pub use watch::set_watch;
pub use work::{enqueue, enqueue_crawl, regenerate};
