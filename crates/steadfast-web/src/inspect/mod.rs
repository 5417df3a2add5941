//! The inspection scope: what the engine sees, over HTTP, for operators.
//!
//! - `GET <path>/inspect`: the [`EngineReport`] of
//!   [`Engine::inspect`] as JSON;
//! - `GET <path>/status`: a small server-rendered HTML status page (no
//!   script, refreshes itself with `<meta http-equiv="refresh">`):
//!   references with their state and endpoints (ejected and tombstoned
//!   marks), registry watches, apps with instances and revisions (attempts,
//!   last error, next retry), registrations.
//!
//! ```no_run
//! # fn app(engine: steadfast_actors::Engine) {
//! use actix_web::App;
//! let app = App::new().service(steadfast_web::inspect_scope("/steadfast", engine));
//! # }
//! ```
//!
//! Both answer `503` with the reason as text when the engine cannot be
//! inspected (shut down, or it did not answer within the inspection bound).
//! Mount the scope on an operators' listener or behind authentication: the
//! report names hosts, ports and errors.

mod html;

use std::time::Duration;

use actix_web::http::header::{CacheControl, CacheDirective, ContentType};
use actix_web::{web, HttpResponse, Scope};
use steadfast_actors::{Engine, EngineReport};

pub use html::render_status;

/// Default refresh interval of the status page.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5);

/// Settings of the inspection scope.
#[derive(Clone)]
pub struct InspectScope {
    engine: Engine,
    refresh: Duration,
    title: String,
}

impl std::fmt::Debug for InspectScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InspectScope")
            .field("refresh", &self.refresh)
            .field("title", &self.title)
            .finish_non_exhaustive()
    }
}

impl InspectScope {
    /// The scope over `engine`, the page refreshing every
    /// [`DEFAULT_REFRESH`], titled "steadfast status".
    pub fn new(engine: Engine) -> Self {
        Self {
            engine,
            refresh: DEFAULT_REFRESH,
            title: "steadfast status".into(),
        }
    }

    /// How often the status page reloads itself (zero: never; rounded up
    /// to whole seconds).
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// The page's title (e.g. the service's name).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    /// The actix-web scope mounted at `path` (`""` or `"/"`: the root).
    pub fn scope(self, path: &str) -> Scope {
        let path = path.trim_end_matches('/');
        web::scope(path)
            .app_data(web::Data::new(self))
            .route("/inspect", web::get().to(inspect_json))
            .route("/status", web::get().to(status_page))
    }
}

/// The inspection scope at `path` over `engine` with the default settings
/// (see [`InspectScope`]).
pub fn inspect_scope(path: &str, engine: Engine) -> Scope {
    InspectScope::new(engine).scope(path)
}

fn unavailable(e: steadfast_actors::EngineError) -> HttpResponse {
    HttpResponse::ServiceUnavailable()
        .content_type(ContentType::plaintext())
        .body(format!("inspection failed: {e}"))
}

fn no_cache() -> CacheControl {
    CacheControl(vec![CacheDirective::NoStore])
}

async fn report(cfg: &InspectScope) -> Result<EngineReport, HttpResponse> {
    cfg.engine.inspect().await.map_err(unavailable)
}

async fn inspect_json(cfg: web::Data<InspectScope>) -> HttpResponse {
    match report(&cfg).await {
        Ok(r) => match serde_json::to_string(&r) {
            Ok(body) => HttpResponse::Ok()
                .insert_header(no_cache())
                .content_type(ContentType::json())
                .body(body),
            Err(e) => HttpResponse::InternalServerError().body(e.to_string()),
        },
        Err(resp) => resp,
    }
}

async fn status_page(cfg: web::Data<InspectScope>) -> HttpResponse {
    match report(&cfg).await {
        Ok(r) => HttpResponse::Ok()
            .insert_header(no_cache())
            .content_type(ContentType::html())
            .body(render_status(&r, &cfg.title, cfg.refresh)),
        Err(resp) => resp,
    }
}
