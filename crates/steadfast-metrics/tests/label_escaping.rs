//! Hostile names in the exposition. App names are whatever a provider
//! publishes (and interface-only references read them from mapping keys),
//! interface names reach the `reference` label: with `"`, `\`, line breaks
//! and `# EOF` in them they must stay inside their label value. Each test
//! reads `Metrics::encode` (what `/metrics` serves) and checks it with a
//! small parser of the text format written here: one `# EOF`, last; every
//! line a descriptor or a `name{labels} value` sample of a declared family;
//! no forged line by any reader's idea of a line break; and each label
//! value, unescaped, is the name it came from (control characters other
//! than the line feed read back as U+FFFD, see `src/label.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;
use steadfast_actors::Engine;
use steadfast_core::Reference;
use steadfast_memory::MemoryRegistry;
use steadfast_metrics::Metrics;
use steadfast_testkit::{instance_for, MetadataBuilder, ScriptedFetcher};

const IFACE: &str = "demo.Greeter";
const FAKE: &str = "steadfast_fake_metric";

/// App names meant to end a label, a sample or the exposition.
const HOSTILE: &[&str] = &[
    "a\"b",
    "a\\b",
    "x\n# EOF\nsteadfast_fake_metric 1",
    "}",
    "\"} 1\nsteadfast_fake_metric{app=\"x",
    "\\",
    "\\\"",
    "trailing\\",
    "\\n is not a newline",
    "x\r\nsteadfast_fake_metric 2",
    "y\rsteadfast_fake_metric 3",
    "z\u{2028}steadfast_fake_metric 4",
    "\n# TYPE steadfast_fake_metric counter",
];

// ---- a small parser of the text exposition --------------------------------

/// One sample line, label values unescaped.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
}

fn name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn is_metric_name(s: &str) -> bool {
    !s.is_empty() && s.chars().enumerate().all(|(i, c)| name_char(c, i == 0))
}

/// Reads an escaped string up to its closing quote (not consumed past):
/// `\\`, `\"` and `\n` only; returns the value and the rest after the
/// quote.
fn unescape_quoted(s: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, '\\')) => out.push('\\'),
                Some((_, '"')) => out.push('"'),
                Some((_, 'n')) => out.push('\n'),
                other => return Err(format!("bad escape {other:?} in {s:?}")),
            },
            '\n' => return Err("raw line feed in a label value".into()),
            c => out.push(c),
        }
    }
    Err(format!("unterminated label value {s:?}"))
}

/// `text` (escaped help) unescaped, refusing raw `"` and bad escapes.
fn unescape_help(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some('n') => out.push('\n'),
                other => return Err(format!("bad escape {other:?} in help {text:?}")),
            },
            '"' => return Err(format!("raw quote in help {text:?}")),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let end = line
        .char_indices()
        .find(|&(i, c)| !name_char(c, i == 0))
        .map_or(line.len(), |(i, _)| i);
    let (name, mut rest) = line.split_at(end);
    if name.is_empty() {
        return Err(format!("no metric name: {line:?}"));
    }
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            let key_end = rest
                .char_indices()
                .find(|&(i, c)| {
                    !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit()))
                })
                .map_or(rest.len(), |(i, _)| i);
            let (key, after) = rest.split_at(key_end);
            if key.is_empty() {
                return Err(format!("no label name at {rest:?} in {line:?}"));
            }
            let after = after
                .strip_prefix("=\"")
                .ok_or_else(|| format!("no =\" after {key} in {line:?}"))?;
            let (value, after) = unescape_quoted(after)?;
            labels.push((key.to_string(), value));
            if let Some(after) = after.strip_prefix(',') {
                rest = after;
            } else if let Some(after) = after.strip_prefix('}') {
                rest = after;
                break;
            } else {
                return Err(format!("expected , or }} at {after:?} in {line:?}"));
            }
        }
    }
    let value = rest
        .strip_prefix(' ')
        .ok_or_else(|| format!("no space before the value in {line:?}"))?;
    if value.contains(' ') {
        return Err(format!("more than a value after the labels in {line:?}"));
    }
    value
        .parse::<f64>()
        .map_err(|e| format!("value {value:?} of {line:?}: {e}"))?;
    Ok(Sample {
        name: name.to_string(),
        labels,
    })
}

/// Whether sample `name` belongs to the family `family` of type `kind`.
fn of_family(name: &str, family: &str, kind: &str) -> bool {
    let suffixes: &[&str] = match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_count", "_sum", "_created"],
        _ => &[""],
    };
    suffixes
        .iter()
        .any(|s| name.strip_prefix(family) == Some(s))
}

