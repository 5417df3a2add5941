//! Who still uses which addresses: an address that no owner lists drains.

use std::collections::{HashMap, HashSet};

/// One feeder of endpoint sets (a caller, a directory): the pool drains an
/// address once no owner lists it any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub u64);

/// The address sets of every owner.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    next: u64,
    sets: HashMap<OwnerId, HashSet<String>>,
}

impl Owners {
    /// A fresh owner id (listing nothing yet).
    pub(crate) fn new_owner(&mut self) -> OwnerId {
        self.next = self.next.wrapping_add(1);
        OwnerId(self.next)
    }

    /// Replaces `owner`'s addresses (an empty set forgets the owner) and
    /// returns the addresses that no owner lists any more.
    pub(crate) fn sync(&mut self, owner: OwnerId, addresses: HashSet<String>) -> Vec<String> {
        let old = if addresses.is_empty() {
            self.sets.remove(&owner).unwrap_or_default()
        } else {
            self.sets.insert(owner, addresses).unwrap_or_default()
        };
        let new = self.sets.get(&owner);
        let mut unlisted: Vec<String> = old
            .into_iter()
            .filter(|a| !new.is_some_and(|n| n.contains(a)))
            .filter(|a| !self.sets.values().any(|set| set.contains(a)))
            .collect();
        unlisted.sort();
        unlisted
    }

    /// Whether some owner lists `address`.
    pub(crate) fn lists(&self, address: &str) -> bool {
        self.sets.values().any(|set| set.contains(address))
    }
}
