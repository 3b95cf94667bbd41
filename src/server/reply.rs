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

/// OpenViking's error codes, each with the HTTP status its `ERROR_CODE_TO_HTTP_STATUS` gives it
/// (`openviking/server/models.py`, 0.5.2), in its order: the one place a code becomes a
/// status. A code is serialised by its name, so the envelope carries OpenViking's names exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// `OK` (200).
    Ok,
    /// `INVALID_ARGUMENT` (400).
    InvalidArgument,
    /// `GIT_AUTH_FAILED` (400).
    GitAuthFailed,
    /// `INVALID_URI` (400).
    InvalidUri,
    /// `NOT_FOUND` (404).
    NotFound,
    /// `ALREADY_EXISTS` (409).
    AlreadyExists,
    /// `CONFLICT` (409).
    Conflict,
    /// `PERMISSION_DENIED` (403).
    PermissionDenied,
    /// `UNAUTHENTICATED` (401).
    Unauthenticated,
    /// `RESOURCE_EXHAUSTED` (429).
    ResourceExhausted,
    /// `FAILED_PRECONDITION` (412).
    FailedPrecondition,
    /// `ABORTED` (409).
    Aborted,
    /// `DEADLINE_EXCEEDED` (504).
    DeadlineExceeded,
    /// `UNAVAILABLE` (503).
    Unavailable,
    /// `INTERNAL` (500).
    Internal,
    /// `UNIMPLEMENTED` (501).
    Unimplemented,
    /// `NOT_INITIALIZED` (500).
    NotInitialized,
    /// `PROCESSING_ERROR` (500).
    ProcessingError,
    /// `EMBEDDING_FAILED` (500).
    EmbeddingFailed,
    /// `VLM_FAILED` (500).
    VlmFailed,
    /// `SESSION_EXPIRED` (410).
    SessionExpired,
    /// `UNSUPPORTED_URI` (400).
    UnsupportedUri,
    /// `UNSUPPORTED_MODE` (400).
    UnsupportedMode,
    /// `RESTORE_WRITEBACK_PARTIAL` (500).
    RestoreWritebackPartial,
    /// `SKILL_INVALID` (400).
    SkillInvalid,
    /// `SKILL_CAPABILITY_UNAVAILABLE` (400).
    SkillCapabilityUnavailable,
    /// `AGENT_OUTPUT_INVALID` (500).
    AgentOutputInvalid,
    /// `MODEL_UNAVAILABLE` (503).
    ModelUnavailable,
    /// `WRITE_CONFLICT` (409).
    WriteConflict,
    /// `WRITE_FAILED` (500).
    WriteFailed,
    /// `REFRESH_FAILED` (500).
    RefreshFailed,
    /// `BOT_RESTARTED` (503).
    BotRestarted,
    /// `INTERNAL_ERROR` (500).
    InternalError,
    /// `NO_VECTOR_DB` (503).
    NoVectorDb,
    /// `INVALID_FILTER` (400).
    InvalidFilter,
    /// `UNKNOWN` (500).
    Unknown,
}

impl Code {
    /// Every code, in OpenViking's order.
    pub const ALL: [Code; 36] = [
        Code::Ok,
        Code::InvalidArgument,
        Code::GitAuthFailed,
        Code::InvalidUri,
        Code::NotFound,
        Code::AlreadyExists,
        Code::Conflict,
        Code::PermissionDenied,
        Code::Unauthenticated,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::DeadlineExceeded,
        Code::Unavailable,
        Code::Internal,
        Code::Unimplemented,
        Code::NotInitialized,
        Code::ProcessingError,
        Code::EmbeddingFailed,
        Code::VlmFailed,
        Code::SessionExpired,
        Code::UnsupportedUri,
        Code::UnsupportedMode,
        Code::RestoreWritebackPartial,
        Code::SkillInvalid,
        Code::SkillCapabilityUnavailable,
        Code::AgentOutputInvalid,
        Code::ModelUnavailable,
        Code::WriteConflict,
        Code::WriteFailed,
        Code::RefreshFailed,
        Code::BotRestarted,
        Code::InternalError,
        Code::NoVectorDb,
        Code::InvalidFilter,
        Code::Unknown,
    ];