/// Parses the whole exposition, checking every line; the samples.
fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let body = text
        .strip_suffix("# EOF\n")
        .ok_or("the exposition does not end with `# EOF`")?;
    let mut family: Option<(String, String)> = None;
    let mut samples = Vec::new();
    for line in body.split_terminator('\n') {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let (word, name, rest) = (parts.next(), parts.next(), parts.next());
            let name = name.filter(|n| is_metric_name(n));
            match (word, name, rest) {
                (Some("HELP"), Some(_), Some(help)) => {
                    unescape_help(help)?;
                }
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !["counter", "gauge", "histogram", "info", "unknown"].contains(&kind) {
                        return Err(format!("unknown type in {line:?}"));
                    }
                    family = Some((name.to_string(), kind.to_string()));
                }
                _ => return Err(format!("not a descriptor: {line:?}")),
            }
            continue;
        }
        let sample = parse_sample(line)?;
        match &family {
            Some((f, kind)) if of_family(&sample.name, f, kind) => samples.push(sample),
            _ => return Err(format!("sample of no declared family: {line:?}")),
        }
    }
    Ok(samples)
}

/// Every check on an exposition; its samples.
fn check(text: &str) -> Vec<Sample> {
    assert!(text.ends_with("# EOF\n"), "{text}");
    // Line breaks as any reader may take them: line feed, carriage return
    // (universal newlines), NEL, VT, FF, the Unicode separators.
    let lines: Vec<&str> = text
        .split(|c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
        .collect();
    let eofs = lines.iter().filter(|l| l.trim() == "# EOF").count();
    assert_eq!(eofs, 1, "exactly one `# EOF`:\n{text}");
    assert!(
        text.split('\n').rfind(|l| !l.is_empty()) == Some("# EOF"),
        "`# EOF` is the last line:\n{text}"
    );
    for line in &lines {
        assert!(
            !line.trim_start().starts_with(FAKE),
            "forged line {line:?} in\n{text}"
        );
    }
    assert!(
        !text.contains(['\r', '\u{85}', '\u{2028}', '\u{2029}', '\u{1b}']),
        "no raw line break but the line feed, no escape character:\n{text:?}"
    );
    match parse_exposition(text) {
        Ok(samples) => samples,
        Err(e) => panic!("{e}\n{text}"),
    }
}

/// The distinct values of label `key` on the samples of `name`.
fn values(samples: &[Sample], name: &str, key: &str) -> BTreeSet<String> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .flat_map(|s| s.labels.iter().filter(|(k, _)| k == key))
        .map(|(_, v)| v.clone())
        .collect()
}

