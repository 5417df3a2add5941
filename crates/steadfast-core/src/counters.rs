//! Counter tables: each counter or gauge of a component is declared once,
//! in one [`counter_table!`](crate::counter_table) row (field, metric name,
//! help text, kind), and the macro writes everything else from it: the
//! shared atomics, the plain snapshot with its docs, the copy between them,
//! the `&[CounterSpec]` table and the values in table order. Exporters
//! (Prometheus, inspect) walk the table, so a counter declared is a counter
//! exported. The engine's counters and the etcd backend's are two such
//! tables.

/// How a row of a counter table is exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CounterKind {
    /// A gauge (a level that goes up and down).
    Gauge,
    /// A monotonic counter.
    Counter,
    /// A monotonic counter exported per
    /// [`FetchError::label`](crate::FetchError::label) (label `kind`); its
    /// samples add up to the row's value.
    CounterByFetchError,
}

/// One row of a counter table: the snapshot field, the metric family it is
/// exported as (`steadfast_` prefix added by the encoder, and `_total` for
/// counters), its help text and its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSpec {
    /// The snapshot's field.
    pub field: &'static str,
    /// The metric family name, without the `steadfast_` prefix.
    pub name: &'static str,
    /// The metric's help text.
    pub help: &'static str,
    /// How it is exported.
    pub kind: CounterKind,
}

/// A counter's value read at one snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterValue {
    /// A gauge's level.
    Level(i64),
    /// A counter's count.
    Count(u64),
}

/// The atomic, plain type, kind and value of one row kind (`gauge`,
/// `counter`, `by_kind`): the pieces [`counter_table!`](crate::counter_table)
/// writes a row with.
#[doc(hidden)]
#[macro_export]
macro_rules! __counter_row {
    (atomic gauge) => {
        ::std::sync::atomic::AtomicI64
    };
    (atomic counter) => {
        ::std::sync::atomic::AtomicU64
    };
    (atomic by_kind) => {
        ::std::sync::atomic::AtomicU64
    };
    (plain gauge) => {
        i64
    };
    (plain counter) => {
        u64
    };
    (plain by_kind) => {
        u64
    };
    (kind gauge) => {
        $crate::CounterKind::Gauge
    };
    (kind counter) => {
        $crate::CounterKind::Counter
    };
    (kind by_kind) => {
        $crate::CounterKind::CounterByFetchError
    };
    (value gauge, $v:expr) => {
        $crate::CounterValue::Level($v)
    };
    (value counter, $v:expr) => {
        $crate::CounterValue::Count($v)
    };
    (value by_kind, $v:expr) => {
        $crate::CounterValue::Count($v)
    };
}

/// Declares a component's counters once. From
///
/// ```text
/// counter_table! {
///     /// docs of the atomics
///     pub struct Stats { extra_field: Type, ... }
///     /// docs of the snapshot
///     pub struct StatsSnapshot;
///     /// docs of the table
///     pub const STATS_TABLE;
///     rows {
///         /// docs of the snapshot field
///         counter field: "metric_name", "help text";
///         gauge level: "level_name", "help text";
///     }
/// }
/// ```
///
/// it writes `Stats` (one `pub(crate)` atomic per row, `Default`, plus the
/// extra fields, which must be `Default`), `StatsSnapshot` (one documented
/// plain field per row), `STATS_TABLE: &[CounterSpec]`, `Stats::snapshot()`
/// and `StatsSnapshot::values()` (every row with its value, in table
/// order). Row kinds: `counter`, `gauge`, `by_kind` (a counter exported per
/// fetch error kind).
#[macro_export]
macro_rules! counter_table {
    (
        $(#[$smeta:meta])* $svis:vis struct $stats:ident { $( $xfield:ident : $xty:ty ),* $(,)? }
        $(#[$nmeta:meta])* $nvis:vis struct $snap:ident;
        $(#[$tmeta:meta])* $tvis:vis const $table:ident;
        rows { $( $(#[doc = $doc:literal])* $kind:ident $field:ident : $name:literal, $help:literal; )* }
    ) => {
        $(#[$smeta])*
        #[derive(Debug, Default)]
        $svis struct $stats {
            $( pub(crate) $field: $crate::__counter_row!(atomic $kind), )*
            $( $xfield: $xty, )*
        }

        $(#[$nmeta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $nvis struct $snap {
            $( $(#[doc = $doc])* pub $field: $crate::__counter_row!(plain $kind), )*
        }

        $(#[$tmeta])*
        $tvis const $table: &[$crate::CounterSpec] = &[
            $( $crate::CounterSpec {
                field: stringify!($field),
                name: $name,
                help: $help,
                kind: $crate::__counter_row!(kind $kind),
            }, )*
        ];

        impl $stats {
            /// Copies every counter.
            pub fn snapshot(&self) -> $snap {
                $snap {
                    $( $field: self.$field.load(::std::sync::atomic::Ordering::SeqCst), )*
                }
            }
        }

        impl $snap {
            /// Every row of the table with its value, in table order.
            pub fn values(&self) -> ::std::vec::Vec<(&'static $crate::CounterSpec, $crate::CounterValue)> {
                let vals = [ $( $crate::__counter_row!(value $kind, self.$field), )* ];
                $table.iter().zip(vals).collect()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use crate::{CounterKind, CounterValue};

    crate::counter_table! {
        /// Test atomics.
        pub struct TestStats { extra: u8 }
        /// Test snapshot.
        pub struct TestSnapshot;
        /// Test table.
        pub const TEST_TABLE;
        rows {
            /// A count.
            counter hits: "test_hits", "Hits";
            /// A level.
            gauge open: "test_open", "Open";
        }
    }

    #[test]
    fn a_row_is_an_atomic_a_snapshot_field_and_a_table_entry() {
        let s = TestStats::default();
        s.hits.fetch_add(3, std::sync::atomic::Ordering::SeqCst);
        s.open.fetch_sub(2, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(s.extra, 0);
        let snap = s.snapshot();
        assert_eq!((snap.hits, snap.open), (3, -2));
        let values = snap.values();
        assert_eq!(values.len(), TEST_TABLE.len());
        assert_eq!(values[0].0.field, "hits");
        assert_eq!(values[0].0.kind, CounterKind::Counter);
        assert_eq!(values[0].1, CounterValue::Count(3));
        assert_eq!(values[1].0.name, "test_open");
        assert_eq!(values[1].1, CounterValue::Level(-2));
    }
}
