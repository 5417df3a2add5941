//! The caller-side settings an engine reads at the moment it needs them
//! (not frozen at start): [`CallerConfig`], shared by the engine and every
//! directory through one [`LiveConfig`] slot that
//! [`Engine::set_caller_config`](crate::Engine::set_caller_config) swaps.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use steadfast_core::{BalanceConfig, OutlierPolicy, PeakEwma, Strategy};

/// Caller-side tunables: closing tombstones, demand-driven probes, handle
/// lifetimes.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallerConfig {
    /// How long a closing tombstone vetoes re-adds of the endpoint's
    /// incarnation (read when the tombstone is written). Default 30 s.
    #[serde(with = "humantime_serde")]
    pub tombstone_ttl: Duration,
    /// Fewest time between two demand-driven re-resolves a directory asks
    /// of its resolvers, whatever the number of waiting callers. Default 1 s.
    #[serde(with = "humantime_serde")]
    pub min_probe_interval: Duration,
    /// How long a reference whose last handle was dropped stays subscribed
    /// (`None`: until `unsubscribe` or shutdown). Default 30 s.
    #[serde(with = "humantime_serde")]
    pub unsubscribe_linger: Option<Duration>,
    /// How directories pick endpoints unless one overrides it
    /// ([`Directory::set_strategy`](crate::Directory::set_strategy)).
    /// Default [`Strategy::PeakEwma`] (P2C over peak-EWMA latency).
    pub strategy: Strategy,
    /// Peak-EWMA settings: default RTT 30 ms, decay 10 s, a failure counts
    /// as at least 250 ms.
    pub peak_ewma: PeakEwma,
    /// Passive outlier ejection from reported outcomes: 5 failures in a
    /// row, or >= 50 % of >= 20 outcomes over 10 s, eject for 30 s doubling
    /// per ejection in a row up to 300 s; at most 50 % of a directory
    /// ejected. Connection refused and closing eject at once.
    pub outlier: OutlierPolicy,
}

impl CallerConfig {
    /// The balancing settings (a copy).
    pub fn balance(&self) -> BalanceConfig {
        BalanceConfig {
            strategy: self.strategy,
            peak_ewma: self.peak_ewma,
            outlier: self.outlier,
        }
    }
}

impl Default for CallerConfig {
    fn default() -> Self {
        Self {
            tombstone_ttl: Duration::from_secs(30),
            min_probe_interval: Duration::from_secs(1),
            unsubscribe_linger: Some(Duration::from_secs(30)),
            strategy: Strategy::default(),
            peak_ewma: PeakEwma::default(),
            outlier: OutlierPolicy::default(),
        }
    }
}

/// The shared, swappable [`CallerConfig`] of one engine (cheap to clone;
/// reads are lock-free).
#[derive(Clone, Debug, Default)]
pub struct LiveConfig(Arc<Slot>);

#[derive(Debug)]
struct Slot {
    config: ArcSwap<CallerConfig>,
    /// Bumped after every store: a thread's cached balancing settings are
    /// current while the generation they were read at still is.
    generation: AtomicU64,
    /// Identifies the slot in the per-thread caches.
    id: u64,
}

static NEXT_SLOT: AtomicU64 = AtomicU64::new(1);

impl Default for Slot {
    fn default() -> Self {
        Self::new(CallerConfig::default())
    }
}

impl Slot {
    fn new(config: CallerConfig) -> Self {
        Self {
            config: ArcSwap::from_pointee(config),
            generation: AtomicU64::new(0),
            id: NEXT_SLOT.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// Balancing settings a thread read last, per slot: (slot, generation, settings).
const BALANCE_CACHE: usize = 4;

thread_local! {
    static BALANCE: RefCell<Vec<(u64, u64, BalanceConfig)>> = const { RefCell::new(Vec::new()) };
}

impl LiveConfig {
    /// A slot holding `config`.
    pub fn new(config: CallerConfig) -> Self {
        Self(Arc::new(Slot::new(config)))
    }

    /// The settings now.
    pub fn load(&self) -> Arc<CallerConfig> {
        self.0.config.load_full()
    }

    /// A short-lived guard on the settings now (no reference count touched
    /// on the fast path).
    #[inline]
    pub fn peek(&self) -> arc_swap::Guard<Arc<CallerConfig>> {
        self.0.config.load()
    }

    /// The balancing settings now, through a small per-thread cache: a hit
    /// costs one atomic load (for per-pick reads).
    #[inline]
    pub fn balance(&self) -> BalanceConfig {
        let (id, generation) = (self.0.id, self.0.generation.load(Ordering::Acquire));
        let hit = BALANCE.with(|c| {
            let c = c.try_borrow().ok()?;
            c.iter()
                .find(|(i, g, _)| *i == id && *g == generation)
                .map(|(_, _, b)| *b)
        });
        hit.unwrap_or_else(|| self.balance_slow(id, generation))
    }

    #[cold]
    fn balance_slow(&self, id: u64, generation: u64) -> BalanceConfig {
        let b = self.peek().balance();
        BALANCE.with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                c.retain(|(i, _, _)| *i != id);
                if c.len() >= BALANCE_CACHE {
                    c.pop();
                }
                c.insert(0, (id, generation, b));
            }
        });
        b
    }

    /// Replaces the settings; readers see them from their next read.
    pub fn store(&self, config: CallerConfig) {
        self.0.config.store(Arc::new(config));
        self.0.generation.fetch_add(1, Ordering::AcqRel);
    }
}
