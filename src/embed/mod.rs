//! Embeddings: turning text into vectors for the derived index.
//!
//! Owns the [`Embedder`] trait and its providers: [`BertEmbedder`] (a sentence-transformers
//! BERT model on disk, run in process: `provider: "local"` with a `model` directory) and
//! [`HttpEmbedder`] (any OpenAI-compatible `/embeddings` API, configured like OpenViking's
//! `embedding.dense`). Without a model, search is lexical only. (The hashing embedder that
//! was the default before is retired: on the search benchmark it took from BM25 in the fusion,
//! MRR@10 0.449 → 0.352; an index it built is upgraded when it is first opened.)
//! Every failure is an [`EmbedError`]; the job layer treats it as a retryable job error.

mod bert;
mod encoder;
mod http;
mod int8;

use std::sync::Arc;

use thiserror::Error;

use crate::config::EmbeddingConfig;

pub use bert::BertEmbedder;
pub use http::HttpEmbedder;

/// Why an embedding request failed.
#[derive(Debug, Error)]
pub enum EmbedError {
    #[error("embedding configuration: {0}")]
    Config(String),
    #[error("embedding request to {url} failed")]
    Transport {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("embedding request to {url} returned HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("embedding response from {url} is malformed: {msg}")]
    BadResponse { url: String, msg: String },
    #[error(
        "embedding model {model} returned dimension {got}, configured dimension is {expected}"
    )]
    Dimension {
        model: String,
        expected: usize,
        got: usize,
    },
    /// A local model failed on its input (tokenizer or tensor error): the same input fails
    /// again, so it is not transient.
    #[error("embedding model {model} failed: {msg}")]
    Inference { model: String, msg: String },
}

impl EmbedError {
    /// Whether retrying the same request may succeed (network trouble, timeouts, HTTP 408,
    /// 429 and 5xx). The job layer retries every error up to its limit; this lets it give up
    /// early on the rest (bad key, bad model, wrong dimension), which only a configuration
    /// change fixes.
    pub fn is_transient(&self) -> bool {
        match self {
            EmbedError::Transport { .. } => true,
            EmbedError::Status { status, .. } => matches!(status, 408 | 429 | 500..=599),
            EmbedError::BadResponse { .. }
            | EmbedError::Dimension { .. }
            | EmbedError::Inference { .. }
            | EmbedError::Config(_) => false,
        }
    }
}

/// Text in, unit-or-not vectors out. The index normalises, so providers need not.
pub trait Embedder: Send + Sync {
    /// Length of every vector this embedder returns.
    fn dim(&self) -> usize;
    /// Identifies the vector space: vectors from different ids must never be compared.
    fn model_id(&self) -> String;
    /// One vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// The configuration this embedder was built from, as [`describe`] names it (so that a
    /// daemon's model and a command's configuration compare without loading the model).
    fn describe(&self) -> String {
        self.model_id()
    }
    /// How a model run in process computes (`f32`, `int8`), for `status`; `None` for a
    /// remote one.
    fn precision(&self) -> Option<&'static str> {
        None
    }
}

/// How `cfg` names its model, the same string [`Embedder::describe`] gives for the embedder
/// [`from_config`] builds: `none (lexical only)`, `local DIR` (the directory made absolute),
/// `openai MODEL`.
pub fn describe(cfg: &EmbeddingConfig) -> String {
    match (
        cfg.provider.as_str(),
        cfg.model.as_deref().filter(|m| !m.is_empty()),
    ) {
        ("local", None) => "none (lexical only)".to_string(),
        ("local", Some(dir)) => local_name(&expand_home(dir)),
        (p, m) => format!("{p} {}", m.unwrap_or("-")),
    }
}

/// `local DIR`, DIR absolute when it exists.
fn local_name(dir: &std::path::Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    format!("local {}", dir.display())
}

/// Build the dense embedder `cfg` names, or `None` when search is lexical only (`local`
/// without a model directory: the default, so a fresh machine works offline).
pub fn from_config(cfg: &EmbeddingConfig) -> Result<Option<Arc<dyn Embedder>>, EmbedError> {
    if cfg.dimension == 0 {
        return Err(EmbedError::Config("dimension must be at least 1".into()));
    }
    match cfg.provider.as_str() {
        "local" => match cfg.model.as_deref().filter(|m| !m.is_empty()) {
            None => Ok(None),
            Some(dir) => Ok(Some(Arc::new(BertEmbedder::load_with(
                &expand_home(dir),
                cfg.precision,
            )?))),
        },
        "openai" => Ok(Some(Arc::new(HttpEmbedder::from_config(cfg)?))),
        other => Err(EmbedError::Config(format!(
            "unknown provider {other:?} (expected \"local\" or \"openai\")"
        ))),
    }
}

/// `~/x` → `$HOME/x`, as a user writes a model path in a configuration file.
fn expand_home(p: &str) -> std::path::PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => std::path::PathBuf::from(p),
    }
}
