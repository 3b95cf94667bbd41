//! OpenAI-compatible embeddings over HTTP: `POST {api_base}/embeddings`.
//!
//! Works with OpenAI, vLLM, Ollama's and llama.cpp's OpenAI endpoints and the like. Every
//! failure (transport, HTTP status, malformed body, wrong dimension) is an [`EmbedError`];
//! the caller's job is retried, so nothing here retries on its own.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{EmbedError, Embedder};
use crate::config::EmbeddingConfig;

/// Texts per request: large enough to amortise the round trip, small enough for any server's
/// request limits.
const BATCH: usize = 64;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How much of an error body is worth putting in a one-line message.
const MAX_ERROR_BODY: usize = 300;

pub struct HttpEmbedder {
    url: String,
    model: String,
    api_key: Option<String>,
    dim: usize,
    agent: ureq::Agent,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [&'a str],
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

impl HttpEmbedder {
    pub fn from_config(cfg: &EmbeddingConfig) -> Result<Self, EmbedError> {
        let base = cfg
            .api_base
            .as_deref()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                EmbedError::Config(
                    "embedding.dense.api_base is required for provider openai".into(),
                )
            })?;
        let model = cfg.model.clone().filter(|m| !m.is_empty()).ok_or_else(|| {
            EmbedError::Config("embedding.dense.model is required for provider openai".into())
        })?;
        Ok(Self::new(
            base,
            &model,
            cfg.api_key.as_deref(),
            cfg.dimension,
        ))
    }

    pub fn new(api_base: &str, model: &str, api_key: Option<&str>, dim: usize) -> Self {
        HttpEmbedder {
            url: format!("{}/embeddings", api_base.trim_end_matches('/')),
            model: model.to_string(),
            api_key: api_key.filter(|k| !k.is_empty()).map(str::to_string),
            dim,
            agent: agent(REQUEST_TIMEOUT),
        }
    }

    /// Give up on a request (connect, send, wait, read) after `timeout` instead of the default.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.agent = agent(timeout);
        self
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let transport = |e: ureq::Error| EmbedError::Transport {
            url: self.url.clone(),
            source: Box::new(e),
        };
        let mut req = self.agent.post(&self.url);
        if let Some(key) = &self.api_key {
            req = req.header("Authorization", format!("Bearer {key}"));
        }
        let mut resp = req
            .send_json(Request {
                model: &self.model,
                input: texts,
            })
            .map_err(transport)?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let body = resp.body_mut().read_to_string().unwrap_or_default();
            let mut body: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
            if body.len() > MAX_ERROR_BODY {
                let cut = (0..=MAX_ERROR_BODY)
                    .rev()
                    .find(|&i| body.is_char_boundary(i));
                body.truncate(cut.unwrap_or(0));
                body.push('…');
            }
            return Err(EmbedError::Status {
                url: self.url.clone(),
                status,
                body,
            });
        }
        let parsed: Response =
            resp.body_mut()
                .read_json()
                .map_err(|e| EmbedError::BadResponse {
                    url: self.url.clone(),
                    msg: e.to_string(),
                })?;
        if parsed.data.len() != texts.len() {
            return Err(EmbedError::BadResponse {
                url: self.url.clone(),
                msg: format!(
                    "{} embeddings for {} inputs",
                    parsed.data.len(),
                    texts.len()
                ),
            });
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (pos, item) in parsed.data.into_iter().enumerate() {
            if item.embedding.len() != self.dim {
                return Err(EmbedError::Dimension {
                    model: self.model.clone(),
                    expected: self.dim,
                    got: item.embedding.len(),
                });
            }
            // Servers may answer out of order; `index` says which input each vector is for.
            let i = item.index.unwrap_or(pos);
            match slots.get_mut(i) {
                Some(slot @ None) => *slot = Some(item.embedding),
                _ => {
                    return Err(EmbedError::BadResponse {
                        url: self.url.clone(),
                        msg: format!("bad or repeated index {i}"),
                    })
                }
            }
        }
        Ok(slots.into_iter().map(|s| s.unwrap_or_default()).collect())
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .timeout_global(Some(timeout))
        // Read the body of a 4xx/5xx ourselves: it usually says what is wrong.
        .http_status_as_error(false)
        .build()
        .new_agent()
}

impl Embedder for HttpEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn model_id(&self) -> String {
        format!("openai:{}", self.model)
    }

    fn describe(&self) -> String {
        format!("openai {}", self.model)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            out.extend(self.embed_batch(batch)?);
        }
        Ok(out)
    }
}
