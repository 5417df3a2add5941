//! The values read at one encode, and their [`Collector`]: each family is
//! written once with its type and help, one sample per label set.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::label::{escape, valid_metric_name, LabelValue};

/// Label pairs of one sample: fixed keys, values escaped ([`LabelValue`]:
/// the one way a label value reaches the exposition, here and in the
/// select probe).
pub(crate) type Labels = Vec<(&'static str, LabelValue)>;

/// A sample's value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Value {
    /// A counter (monotonic).
    Count(u64),
    /// An integer gauge.
    Int(i64),
    /// A real gauge (seconds, ...).
    Real(f64),
}

/// One metric family.
#[derive(Debug)]
pub(crate) struct MetricFamily {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, Value)>,
}

/// Everything read at one encode.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    families: Vec<MetricFamily>,
}

impl Gathered {
    fn family(&mut self, name: &'static str, help: &'static str) -> &mut MetricFamily {
        let at = match self.families.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                self.families.push(MetricFamily {
                    name,
                    help,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[at]
    }

    /// Adds a sample; a sample with the same labels is summed (several
    /// pools or etcd registries).
    pub(crate) fn add(&mut self, name: &'static str, help: &'static str, labels: Labels, v: Value) {
        let f = self.family(name, help);
        if let Some((_, old)) = f.samples.iter_mut().find(|(l, _)| *l == labels) {
            *old = match (*old, v) {
                (Value::Count(a), Value::Count(b)) => Value::Count(a.saturating_add(b)),
                (Value::Int(a), Value::Int(b)) => Value::Int(a.saturating_add(b)),
                (Value::Real(a), Value::Real(b)) => Value::Real(a + b),
                (_, b) => b,
            };
        } else {
            f.samples.push((labels, v));
        }
    }

    /// A label-free counter.
    pub(crate) fn counter(&mut self, name: &'static str, help: &'static str, v: u64) {
        self.add(name, help, Vec::new(), Value::Count(v));
    }

    /// A label-free integer gauge.
    pub(crate) fn gauge(&mut self, name: &'static str, help: &'static str, v: i64) {
        self.add(name, help, Vec::new(), Value::Int(v));
    }
}

fn metric_type(samples: &[(Labels, Value)]) -> MetricType {
    match samples.first() {
        Some((_, Value::Count(_))) => MetricType::Counter,
        _ => MetricType::Gauge,
    }
}

fn sample(m: &mut MetricEncoder<'_>, value: Value) -> Result<(), std::fmt::Error> {
    match value {
        Value::Count(v) => m.encode_counter::<NoLabelSet, _, u64>(&v, None),
        Value::Int(v) => m.encode_gauge(&v),
        Value::Real(v) => m.encode_gauge(&v),
    }
}

impl Collector for Gathered {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            // Names and helps are constants of the counter tables, not
            // registry text; still, a name that is not a metric name is
            // refused (it would break the exposition) and a help is
            // escaped like a label value.
            if !valid_metric_name(f.name) {
                tracing::warn!(name = f.name, "not a metric name; family left out");
                continue;
            }
            let help = escape(f.help);
            let mut metric =
                encoder.encode_descriptor(f.name, &help, None, metric_type(&f.samples))?;
            for (labels, value) in &f.samples {
                if labels.is_empty() {
                    // A label-free family has one sample: written bare
                    // (`name 3`, not `name{} 3`).
                    sample(&mut metric, *value)?;
                } else {
                    sample(&mut metric.encode_family(labels)?, *value)?;
                }
            }
        }
        Ok(())
    }
}
