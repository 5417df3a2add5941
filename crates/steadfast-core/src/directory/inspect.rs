//! What a directory can tell an operator beyond its snapshot: the
//! endpoints it holds tombstones for (closed, kept out until the tombstone
//! expires).

use super::DirectoryMachine;

impl DirectoryMachine {
    /// Resets asked of this directory's resolvers after updates that did
    /// not follow, so far, and since when the oldest gap waits for its
    /// Reset (if one does).
    pub fn reset_asks(&self) -> (u64, Option<std::time::Instant>) {
        let asked = self.asks.values().map(|a| a.asks()).sum();
        let since = self.asks.values().filter_map(|a| a.pending_since()).min();
        (asked, since)
    }

    /// The tombstoned endpoints of every app, sorted: `host:port` when the
    /// tombstone holds back a URL the registry still lists, else the
    /// instance id (a tombstone is keyed by id).
    pub fn tombstoned(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .views()
            .flat_map(|v| v.tombs.entries())
            .map(|(id, url)| match url {
                Some(u) => u.address(),
                None => id.to_string(),
            })
            .collect();
        out.sort();
        out
    }
}
