//! Retrieval: `POST /api/v1/search/find`, `/search/search` (`mode: list|context`),
//! `/search/grep`, `/search/glob` — OpenViking 0.5.2's `routers/search.py`.
//!
//! - `find` and `search` (list mode) are the daemon's own engine ([`crate::ops::search::find`],
//!   the index, the queue that hides summaries being rewritten, the configured model) behind
//!   OpenViking's request and result shapes: hits split into `memories`, `resources` and
//!   `skills` by where they live (OpenViking's `classify_uri`), each with `context_type`,
//!   `uri` (a directory summary is named by its `.abstract.md` / `.overview.md`, as OpenViking
//!   names them), `level`, `score`, `abstract` and `tags`.
//! - What the caller may not see never comes back: a user key's default scope is its own
//!   `user/{id}` tree and `resources` (OpenViking's `default_target_directories`), an explicit
//!   `target_uri` passes [`Identity::path`], and every hit passes [`Identity::may_read`] (a
//!   summary's hit is its directory's summary: never that of `viking://user`, which holds
//!   every user's tree, for a caller who sees one).
//! - No LLM anywhere: `search` does no intent analysis (OpenViking skips it too when no
//!   planner is configured, and then ignores `session_id`), so it answers as `find` does and
//!   returns no `query_plan`; `mode: "context"` ([`context`]) budgets and renders the same
//!   hits without query expansion or a rewritten digest.
//! - `score` is from 0 to 1, as OpenViking's clients read it: a monotone map of the engine's
//!   ranking value ([`normalised`]: a cosine or the calibrated hybrid fusion as it is, a BM25
//!   as its share of the retrieval's best), which is kept as `raw_score`; `score_threshold`
//!   is applied to `score`.
//! - `grep` and `glob` walk the files (hidden names and other users' trees skipped), bounded
//!   by `node_limit`, `level_limit` and [`WALK_MAX_FILES`]. They follow no symlink, as `rg`
//!   without `-L`: a link made through the mount (to `/etc`, into another user's tree) is
//!   listed by glob as the name it is and never read or descended; every file they or
//!   `read_content` read is opened below the data root with no link on the way.

mod context;
mod filter;

use std::sync::Arc;

use axum::extract::State;
use serde::Deserialize;
use serde_json::{json, Value};

use super::fs::View;
use super::{post, Routes};
use crate::index::{Hit, Level, Mode, Scale};
use crate::ops::search::{self, PendingSummaries, Query};
use crate::server::auth::{Identity, Role};
use crate::server::extract::Body;
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};
use crate::sys::{DataRoot, Stat};
use crate::uri::VPath;
use filter::Accept;

pub(super) use context::estimate_tokens;

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/search/find", post(find))
        .route("/api/v1/search/search", post(search))
        .route("/api/v1/search/recall", post(recall))
        .route("/api/v1/search/grep", post(grep))
        .route("/api/v1/search/glob", post(glob))
}

/// OpenViking's `DEFAULT_LIMIT`.
const DEFAULT_LIMIT: usize = 10;
/// The most hits one request may ask for (the engine's own bound, as `vikingfs find`'s).
const MAX_LIMIT: usize = 10_000;
/// How much of a file `read_content` and the context tiers read.
const READ_MAX_BYTES: u64 = 1 << 20;
/// The most files one `grep` or `glob` walk visits.
pub const WALK_MAX_FILES: usize = 200_000;
/// How much of one file `grep` searches.
const GREP_MAX_FILE_BYTES: u64 = 16 << 20;

/// A string or a list of strings (`target_uri`, `context_type`).
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl Default for OneOrMany {
    fn default() -> Self {
        OneOrMany::One(String::new())
    }
}

impl OneOrMany {
    fn items(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// `FindRequest` (extra fields forbidden, as OpenViking's model says).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FindBody {
    #[serde(default)]
    query: String,
    #[serde(default)]
    image_url: Option<Value>,
    #[serde(default)]
    target_uri: OneOrMany,
    #[serde(default)]
    context_type: Option<OneOrMany>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    node_limit: Option<i64>,
    #[serde(default)]
    score_threshold: Option<f64>,
    #[serde(default)]
    filter: Option<Value>,
    #[serde(default)]
    include_provenance: bool,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    time_field: Option<String>,
    #[serde(default)]
    level: Option<Value>,
    #[serde(default)]
    read_content: bool,
    #[serde(default)]
    #[allow(dead_code)] // Accepted: telemetry is OpenViking's own tracing.
    telemetry: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)] // Accepted: no time decay is applied to scores here.
    events_time_decay_protection: Option<String>,
}

