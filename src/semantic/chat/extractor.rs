//! Memories extracted by the chat model.

use serde::Deserialize;

use super::{answer_json, transcript, ChatClient, ChatError, ChatMessage};
use crate::semantic::memory::{
    entity_path, event_path, group_facts, preference_path, Date, ExtractContext, Fact, Memory,
    MemoryCategory, Message, PROFILE_PATH,
};
use crate::semantic::summary::truncate_chars;

/// Memories extracted by the chat model. The model only names facts; the paths are built here
/// with the same layout functions as the rule extractor, so a model can never write outside
/// `memories/` or invent a layout.
#[derive(Debug, Clone)]
pub struct ChatExtractor {
    client: ChatClient,
}

#[derive(Deserialize)]
struct MemoryAnswer {
    memories: Vec<MemoryItem>,
}

#[derive(Deserialize)]
struct MemoryItem {
    category: String,
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    entity_type: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    date: Option<String>,
    fact: String,
}

/// The longest fact line kept.
const FACT_MAX_CHARS: usize = 500;

impl ChatExtractor {
    pub fn new(client: ChatClient) -> Self {
        ChatExtractor { client }
    }

    pub fn prompt(ctx: &ExtractContext, messages: &[Message]) -> Vec<ChatMessage> {
        let date = ctx
            .archive_date
            .map_or_else(|| "unknown".to_string(), |d| d.to_string());
        let system = format!(
            "You extract long-term memories about the user from a conversation. Answer with one \
             JSON object {{\"memories\": [...]}} and nothing else. Each item: \"category\" one of \
             \"preferences\" (needs \"topic\"), \"entities\" (needs \"name\", optional \
             \"entity_type\" such as people or organizations), \"events\" (needs \"date\" as \
             YYYY-MM-DD and \"name\"), \"profile\"; and \"fact\": one sentence. Only facts the \
             user stated; none from questions or hypotheticals. Today is {date}. An empty list \
             is a valid answer."
        );
        vec![
            ChatMessage::system(system),
            ChatMessage::user(transcript(messages)),
        ]
    }

    pub fn extract(
        &self,
        ctx: &ExtractContext,
        messages: &[Message],
    ) -> Result<Vec<Memory>, ChatError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let answer = self.client.complete(&Self::prompt(ctx, messages))?;
        let parsed: MemoryAnswer = serde_json::from_value(answer_json(&answer)?)
            .map_err(|e| ChatError::BadAnswer(format!("memory answer: {e}")))?;
        let facts = parsed
            .memories
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                item_fact(ctx, item)
                    .map_err(|e| ChatError::BadAnswer(format!("memory answer item {i}: {e}")))
            })
            .collect::<Result<Vec<Fact>, ChatError>>()?;
        Ok(group_facts(facts))
    }
}

/// Validate one model item into a fact. A whole answer with one bad item is rejected (and is
/// retryable): half-applying a model answer would make reruns write different memories.
fn item_fact(ctx: &ExtractContext, item: MemoryItem) -> Result<Fact, String> {
    let fact = truncate_chars(
        &item.fact.split_whitespace().collect::<Vec<_>>().join(" "),
        FACT_MAX_CHARS,
    );
    if fact.is_empty() {
        return Err("empty fact".into());
    }
    let need = |v: Option<String>, key: &str| -> Result<String, String> {
        v.filter(|s| !s.trim().is_empty())
            .ok_or_else(|| format!("{key:?} is required for {:?}", item.category))
    };
    let (category, rel_path, title) = match item.category.as_str() {
        "preferences" => {
            let topic = need(item.topic.clone(), "topic")?;
            (
                MemoryCategory::Preferences,
                preference_path(&ctx.user, &topic),
                format!("Preference: {topic}"),
            )
        }
        "entities" => {
            let name = need(item.name.clone(), "name")?;
            let kind = item.entity_type.clone().unwrap_or_else(|| "general".into());
            (MemoryCategory::Entities, entity_path(&kind, &name), name)
        }
        "events" => {
            let date = need(item.date.clone(), "date")?;
            let date = Date::parse_iso(date.trim())
                .ok_or_else(|| format!("date {date:?} is not YYYY-MM-DD"))?;
            let name = need(item.name.clone(), "name")?;
            let title = format!("{date}: {name}");
            (MemoryCategory::Events, event_path(date, &name), title)
        }
        "profile" => (
            MemoryCategory::Profile,
            PROFILE_PATH.to_string(),
            "Profile".to_string(),
        ),
        other => return Err(format!("unknown category {other:?}")),
    };
    Ok(Fact {
        category,
        rel_path,
        title,
        text: fact,
    })
}
