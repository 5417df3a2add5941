//! Provider side over HTTP: [`metadata_scope`] serves a [`MetadataStore`]
//! inside the user's own actix-web `App`, and [`MetadataServer`] runs the
//! same scope as a small standalone server inside the current actix System
//! (or any tokio runtime).

use std::io;
use std::net::SocketAddr;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer, Scope};

use crate::endpoint::normalize_base_path;
use crate::store::MetadataStore;

/// Base path the MetadataService is mounted under unless told otherwise.
pub const DEFAULT_BASE_PATH: &str = "/steadfast";

/// Seconds a graceful [`MetadataServer::stop`] waits for open connections.
const SHUTDOWN_TIMEOUT_SECS: u64 = 1;

/// A scope serving `GET <base_path>/metadata/{revision}` from `store`:
/// 200 with the MetadataInfo as JSON, or 404 with a small JSON error body
/// when the store does not hold the revision. Mount it in your own `App`
/// with `App::new().service(metadata_scope(DEFAULT_BASE_PATH, store))`.
///
/// `base_path` is normalised: surrounding whitespace and trailing `/` are
/// dropped and a leading `/` is added; `""` or `"/"` mount at the root.
pub fn metadata_scope(base_path: &str, store: MetadataStore) -> Scope {
    web::scope(&normalize_base_path(base_path))
        .app_data(web::Data::new(store))
        .route("/metadata/{revision}", web::get().to(get_metadata))
}

async fn get_metadata(
    store: web::Data<MetadataStore>,
    revision: web::Path<String>,
) -> HttpResponse {
    match store.get(revision.as_str()) {
        Some(info) => HttpResponse::Ok().json(&*info),
        None => HttpResponse::NotFound().json(serde_json::json!({
            "error": "unknown_revision",
            "revision": revision.as_str(),
        })),
    }
}

/// A standalone HTTP server running [`metadata_scope`] with one worker.
/// It never installs signal handlers; stop it with [`MetadataServer::stop`]
/// (dropping it stops it too, without waiting).
pub struct MetadataServer {
    addr: SocketAddr,
    handle: Option<ServerHandle>,
    task: Option<tokio::task::JoinHandle<io::Result<()>>>,
}

impl MetadataServer {
    /// Binds `bind` (port 0 picks a free port) and starts serving `store`
    /// under `base_path`. Must be called inside a tokio runtime, such as
    /// the one of an actix System; the server runs on a task of it plus
    /// one worker thread. Fails when the address cannot be bound.
    pub fn start(bind: SocketAddr, base_path: &str, store: MetadataStore) -> io::Result<Self> {
        let base = normalize_base_path(base_path);
        let server =
            HttpServer::new(move || App::new().service(metadata_scope(&base, store.clone())))
                .workers(1)
                .disable_signals()
                .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS)
                .bind(bind)?;
        let addr = server.addrs().first().copied().ok_or_else(|| {
            io::Error::new(io::ErrorKind::AddrNotAvailable, "no address was bound")
        })?;
        let server = server.run();
        let handle = server.handle();
        let task = tokio::spawn(server);
        tracing::debug!(%addr, "metadata server started");
        Ok(Self {
            addr,
            handle: Some(handle),
            task: Some(task),
        })
    }

    /// The address the server listens on (with the real port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and waits until it has stopped accepting. A
    /// graceful stop lets open requests finish (for at most about a
    /// second); otherwise connections are dropped. An idle keep-alive
    /// connection may still be answered for a moment after this returns,
    /// until the worker thread has wound down.
    pub async fn stop(mut self, graceful: bool) {
        if let Some(handle) = self.handle.take() {
            handle.stop(graceful).await;
        }
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                tracing::warn!(addr = %self.addr, error = %e, "metadata server task failed");
            }
        }
        tracing::debug!(addr = %self.addr, "metadata server stopped");
    }
}

impl Drop for MetadataServer {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            // The stop command is sent at once; the returned future only
            // waits for completion, which a destructor cannot do.
            drop(handle.stop(false));
        }
    }
}

impl std::fmt::Debug for MetadataServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataServer")
            .field("addr", &self.addr)
            .field("running", &self.handle.is_some())
            .finish()
    }
}