/// `SearchRequest`: `FindRequest`'s fields, the session, the search type and the context
/// mode's fields.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchBody {
    #[serde(default)]
    query: String,
    #[serde(default)]
    search_type: Option<String>,
    #[serde(default)]
    image_url: Option<Value>,
    #[serde(default)]
    target_uri: OneOrMany,
    #[serde(default)]
    context_type: Option<OneOrMany>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    node_limit: Option<i64>,
    #[serde(default)]
    score_threshold: Option<f64>,
    #[serde(default)]
    filter: Option<Value>,
    #[serde(default)]
    include_provenance: bool,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    time_field: Option<String>,
    #[serde(default)]
    level: Option<Value>,
    #[serde(default)]
    read_content: bool,
    #[serde(default)]
    #[allow(dead_code)]
    telemetry: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    events_time_decay_protection: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    // The context mode's fields (`CONTEXT_ONLY_FIELDS`).
    #[serde(default)]
    pub(super) query_expansion: Option<String>,
    #[serde(default)]
    pub(super) max_tokens: Option<i64>,
    #[serde(default)]
    pub(super) quotas: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub(super) purpose: Option<String>,
    #[serde(default)]
    pub(super) detail: Option<Value>,
    #[serde(default)]
    pub(super) dedup_turns: Option<i64>,
    #[serde(default)]
    pub(super) exclude_uris: Option<Vec<String>>,
    #[serde(default)]
    pub(super) peer_scope: Option<String>,
    #[serde(default)]
    pub(super) other_peer_penalty: Option<Value>,
    #[serde(default)]
    pub(super) rewrite: Option<Value>,
    #[serde(default)]
    pub(super) rewrite_max_bullets: Option<i64>,
}

impl SearchBody {
    /// The context-only fields this list-mode request sets, as OpenViking names them.
    fn context_fields_used(&self) -> Option<String> {
        let set = [
            ("detail", self.detail.is_some()),
            ("dedup_turns", self.dedup_turns.is_some()),
            ("exclude_uris", self.exclude_uris.is_some()),
            ("max_tokens", self.max_tokens.is_some()),
            ("other_peer_penalty", self.other_peer_penalty.is_some()),
            ("peer_scope", self.peer_scope.is_some()),
            ("purpose", self.purpose.is_some()),
            ("query_expansion", self.query_expansion.is_some()),
            ("quotas", self.quotas.is_some()),
            ("rewrite", self.rewrite.is_some()),
            ("rewrite_max_bullets", self.rewrite_max_bullets.is_some()),
        ];
        let used: Vec<&str> = set.iter().filter(|(_, s)| *s).map(|(n, _)| *n).collect();
        (!used.is_empty()).then(|| used.join(", "))
    }
}

/// One retrieval as both faces ask it.
pub(super) struct Ask {
    pub text: String,
    pub mode: Mode,
    /// Explicit targets (empty: the caller's default scope).
    pub targets: Vec<VPath>,
    pub limit: usize,
    pub accept: Accept,
}

fn limit_of(limit: Option<i64>, node_limit: Option<i64>) -> Result<usize, ApiError> {
    let n = node_limit.or(limit).unwrap_or(DEFAULT_LIMIT as i64);
    if n < 1 {
        let field = if node_limit.is_some() {
            "node_limit"
        } else {
            "limit"
        };
        return Err(ApiError::invalid(format!(
            "Invalid request body: {field}: Input should be greater than or equal to 1"
        ))
        .with_details(json!({"validation_errors": [{
            "type": "greater_than_equal", "loc": ["body", field],
            "msg": "Input should be greater than or equal to 1"}]})));
    }
    Ok((n as usize).min(MAX_LIMIT))
}

