//! Restart clean: a resolver whose actor panicked is not repaired, it is
//! replaced. The new machine starts from its inputs (the app, the policy,
//! the seed) and learns everything else again: every revision's metadata
//! the metadata cache holds ([`ResolverMachine::on_recalled`]), then the
//! registry's state from a fresh subscription. Two numbers carry over in a
//! [`ResumePoint`], because the rest of the engine has seen them: the
//! version of the last update handed out (the directories hold it; the new
//! machine's updates must come after it) and the next fetch token (answers
//! to the old machine's fetches may still arrive; they must not match a
//! new fetch).
//!
//! Until the registry's state arrives a resumed machine hands out nothing,
//! so directories keep serving what they hold instead of an empty or
//! pending state. The shell recalls the cache before it subscribes, so
//! when the state comes every revision the cache knows is resolved at once
//! and the first update is whole: one Reset, after the last update the
//! directories hold. Only a revision the cache no longer holds (evicted)
//! is fetched again, and its instances wait for it like any new revision.

use std::sync::Arc;

use super::{ResolverMachine, Token};
use crate::change::Version;
use crate::model::MetadataInfo;
use crate::update::DirectoryUpdate;

/// What a replacement resolver takes over from the one it replaces
/// ([`ResolverMachine::resume_point`], [`ResolverMachine::resuming`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResumePoint {
    out: Option<Version>,
    next_token: Token,
}

impl ResolverMachine {
    /// The watermarks a replacement of this machine must start after.
    pub fn resume_point(&self) -> ResumePoint {
        ResumePoint {
            out: self.out,
            next_token: self.next_token,
        }
    }

    /// This (new) machine replaces one that stopped at `at`: its updates
    /// come after the last one handed out there, its tokens after the last
    /// one issued there, and it hands out nothing until the registry's
    /// state arrived (see the module docs).
    pub fn resuming(mut self, at: ResumePoint) -> Self {
        self.out = at.out;
        self.next_token = at.next_token.max(self.next_token);
        self.resyncing = true;
        self
    }

    /// The metadata cache's revisions of the app (`(revision, metadata)`;
    /// others are ignored): known, so a revision among them resolves as
    /// soon as an instance names it.
    pub fn on_recalled(&mut self, known: impl IntoIterator<Item = (String, Arc<MetadataInfo>)>) {
        for (rev, info) in known {
            if info.app == self.app && info.revision == rev {
                self.metadata.insert(rev, info);
            }
        }
    }

    /// The token the machine's next fetch or timer gets (every earlier one
    /// is its own or its predecessor's).
    pub fn next_token(&self) -> Token {
        self.next_token
    }

    /// Whether the machine is a replacement still waiting for the
    /// registry's state (no update goes out meanwhile).
    pub fn is_resyncing(&self) -> bool {
        self.resyncing && !self.has_state
    }

    /// What a directory that (re)attaches for `key` is sent, in order:
    /// first the updates still pending for the directories already attached
    /// (taken now, as a flush would), then the key's whole state at the
    /// version it was last sent ([`ResolverMachine::update_for`]), or no
    /// state while the machine resyncs (the key's Reset goes out when the
    /// resync ends, and the directory keeps serving what it holds until
    /// then).
    ///
    /// The pending updates go first so that the state handed over is
    /// exactly what the key was last sent: a Reset labelled with the last
    /// version sent but holding changes made since would let the next
    /// Delta miss an instance added and removed again in between (it never
    /// carries one it never sent), and the attaching directory would serve
    /// it for good.
    pub fn attach_update(&mut self, key: &str) -> AttachUpdates {
        let pending = self.take_updates();
        let reset = (!self.is_resyncing()).then(|| self.update_for(key));
        AttachUpdates { pending, reset }
    }

    /// Ends the resync once [`ResolverMachine::is_resyncing`] says it is
    /// over; true while it lasts.
    pub(super) fn still_resyncing(&mut self) -> bool {
        self.resyncing = self.is_resyncing();
        self.resyncing
    }
}

/// What [`ResolverMachine::attach_update`] hands out.
#[derive(Debug)]
pub struct AttachUpdates {
    /// Updates for the directories already attached (not the one
    /// attaching), to be delivered first.
    pub pending: Vec<DirectoryUpdate>,
    /// The attaching directory's whole state (`None` while resyncing).
    pub reset: Option<DirectoryUpdate>,
}
