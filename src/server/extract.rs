//! Request bodies and query strings, read as OpenViking's FastAPI reads them: a body that is not
//! JSON, or whose fields do not fit, is `INVALID_ARGUMENT` (400) in the envelope, naming the
//! field; a body over the limit keeps its 413. The content type is not insisted on (clients
//! that post JSON as text/plain, or nothing, still work), and an empty body is `{}`.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::reply::ApiError;

/// A JSON body of type `T`.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|r| ApiError::framework(r.status(), r.body_text()))?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        parse(text).map(Body)
    }
}

/// Parse `bytes` as a `T`, an error naming the field that does not fit.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let (kind, loc) = if inner.is_syntax() || inner.is_eof() {
            ("json_invalid", vec!["body".to_string()])
        } else {
            ("value_error", vec!["body".to_string(), path.clone()])
        };
        let message = if path == "." || kind == "json_invalid" {
            format!("Invalid request body: {inner}")
        } else {
            format!("Invalid request body: {path}: {inner}")
        };
        ApiError::invalid(message).with_details(json!({
            "validation_errors": [{ "type": kind, "loc": loc, "msg": inner.to_string() }]
        }))
    })
}

/// A query string of type `T`.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Params(q.0))
            .map_err(|r| {
                ApiError::invalid(r.body_text()).with_details(json!({
                    "validation_errors": [{ "type": "value_error", "loc": ["query"],
                                            "msg": r.body_text() }]
                }))
            })
    }
}
