//! Directory and archive summaries written by the chat model.

use serde::Deserialize;

use super::{answer_json, transcript, ChatClient, ChatError, ChatMessage};
use crate::semantic::memory::Message;
use crate::semantic::summary::{
    truncate_chars, DirInput, Summary, ABSTRACT_MAX_CHARS, OVERVIEW_MAX_CHARS,
};

/// Directory summaries written by the chat model, cut to the same limits as the local ones.
#[derive(Debug, Clone)]
pub struct ChatSummarizer {
    client: ChatClient,
}

#[derive(Deserialize)]
struct SummaryAnswer {
    #[serde(rename = "abstract")]
    abstract_md: String,
    overview: String,
}

/// Per-child text sent to the model: enough for a gist, bounded so a large directory fits.
const PROMPT_CHILD_CHARS: usize = 600;
const PROMPT_MAX_CHILDREN: usize = 200;

impl ChatSummarizer {
    pub fn new(client: ChatClient) -> Self {
        ChatSummarizer { client }
    }

    pub fn prompt(input: &DirInput) -> Vec<ChatMessage> {
        let system = format!(
            "You summarise one directory of a knowledge base. Answer with one JSON object \
             {{\"abstract\": string, \"overview\": string}} and nothing else. \"abstract\": one or \
             two sentences, at most {ABSTRACT_MAX_CHARS} characters, saying what the directory \
             holds. \"overview\": markdown, at most {OVERVIEW_MAX_CHARS} characters: a heading, \
             what the directory holds, then a list with one line per child giving its gist."
        );
        let mut user = format!("Directory: {}\n", input.uri);
        let children = input.content_children();
        for c in children.iter().take(PROMPT_MAX_CHILDREN) {
            let kind = if c.is_dir { "directory" } else { "file" };
            let text = truncate_chars(&c.text, PROMPT_CHILD_CHARS);
            user.push_str(&format!("\n--- {kind} {}\n{text}\n", c.name));
        }
        if children.len() > PROMPT_MAX_CHILDREN {
            user.push_str(&format!(
                "\n... and {} more children\n",
                children.len() - PROMPT_MAX_CHILDREN
            ));
        }
        vec![ChatMessage::system(system), ChatMessage::user(user)]
    }

    pub fn summarize(&self, input: &DirInput) -> Result<Summary, ChatError> {
        self.ask(&Self::prompt(input))
    }

    /// The prompt for an archived conversation (a session archive's sidecars).
    pub fn conversation_prompt(uri: &str, messages: &[Message]) -> Vec<ChatMessage> {
        let system = format!(
            "You summarise one archived conversation between a user and an assistant. Answer \
             with one JSON object {{\"abstract\": string, \"overview\": string}} and nothing \
             else. \"abstract\": one or two sentences, at most {ABSTRACT_MAX_CHARS} characters: \
             the topic, the user's intent and the outcome. \"overview\": markdown, at most \
             {OVERVIEW_MAX_CHARS} characters: a heading, the user's request, key points and \
             decisions, pending tasks."
        );
        let user = format!("Archive: {uri}\n\n{}", transcript(messages));
        vec![ChatMessage::system(system), ChatMessage::user(user)]
    }

    pub fn summarize_messages(
        &self,
        uri: &str,
        messages: &[Message],
    ) -> Result<Summary, ChatError> {
        self.ask(&Self::conversation_prompt(uri, messages))
    }

    fn ask(&self, prompt: &[ChatMessage]) -> Result<Summary, ChatError> {
        let answer = self.client.complete(prompt)?;
        let v = answer_json(&answer)?;
        let a: SummaryAnswer = serde_json::from_value(v)
            .map_err(|e| ChatError::BadAnswer(format!("summary answer: {e}")))?;
        if a.abstract_md.trim().is_empty() || a.overview.trim().is_empty() {
            return Err(ChatError::BadAnswer("empty abstract or overview".into()));
        }
        let mut overview = a.overview.trim().to_string();
        overview.push('\n');
        Ok(Summary {
            abstract_md: a.abstract_md,
            overview_md: overview,
        }
        .enforce_limits())
    }
}