/// The targets a request names, each checked for the caller (`""`, `/` and `viking://`
/// name no target, as in OpenViking).
fn targets_of(who: &Identity, t: &OneOrMany) -> Result<Vec<VPath>, ApiError> {
    let mut out: Vec<VPath> = Vec::new();
    for u in t.items() {
        let u = u.trim();
        if u.is_empty() || u == "/" || u == "viking://" {
            continue;
        }
        let p = who.path(u)?;
        if p.is_root() {
            continue;
        }
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

fn no_images(image_url: &Option<Value>) -> Result<(), ApiError> {
    match image_url {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s.is_empty() => Ok(()),
        Some(Value::Array(a)) if a.is_empty() => Ok(()),
        Some(_) => Err(ApiError::new(
            Code::UnsupportedMode,
            "image_url needs an image embedding model; vikingfs searches text only",
        )),
    }
}

impl FindBody {
    fn ask(&self, who: &Identity) -> Result<Ask, ApiError> {
        no_images(&self.image_url)?;
        Ok(Ask {
            text: self.query.trim().to_string(),
            mode: Mode::Hybrid,
            targets: targets_of(who, &self.target_uri)?,
            limit: limit_of(self.limit, self.node_limit)?,
            accept: Accept::from_request(
                self.context_type.as_ref().map(OneOrMany::items),
                self.level.as_ref(),
                self.filter.as_ref(),
                self.tags.as_deref(),
                self.since.as_deref(),
                self.until.as_deref(),
                self.time_field.as_deref(),
                self.score_threshold,
            )?,
        })
    }
}

impl SearchBody {
    pub(super) fn ask(&self, who: &Identity) -> Result<Ask, ApiError> {
        no_images(&self.image_url)?;
        let mode = match self.search_type.as_deref() {
            None | Some("semantic") => Mode::Hybrid,
            Some("keywords") => {
                if self.query.trim().is_empty() {
                    return Err(ApiError::invalid(
                        "query must not be empty when search_type='keywords'",
                    ));
                }
                Mode::Lexical
            }
            Some(other) => {
                return Err(ApiError::invalid(format!(
                    "search_type must be 'semantic' or 'keywords', got {other:?}"
                )))
            }
        };
        Ok(Ask {
            text: self.query.trim().to_string(),
            mode,
            targets: targets_of(who, &self.target_uri)?,
            limit: limit_of(self.limit, self.node_limit)?,
            accept: Accept::from_request(
                self.context_type.as_ref().map(OneOrMany::items),
                self.level.as_ref(),
                self.filter.as_ref(),
                self.tags.as_deref(),
                self.since.as_deref(),
                self.until.as_deref(),
                self.time_field.as_deref(),
                self.score_threshold,
            )?,
        })
    }
}

/// OpenViking's `_validate_query` (`service/search_service.py`): a search needs a query or an
/// image; `find` takes a filter instead (its result is then the filter's), `search` does not.
fn check_query(
    query: &str,
    image_url: &Option<Value>,
    filter: &Option<Value>,
) -> Result<(), ApiError> {
    let image = image_url.as_ref().is_some_and(|v| {
        !v.is_null() && v.as_str() != Some("") && v.as_array().is_none_or(|a| !a.is_empty())
    });
    let filter = filter
        .as_ref()
        .is_some_and(|f| f.as_object().is_some_and(|o| !o.is_empty()));
    if query.trim().is_empty() && !image && !filter {
        return Err(ApiError::invalid(
            "Search query or image_url must not be empty unless a filter is provided.",
        ));
    }
    Ok(())
}

async fn find(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<FindBody>) -> ApiResult {
    // After the request's own checks, as OpenViking's service runs it after the model's.
    let ask = b.ask(&who)?;
    check_query(&b.query, &b.image_url, &b.filter)?;
    let (provenance, read_content) = (b.include_provenance, b.read_content);
    blocking(move || {
        let hits = retrieve(&api, &who, &ask)?;
        record_retrieval(&hits);
        ok(result_json(&api, &ask, &hits, provenance, read_content))
    })
    .await
}

async fn search(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<SearchBody>,
) -> ApiResult {
    match b.mode.as_deref() {
        None | Some("list") => {
            if let Some(used) = b.context_fields_used() {
                return Err(ApiError::invalid(format!(
                    "{used} require mode='context'; set mode='context' or drop these fields"
                )));
            }
            let ask = b.ask(&who)?;
            check_query(&b.query, &b.image_url, &None)?;
            if let Some(sid) = &b.session_id {
                // Intent analysis (OpenViking's only use of the session here) needs a chat
                // model; like OpenViking without one, the session does not change the search.
                tracing::debug!(session = %sid, "search: session_id noted, no intent analysis");
            }
            let (provenance, read_content) = (b.include_provenance, b.read_content);
            blocking(move || {
                let hits = retrieve(&api, &who, &ask)?;
                record_retrieval(&hits);
                ok(result_json(&api, &ask, &hits, provenance, read_content))
            })
            .await
        }
        Some("context") => {
            if b.read_content {
                return Err(ApiError::invalid(
                    "read_content is only supported in mode='list'",
                ));
            }
            if !b.target_uri.items().iter().all(|u| u.is_empty()) {
                return Err(ApiError::invalid(
                    "target_uri is not supported in mode='context'",
                ));
            }
            let ask = b.ask(&who)?;
            blocking(move || context::assemble(&api, &who, &ask, &b)).await
        }
        Some(other) => Err(ApiError::invalid(format!(
            "mode must be 'list' or 'context', got {other:?}"
        ))),
    }
}

/// `RecallRequest`'s fields (OpenViking refuses any other).
const RECALL_FIELDS: [&str; 18] = [
    "query",
    "quotas",
    "max_chars",
    "min_score",
    "peer_scope",
    "other_peer_penalty",
    "render",
    "telemetry",
    "session_id",
    "query_expansion",
    "max_tokens",
    "purpose",
    "detail",
    "score_threshold",
    "dedup_turns",
    "exclude_uris",
    "rewrite",
    "rewrite_max_bullets",
];

/// `POST /api/v1/search/recall`: OpenViking's deprecated preset over the context mode
/// (`retrieve/context_assembler/recall_preset.py`'s `fold_recall_request`): its v1 fields
/// folded onto `search` with `mode: "context"` — `max_chars` as tokens (4 characters each,
/// 64 at least), `min_score` as `score_threshold` (0.1 by default), `render: "compact"` as
/// `detail: "abstract"`, the v1 quotas under the caller's, purpose `coding` — and answered
/// by the same assembly, marked deprecated in its stats.
async fn recall(State(api): State<Arc<Api>>, who: Identity, Body(v): Body<Value>) -> ApiResult {
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::invalid("a recall request is a JSON object"))?;
    if let Some(k) = obj.keys().find(|k| !RECALL_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!(
            "{k}: Extra inputs are not permitted"
        )));
    }
    let given = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let mut aliases = Vec::new();
    for k in ["max_chars", "min_score", "render"] {
        if obj.contains_key(k) {
            aliases.push(k);
        }
    }
    let max_tokens = match (given("max_tokens"), given("max_chars")) {
        (Some(t), _) => t.clone(),
        (None, Some(c)) => {
            let chars = c
                .as_i64()
                .ok_or_else(|| ApiError::invalid("max_chars must be an integer"))?;
            json!(((chars as f64 / 4.0).round() as i64).max(64))
        }
        (None, None) => json!(context::DEFAULT_MAX_TOKENS),
    };
    let threshold = given("score_threshold")
        .or_else(|| given("min_score"))
        .cloned()
        .unwrap_or(json!(0.1));
    let detail = match (given("detail"), obj.get("render")) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(Value::String(r))) if r == "compact" => Some(json!("abstract")),
        _ => None,
    };
    let defaults = json!({"events": 10, "entities": 10, "preferences": 3, "experiences": 0});
    let quotas = match obj.get("quotas") {
        None => defaults,
        Some(Value::Object(m)) => {
            let mut q = defaults;
            for (k, v) in m {
                q[k] = v.clone();
            }
            q
        }
        Some(other) => other.clone(),
    };
    let mut body = json!({
        "query": obj.get("query").cloned().unwrap_or(json!("")),
        "mode": "context",
        "max_tokens": max_tokens,
        "score_threshold": threshold,
        "quotas": quotas,
        "purpose": given("purpose").cloned().unwrap_or(json!("coding")),
    });
    if let Some(d) = detail {
        body["detail"] = d;
    }
    for k in [
        "session_id",
        "query_expansion",
        "dedup_turns",
        "exclude_uris",
        "peer_scope",
        "other_peer_penalty",
        "rewrite",
        "rewrite_max_bullets",
        "telemetry",
    ] {
        if let Some(v) = given(k) {
            body[k] = v.clone();
        }
    }
    let b: SearchBody =
        serde_json::from_value(body).map_err(|e| ApiError::invalid(e.to_string()))?;
    let render = obj.get("render") != Some(&Value::Bool(false));
    let ask = b.ask(&who)?;
    let mut out = blocking(move || context::assemble(&api, &who, &ask, &b)).await?;
    let r = &mut out.0;
    r["stats"]["deprecated"] = json!({
        "endpoint": "/api/v1/search/recall",
        "successor": "/api/v1/search/search",
        "successor_body": {"mode": "context"},
        "aliases_used": aliases,
    });
    if !render {
        // v1's `render: false`: the entries only.
        r["rendered"] = json!("");
    }
    Ok(out)
}

