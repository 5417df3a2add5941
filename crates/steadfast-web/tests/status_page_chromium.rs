//! The status page as an operator's browser renders it: an actix-web
//! server on loopback serves the inspection scope of an engine with a
//! ready reference (one endpoint ejected, one tombstoned) and an
//! unresolved one; headless Chromium (Debian's `chromium`, installed by
//! `scripts/test.sh` when missing; `CHROMIUM=/path` overrides) loads it,
//! and the rendered text must name both references with their states and
//! the unresolved revision's attempts. Chromium also takes a screenshot
//! (checked to be a PNG); set `STEADFAST_STATUS_SCREENSHOT=<path>` to keep
//! it (`docs/status-page.png` is made this way).
//!
//! Real time (a browser and a server on real sockets): every wait is
//! bounded, the engine's only waits are a scripted fetcher's immediate
//! failures and its first retry (1 s).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use actix_web::{App, HttpServer};
use steadfast_actors::{Directory, Engine};
use steadfast_core::{FailureClass, MetadataInfo, Reference};
use steadfast_memory::MemoryRegistry;
use steadfast_testkit::{instance_for, InstanceBuilder, MetadataBuilder, ScriptedFetcher};
use steadfast_web::InspectScope;

/// Longest a Chromium run may take.
const BROWSER_LIMIT: Duration = Duration::from_secs(60);

fn metadata(app: &str, iface: &str) -> MetadataInfo {
    MetadataBuilder::new(app)
        .service(iface, "http", 8080)
        .build()
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never happened: {what}");
}

fn chromium() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

/// Runs headless Chromium with `args` then `url`, stdout into `out`,
/// killed after [`BROWSER_LIMIT`]; returns whether it exited with 0.
async fn run_browser(args: &[String], url: &str, out: &Path, profile: &Path) -> bool {
    let stdout = std::fs::File::create(out).expect("output file");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--no-proxy-server",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{}` ({e}): install Debian's chromium package \
                 (scripts/test.sh does) or set CHROMIUM",
                chromium()
            )
        });
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            return status.success();
        }
        if start.elapsed() > BROWSER_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {BROWSER_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text a browser shows for `dom`: tags dropped, entities of the page
/// decoded, whitespace collapsed.
fn text_of(dom: &str) -> String {
    let mut text = String::with_capacity(dom.len());
    let mut in_tag = false;
    let mut in_style = false;
    let lower = dom.to_ascii_lowercase();
    let mut i = 0;
    for (pos, c) in dom.char_indices() {
        if pos < i {
            continue;
        }
        match c {
            '<' => {
                in_tag = true;
                if lower.get(pos..).is_some_and(|r| r.starts_with("<style")) {
                    in_style = true;
                } else if lower.get(pos..).is_some_and(|r| r.starts_with("</style")) {
                    in_style = false;
                }
                text.push(' ');
            }
            '>' if in_tag => in_tag = false,
            _ if in_tag || in_style => {}
            '&' => {
                let rest = dom.get(pos..).unwrap_or("");
                let (s, len) = [
                    ("&amp;", "&"),
                    ("&lt;", "<"),
                    ("&gt;", ">"),
                    ("&quot;", "\""),
                    ("&#39;", "'"),
                ]
                .iter()
                .find(|(e, _)| rest.starts_with(e))
                .map_or(("&", 1), |(e, s)| (*s, e.len()));
                text.push_str(s);
                i = pos + len;
            }
            c => text.push(c),
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Leases the endpoint on `host` and reports `class` on it.
fn fail_on(dir: &Directory, host: &str, class: FailureClass) {
    let lease = (0..100)
        .find_map(|_| dir.select_other(|u| u.host() != host).ok())
        .expect("endpoint leased");
    let _ = lease.failure(class);
}

#[actix_rt::test]
async fn chromium_renders_the_status_page_with_a_ready_and_an_unresolved_reference() {
    let registry = MemoryRegistry::new();
    let fetcher = ScriptedFetcher::new();
    let engine = Engine::builder()
        .registry(registry.clone())
        .fetcher(fetcher.clone())
        .seed(3)
        .start()
        .expect("engine starts");
    let orders = metadata("orders", "shop.Orders");
    let billing = metadata("billing", "shop.Billing");
    fetcher.serve(orders.clone());
    fetcher.serve(billing.clone());
    fetcher.fail_always(&billing.revision);
    let ready = engine
        .subscribe(Reference::new("shop.Orders", "http", ["orders"]))
        .await
        .expect("subscribe");
    let _stuck = engine
        .subscribe(Reference::new("shop.Billing", "http", ["billing"]))
        .await
        .expect("subscribe");
    for n in 1..=4u16 {
        registry.put(instance_for(&orders, format!("10.0.0.{n}"), 8080));
    }
    registry.put(instance_for(&billing, "10.0.1.1", 8080));
    // What this process registers itself shows under Registrations.
    engine
        .register(InstanceBuilder::new("gateway", "10.0.2.1", 9090).build())
        .await
        .expect("register");
    eventually("orders ready", || {
        ready.snapshot().is_ok_and(|s| s.len() == 4)
    })
    .await;
    fail_on(&ready, "10.0.0.1", FailureClass::ConnectionRefused);
    fail_on(&ready, "10.0.0.4", FailureClass::Closing);
    eventually("10.0.0.4 tombstoned", || {
        ready.snapshot().is_ok_and(|s| s.len() == 3)
    })
    .await;
    // The billing revision fails its first fetch and its first retry.
    let eng = engine.clone();
    let start = Instant::now();
    loop {
        let report = eng.inspect().await.expect("inspect");
        let attempts = report
            .apps
            .iter()
            .find(|a| a.app == "billing")
            .and_then(|a| a.revisions.first())
            .map_or(0, |r| r.attempts);
        if attempts >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "billing never retried"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let e = engine.clone();
    let server = HttpServer::new(move || {
        App::new().service(
            InspectScope::new(e.clone())
                .title("shop-frontend")
                .scope("/ops"),
        )
    })
    .workers(1)
    .listen(listener)
    .expect("listen")
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let url = format!("http://127.0.0.1:{port}/ops/status");

    let dir = std::env::temp_dir().join(format!("steadfast-chromium-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let dom_file = dir.join("dom.html");
    let ok = run_browser(
        &["--dump-dom".into()],
        &url,
        &dom_file,
        &dir.join("profile"),
    )
    .await;
    let dom = std::fs::read_to_string(&dom_file).expect("dom");
    assert!(ok, "chromium failed; output: {dom}");
    let text = text_of(&dom);
    for expected in [
        "shop-frontend",
        "shop.Orders:http ready",
        "shop.Billing:http empty:unresolved",
        "Watches: connected",
        "ejected",
        "tombstone 10.0.0.4:8080",
        "gateway/",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} not rendered in: {text}"
        );
    }
    // The billing revision's row: waiting (or fetching) with its attempts.
    assert!(
        text.contains("metadata service unreachable"),
        "last error rendered: {text}"
    );

    let shot: PathBuf = std::env::var_os("STEADFAST_STATUS_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join("status.png"));
    let ok = run_browser(
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,800".into(),
        ],
        &url,
        &dir.join("shot.log"),
        &dir.join("profile2"),
    )
    .await;
    assert!(ok, "chromium screenshot failed");
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    assert!(
        png.len() > 10_000,
        "a page, not a blank: {} bytes",
        png.len()
    );

    handle.stop(true).await;
    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
