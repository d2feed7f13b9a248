//! Wrong tokens per client address, and the pauses they start (bounded: [`ADDRESSES_REMEMBERED`]).

use std::collections::HashMap;

use tokio::time::Instant;

use super::{ADDRESSES_REMEMBERED, Peer};

/// Wrong tokens per address, at most [`ADDRESSES_REMEMBERED`] of them.
#[derive(Default)]
pub(super) struct Guesses(pub(super) HashMap<Peer, Guesser>);

/// One address's wrong tokens in a row, when it gave the last one, and the pause they started.
pub(super) struct Guesser {
    /// Wrong tokens in a row.
    pub(super) wrong: u32,
    /// When it gave the last one.
    last: Instant,
    /// Until when its token checks are refused, once it gave too many.
    pub(super) paused_until: Option<Instant>,
}

impl Guesses {
    /// Until when `peer`'s token checks are paused, if they are now; a pause that is over is forgotten.
    pub(super) fn paused(&mut self, peer: Peer, now: Instant) -> Option<Instant> {
        let until = self.0.get(&peer)?.paused_until?;
        if now < until {
            return Some(until);
        }
        self.0.remove(&peer);
        None
    }

    /// Counts a wrong token from `peer`: its wrong tokens in a row now. A new address first makes room:
    /// addresses whose pause is over are forgotten, then, while the table is full, the one whose last wrong
    /// token is oldest.
    pub(super) fn wrong(&mut self, peer: Peer, now: Instant) -> &mut Guesser {
        if !self.0.contains_key(&peer) {
            self.0.retain(|_, g| g.paused_until.is_none_or(|until| now < until));
            while self.0.len() >= ADDRESSES_REMEMBERED {
                let Some(oldest) = self.0.iter().min_by_key(|(_, g)| g.last).map(|(p, _)| *p) else { break };
                self.0.remove(&oldest);
            }
        }
        let guesser = self.0.entry(peer).or_insert(Guesser { wrong: 0, last: now, paused_until: None });
        guesser.wrong += 1;
        guesser.last = now;
        guesser
    }
}
