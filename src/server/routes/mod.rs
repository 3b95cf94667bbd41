//! The router: one file per group of OpenViking's routes (its `openviking/server/routers/`),
//! each naming its paths once in a `routes()` function, and the layers every request passes:
//! CORS (`server.cors_origins`), the body limit, the request timeout, the body's deadline and
//! the peer's share of the server (`super::limits`), the `X-Process-Time` header, and the
//! envelope for the framework's own answers (an unknown route, a wrong method, a body over the
//! limit).

pub mod admin;
pub mod content;
pub mod fs;
pub mod observer;
pub mod resources;
pub mod search;
pub mod sessions;
pub mod snapshot;
pub mod system;
pub mod tasks;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::limits;
use super::reply::ApiError;
use super::Api;

pub type Routes = Router<Arc<Api>>;

/// Every route, with the layers around them.
pub fn router(api: Arc<Api>) -> Router {
    let limit = api.config.max_body_bytes;
    let timeout = api.config.request_timeout;
    let cors = cors(&api.config.cors_origins);
    let pace = limits::BodyPace {
        grace: api.config.body_timeout,
        min_rate: api.config.min_body_rate,
    };
    Router::new()
        .merge(system::routes())
        .merge(admin::routes())
        .merge(fs::routes())
        .merge(content::routes())
        .merge(resources::routes())
        .merge(super::mcp::routes(&api))
        .merge(search::routes())
        .merge(sessions::routes())
        .merge(snapshot::routes())
        .merge(tasks::routes())
        .merge(observer::routes())
        .merge(super::local::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        // The body's deadline starts once the request is admitted: waiting for a slot does
        // not eat into it.
        .layer(middleware::from_fn_with_state(pace, limits::body_deadline))
        // Inside the timeout: a request waiting for its peer's slot ends there at the latest.
        .layer(middleware::from_fn(limits::admit))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            timeout,
        ))
        // Around the timeout, so that its 504 is in the envelope too.
        .layer(middleware::from_fn(framework_errors))
        .layer(cors)
        .layer(middleware::from_fn(process_time))
        // Outermost: who each request is for, for the history's entries.
        .layer(middleware::from_fn(super::caller::scope))
        .with_state(api)
}

fn cors(origins: &[String]) -> CorsLayer {
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::PATCH,
        ])
        .allow_headers(tower_http::cors::Any)
}

async fn not_found(req: Request) -> ApiError {
    ApiError::framework(
        StatusCode::NOT_FOUND,
        format!("Not Found: {}", req.uri().path()),
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::framework(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

/// OpenViking's `X-Process-Time` (seconds, as a decimal).
async fn process_time(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&started.elapsed().as_secs_f64().to_string()) {
        resp.headers_mut().insert("x-process-time", v);
    }
    resp
}

/// An error answer that is not already the envelope (a layer's 413 or 504, an extractor's
/// plain text) becomes it, as OpenViking's exception handlers do.
async fn framework_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let body = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).trim().to_string();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("HTTP request failed")
            .to_string()
    } else {
        text
    };
    ApiError::framework(status, message).into_response()
}

/// A route's body as a response (for routes that answer bytes, not the envelope).
pub fn raw(content_type: &str, bytes: Vec<u8>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(bytes))
        .unwrap_or_else(|_| ApiError::internal("response").into_response())
}
