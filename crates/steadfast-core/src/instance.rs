//! The compact, shared form of a registry record, decoded once where it
//! enters the engine (the registry backend) and shared, never copied, by
//! every stage after it: the registry's own state, the subscription, the
//! resolver and every endpoint URL built on it.
//!
//! [`ServiceInstance`] stays the owned, editable record users register and
//! fetchers receive; [`Instance`] is what the watch path carries:
//! - id and host are shared strings ([`Arc<str>`]); the host is a prefix of
//!   the id's string when the id is the usual `host:port`;
//! - the revision is interned per app ([`RevisionInterner`]): every
//!   instance of one revision points at the same string, and the resolver
//!   maps it to a small per-app id;
//! - the incarnation, metadata port and closing flag are parsed once, at
//!   decode; other metadata (rare) is kept as-is in one boxed slice.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::incarnation::{Incarnation, BOOT_ID_KEY, EXPORT_MS_KEY};
use crate::model::{ServiceInstance, CLOSING_KEY, METADATA_PORT_KEY, REVISION_KEY};

/// A decoded registry record, shared by `Arc` along the whole data path.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Instance {
    id: Arc<str>,
    /// The id's hash in the id indexes ([`crate::slot_index`]), computed
    /// once at decode so that indexing a record need not read its id.
    id_hash: u64,
    /// The host: its own string (rare: behind a thin pointer), or (the
    /// usual `host:port` id) the first `host_len` bytes of the id, so it
    /// costs no allocation.
    host: Option<Box<Box<str>>>,
    host_len: u32,
    port: u16,
    /// The MetadataService port when the record names one.
    metadata_port: Option<u16>,
    weight: u32,
    healthy: bool,
    closing: bool,
    revision: Option<Arc<str>>,
    incarnation: Option<Incarnation>,
    /// Metadata besides the keys parsed above, sorted by key (usually none).
    extra: Option<ExtraMetadata>,
}

/// Metadata pairs of a record besides the parsed keys (rare: behind a thin
/// pointer).
type ExtraMetadata = Box<Box<[(Box<str>, Box<str>)]>>;

/// The most an [`Instance`] may take. The thin pointers above keep it
/// here, so that its shared allocation (plus `Arc`'s two counts) is 128
/// bytes: the size class glibc's malloc frees into its fast bins. One byte
/// more puts every record in the class that coalesces on free; freeing a
/// 100k-instance state then interleaves coalescing frees with fast-bin
/// ones, and glibc consolidates its fast bins once per record
/// (`bench_pipeline` measured a third of the engine's full-state CPU in
/// `malloc_consolidate`). Checked at compile time.
const INSTANCE_MAX_BYTES: usize = 104;
const _: () = assert!(std::mem::size_of::<Instance>() <= INSTANCE_MAX_BYTES);

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instance")
            .field("id", &self.id)
            .field("host", &self.host())
            .field("port", &self.port)
            .field("weight", &self.weight)
            .field("healthy", &self.healthy)
            .field("closing", &self.closing)
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// Interns revision strings of one app, so that all instances of one
/// revision share one allocation. Entries no instance uses any more are
/// dropped by [`RevisionInterner::trim`].
#[derive(Debug, Default)]
pub struct RevisionInterner {
    known: FxHashMap<Arc<str>, ()>,
}

impl RevisionInterner {
    /// The shared string for `revision`.
    pub fn intern(&mut self, revision: &str) -> Arc<str> {
        if let Some((k, _)) = self.known.get_key_value(revision) {
            return k.clone();
        }
        let k: Arc<str> = Arc::from(revision);
        self.known.insert(k.clone(), ());
        k
    }

    /// Forgets revisions held by nobody but the interner.
    pub fn trim(&mut self) {
        self.known.retain(|k, _| Arc::strong_count(k) > 1);
    }

    /// Number of distinct revisions interned.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

impl Instance {
    /// Decodes `record`, consuming it.
    pub fn from_record(record: ServiceInstance, revisions: &mut RevisionInterner) -> Self {
        Self::decode(&record, revisions)
    }