/// OpenViking's kinds of context, by where a path lives (`core/namespace.py`'s
/// `classify_uri`; `agent/memories`, an older OpenViking layout, counts as memory).
pub(super) fn context_type(p: &VPath) -> &'static str {
    let c: Vec<&str> = p.components().take(5).collect();
    match c.as_slice() {
        ["agent", "skills", ..] => "skill",
        ["agent", "memories", ..] => "memory",
        ["user", _, "memories", ..] => "memory",
        ["user", _, "skills", ..] => "skill",
        ["user", _, "resources", ..] => "resource",
        ["user", _, "peers", _, "memories"] => "memory",
        _ => "resource",
    }
}

/// The URI OpenViking gives a hit: a directory's summary is its sidecar file.
pub(super) fn hit_uri(h: &Hit) -> String {
    let sidecar = match h.level {
        Level::Abstract => crate::uri::ABSTRACT_FILE,
        Level::Overview => crate::uri::OVERVIEW_FILE,
        Level::Content => return h.uri.uri(),
    };
    h.uri
        .join(sidecar)
        .map(|p| p.uri())
        .unwrap_or_else(|_| h.uri.uri())
}

/// Is `p` in the caller's default scope? (OpenViking's `default_target_directories`: root
/// sees everything; anyone else its own user tree and the shared resources, and the agent's
/// skills when skills are asked for.)
fn in_default_scope(who: &Identity, p: &VPath, skills: bool) -> bool {
    if who.role == Role::Root {
        return true;
    }
    let mut c = p.components();
    match (c.next(), c.next()) {
        (Some("resources"), _) => true,
        (Some("user"), Some(u)) => u == who.user,
        (Some("agent"), Some("skills")) => skills,
        _ => false,
    }
}

