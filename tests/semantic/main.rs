//! Integration tests: summaries, memories, the chat model, and the embedders (BERT, HTTP,
//! config).
//!
//! One test binary per area, each former test file a module: the crate is linked once per
//! area instead of once per file (most of a cold build's time).

#[path = "../support/mod.rs"]
mod support;

mod embed_bert;
mod embed_config;
mod embed_http;
mod semantic_chat;
mod semantic_memory;
mod semantic_summary;