/// What a name reads back as: itself, control characters other than the
/// line feed and the Unicode line and paragraph separators as U+FFFD.
fn expected(name: &str) -> String {
    name.chars()
        .map(|c| {
            if (c.is_control() && c != '\n') || c == '\u{2028}' || c == '\u{2029}' {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect()
}

// ---- fixtures ---------------------------------------------------------------

fn start() -> (Engine, MemoryRegistry, ScriptedFetcher) {
    tokio::time::pause();
    let registry = MemoryRegistry::new();
    let fetcher = ScriptedFetcher::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(7)
        .start()
        .expect("engine starts");
    (engine, registry, fetcher)
}

/// Waits (virtual time) until the engine reports a resolver for every app
/// of `apps`; the apps it reports.
async fn wait_apps(engine: &Engine, apps: &BTreeSet<String>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..300 {
        let report = engine.inspect().await.expect("inspect");
        seen = report.apps.iter().map(|a| a.app.clone()).collect();
        if apps.is_subset(&seen) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen
}

/// Provider instances published under every hostile name, a reference to
/// them all: the `app` labels read back as the names, nothing is forged.
#[actix_rt::test]
async fn hostile_app_names_stay_inside_their_label_values() {
    let (engine, registry, fetcher) = start();
    for (i, app) in HOSTILE.iter().enumerate() {
        let info = MetadataBuilder::new(*app)
            .service(IFACE, "tri", 20000)
            .build();
        fetcher.serve(info.clone());
        let port = 8001 + u16::try_from(i).unwrap();
        registry.put(instance_for(&info, "127.0.0.1", port));
    }
    let dir = engine
        .subscribe(Reference::new(IFACE, "tri", HOSTILE.iter().copied()))
        .await
        .unwrap();
    let names: BTreeSet<String> = HOSTILE.iter().map(|s| s.to_string()).collect();
    let seen = wait_apps(&engine, &names).await;
    assert_eq!(seen, names, "the engine runs a resolver for every name");
    for _ in 0..300 {
        if dir.select().is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let text = Metrics::new()
        .engine(&engine)
        .directory(&dir)
        .encode()
        .await;
    let samples = check(&text);
    let want: BTreeSet<String> = HOSTILE.iter().map(|n| expected(n)).collect();
    for family in [
        "steadfast_app_instances",
        "steadfast_app_instances_serving",
        "steadfast_app_unresolved_revisions",
    ] {
        assert_eq!(values(&samples, family, "app"), want, "{family}\n{text}");
    }
    // The names without control characters read back exactly.
    for name in ["a\"b", "a\\b", "x\n# EOF\nsteadfast_fake_metric 1", "}"] {
        assert!(
            values(&samples, "steadfast_app_instances", "app").contains(name),
            "{name:?}\n{text}"
        );
    }
    let instances: f64 = text
        .lines()
        .filter(|l| l.starts_with("steadfast_app_instances{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        instances,
        HOSTILE.len() as f64,
        "one instance per app:\n{text}"
    );
    engine.shutdown().await;
}

/// An interface-only reference to a hostile interface, whose mapping names
/// a hostile app: the `reference` labels (gauges, states and the select
/// probe's histogram) and the `app` label read back exactly.
#[actix_rt::test]
async fn hostile_interface_and_mapped_app_names_stay_inside_their_label_values() {
    let (engine, registry, fetcher) = start();
    let iface = "demo\"} 1\n# EOF\nsteadfast_fake_metric{reference=\"x";
    let app = "m\\\"}\n# EOF\nsteadfast_fake_metric 5\n";
    let info = MetadataBuilder::new(app)
        .service(iface, "tri", 20000)
        .build();
    fetcher.serve(info.clone());
    registry.put(instance_for(&info, "127.0.0.1", 8001));
    registry.put_mapping(iface, app);
    let reference = Reference::new(iface, "tri", Vec::<String>::new());
    let key = reference.subscribe_key();
    let dir = engine.subscribe(reference).await.unwrap();
    let seen = wait_apps(&engine, &BTreeSet::from([app.to_string()])).await;
    assert!(
        seen.contains(app),
        "the mapping's app is followed: {seen:?}"
    );

    let metrics = Metrics::new().engine(&engine).directory(&dir);
    let text = metrics.encode().await;
    let samples = check(&text);
    assert_eq!(
        values(&samples, "steadfast_app_instances", "app"),
        BTreeSet::from([app.to_string()]),
        "{text}"
    );
    for family in [
        "steadfast_reference_endpoints",
        "steadfast_reference_state",
        "steadfast_select_duration_seconds_count",
        "steadfast_select_duration_seconds_bucket",
    ] {
        assert_eq!(
            values(&samples, family, "reference"),
            BTreeSet::from([key.clone()]),
            "{family}\n{text}"
        );
    }
    // The state label set is unchanged: each known state once.
    let states = samples
        .iter()
        .filter(|s| s.name == "steadfast_reference_state")
        .count();
    assert_eq!(states, steadfast_actors::REFERENCE_STATES.len(), "{text}");
    engine.shutdown().await;
}

/// Pieces that mean something to the text format, spliced into names.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<char>().prop_map(String::from),
        any::<String>(),
        prop::sample::select(vec![
            "\\",
            "\"",
            "\n",
            "\r",
            "\r\n",
            "# EOF",
            "# TYPE ",
            FAKE,
            " 1",
            "{",
            "}",
            "=",
            ",",
            "\\n",
            "\\\"",
            "\u{2028}",
            "\u{85}",
            "\u{0}",
            "\u{1b}[2K",
            "é",
            "💥",
        ])
        .prop_map(String::from),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..6).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Arbitrary app names (and one as the interface): the exposition keeps
    /// its shape, and every name reads back from its label.
    #[test]
    fn arbitrary_names_never_break_the_exposition(
        apps in prop::collection::btree_set(name(), 1..4),
        iface in name(),
    ) {
        actix_rt::System::new().block_on(async move {
            let (engine, _registry, _fetcher) = start();
            let reference = Reference::new(iface, "tri", apps.iter().cloned());
            let key = reference.subscribe_key();
            let dir = engine.subscribe(reference).await.unwrap();
            let seen = wait_apps(&engine, &apps).await;
            assert_eq!(&seen, &apps, "a resolver per name");
            let text = Metrics::new().engine(&engine).directory(&dir).encode().await;
            let samples = check(&text);
            let want: BTreeSet<String> = apps.iter().map(|n| expected(n)).collect();
            assert_eq!(values(&samples, "steadfast_app_instances", "app"), want, "{text}");
            assert_eq!(
                values(&samples, "steadfast_reference_endpoints", "reference"),
                BTreeSet::from([expected(&key)]),
                "{text}"
            );
            assert_eq!(
                values(&samples, "steadfast_select_duration_seconds_count", "reference"),
                BTreeSet::from([expected(&key)]),
                "{text}"
            );
            engine.shutdown().await;
        });
    }
}