/// The best `ask.limit` hits the caller may see, best first: one engine query per target
/// (the default scope is one query filtered), each asked again deeper until enough of its
/// hits pass the filters or the engine has no more.
/// What `find` and `search` answered since the daemon started (`GET /api/v1/observer/retrieval`,
/// OpenViking's `RetrievalStatsCollector`): counts and normalised scores, nothing of a query.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetrievalStats {
    pub queries: u64,
    pub results: u64,
    pub zero_result: u64,
    pub score_sum: f64,
    pub min_score: f64,
    pub max_score: f64,
}

static RETRIEVAL: parking_lot::Mutex<RetrievalStats> = parking_lot::Mutex::new(RetrievalStats {
    queries: 0,
    results: 0,
    zero_result: 0,
    score_sum: 0.0,
    min_score: 0.0,
    max_score: 0.0,
});

/// The retrieval counts so far.
pub fn retrieval_stats() -> RetrievalStats {
    *RETRIEVAL.lock()
}

/// Count one answered query and its hits.
fn record_retrieval(hits: &[Ranked]) {
    let mut r = RETRIEVAL.lock();
    r.queries += 1;
    if hits.is_empty() {
        r.zero_result += 1;
    }
    for h in hits {
        let s = f64::from(h.score);
        r.min_score = if r.results == 0 {
            s
        } else {
            r.min_score.min(s)
        };
        r.max_score = r.max_score.max(s);
        r.score_sum += s;
        r.results += 1;
    }
}

/// A hit's ranking value as OpenViking's clients read `score`: from 0 to 1, higher better
/// (OpenViking's is a cosine). A monotone map of the engine's values within one retrieval, so
/// the order is the engine's: a cosine or a fused share is already 0..1 (kept, clamped); a
/// BM25 becomes its share of the retrieval's best (`best`), as the hybrid fusion already
/// measures BM25. BM25 has no scale of its own (it grows with the query's words and their
/// rarity, and is near 0 for a word most files hold), so a fixed squashing would give one
/// query's best match 0.9 and another's 0.000001.
pub fn normalised(raw: f32, scale: Scale, best: f32) -> f32 {
    if !raw.is_finite() {
        return 0.0;
    }
    match scale {
        Scale::Unit => raw.clamp(0.0, 1.0),
        Scale::Bm25 if best > 0.0 && best.is_finite() => (raw / best).clamp(0.0, 1.0),
        Scale::Bm25 => 0.0,
    }
}

/// A hit whose `score` is [`normalised`], with the engine's own value beside it
/// (`raw_score` in the answers).
#[derive(Debug, Clone)]
pub(super) struct Ranked {
    pub hit: Hit,
    pub raw: f32,
}

impl Ranked {
    fn of(mut hit: Hit, scale: Scale, best: f32) -> Ranked {
        let raw = hit.score;
        hit.score = normalised(raw, scale, best);
        Ranked { hit, raw }
    }
}

impl std::ops::Deref for Ranked {
    type Target = Hit;
    fn deref(&self) -> &Hit {
        &self.hit
    }
}

pub(super) fn retrieve(api: &Api, who: &Identity, ask: &Ask) -> Result<Vec<Ranked>, ApiError> {
    if ask.text.is_empty() || ask.accept.matches_nothing() {
        return Ok(Vec::new());
    }
    let ws = api.ops.workspace();
    let queue: &dyn PendingSummaries = api.ops.queue();
    let embedder = api.ops.embedder().map(|e| e.as_ref());
    let scopes: Vec<Option<&VPath>> = if ask.targets.is_empty() {
        vec![None]
    } else {
        ask.targets.iter().map(Some).collect()
    };
    let skills = ask.accept.wants("skill");
    let mut all: Vec<Hit> = Vec::new();
    let mut scale = Scale::default();
    for under in scopes {
        let keep = |h: &Hit| {
            // A summary's hit is its directory's: a shared parent's quotes other users.
            who.may_read(&h.uri, h.level)
                && (under.is_some() || in_default_scope(who, &h.uri, skills))
                && ask.accept.accepts(ws, h)
        };
        let mut want = ask.limit;
        loop {
            let found = search::find(
                ws,
                api.ops.index(),
                Some(queue),
                embedder,
                &Query {
                    text: &ask.text,
                    mode: ask.mode,
                    limit: want,
                    under,
                },
            )
            .map_err(|e| ApiError::from_ops(&under.map(VPath::uri).unwrap_or_default(), e))?;
            let raw = found.hits.len();
            scale = found.scale;
            let kept: Vec<Hit> = found.hits.into_iter().filter(|h| keep(h)).collect();
            if kept.len() >= ask.limit || raw < want || want >= MAX_LIMIT {
                all.extend(kept);
                break;
            }
            want = (want * 4).min(MAX_LIMIT);
        }
    }
    all.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.uri.cmp(&b.uri))
            .then(a.level.cmp(&b.level))
    });
    all.dedup_by(|a, b| a.uri == b.uri && a.level == b.level);
    // Scored against the best the caller may see (the first after the sort); the threshold
    // applies to the score answered.
    let best = all.first().map_or(0.0, |h| h.score);
    let threshold = ask.accept.threshold();
    Ok(all
        .into_iter()
        .map(|h| Ranked::of(h, scale, best))
        .filter(|h| threshold.is_none_or(|t| h.score >= t))
        .take(ask.limit)
        .collect())
}

