//! The awc factory (feature `awc`) through the pool, over a real loopback
//! socket, from two actix systems on two threads.

#![cfg(feature = "awc")]

use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use steadfast_pool::{ClientPool, PoolConfig};
use steadfast_web::{AwcClient, AwcConfig, AwcFactory};

async fn get(client: &AwcClient, address: &str) -> String {
    let mut response = tokio::time::timeout(
        Duration::from_secs(5),
        client
            .client()
            .get(format!("http://{address}/hello"))
            .send(),
    )
    .await
    .expect("bounded")
    .expect("answered");
    let body = response.body().await.expect("body");
    String::from_utf8_lossy(&body).into_owned()
}

#[actix_rt::test]
async fn awc_factory_clients_serve_calls_on_every_thread() {
    let server = HttpServer::new(|| {
        App::new().route(
            "/hello",
            web::get().to(|| async { HttpResponse::Ok().body("hello") }),
        )
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .unwrap();
    let address = server.addrs()[0].to_string();
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);

    let pool = ClientPool::new(AwcFactory::new(AwcConfig::default()), PoolConfig::default());
    let pooled = pool.acquire(&address).unwrap();
    assert_eq!(get(&pooled, &address).await, "hello");
    // The same pooled handle, used from another thread's actix system.
    let handle_elsewhere: AwcClient = pooled.client().clone();
    let elsewhere = address.clone();
    let other = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move { get(&handle_elsewhere, &elsewhere).await })
    });
    assert_eq!(other.join().expect("other thread"), "hello");
    drop(pooled);
    assert_eq!(pool.stats().built, 1);
    handle.stop(false).await;
}