    /// Decodes `record` (its revision interned in `revisions`).
    pub fn decode(record: &ServiceInstance, revisions: &mut RevisionInterner) -> Self {
        let id: Arc<str> = Arc::from(record.id.as_str());
        let prefix = record.id.starts_with(record.host.as_str());
        let (host, host_len) = match u32::try_from(record.host.len()) {
            Ok(len) if prefix => (None, len),
            _ => (Some(Box::new(Box::from(record.host.as_str()))), 0),
        };
        let revision = record.revision().map(|r| revisions.intern(r));
        let mut extra: Vec<(Box<str>, Box<str>)> = Vec::new();
        for (k, v) in &record.metadata {
            let known = matches!(
                k.as_str(),
                REVISION_KEY | CLOSING_KEY | METADATA_PORT_KEY | EXPORT_MS_KEY | BOOT_ID_KEY
            );
            if !known {
                extra.push((k.as_str().into(), v.as_str().into()));
            }
        }
        // Keys that are known but unparsable are kept verbatim, so that the
        // record reads back as it was written.
        let incarnation = record.incarnation();
        if incarnation.is_none() {
            for key in [EXPORT_MS_KEY, BOOT_ID_KEY] {
                if let Some(v) = record.metadata.get(key) {
                    extra.push((key.into(), v.as_str().into()));
                }
            }
        }
        match record.metadata.get(METADATA_PORT_KEY) {
            Some(p) if p.parse::<u16>().is_err() => {
                extra.push((METADATA_PORT_KEY.into(), p.as_str().into()))
            }
            _ => {}
        }
        match record.metadata.get(REVISION_KEY) {
            Some(r) if revision.is_none() => extra.push((REVISION_KEY.into(), r.as_str().into())),
            _ => {}
        }
        match record.metadata.get(CLOSING_KEY) {
            Some(c) if c != "true" => extra.push((CLOSING_KEY.into(), c.as_str().into())),
            _ => {}
        }
        extra.sort_unstable();
        Self {
            id_hash: crate::slot_index::hash_id(&id),
            id,
            host,
            host_len,
            port: record.port,
            metadata_port: record
                .metadata
                .get(METADATA_PORT_KEY)
                .and_then(|p| p.parse().ok()),
            weight: record.weight,
            healthy: record.healthy,
            closing: record.is_closing(),
            revision,
            incarnation,
            extra: (!extra.is_empty()).then(|| Box::new(extra.into_boxed_slice())),
        }
    }

    /// This instance with the registry's creation marker of its record
    /// (etcd `create_revision`; 0: none) in its incarnation. A record with
    /// no stamped incarnation keeps none.
    pub fn with_created(mut self, created: u64) -> Self {
        if let Some(inc) = self.incarnation.take() {
            self.incarnation = Some(inc.with_created(created));
        }
        self
    }

    /// The owned record of this instance in `app` (as registered; the
    /// creation marker is the registry's and is not part of it).
    pub fn to_record(&self, app: &str) -> ServiceInstance {
        let mut metadata = BTreeMap::new();
        if let Some(r) = &self.revision {
            metadata.insert(REVISION_KEY.to_string(), r.to_string());
        }
        if self.closing {
            metadata.insert(CLOSING_KEY.to_string(), "true".to_string());
        }
        if let Some(p) = self.metadata_port {
            metadata.insert(METADATA_PORT_KEY.to_string(), p.to_string());
        }
        if let Some(inc) = &self.incarnation {
            inc.stamp(&mut metadata);
        }
        for (k, v) in self.extra.iter().flat_map(|e| e.iter()) {
            metadata.insert(k.to_string(), v.to_string());
        }
        ServiceInstance {
            id: self.id.to_string(),
            app: app.to_string(),
            host: self.host().to_string(),
            port: self.port,
            weight: self.weight,
            healthy: self.healthy,
            metadata,
        }
    }

    /// Unique id of the instance within its app.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id's hash as the id indexes compute it.
    pub(crate) fn id_hash(&self) -> u64 {
        self.id_hash
    }

    /// The shared id string.
    pub fn id_arc(&self) -> &Arc<str> {
        &self.id
    }

    /// Host the instance is reachable on (from the registry record).
    pub fn host(&self) -> &str {
        match &self.host {
            Some(host) => host,
            None => self.id.get(..self.host_len as usize).unwrap_or_default(),
        }
    }

    /// Main port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Port of the instance's MetadataService.
    pub fn metadata_port(&self) -> u16 {
        self.metadata_port.unwrap_or(self.port)
    }

    /// Load-balancing weight; 0 takes no traffic.
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Whether the registry considers the instance healthy.
    pub fn healthy(&self) -> bool {
        self.healthy
    }