/// Why a hit was returned, in words (OpenViking's `match_reason`).
fn match_reason(h: &Hit) -> String {
    let e = &h.evidence;
    let mut parts = Vec::new();
    if let (Some(r), Some(s)) = (e.lexical_rank, e.bm25) {
        parts.push(format!("lexical rank {r} (bm25 {s:.3})"));
    }
    if let (Some(r), Some(c)) = (e.semantic_rank, e.cosine) {
        parts.push(format!("semantic rank {r} (cosine {c:.3})"));
    }
    parts.join("; ")
}

/// A hit as OpenViking's `MatchedContext` dict (and the engine's value as `raw_score`).
fn hit_json(h: &Ranked) -> Value {
    json!({
        "context_type": context_type(&h.uri),
        "uri": hit_uri(h),
        "level": h.level as u8,
        "score": finite(h.score),
        "raw_score": finite(h.raw),
        "abstract": h.snippet,
        "tags": [],
    })
}

fn finite(x: f32) -> f64 {
    if x.is_finite() {
        f64::from(x)
    } else {
        0.0
    }
}

/// The text of the file behind a hit (a summary's sidecar), when it is text: read below the
/// data root without following a symlink on the way or at the end (`DataRoot::open_nofollow`),
/// and only a regular file (a FIFO made through the mount must not block the request).
pub(super) fn read_text(api: &Api, p: &VPath, max: u64) -> Option<String> {
    let root = DataRoot::open(&api.ops.workspace().data_root()).ok()?;
    read_text_in(&root, p, max)
}

/// [`read_text`] below a data root already open.
fn read_text_in(root: &DataRoot, p: &VPath, max: u64) -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    root.open_regular_beneath(p.as_bytes())
        .ok()?
        .0
        .take(max)
        .read_to_end(&mut buf)
        .ok()?;
    let head = buf[..buf.len().min(crate::content::SNIFF_BYTES)].to_vec();
    match crate::content::sniff(head) {
        crate::content::Content::Text(_) => Some(String::from_utf8_lossy(&buf).into_owned()),
        crate::content::Content::Binary(_) => None,
    }
}

/// `FindResult.to_dict()`.
fn result_json(
    api: &Api,
    ask: &Ask,
    hits: &[Ranked],
    provenance: bool,
    read_content: bool,
) -> Value {
    let mut buckets: [Vec<Value>; 3] = Default::default();
    for h in hits {
        let mut v = hit_json(h);
        if read_content {
            let p = match h.level {
                Level::Content => Some(h.uri.clone()),
                _ => VPath::parse_uri(&hit_uri(h), "").ok(),
            };
            if let Some(t) = p.and_then(|p| read_text(api, &p, READ_MAX_BYTES)) {
                v["content"] = Value::String(t);
            }
        }
        let i = match context_type(&h.uri) {
            "memory" => 0,
            "resource" => 1,
            _ => 2,
        };
        buckets[i].push(v);
    }
    let [memories, resources, skills] = buckets;
    let mut out = json!({
        "memories": memories,
        "resources": resources,
        "skills": skills,
        "total": hits.len(),
    });
    if provenance {
        let searched: Vec<String> = if ask.targets.is_empty() {
            vec!["viking://".to_string()]
        } else {
            ask.targets.iter().map(VPath::uri).collect()
        };
        out["provenance"] = json!([{
            "query": ask.text,
            "searched_directories": searched,
            "matched_contexts": hits.iter().map(|h| json!({
                "uri": hit_uri(h),
                "tier": format!("L{}", h.level as u8),
                "context_type": context_type(&h.uri),
                "score": finite(h.score),
                "raw_score": finite(h.raw),
                "match_reason": match_reason(h),
            })).collect::<Vec<_>>(),
            "thinking_trace": {"events": [], "statistics": {}},
        }]);
    }
    out
}

