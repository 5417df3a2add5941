//! A scripted client factory for the pool's shell tests.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use steadfast_pool::ClientFactory;

/// One built client: its serial number and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestClient {
    pub serial: u64,
    pub address: String,
}

/// How closing an address's clients behaves.
#[derive(Clone, Copy, Debug)]
pub enum CloseScript {
    /// Takes this long, then succeeds.
    Slow(Duration),
    /// Fails at once.
    Fail,
    /// Panics.
    Panic,
    /// Never finishes (the pool's close timeout cuts it).
    Hang,
}

#[derive(Debug, thiserror::Error)]
#[error("scripted close failure")]
pub struct TestError;

#[derive(Default)]
pub struct Log {
    pub built: AtomicU64,
    /// Closes finished successfully, in order (by serial).
    pub closed: Mutex<Vec<u64>>,
    /// Closes started, in order (by serial).
    pub close_started: Mutex<Vec<u64>>,
}

/// Builds numbered clients; closes them as scripted per address.
#[derive(Clone, Default)]
pub struct TestFactory {
    pub log: Arc<Log>,
    pub scripts: Arc<Mutex<HashMap<String, CloseScript>>>,
}

impl TestFactory {
    pub fn script(&self, address: &str, script: CloseScript) {
        self.scripts
            .lock()
            .unwrap()
            .insert(address.to_string(), script);
    }
    pub fn closed(&self) -> Vec<u64> {
        self.log.closed.lock().unwrap().clone()
    }
    pub fn close_started(&self) -> Vec<u64> {
        self.log.close_started.lock().unwrap().clone()
    }
}

impl ClientFactory for TestFactory {
    type Client = TestClient;
    type Error = TestError;

    fn build(&self, address: &str) -> Result<TestClient, TestError> {
        let serial = self.log.built.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(TestClient {
            serial,
            address: address.to_string(),
        })
    }

    fn close(&self, client: TestClient) -> BoxFuture<'static, Result<(), TestError>> {
        let script = self.scripts.lock().unwrap().get(&client.address).copied();
        let log = self.log.clone();
        Box::pin(async move {
            log.close_started.lock().unwrap().push(client.serial);
            match script {
                Some(CloseScript::Fail) => return Err(TestError),
                Some(CloseScript::Panic) => panic!("scripted close panic"),
                Some(CloseScript::Hang) => std::future::pending::<()>().await,
                Some(CloseScript::Slow(d)) => tokio::time::sleep(d).await,
                None => {}
            }
            log.closed.lock().unwrap().push(client.serial);
            Ok(())
        })
    }
}

/// Lets spawned tasks run without moving the (paused) clock.
pub async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
