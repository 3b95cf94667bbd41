//! Semantic processing the job handlers call: directory summaries and session memories.
//!
//! Pure and I/O-free apart from the optional chat model: handlers read the inputs, call a
//! [`Summarizer`] or [`MemoryExtractor`], and write the results under their own locks. Both traits
//! are `Send + Sync` so one instance (an `Arc<dyn ...>` from [`summarizer_from_config`] /
//! [`extractor_from_config`]) serves every worker thread. Local, deterministic implementations
//! are the default; a configured `vlm` selects the OpenAI-compatible chat ones.

pub mod chat;
pub mod memory;
pub mod rules;
pub mod summary;

use std::sync::Arc;

use thiserror::Error;

use crate::config::ChatConfig;
use chat::{ChatClient, ChatError, ChatExtractor, ChatSummarizer};
use memory::{ExtractContext, Memory, Message};
use rules::RuleExtractor;
use summary::{DirInput, LocalSummarizer, Summary};

#[derive(Debug, Error)]
pub enum SemanticError {
    #[error(transparent)]
    Chat(#[from] ChatError),
}

impl SemanticError {
    /// Whether the job should be retried later rather than failed for good.
    pub fn is_retryable(&self) -> bool {
        match self {
            SemanticError::Chat(e) => e.is_retryable(),
        }
    }
}

/// Writes a directory's `.abstract.md` and `.overview.md` texts, within
/// [`summary::ABSTRACT_MAX_CHARS`] and [`summary::OVERVIEW_MAX_CHARS`].
pub trait Summarizer: Send + Sync {
    fn summarize(&self, input: &DirInput) -> Result<Summary, SemanticError>;
    /// The sidecars of a session archive at `uri`, from its messages.
    fn summarize_messages(&self, uri: &str, messages: &[Message])
        -> Result<Summary, SemanticError>;
    /// A short name for logs (`local`, `chat`).
    fn name(&self) -> &'static str;
}

/// Extracts memory files from a session archive's messages.
pub trait MemoryExtractor: Send + Sync {
    fn extract(
        &self,
        ctx: &ExtractContext,
        messages: &[Message],
    ) -> Result<Vec<Memory>, SemanticError>;
    fn name(&self) -> &'static str;
}

impl Summarizer for LocalSummarizer {
    fn summarize(&self, input: &DirInput) -> Result<Summary, SemanticError> {
        Ok(LocalSummarizer::summarize(self, input))
    }
    fn summarize_messages(
        &self,
        uri: &str,
        messages: &[Message],
    ) -> Result<Summary, SemanticError> {
        Ok(LocalSummarizer::summarize_messages(self, uri, messages))
    }
    fn name(&self) -> &'static str {
        "local"
    }
}

impl Summarizer for ChatSummarizer {
    fn summarize(&self, input: &DirInput) -> Result<Summary, SemanticError> {
        Ok(ChatSummarizer::summarize(self, input)?)
    }
    fn summarize_messages(
        &self,
        uri: &str,
        messages: &[Message],
    ) -> Result<Summary, SemanticError> {
        Ok(ChatSummarizer::summarize_messages(self, uri, messages)?)
    }
    fn name(&self) -> &'static str {
        "chat"
    }
}

impl MemoryExtractor for RuleExtractor {
    fn extract(
        &self,
        ctx: &ExtractContext,
        messages: &[Message],
    ) -> Result<Vec<Memory>, SemanticError> {
        Ok(RuleExtractor::extract(self, ctx, messages))
    }
    fn name(&self) -> &'static str {
        "local"
    }
}

impl MemoryExtractor for ChatExtractor {
    fn extract(
        &self,
        ctx: &ExtractContext,
        messages: &[Message],
    ) -> Result<Vec<Memory>, SemanticError> {
        Ok(ChatExtractor::extract(self, ctx, messages)?)
    }
    fn name(&self) -> &'static str {
        "chat"
    }
}

/// The chat summariser when `vlm` is configured, else the local one.
pub fn summarizer_from_config(vlm: Option<&ChatConfig>) -> Result<Arc<dyn Summarizer>, ChatError> {
    Ok(match vlm {
        Some(cfg) => Arc::new(ChatSummarizer::new(ChatClient::new(cfg)?)),
        None => Arc::new(LocalSummarizer),
    })
}

/// The chat extractor when `vlm` is configured, else the rule-based one.
pub fn extractor_from_config(
    vlm: Option<&ChatConfig>,
) -> Result<Arc<dyn MemoryExtractor>, ChatError> {
    Ok(match vlm {
        Some(cfg) => Arc::new(ChatExtractor::new(ChatClient::new(cfg)?)),
        None => Arc::new(RuleExtractor),
    })
}