    /// OpenViking's name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::GitAuthFailed => "GIT_AUTH_FAILED",
            Code::InvalidUri => "INVALID_URI",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::Conflict => "CONFLICT",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::Unavailable => "UNAVAILABLE",
            Code::Internal => "INTERNAL",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::NotInitialized => "NOT_INITIALIZED",
            Code::ProcessingError => "PROCESSING_ERROR",
            Code::EmbeddingFailed => "EMBEDDING_FAILED",
            Code::VlmFailed => "VLM_FAILED",
            Code::SessionExpired => "SESSION_EXPIRED",
            Code::UnsupportedUri => "UNSUPPORTED_URI",
            Code::UnsupportedMode => "UNSUPPORTED_MODE",
            Code::RestoreWritebackPartial => "RESTORE_WRITEBACK_PARTIAL",
            Code::SkillInvalid => "SKILL_INVALID",
            Code::SkillCapabilityUnavailable => "SKILL_CAPABILITY_UNAVAILABLE",
            Code::AgentOutputInvalid => "AGENT_OUTPUT_INVALID",
            Code::ModelUnavailable => "MODEL_UNAVAILABLE",
            Code::WriteConflict => "WRITE_CONFLICT",
            Code::WriteFailed => "WRITE_FAILED",
            Code::RefreshFailed => "REFRESH_FAILED",
            Code::BotRestarted => "BOT_RESTARTED",
            Code::InternalError => "INTERNAL_ERROR",
            Code::NoVectorDb => "NO_VECTOR_DB",
            Code::InvalidFilter => "INVALID_FILTER",
            Code::Unknown => "UNKNOWN",
        }
    }

    /// The HTTP status OpenViking answers the code with.
    pub fn status(self) -> StatusCode {
        let n = match self {
            Code::Ok => 200,
            Code::InvalidArgument => 400,
            Code::GitAuthFailed => 400,
            Code::InvalidUri => 400,
            Code::NotFound => 404,
            Code::AlreadyExists => 409,
            Code::Conflict => 409,
            Code::PermissionDenied => 403,
            Code::Unauthenticated => 401,
            Code::ResourceExhausted => 429,
            Code::FailedPrecondition => 412,
            Code::Aborted => 409,
            Code::DeadlineExceeded => 504,
            Code::Unavailable => 503,
            Code::Internal => 500,
            Code::Unimplemented => 501,
            Code::NotInitialized => 500,
            Code::ProcessingError => 500,
            Code::EmbeddingFailed => 500,
            Code::VlmFailed => 500,
            Code::SessionExpired => 410,
            Code::UnsupportedUri => 400,
            Code::UnsupportedMode => 400,
            Code::RestoreWritebackPartial => 500,
            Code::SkillInvalid => 400,
            Code::SkillCapabilityUnavailable => 400,
            Code::AgentOutputInvalid => 500,
            Code::ModelUnavailable => 503,
            Code::WriteConflict => 409,
            Code::WriteFailed => 500,
            Code::RefreshFailed => 500,
            Code::BotRestarted => 503,
            Code::InternalError => 500,
            Code::NoVectorDb => 503,
            Code::InvalidFilter => 400,
            Code::Unknown => 500,
        };
        StatusCode::from_u16(n).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The code of an OpenViking name (an answer's `error.code`); `None` for a name it does
    /// not have.
    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A failed request: OpenViking's error object.
#[derive(Debug, Clone, Serialize)]
pub struct ApiError {
    pub code: Code,
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
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
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
            400 | 422 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            409 => Code::Conflict,
            429 => Code::ResourceExhausted,
            501 => Code::Unimplemented,
            502 | 503 => Code::Unavailable,
            504 => Code::DeadlineExceeded,
            s if s >= 500 => Code::Internal,
            _ => Code::Unknown,
        };
        let mut e = ApiError::new(code, message);
        if code == Code::Unknown {
            e.http = Some(status);
        } else if code.status() != status {
            e.details = Some(json!({ "original_http_status_code": status.as_u16() }));
        }
        e
    }

    /// What vikingfs does not serve of OpenViking's API: `UNIMPLEMENTED` (501), the message
    /// naming what and why, so that a client reports it rather than a missing file.
    pub fn unimplemented(what: impl std::fmt::Display, why: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            Code::Unimplemented,
            format!("{what} is not supported by vikingfs: {why}"),
        )
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::InvalidArgument, message)
    }

    pub fn invalid_uri(uri: &str, why: impl std::fmt::Display) -> ApiError {
        ApiError::new(Code::InvalidUri, format!("invalid URI {uri:?}: {why}"))
            .with_details(json!({ "uri": uri }))
    }

    pub fn not_found(uri: &str) -> ApiError {
        ApiError::new(Code::NotFound, format!("Resource not found: {uri}"))
            .with_details(json!({ "resource": uri }))
    }

    pub fn denied(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::PermissionDenied, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::Unauthenticated, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::Internal, message)
    }

    /// A lock held by someone else, as OpenViking's `ResourceBusyError` maps it: retry later.
    pub fn busy(uri: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(Code::Conflict, message).with_details(json!({
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
                ApiError::new(Code::AlreadyExists, message).with_details(json!({ "resource": uri }))
            }
            OpsError::Busy(_) => ApiError::busy(uri, message),
            OpsError::Conflict(_) => {
                ApiError::new(Code::Conflict, message).with_details(json!({ "resource": uri }))
            }
            OpsError::IsADirectory(_) => ApiError::new(Code::FailedPrecondition, message)
                .with_details(json!({"resource": uri, "expected": "file", "actual": "directory"})),
            OpsError::NotADirectory(_) => ApiError::new(Code::FailedPrecondition, message)
                .with_details(json!({"resource": uri, "expected": "directory", "actual": "file"})),
            OpsError::NotEmpty(_) => ApiError::new(Code::FailedPrecondition, message)
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
                libc::ENOSPC | libc::EDQUOT => ApiError::new(Code::ResourceExhausted, message),
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
        self.http.unwrap_or_else(|| self.code.status())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_named_and_answered_as_openvikings_table_says() {
        for c in Code::ALL {
            assert_eq!(Code::from_name(c.as_str()), Some(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
        assert_eq!(Code::from_name("NO_SUCH_CODE"), None);
        for (c, status) in [
            (Code::InvalidFilter, 400),
            (Code::Unimplemented, 501),
            (Code::SessionExpired, 410),
            (Code::NoVectorDb, 503),
            (Code::Unknown, 500),
        ] {
            assert_eq!(c.status().as_u16(), status, "{c}");
        }
        let e = ApiError::unimplemented("GET /x", "why");
        assert_eq!(
            (e.status().as_u16(), e.message.as_str()),
            (501, "GET /x is not supported by vikingfs: why")
        );
        assert_eq!(
            ApiError::framework(StatusCode::NOT_IMPLEMENTED, "x").code,
            Code::Unimplemented
        );
        // A status without a code of its own keeps it, as OpenViking's handler does.
        let e = ApiError::framework(StatusCode::METHOD_NOT_ALLOWED, "x");
        assert_eq!((e.code, e.status().as_u16()), (Code::Unknown, 405));
    }
}
