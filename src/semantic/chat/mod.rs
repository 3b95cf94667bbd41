//! An OpenAI-compatible chat client (OpenViking's `vlm` provider), and the summariser and memory
//! extractor built on it (in `summarizer` and `extractor`).
//!
//! One request shape: `POST {api_base}/chat/completions` with a Bearer key and a JSON body of
//! `model` and `messages`; the answer is `choices[0].message.content`. Every failure is a
//! [`ChatError`] that says whether retrying may help, so the queue can retry transient failures
//! and park permanent ones instead of retrying forever (OpenViking #4919).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use super::memory::Message;
use super::summary::truncate_chars;
use crate::config::ChatConfig;

mod extractor;
mod summarizer;

pub use extractor::ChatExtractor;
pub use summarizer::ChatSummarizer;

/// Whole-request timeout: models take 5 s to 60 s+ (seed, "session.commit()").
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an error body quoted in a message.
const BODY_QUOTE_CHARS: usize = 300;

#[derive(Debug, Error)]
pub enum ChatError {
    #[error("vlm config: {0}")]
    Config(String),
    #[error("chat model at {url}: connection failed")]
    Connect {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("chat model at {url}: no answer within {secs} s")]
    Timeout { url: String, secs: u64 },
    #[error("chat model at {url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("chat model at {url}: response is not an OpenAI chat completion: {msg}")]
    BadResponse { url: String, msg: String },
    #[error("chat model answer rejected: {0}")]
    BadAnswer(String),
}

impl ChatError {
    /// Whether the same request may succeed later. Refused connections, timeouts, 408, 429 and
    /// 5xx are the server's passing state; a model answer that fails validation is sampling
    /// noise. A bad config, other 4xx (bad key, unknown model) or a server that does not speak
    /// the protocol will fail the same way every time.
    pub fn is_retryable(&self) -> bool {
        match self {
            ChatError::Connect { .. } | ChatError::Timeout { .. } | ChatError::BadAnswer(_) => true,
            ChatError::Status { status, .. } => {
                *status == 408 || *status == 429 || (500..600).contains(status)
            }
            ChatError::Config(_) | ChatError::BadResponse { .. } => false,
        }
    }
}

/// One chat message of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage {
            role: "system".into(),
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage {
            role: "user".into(),
            content: content.into(),
        }
    }
}

/// A blocking client for one configured model. Cheap to share across worker threads.
#[derive(Debug, Clone)]
pub struct ChatClient {
    agent: ureq::Agent,
    url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
}

impl ChatClient {
    pub fn new(cfg: &ChatConfig) -> Result<ChatClient, ChatError> {
        Self::with_timeout(cfg, DEFAULT_TIMEOUT)
    }

    pub fn with_timeout(cfg: &ChatConfig, timeout: Duration) -> Result<ChatClient, ChatError> {
        if cfg.provider != "openai" {
            return Err(ChatError::Config(format!(
                "provider {:?} is not supported (expected \"openai\")",
                cfg.provider
            )));
        }
        let base = cfg
            .api_base
            .as_deref()
            .ok_or_else(|| ChatError::Config("api_base is required".into()))?;
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ChatError::Config(format!(
                "api_base {base:?} must start with http:// or https://"
            )));
        }
        let model = cfg
            .model
            .clone()
            .ok_or_else(|| ChatError::Config("model is required".into()))?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
            // Status codes are mapped by us, with the body quoted.
            .http_status_as_error(false)
            .build()
            .into();
        Ok(ChatClient {
            agent,
            url: format!("{}/chat/completions", base.trim_end_matches('/')),
            model,
            api_key: cfg.api_key.clone().filter(|k| !k.is_empty()),
            timeout,
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Send `messages` and return the model's answer text.
    pub fn complete(&self, messages: &[ChatMessage]) -> Result<String, ChatError> {
        let body = serde_json::json!({
            "model": self.model,
            "messages": messages,
            "temperature": 0,
        });
        let mut req = self.agent.post(&self.url);
        if let Some(key) = &self.api_key {
            req = req.header("Authorization", &format!("Bearer {key}"));
        }
        let mut resp = req.send_json(&body).map_err(|e| self.transport_error(e))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| self.transport_error(e))?;
        if !(200..300).contains(&status) {
            return Err(ChatError::Status {
                url: self.url.clone(),
                status,
                body: quote(&text),
            });
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| self.bad_response(e))?;
        match v.pointer("/choices/0/message/content") {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(self.bad_response("choices[0].message.content is not a string")),
            None => {
                Err(self.bad_response(format!("no choices[0].message.content in {}", quote(&text))))
            }
        }
    }

    fn bad_response(&self, msg: impl ToString) -> ChatError {
        ChatError::BadResponse {
            url: self.url.clone(),
            msg: msg.to_string(),
        }
    }

    fn transport_error(&self, e: ureq::Error) -> ChatError {
        let url = self.url.clone();
        match e {
            ureq::Error::Timeout(_) => ChatError::Timeout {
                url,
                secs: self.timeout.as_secs(),
            },
            ureq::Error::Io(ref io) if io.kind() == std::io::ErrorKind::TimedOut => {
                ChatError::Timeout {
                    url,
                    secs: self.timeout.as_secs(),
                }
            }
            ureq::Error::BadUri(m) => ChatError::Config(format!("api_base: {m}")),
            ureq::Error::Tls(m) => ChatError::Config(format!("TLS: {m}")),
            ureq::Error::Protocol(_)
            | ureq::Error::RedirectFailed
            | ureq::Error::TooManyRedirects => ChatError::BadResponse {
                url,
                msg: e.to_string(),
            },
            other => ChatError::Connect {
                url,
                source: Box::new(other),
            },
        }
    }
}

fn quote(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_chars(&one_line, BODY_QUOTE_CHARS)
}

/// The JSON object inside a model answer: models like to wrap it in a ```json fence or a
/// sentence, so take the outermost `{ ... }`.
pub fn answer_json(answer: &str) -> Result<Value, ChatError> {
    let start = answer.find('{');
    let end = answer.rfind('}');
    let slice = match (start, end) {
        (Some(s), Some(e)) if s < e => &answer[s..=e],
        _ => {
            return Err(ChatError::BadAnswer(format!(
                "no JSON object in {:?}",
                quote(answer)
            )))
        }
    };
    serde_json::from_str(slice).map_err(|e| ChatError::BadAnswer(format!("invalid JSON: {e}")))
}

/// Per-message and total text sent to the model.
const PROMPT_MESSAGE_CHARS: usize = 2000;
const PROMPT_TOTAL_CHARS: usize = 60_000;

/// Messages as `role (time): content` lines, bounded per message and in total.
pub(crate) fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    let mut total = 0;
    for m in messages {
        let line = format!(
            "{}{}: {}\n",
            m.role,
            m.time
                .as_deref()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default(),
            truncate_chars(&m.content, PROMPT_MESSAGE_CHARS)
        );
        total += line.chars().count();
        if total > PROMPT_TOTAL_CHARS {
            out.push_str("[... later messages left out]\n");
            break;
        }
        out.push_str(&line);
    }
    out
}
