//! The select-latency probe: at each encode, times [`PROBE_SELECTS`] picks
//! of each directory given to `Metrics::directory`, off the callers' path.

use std::time::Instant;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use steadfast_actors::Directory;

use crate::collect::Labels;

/// Picks timed per directory at each encode.
pub const PROBE_SELECTS: usize = 32;

/// Bucket bounds of `steadfast_select_duration_seconds` (100 ns to 1 ms: a
/// lock-free pick takes well under a microsecond).
const BUCKETS: [f64; 10] = [
    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 5e-5, 1e-4, 1e-3,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// The histogram family, shared by every clone of a `Metrics` (a `Family`
/// clone shares its metrics).
#[derive(Clone)]
pub(crate) struct SelectProbe {
    family: Histograms,
}

impl SelectProbe {
    pub(crate) fn new() -> Self {
        Self {
            family: Family::new_with_constructor(histogram),
        }
    }

    /// Times the picks; a pick that finds no endpoint is not recorded (its
    /// cost is building the reason, not picking).
    pub(crate) fn run(&self, directories: &[Directory]) {
        for dir in directories {
            let labels: Labels = vec![("reference", dir.reference().subscribe_key().into())];
            let h = self.family.get_or_create(&labels);
            for _ in 0..PROBE_SELECTS {
                let start = Instant::now();
                let picked = dir.select();
                let took = start.elapsed();
                match picked {
                    Ok(_) => h.observe(took.as_secs_f64()),
                    Err(e) => {
                        tracing::debug!(reference = ?dir.reference().subscribe_key(), error = %e, "select probe found no endpoint");
                        break;
                    }
                }
            }
        }
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "select_duration_seconds",
            "Time of one Directory::select pick, timed by a probe at each scrape",
            self.family.clone(),
        );
    }
}
