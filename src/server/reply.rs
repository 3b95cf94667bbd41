//! OpenViking's response envelope, written once: every route answers
//! `{"status":"ok","result":…}` or `{"status":"error","error":{"code","message","details"}}`
//! (0.5.2's `Response` model: the time a request took is its `X-Process-Time` header), with the HTTP status OpenViking's `ERROR_CODE_TO_HTTP_STATUS` gives
//! the code (`openviking/server/models.py`, 0.5.2). How an operation's failure becomes a code is
//! [`ApiError::from_ops`] over [`OpsError`]: one table for every route and the MCP tools.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};

use crate::errno::ToErrno;
use crate::ops::OpsError;

/// OpenViking's codes and their HTTP statuses (models.py).
pub fn http_status(code: &str) -> StatusCode {
    let n = match code {
        "OK" => 200,
        "INVALID_ARGUMENT"
        | "GIT_AUTH_FAILED"
        | "INVALID_URI"
        | "UNSUPPORTED_URI"
        | "UNSUPPORTED_MODE"
        | "SKILL_INVALID"
        | "SKILL_CAPABILITY_UNAVAILABLE"
        | "INVALID_FILTER" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "ALREADY_EXISTS" | "CONFLICT" | "ABORTED" | "WRITE_CONFLICT" => 409,
        "SESSION_EXPIRED" => 410,
        "FAILED_PRECONDITION" => 412,
        "RESOURCE_EXHAUSTED" => 429,
        "UNIMPLEMENTED" => 501,
        "UNAVAILABLE" | "MODEL_UNAVAILABLE" | "BOT_RESTARTED" | "NO_VECTOR_DB" => 503,
        "DEADLINE_EXCEEDED" => 504,
        _ => 500,
    };
    StatusCode::from_u16(n).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A failed request: OpenViking's error object.
#[derive(Debug, Clone, Serialize)]
pub struct ApiError {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// The HTTP status of a framework error whose status has no code of its own (405, 408,
    /// 413, ...): OpenViking answers those `UNKNOWN` with the status kept.
    #[serde(skip)]
    pub http: Option<StatusCode>,
}

pub type ApiResult = Result<Ok, ApiError>;

impl ApiError {
    pub fn new(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: None,
            http: None,
        }
    }

    /// A framework's answer (a body that is not JSON, a route that does not exist, a body
    /// over the limit, ...) as OpenViking's exception handler turns it into the envelope.
    pub fn framework(status: StatusCode, message: impl Into<String>) -> ApiError {
        let code = match status.as_u16() {
            400 | 422 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            409 => "CONFLICT",
            429 => "RESOURCE_EXHAUSTED",
            502 | 503 => "UNAVAILABLE",
            504 => "DEADLINE_EXCEEDED",
            s if s >= 500 => "INTERNAL",
            _ => "UNKNOWN",
        };
        let mut e = ApiError::new(code, message);
        if code == "UNKNOWN" {
            e.http = Some(status);
        } else if http_status(code) != status {
            e.details = Some(json!({ "original_http_status_code": status.as_u16() }));
        }
        e
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new("INVALID_ARGUMENT", message)
    }

    pub fn invalid_uri(uri: &str, why: impl std::fmt::Display) -> ApiError {
        ApiError::new("INVALID_URI", format!("invalid URI {uri:?}: {why}"))
            .with_details(json!({ "uri": uri }))
    }

    pub fn not_found(uri: &str) -> ApiError {
        ApiError::new("NOT_FOUND", format!("Resource not found: {uri}"))
            .with_details(json!({ "resource": uri }))
    }

    pub fn denied(message: impl Into<String>) -> ApiError {
        ApiError::new("PERMISSION_DENIED", message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new("UNAUTHENTICATED", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new("INTERNAL", message)
    }

    /// A lock held by someone else, as OpenViking's `ResourceBusyError` maps it: retry later.
    pub fn busy(uri: &str, message: impl Into<String>) -> ApiError {
        ApiError::new("CONFLICT", message).with_details(json!({
            "resource": uri,
            "uri": uri,
            "conflict_type": "path_busy",
            "retryable": true,
        }))
    }

    /// An operation's failure on `uri`: the one mapping of [`OpsError`] to OpenViking's codes.
    pub fn from_ops(uri: &str, e: OpsError) -> ApiError {
        let message = crate::error::Chain(&e).to_string();
        match &e {
            OpsError::NotFound(_) => ApiError::not_found(uri),
            OpsError::Exists(_) => {
                ApiError::new("ALREADY_EXISTS", message).with_details(json!({ "resource": uri }))
            }
            OpsError::Busy(_) => ApiError::busy(uri, message),
            OpsError::Conflict(_) => {
                ApiError::new("CONFLICT", message).with_details(json!({ "resource": uri }))
            }
            OpsError::IsADirectory(_) => ApiError::new("FAILED_PRECONDITION", message)
                .with_details(json!({"resource": uri, "expected": "file", "actual": "directory"})),
            OpsError::NotADirectory(_) => ApiError::new("FAILED_PRECONDITION", message)
                .with_details(json!({"resource": uri, "expected": "directory", "actual": "file"})),
            OpsError::NotEmpty(_) => ApiError::new("FAILED_PRECONDITION", message)
                .with_details(json!({ "resource": uri })),
            OpsError::IntoItself { .. } | OpsError::Exchange(_) | OpsError::SourceName { .. } => {
                ApiError::invalid(message).with_details(json!({ "resource": uri }))
            }
            OpsError::ScopeRoot(_) | OpsError::Derived(_) => {
                ApiError::denied(message).with_details(json!({ "resource": uri }))
            }
            OpsError::Uri(_) => ApiError::invalid_uri(uri, &e),
            OpsError::BadSource { .. } | OpsError::BadQuery(_) => ApiError::invalid(message),
            _ => match e.errno() {
                libc::ENOSPC | libc::EDQUOT => ApiError::new("RESOURCE_EXHAUSTED", message),
                libc::ENOENT => ApiError::not_found(uri),
                libc::EACCES | libc::EPERM | libc::EROFS => ApiError::denied(message),
                _ => {
                    tracing::error!(uri, "{message}");
                    ApiError::internal(message)
                }
            },
        }
    }

    pub fn status(&self) -> StatusCode {
        self.http.unwrap_or_else(|| http_status(self.code))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = json!({ "status": "error", "error": self });
        (status, Json(body)).into_response()
    }
}

/// A successful request's result, wrapped in the envelope when answered.
#[derive(Debug)]
pub struct Ok(pub Value);

impl IntoResponse for Ok {
    fn into_response(self) -> Response {
        Json(json!({ "status": "ok", "result": self.0 })).into_response()
    }
}

/// `Ok` of anything serialisable.
pub fn ok(v: impl Serialize) -> ApiResult {
    serde_json::to_value(v)
        .map(Ok)
        .map_err(|e| ApiError::internal(format!("result: {e}")))
}
