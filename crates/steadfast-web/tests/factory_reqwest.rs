//! The reqwest factory through the pool, over a real loopback socket.

use std::time::Duration;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use steadfast_pool::{ClientPool, PoolConfig};
use steadfast_web::{ReqwestConfig, ReqwestFactory};

/// An actix-web server on a free loopback port that echoes header `x-echo`.
fn echo_server() -> (actix_web::dev::ServerHandle, String) {
    let server = HttpServer::new(|| {
        App::new().route(
            "/echo",
            web::get().to(|req: HttpRequest| async move {
                let echo = req
                    .headers()
                    .get("x-echo")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_string();
                HttpResponse::Ok().body(echo)
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .expect("bind loopback");
    let address = server.addrs()[0].to_string();
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    (handle, address)
}

#[actix_rt::test]
async fn reqwest_factory_clients_serve_calls_through_the_pool() {
    let (server, address) = echo_server();
    let factory = ReqwestFactory::new(ReqwestConfig::default()).customize(|b| {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "x-echo",
            reqwest::header::HeaderValue::from_static("customized"),
        );
        b.default_headers(headers)
    });
    let pool = ClientPool::new(factory, PoolConfig::default());
    let owner = pool.new_owner();
    pool.sync_endpoints(owner, [address.clone()]);
    for _ in 0..3 {
        let client = pool.acquire(&address).expect("client");
        let body = tokio::time::timeout(Duration::from_secs(5), async {
            client
                .get(format!("http://{address}/echo"))
                .send()
                .await?
                .text()
                .await
        })
        .await
        .expect("bounded")
        .expect("answered");
        assert_eq!(body, "customized");
    }
    assert_eq!(pool.stats().built, 1, "one client per endpoint, reused");
    pool.drop_owner(owner);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stats = pool.stats();
    assert_eq!((stats.active, stats.drained), (0, 1));
    server.stop(false).await;
}

#[actix_rt::test]
async fn reqwest_factory_connect_refused_fails_fast() {
    // A port that was just free: nothing listens there.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = free.local_addr().unwrap().to_string();
    drop(free);
    let pool = ClientPool::new(ReqwestFactory::default(), PoolConfig::default());
    let client = pool.acquire(&address).unwrap();
    let started = std::time::Instant::now();
    let err = client
        .get(format!("http://{address}/"))
        .send()
        .await
        .expect_err("nothing listens");
    assert!(err.is_connect(), "{err:?}");
    let took = started.elapsed();
    let connect_timeout = ReqwestConfig::default().connect_timeout;
    eprintln!("refused connection failed after {took:?} (connect timeout {connect_timeout:?})");
    assert!(took < connect_timeout, "{took:?}");
}

#[test]
fn reqwest_defaults_are_documented_values() {
    let c = ReqwestConfig::default();
    assert_eq!(c.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.connection_idle_timeout, Duration::from_secs(90));
    assert_eq!(c.max_idle_connections, 32);
    assert!(c.tcp_nodelay);
}
