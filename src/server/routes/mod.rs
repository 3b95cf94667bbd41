//! The router: one file per group of OpenViking's routes (its `openviking/server/routers/`),
//! each naming its paths once in a `routes()` function, and the layers every request passes:
//! CORS (`server.cors_origins`), the body limit, the request timeout, the body's deadline and
//! the peer's share of the server (`super::limits`), the `X-Process-Time` header, and the
//! envelope for the framework's own answers (an unknown route, a wrong method, a body over the
//! limit).
//!
//! [`Routes`] is axum's router with the (method, path) pairs it serves beside it, made by the
//! same calls ([`get`], [`post`], …, [`Routes::route`]): [`endpoints`] lists every route the
//! server answers, so a test can call each of them (the access test does: a route added later
//! is probed the day it is added).

pub mod acl;
pub mod admin;
pub mod content;
pub mod fs;
pub mod observer;
pub mod openviking;
pub mod resources;
pub mod search;
pub mod sessions;
pub mod skills;
pub mod snapshot;
pub mod system;
pub mod tasks;
pub mod unsupported;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::handler::Handler;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{self, MethodRouter};
use axum::Router;
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::limits;
use super::reply::ApiError;
use super::Api;

/// One route the server answers: a method (`ANY` for a route that takes every method) and
/// a path as the router matches it (`{sid}` a parameter).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub method: &'static str,
    pub path: String,
}

/// A group of routes: the router, and the endpoints it serves.
pub struct Routes {
    router: Router<Arc<Api>>,
    served: Vec<Endpoint>,
}

impl Default for Routes {
    fn default() -> Self {
        Self::new()
    }
}

impl Routes {
    pub fn new() -> Routes {
        Routes {
            router: Router::new(),
            served: Vec::new(),
        }
    }

    /// Serve `path` by `methods`.
    pub fn route(mut self, path: &str, methods: Methods) -> Routes {
        self.router = self.router.route(path, methods.router);
        self.served
            .extend(methods.methods.into_iter().map(|method| Endpoint {
                method,
                path: path.to_string(),
            }));
        self
    }

    pub fn merge(mut self, other: Routes) -> Routes {
        self.router = self.router.merge(other.router);
        self.served.extend(other.served);
        self
    }

    /// The router changed by `f` (a layer around these routes), serving the same endpoints.
    pub fn map(mut self, f: impl FnOnce(Router<Arc<Api>>) -> Router<Arc<Api>>) -> Routes {
        self.router = f(self.router);
        self
    }
}

/// The handlers of one path, by method, and the methods they are.
pub struct Methods {
    router: MethodRouter<Arc<Api>>,
    methods: Vec<&'static str>,
}

macro_rules! method {
    ($(#[$doc:meta])* $name:ident, $m:literal) => {
        $(#[$doc])*
        pub fn $name<H: Handler<T, Arc<Api>>, T: 'static>(handler: H) -> Methods {
            Methods {
                router: routing::$name(handler),
                methods: vec![$m],
            }
        }

        impl Methods {
            $(#[$doc])*
            pub fn $name<H: Handler<T, Arc<Api>>, T: 'static>(mut self, handler: H) -> Methods {
                self.router = self.router.$name(handler);
                self.methods.push($m);
                self
            }
        }
    };
}

method!(
    /// `GET` by `handler`.
    get,
    "GET"
);
method!(
    /// `POST` by `handler`.
    post,
    "POST"
);
method!(
    /// `PUT` by `handler`.
    put,
    "PUT"
);
method!(
    /// `PATCH` by `handler`.
    patch,
    "PATCH"
);
method!(
    /// `DELETE` by `handler`.
    delete,
    "DELETE"
);

/// Every method by `handler`.
pub fn any<H: Handler<T, Arc<Api>>, T: 'static>(handler: H) -> Methods {
    Methods {
        router: routing::any(handler),
        methods: vec!["ANY"],
    }
}

impl Methods {
    /// The handlers changed by `f` (a layer around them), for the same methods.
    pub fn map(
        mut self,
        f: impl FnOnce(MethodRouter<Arc<Api>>) -> MethodRouter<Arc<Api>>,
    ) -> Methods {
        self.router = f(self.router);
        self
    }
}

/// Every route's group, and OpenViking's routes none of them serves answered 501
/// ([`unsupported`]).
fn all() -> Routes {
    let groups = groups();
    let rest = unsupported::routes(&groups.served);
    groups.merge(rest)
}

/// The endpoints the route groups serve (not the 501 answers).
pub fn served() -> Vec<Endpoint> {
    groups().served
}

/// The route groups.
fn groups() -> Routes {
    Routes::new()
        .merge(system::routes())
        .merge(acl::routes())
        .merge(admin::routes())
        .merge(fs::routes())
        .merge(content::routes())
        .merge(resources::routes())
        .merge(skills::routes())
        .merge(super::mcp::routes())
        .merge(search::routes())
        .merge(sessions::routes())
        .merge(snapshot::routes())
        .merge(tasks::routes())
        .merge(observer::routes())
        .merge(super::local::routes())
}

/// Every route the router answers (the same groups [`router`] serves), in order.
pub fn endpoints() -> Vec<Endpoint> {
    let mut e = all().served;
    e.sort();
    e
}

/// Every route, with the layers around them.
pub fn router(api: Arc<Api>) -> Router {
    let limit = api.config.max_body_bytes;
    let timeout = api.config.request_timeout;
    let cors = cors(&api.config.cors_origins);
    let pace = limits::BodyPace {
        grace: api.config.body_timeout,
        min_rate: api.config.min_body_rate,
    };
    all()
        .router
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