    /// Whether the record announces that its provider shuts down.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Whether the instance may receive traffic.
    pub fn is_serving(&self) -> bool {
        self.healthy && self.weight > 0 && !self.closing
    }

    /// The metadata revision it advertises (`None`: none or the empty one).
    pub fn revision(&self) -> Option<&str> {
        self.revision.as_deref()
    }

    /// The shared (interned) revision string.
    pub fn revision_arc(&self) -> Option<&Arc<str>> {
        self.revision.as_ref()
    }

    /// The incarnation stamped at export, if any.
    pub fn incarnation(&self) -> Option<&Incarnation> {
        self.incarnation.as_ref()
    }

    /// A metadata value that is not one of the parsed keys.
    pub fn extra(&self, key: &str) -> Option<&str> {
        self.extra
            .iter()
            .flat_map(|e| e.iter())
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

/// A decoded record `h:port` of app `a` with `weight` (tests of the sets
/// and maps built on instances).
#[cfg(test)]
pub(crate) fn test_instance(port: u16, weight: u32) -> Arc<Instance> {
    let mut r = ServiceInstance::new("a", "h", port);
    r.weight = weight;
    Arc::new(Instance::decode(&r, &mut RevisionInterner::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn decodes_once_and_reads_back_the_record() {
        let mut revs = RevisionInterner::default();
        let mut r = ServiceInstance::new("app", "10.0.0.1", 20880);
        r.set_revision("abc");
        r.metadata.insert(CLOSING_KEY.into(), "true".into());
        r.metadata.insert(METADATA_PORT_KEY.into(), "9".into());
        r.metadata.insert("zone".into(), "eu".into());
        Incarnation {
            export_ms: 7,
            boot_id: "b".into(),
            created: None,
        }
        .stamp(&mut r.metadata);
        let a = Instance::decode(&r, &mut revs);
        assert_eq!(a.id(), "10.0.0.1:20880");
        assert_eq!(a.host(), "10.0.0.1");
        let mut odd = ServiceInstance::new("app", "é1", 1);
        odd.id = "é".into();
        assert_eq!(
            Instance::decode(&odd, &mut revs).host(),
            "é1",
            "not a prefix: its own"
        );
        assert_eq!(a.revision(), Some("abc"));
        assert!(a.is_closing() && !a.is_serving());
        assert_eq!(a.metadata_port(), 9);
        assert_eq!(a.extra("zone"), Some("eu"));
        assert_eq!(a.incarnation().map(|i| i.export_ms), Some(7));
        assert_eq!(a.to_record("app"), r);
        let mut r2 = ServiceInstance::new("app", "10.0.0.2", 1);
        r2.set_revision("abc");
        let b = Instance::decode(&r2, &mut revs);
        assert!(Arc::ptr_eq(
            a.revision_arc().unwrap(),
            b.revision_arc().unwrap()
        ));
        assert_eq!(revs.len(), 1);
        drop((a, b));
        revs.trim();
        assert!(revs.is_empty());
    }

    #[test]
    fn random_metadata_round_trips_without_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let keys = [
            REVISION_KEY,
            CLOSING_KEY,
            METADATA_PORT_KEY,
            EXPORT_MS_KEY,
            BOOT_ID_KEY,
            "x",
        ];
        let values = ["", "0", "true", "99999", "65535", "é∂", "12", "-1"];
        let mut revs = RevisionInterner::default();
        for _ in 0..5000 {
            let mut r = ServiceInstance::new("a", "h", rng.gen());
            for _ in 0..rng.gen_range(0..6) {
                let k = keys[rng.gen_range(0..keys.len())];
                let v = values[rng.gen_range(0..values.len())];
                r.metadata.insert(k.into(), v.into());
            }
            let i = Instance::decode(&r, &mut revs);
            // Canonical values read back verbatim; others (e.g. "012") by
            // meaning, and decoding what was read back changes nothing.
            let back = i.to_record("a");
            assert_eq!(Instance::decode(&back, &mut revs), i, "{r:?}");
            assert_eq!(back.incarnation(), r.incarnation());
            assert_eq!(i.revision(), r.revision());
            assert_eq!(i.is_serving(), r.is_serving());
            assert_eq!(i.metadata_port(), r.metadata_port());
            let _ = format!("{i:?}");
        }
    }
}
