//! What a Caller does is visible in tracing: one `steadfast.call` span per
//! call with one `steadfast.attempt` span per attempt inside it, each
//! closing with its outcome and latency.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use steadfast_web::Caller;
use support::{dead_port, wait_endpoints, Mode, Provider, World};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A closed span: its name, its parent's name and its fields.
#[derive(Clone, Debug)]
struct Closed {
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').to_string(),
        );
    }
}

/// Records every span that closes, with the fields it ended with.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Closed>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(f);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(f) = span.extensions_mut().get_mut::<Fields>() {
                values.record(f);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<Fields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            let closed = Closed {
                name: span.name(),
                parent: span.parent().map(|p| p.name()),
                fields,
            };
            self.0.lock().unwrap().push(closed);
        }
    }
}

#[actix_rt::test]
async fn every_call_and_attempt_is_a_span_with_endpoint_outcome_and_latency() {
    let spans = Spans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let world = World::start();
    let dir = world.subscribe().await;
    let live = Provider::start(Mode::Serve);
    let dead = dead_port();
    world.register(live.port, "");
    world.register(dead, "");
    wait_endpoints(&dir, 2).await;
    let caller = Caller::new(dir);
    for _ in 0..10 {
        caller.get("x").await.expect("every call succeeds");
    }
    let s = caller.stats();
    let closed = spans.0.lock().unwrap().clone();
    let calls: Vec<_> = closed
        .iter()
        .filter(|c| c.name == "steadfast.call")
        .collect();
    let attempts: Vec<_> = closed
        .iter()
        .filter(|c| c.name == "steadfast.attempt")
        .collect();
    assert_eq!(calls.len() as u64, s.calls, "one span per call");
    assert_eq!(attempts.len() as u64, s.attempts, "one span per attempt");
    for c in &calls {
        assert_eq!(c.fields["outcome"], "ok", "{c:?}");
        assert!(c.fields["reference"].contains("demo"), "{c:?}");
        assert!(c.fields["latency_ms"].parse::<u64>().is_ok(), "{c:?}");
        assert!(c.fields["attempts"].parse::<u32>().unwrap() >= 1, "{c:?}");
    }
    for a in &attempts {
        assert_eq!(a.parent, Some("steadfast.call"), "{a:?}");
        assert!(a.fields["latency_ms"].parse::<u64>().is_ok(), "{a:?}");
        let port: u16 = a.fields["endpoint"]
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("endpoint host:port");
        let want = if port == live.port { "ok" } else { "connect" };
        assert_eq!(a.fields["outcome"], want, "{a:?}");
    }
}
