//! [`metrics_scope`]: an actix-web scope serving [`Metrics::encode`].

use actix_web::{web, HttpResponse, Scope};

use crate::Metrics;

/// The content type of the exposition (OpenMetrics text 1.0.0, scraped by
/// Prometheus).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A scope answering `GET <path>` with the text exposition of `metrics`
/// (`200`, [`CONTENT_TYPE`]). Mount it with `App::service`.
pub fn metrics_scope(path: &str, metrics: Metrics) -> Scope {
    web::scope(path)
        .app_data(web::Data::new(metrics))
        .route("", web::get().to(serve))
}

async fn serve(metrics: web::Data<Metrics>) -> HttpResponse {
    let body = metrics.encode().await;
    HttpResponse::Ok().content_type(CONTENT_TYPE).body(body)
}