/// `GrepRequest`.
#[derive(Deserialize, Debug)]
struct GrepBody {
    uri: String,
    #[serde(default)]
    exclude_uri: Option<String>,
    pattern: String,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default = "default_node_limit")]
    node_limit: Option<i64>,
    #[serde(default = "default_level_limit")]
    level_limit: i64,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    include_tags: bool,
    #[serde(default)]
    before_context: i64,
    #[serde(default)]
    after_context: i64,
}

fn default_node_limit() -> Option<i64> {
    Some(256)
}

fn default_level_limit() -> i64 {
    10
}

/// A positive `node_limit` (OpenViking: none, 0 or less is unbounded).
fn node_limit(n: Option<i64>) -> Option<usize> {
    n.filter(|n| *n > 0).map(|n| n as usize)
}

async fn grep(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<GrepBody>) -> ApiResult {
    if b.before_context < 0 || b.after_context < 0 {
        return Err(ApiError::invalid(
            "before_context and after_context must be greater than or equal to 0",
        ));
    }
    let root = who.path(&b.uri)?;
    let exclude = match b.exclude_uri.as_deref().filter(|u| !u.is_empty()) {
        Some(u) => Some(who.path(u)?),
        None => None,
    };
    let re = regex::RegexBuilder::new(&b.pattern)
        .case_insensitive(b.case_insensitive)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| ApiError::invalid(format!("Invalid grep pattern: {e}")))?;
    if b.tags.as_ref().is_some_and(|t| !t.is_empty()) {
        // No record carries tags here: a tag filter matches no file.
        return ok(json!({"matches": [], "count": 0, "match_count": 0, "files_scanned": 0}));
    }
    let limit = node_limit(b.node_limit);
    let (before, after) = (b.before_context as usize, b.after_context as usize);
    let depth = b.level_limit.max(0) as usize;
    let include_tags = b.include_tags;
    blocking(move || {
        let view = View::open(&api, &who)?;
        let data = DataRoot::open(&api.ops.workspace().data_root())
            .map_err(|e| ApiError::internal(format!("open the data root: {e}")))?;
        let files = walk(
            &view,
            &who,
            &root,
            exclude.as_ref(),
            depth,
            WalkWants::Files,
        )?;
        let mut matches = Vec::new();
        let mut scanned = 0usize;
        'files: for (p, _) in files {
            let Some(text) = read_text_in(&data, &p, GREP_MAX_FILE_BYTES) else {
                continue;
            };
            scanned += 1;
            let lines: Vec<&str> = text.split('\n').collect();
            for (i, line) in lines.iter().enumerate() {
                if !re.is_match(line) {
                    continue;
                }
                let mut m = json!({"line": i + 1, "uri": p.uri(), "content": line});
                if before > 0 {
                    m["before_context"] = (i.saturating_sub(before)..i)
                        .map(|j| json!({"line": j + 1, "content": lines[j]}))
                        .collect();
                }
                if after > 0 {
                    m["after_context"] = (i + 1..(i + 1 + after).min(lines.len()))
                        .map(|j| json!({"line": j + 1, "content": lines[j]}))
                        .collect();
                }
                if include_tags {
                    m["tags"] = json!([]);
                }
                matches.push(m);
                if limit.is_some_and(|l| matches.len() >= l) {
                    break 'files;
                }
            }
        }
        let n = matches.len();
        ok(json!({"matches": matches, "count": n, "match_count": n, "files_scanned": scanned}))
    })
    .await
}

/// `GlobRequest`.
#[derive(Deserialize, Debug)]
struct GlobBody {
    pattern: String,
    #[serde(default = "default_glob_uri")]
    uri: String,
    #[serde(default = "default_node_limit")]
    node_limit: Option<i64>,
    #[serde(default)]
    extra_fields: Option<Vec<String>>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    include_tags: bool,
}

fn default_glob_uri() -> String {
    "viking://".into()
}

async fn glob(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<GlobBody>) -> ApiResult {
    if b.pattern.trim().is_empty() {
        return Err(ApiError::invalid("pattern must not be empty"));
    }
    let root = who.path(&b.uri)?;
    let matcher = globset::GlobBuilder::new(b.pattern.trim_start_matches('/'))
        .literal_separator(true)
        .build()
        .map_err(|e| ApiError::invalid(format!("Invalid glob pattern: {e}")))?
        .compile_matcher();
    if b.tags.as_ref().is_some_and(|t| !t.is_empty()) {
        return ok(json!({"matches": [], "count": 0}));
    }
    let limit = node_limit(b.node_limit);
    let entries = b.extra_fields.is_some() || b.include_tags;
    blocking(move || {
        let view = View::open(&api, &who)?;
        let found = walk(&view, &who, &root, None, usize::MAX, WalkWants::Both)?;
        let base = root.as_str().len();
        let mut matches = Vec::new();
        for (p, st) in found {
            let rel = p.as_str()[base..].trim_start_matches('/');
            if !matcher.is_match(rel) {
                continue;
            }
            if entries {
                let (secs, nanos) = st.mtime();
                let mtime = jiff::Timestamp::new(secs, nanos as i32)
                    .ok()
                    .map(|t| t.to_string());
                matches.push(json!({
                    "name": p.name(),
                    "uri": p.uri(),
                    "size": st.st_size,
                    "isDir": st.is_dir(),
                    "modTime": mtime,
                    "tags": [],
                }));
            } else {
                matches.push(Value::String(p.uri()));
            }
            if limit.is_some_and(|l| matches.len() >= l) {
                break;
            }
        }
        let n = matches.len();
        ok(json!({"matches": matches, "count": n}))
    })
    .await
}

#[derive(Clone, Copy, PartialEq)]
enum WalkWants {
    /// Regular files only (what grep reads).
    Files,
    /// Every entry: directories, files, and symlinks as the names they are (what glob lists).
    Both,
}

/// The visible entries under `root` (itself when it is no directory), depth-first in name
/// order, at most `depth` directories down and [`WALK_MAX_FILES`] entries: hidden names
/// (summaries, metadata, lock files) are skipped, as OpenViking's listing skips them, and so
/// are trees the caller may not see and `exclude`.
///
/// Nothing is followed, as `rg` without `-L`: every directory is opened below the data root
/// with no symlink on the way (`View`), a symlink is never descended (nor read: grep takes
/// regular files only), and `root` itself being one is no directory. A link made through the
/// mount to `/etc`, or into another user's tree, hands the caller nothing it points at.
fn walk(
    view: &View,
    who: &Identity,
    root: &VPath,
    exclude: Option<&VPath>,
    depth: usize,
    wants: WalkWants,
) -> Result<Vec<(VPath, Stat)>, ApiError> {
    let under_excluded = |p: &VPath| {
        exclude.is_some_and(|x| {
            p == x
                || (p.as_str().starts_with(x.as_str())
                    && p.as_str().as_bytes().get(x.as_str().len()) == Some(&b'/'))
        })
    };
    let st = view
        .stat(root)?
        .ok_or_else(|| ApiError::not_found(&root.uri()))?;
    let mut out = Vec::new();
    let keep = |st: &Stat| wants == WalkWants::Both || st.is_file();
    if under_excluded(root) {
        return Ok(out);
    }
    if !st.is_dir() {
        if keep(&st) {
            out.push((root.clone(), st));
        }
        return Ok(out);
    }
    let mut stack: Vec<(VPath, usize)> = vec![(root.clone(), 0)];
    while let Some((dir, d)) = stack.pop() {
        // Gone meanwhile, or no longer a directory: nothing to list.
        let Ok(kids) = view.children(&dir, who, false) else {
            continue;
        };
        let mut subdirs = Vec::new();
        for n in kids {
            if n.name.starts_with('.') || under_excluded(&n.path) {
                continue;
            }
            if n.is_dir() {
                if wants == WalkWants::Both {
                    out.push((n.path.clone(), n.st));
                }
                if d < depth {
                    subdirs.push(n.path);
                }
            } else if keep(&n.st) {
                out.push((n.path, n.st));
            }
            if out.len() >= WALK_MAX_FILES {
                return Ok(out);
            }
        }
        // Reversed onto the stack so the first name is walked first.
        for p in subdirs.into_iter().rev() {
            stack.push((p, d + 1));
        }
    }
    // Depth-first order with files before subdirectories reads worse than a sorted list.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VPath {
        VPath::from_rel(s).unwrap()
    }

    #[test]
    fn kinds_of_context_follow_openvikings_namespace() {
        assert_eq!(context_type(&p("user/bob/memories/prefs.md")), "memory");
        assert_eq!(context_type(&p("user/bob/peers/carol/memories")), "memory");
        assert_eq!(context_type(&p("user/bob/skills/x/SKILL.md")), "skill");
        assert_eq!(context_type(&p("agent/skills/x")), "skill");
        assert_eq!(context_type(&p("user/bob/resources/a.md")), "resource");
        assert_eq!(
            context_type(&p("user/bob/sessions/s1/messages.jsonl")),
            "resource"
        );
        assert_eq!(context_type(&p("resources/docs/memories/a.md")), "resource");
    }

    #[test]
    fn a_summary_hit_is_named_by_its_sidecar() {
        let h = |level| Hit {
            uri: p("resources/docs"),
            level,
            score: 1.0,
            snippet: String::new(),
            source_version: String::new(),
            evidence: Default::default(),
        };
        assert_eq!(
            hit_uri(&h(Level::Abstract)),
            "viking://resources/docs/.abstract.md"
        );
        assert_eq!(
            hit_uri(&h(Level::Overview)),
            "viking://resources/docs/.overview.md"
        );
        assert_eq!(hit_uri(&h(Level::Content)), "viking://resources/docs");
    }
}
