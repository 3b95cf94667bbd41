//! `POST /api/v1/search/search` with `mode: "context"`: OpenViking 0.5.2's context assembly
//! (`retrieve/context_assembler/`) over the same hits `find` returns, without a language
//! model: candidates are gathered (flat, or per category when `quotas` / `purpose` ask for
//! buckets), each is placed at its category's default detail tier (`uri` < `abstract` <
//! `overview` < `full`) within a per-entry cap, the leftover budget deepens the best ones,
//! and the entries are rendered as OpenViking's `<memory ...>` fragments.
//!
//! What differs, and why: `query_expansion` and `rewrite` need a chat model, so the planned
//! query is the query itself (`query_expansion: "off"`) and no digest is written
//! (`rewrite: "off"`); `dedup_turns` needs OpenViking's per-session recall ledger, which
//! vikingfs does not keep (`dedup.status: "unsupported"` when asked); the buckets of a quota
//! are cut from one ranked retrieval instead of one retrieval per category's directories;
//! a code file's overview is its heading outline like any document (no AST skeleton).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::{hit_uri, read_text, retrieve, Ask, Ranked, SearchBody, READ_MAX_BYTES};
use crate::index::Level;
use crate::server::auth::Identity;
use crate::server::reply::{ok, ApiError, ApiResult};
use crate::server::Api;
use crate::uri::VPath;

pub(super) const DEFAULT_MAX_TOKENS: i64 = 1600;
const MAX_EXCLUDE_URIS: usize = 200;
const MEMORY_CATEGORIES: [&str; 4] = ["events", "entities", "preferences", "experiences"];
const OTHER_MEMORY: &str = "memories";
const CATEGORY_KEYS: [&str; 6] = [
    "events",
    "entities",
    "preferences",
    "experiences",
    "resources",
    "skills",
];
const REPORTED_KEYS: [&str; 7] = [
    "events",
    "entities",
    "preferences",
    "experiences",
    "resources",
    "skills",
    "memories",
];
const OVERVIEW_HEADING_LIMIT: usize = 24;
const OVERVIEW_PARAGRAPH_CHARS: usize = 400;
const SEPARATOR_TOKENS: i64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Tier {
    Uri,
    Abstract,
    Overview,
    Full,
}

impl Tier {
    fn name(self) -> &'static str {
        match self {
            Tier::Uri => "uri",
            Tier::Abstract => "abstract",
            Tier::Overview => "overview",
            Tier::Full => "full",
        }
    }

    fn parse(s: &str) -> Option<Tier> {
        match s {
            "abstract" => Some(Tier::Abstract),
            "overview" => Some(Tier::Overview),
            "full" => Some(Tier::Full),
            _ => None,
        }
    }
}

/// OpenViking's conservative token estimate (`utils/token_estimation.py`): a quarter token
/// per ASCII character, CJK and other wide characters counted heavier.
pub fn estimate_tokens(text: &str) -> i64 {
    if text.is_empty() {
        return 0;
    }
    if text.is_ascii() {
        return (text.len() as i64 + 3) / 4;
    }
    let mut units: i64 = 0;
    for ch in text.chars() {
        let c = ch as u32;
        units += if (0x4E00..=0x9FFF).contains(&c) {
            6
        } else if c < 0x1100 {
            1
        } else if c <= 0x11FF
            || (0x3000..=0x30FF).contains(&c)
            || (0x3130..=0x318F).contains(&c)
            || (0x31F0..=0x31FF).contains(&c)
            || (0x3400..=0x4DBF).contains(&c)
            || (0xAC00..=0xD7AF).contains(&c)
            || (0xF900..=0xFAFF).contains(&c)
            || (0xFF00..=0xFFEF).contains(&c)
            || (0x20000..=0x2EBEF).contains(&c)
        {
            6
        } else if c > 0xFFFF {
            8
        } else {
            1
        };
    }
    (units + 3) / 4
}

#[derive(Debug, Clone)]
struct Candidate {
    base_uri: String,
    /// The file or directory behind the entry.
    path: VPath,
    category: String,
    score: f64,
    ranked_score: f64,
    abstract_text: String,
    origin: &'static str,
    is_directory: bool,
}

#[derive(Debug, Clone)]
struct Entry {
    uri: String,
    category: String,
    score: f64,
    detail: Tier,
    text: String,
    origin: &'static str,
    tokens: i64,
}

fn attr(v: &str) -> String {
    v.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

/// A body cannot forge a sibling `<memory>` element (OpenViking's `_body`).
fn body(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let lower = text.to_ascii_lowercase();
    let mut i = 0;
    while i < text.len() {
        let rest = &lower[i..];
        let hit = if rest.starts_with("</memory") {
            Some(2)
        } else if rest.starts_with("<memory") {
            Some(1)
        } else {
            None
        };
        match hit {
            Some(n) => {
                let next = lower.as_bytes().get(i + n + 6);
                if next.is_some_and(|b| b.is_ascii_whitespace() || *b == b'/' || *b == b'>') {
                    out.push('<');
                    out.push('\\');
                    out.push_str(&text[i + 1..i + n + 6]);
                    i += n + 6;
                    continue;
                }
                out.push('<');
                i += 1;
            }
            None => {
                let ch = text[i..].chars().next().unwrap_or(' ');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    out
}

fn render_entry(e: &Entry) -> String {
    let head = format!(
        "<memory uri=\"{}\" type=\"{}\" score=\"{:.2}\" detail=\"{}\"",
        attr(&e.uri),
        attr(&e.category),
        e.score,
        e.detail.name()
    );
    if e.text.is_empty() {
        format!("{head} />")
    } else {
        format!("{head}>\n{}\n</memory>", body(&e.text))
    }
}

fn make_entry(c: &Candidate, tier: Tier, text: String) -> Entry {
    let mut e = Entry {
        uri: c.base_uri.clone(),
        category: c.category.clone(),
        score: c.score,
        detail: tier,
        text,
        origin: c.origin,
        tokens: 0,
    };
    e.tokens = estimate_tokens(&render_entry(&e));
    e
}

fn full_body_abstract(category: &str) -> bool {
    MEMORY_CATEGORIES.contains(&category) || category == OTHER_MEMORY
}

fn default_tier(category: &str) -> Tier {
    if category == "events" {
        Tier::Overview
    } else {
        Tier::Abstract
    }
}

fn abstract_substitute(c: &Candidate) -> Tier {
    if full_body_abstract(&c.category) {
        Tier::Overview
    } else {
        Tier::Uri
    }
}

fn start_tier(c: &Candidate, pin: Option<Tier>) -> Tier {
    if c.is_directory {
        return Tier::Overview;
    }
    let t = pin.unwrap_or_else(|| default_tier(&c.category));
    if t == Tier::Abstract && c.abstract_text.trim().is_empty() {
        return abstract_substitute(c);
    }
    t
}

fn tier_window(c: &Candidate, pin: Option<Tier>) -> (Tier, Tier) {
    let start = start_tier(c, pin);
    if pin.is_some() || c.is_directory {
        return (start, start);
    }
    let ceiling = if c.category == "events" {
        Tier::Full
    } else {
        start
    };
    (start, ceiling.max(start))
}

fn tiers_down_from(c: &Candidate, t: Tier) -> Vec<Tier> {
    let all = [Tier::Uri, Tier::Abstract, Tier::Overview, Tier::Full];
    let mut order: Vec<Tier> = all.iter().copied().filter(|x| *x <= t).rev().collect();
    if t == Tier::Abstract && abstract_substitute(c) == Tier::Overview {
        order.insert(1, Tier::Overview);
    }
    order
}

/// A memory file's leading `# Summary` section (or legacy `Summary:` line).
fn summary_section(content: &str) -> Option<String> {
    let lines: Vec<&str> = content.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start_matches('#');
        if l.starts_with('#') && l.len() - t.len() <= 3 && t.trim().eq_ignore_ascii_case("summary")
        {
            let mut out = Vec::new();
            for l in &lines[i + 1..] {
                let h = l.len() - l.trim_start_matches('#').len();
                if (1..=3).contains(&h) && l[h..].starts_with([' ', '\t']) {
                    break;
                }
                out.push(*l);
            }
            let s = out.join("\n").trim().to_string();
            return (!s.is_empty()).then_some(s);
        }
    }
    let first = content.trim_start();
    if first.len() >= 8 && first[..8].eq_ignore_ascii_case("summary:") {
        let rest = &first[8..];
        let end = rest.find("ChatLog:").unwrap_or(rest.len());
        let s = crate::index::text::one_line(&rest[..end], usize::MAX);
        return (!s.is_empty()).then_some(s);
    }
    None
}

/// A document's heading outline and first paragraph (OpenViking's `doc_overview`).
fn doc_overview(content: &str) -> String {
    let mut heads = Vec::new();
    for l in content.lines() {
        let h = l.len() - l.trim_start_matches('#').len();
        if (1..=3).contains(&h) && l[h..].starts_with([' ', '\t']) {
            let title = l[h..].trim();
            if !title.is_empty() {
                heads.push(format!("{}{} {title}", "  ".repeat(h - 1), "#".repeat(h)));
                if heads.len() >= OVERVIEW_HEADING_LIMIT {
                    break;
                }
            }
        }
    }
    let mut paragraph = String::new();
    for block in content.split("\n\n") {
        let text: Vec<&str> = block
            .trim()
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        let text = text.join("\n").trim().to_string();
        if !text.is_empty() {
            paragraph = text.chars().take(OVERVIEW_PARAGRAPH_CHARS).collect();
            break;
        }
    }
    [heads.join("\n"), paragraph]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
        .trim()
        .to_string()
}

fn tier_text(c: &Candidate, tier: Tier, content: Option<&str>) -> Option<String> {
    match tier {
        Tier::Uri => Some(String::new()),
        Tier::Abstract => Some(c.abstract_text.trim().to_string()).filter(|t| !t.is_empty()),
        Tier::Overview => {
            let content = content.unwrap_or("");
            let t = if c.is_directory {
                content.trim().to_string()
            } else if c.base_uri.contains("/memories/") {
                summary_section(content).unwrap_or_else(|| doc_overview(content))
            } else {
                doc_overview(content)
            };
            Some(t).filter(|t| !t.is_empty())
        }
        Tier::Full => {
            if c.is_directory {
                return None;
            }
            Some(content.unwrap_or("").trim().to_string()).filter(|t| !t.is_empty())
        }
    }
}

/// The reported category of a hit (OpenViking's `category_for`).
fn category_for(uri: &str) -> String {
    if let Some((_, rest)) = uri.split_once("/memories/") {
        let seg = rest.split('/').next().unwrap_or("");
        return if MEMORY_CATEGORIES.contains(&seg) {
            seg.to_string()
        } else {
            OTHER_MEMORY.to_string()
        };
    }
    if uri.contains("/skills/") {
        return "skills".into();
    }
    if uri.contains("/resources/") || uri.starts_with("viking://resources") {
        return "resources".into();
    }
    OTHER_MEMORY.into()
}

fn origin_for(p: &VPath, who: &Identity) -> &'static str {
    let c: Vec<&str> = p.components().take(4).collect();
    match c.as_slice() {
        ["user", u, "peers", peer, ..] if *u == who.user => {
            if who.peer.as_deref() == Some(*peer) {
                "actor_peer"
            } else {
                "other_peer"
            }
        }
        ["user", u, "peers"] if *u == who.user => "other_peer",
        _ => "self",
    }
}

fn default_penalties() -> BTreeMap<String, f64> {
    [
        ("events", 0.1),
        ("entities", 0.1),
        ("preferences", 0.02),
        ("experiences", 0.02),
        ("resources", 0.02),
        ("skills", 0.02),
        ("memories", 0.1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn penalties(v: Option<&Value>) -> BTreeMap<String, f64> {
    let mut out = default_penalties();
    let clamp = |x: f64| x.clamp(0.0, 1.0);
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, p) in m {
                if let (Some(slot), Some(p)) = (out.get_mut(k), p.as_f64()) {
                    *slot = clamp(p);
                }
            }
        }
        Some(other) => {
            let p = clamp(other.as_f64().unwrap_or(0.0));
            for slot in out.values_mut() {
                *slot = p;
            }
        }
    }
    out
}

fn presets(purpose: &str) -> Option<Vec<(&'static str, usize)>> {
    match purpose {
        "coding" => Some(vec![
            ("events", 1),
            ("entities", 2),
            ("preferences", 1),
            ("experiences", 1),
            ("resources", 3),
            ("skills", 2),
        ]),
        "chat" => Some(vec![
            ("events", 3),
            ("entities", 3),
            ("preferences", 1),
            ("experiences", 1),
            ("resources", 1),
            ("skills", 1),
        ]),
        _ => None,
    }
}

/// The detail pins: one tier for all, or one per category.
#[derive(Default)]
struct Pins {
    scalar: Option<Tier>,
    by_category: BTreeMap<String, Tier>,
}

impl Pins {
    fn for_category(&self, c: &str) -> Option<Tier> {
        self.by_category.get(c).copied().or(self.scalar)
    }

    fn stats(&self) -> Value {
        if !self.by_category.is_empty() {
            Value::Object(
                self.by_category
                    .iter()
                    .map(|(k, t)| (k.clone(), Value::String(t.name().into())))
                    .collect(),
            )
        } else {
            self.scalar
                .map(|t| Value::String(t.name().into()))
                .unwrap_or(Value::Null)
        }
    }
}

fn bounded(name: &str, v: Option<i64>, default: i64, lo: i64, hi: i64) -> Result<i64, ApiError> {
    let n = v.unwrap_or(default);
    if n < lo || n > hi {
        return Err(ApiError::invalid(format!(
            "Invalid request body: {name}: must be between {lo} and {hi}, got {n}"
        )));
    }
    Ok(n)
}

fn unknown_keys<'a>(
    label: &str,
    keys: impl Iterator<Item = &'a String>,
    allowed: &[&str],
) -> Result<(), ApiError> {
    let mut bad: Vec<&str> = keys
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    bad.sort_unstable();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "unknown {label} keys: {}; allowed: {}",
            bad.join(", "),
            allowed.join(", ")
        )))
    }
}

/// Assemble the context block for one request.
pub fn assemble(api: &Api, who: &Identity, ask: &Ask, b: &SearchBody) -> ApiResult {
    let max_tokens = bounded("max_tokens", b.max_tokens, DEFAULT_MAX_TOKENS, 64, 32000)?;
    let dedup_turns = bounded("dedup_turns", b.dedup_turns, 0, 0, 100)?;
    bounded("rewrite_max_bullets", b.rewrite_max_bullets, 6, 1, 20)?;
    match b.query_expansion.as_deref() {
        None | Some("off") | Some("auto") => {}
        Some(o) => {
            return Err(ApiError::invalid(format!(
                "query_expansion must be 'off' or 'auto', got {o:?}"
            )))
        }
    }
    let peer_scope = match b.peer_scope.as_deref() {
        None | Some("all") => "all",
        Some("actor") => "actor",
        Some(o) => {
            return Err(ApiError::invalid(format!(
                "peer_scope must be 'actor' or 'all', got {o:?}"
            )))
        }
    };
    if let Some(q) = &b.quotas {
        unknown_keys("quota", q.keys(), &CATEGORY_KEYS)?;
    }
    let mut pins = Pins::default();
    match &b.detail {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "auto" => {}
        Some(Value::String(s)) => {
            pins.scalar = Some(Tier::parse(s).ok_or_else(|| {
                ApiError::invalid("detail must be 'auto', 'abstract', 'overview' or 'full'")
            })?)
        }
        Some(Value::Object(m)) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            unknown_keys("detail", keys.iter(), &REPORTED_KEYS)?;
            for (k, v) in m {
                if let Some(t) = v.as_str().and_then(Tier::parse) {
                    pins.by_category.insert(k.clone(), t);
                }
            }
        }
        Some(_) => return Err(ApiError::invalid("detail must be a tier or a map of tiers")),
    }
    let excluded_uris = b.exclude_uris.clone().unwrap_or_default();
    if excluded_uris.len() > MAX_EXCLUDE_URIS {
        return Err(ApiError::invalid(format!(
            "exclude_uris holds at most {MAX_EXCLUDE_URIS} URIs"
        )));
    }
    let mut excluded: Vec<VPath> = Vec::new();
    for u in &excluded_uris {
        if !u.trim().is_empty() {
            excluded.push(who.path(u.trim())?);
        }
    }
    let quotas: Option<Vec<(String, usize)>> = match (&b.quotas, b.purpose.as_deref()) {
        (Some(q), _) => Some(
            q.iter()
                .map(|(k, v)| (k.clone(), v.as_i64().unwrap_or(0).max(0) as usize))
                .collect(),
        ),
        (None, Some(p)) => Some(
            presets(p)
                .ok_or_else(|| ApiError::invalid("purpose must be 'chat' or 'coding'"))?
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        (None, None) => None,
    };
    let penalties = penalties(b.other_peer_penalty.as_ref());

    // Gather: one ranked retrieval, wide enough for the excluded and the buckets.
    let width = match &quotas {
        Some(q) => q.iter().map(|(_, n)| *n).sum::<usize>().max(1) * 4,
        None => ask.limit + (excluded.len()).min(ask.limit * 2),
    };
    let pool_ask = Ask {
        text: ask.text.clone(),
        mode: ask.mode,
        targets: Vec::new(),
        limit: width.clamp(1, 10_000),
        accept: ask.accept.clone(),
    };
    let hits: Vec<Ranked> = retrieve(api, who, &pool_ask)?;
    let searched = hits.len();
    let mut excluded_count = 0usize;
    let is_under = |p: &VPath, x: &VPath| {
        p == x
            || (p.as_str().starts_with(x.as_str())
                && p.as_str().as_bytes().get(x.as_str().len()) == Some(&b'/'))
    };
    let mut candidates: Vec<Candidate> = Vec::new();
    for h in &hits {
        if h.uri.name() == "profile.md" {
            continue;
        }
        if excluded.iter().any(|x| is_under(&h.uri, x)) {
            excluded_count += 1;
            continue;
        }
        let base_uri = h.uri.uri();
        let category = category_for(&hit_uri(h));
        let origin = origin_for(&h.uri, who);
        if peer_scope == "actor" && origin == "other_peer" {
            continue;
        }
        let score = f64::from(h.score);
        let penalty = if origin == "other_peer" {
            penalties.get(&category).copied().unwrap_or(0.0)
        } else {
            0.0
        };
        candidates.push(Candidate {
            base_uri,
            path: h.uri.clone(),
            category,
            score,
            ranked_score: score - penalty,
            abstract_text: h.snippet.clone(),
            origin,
            is_directory: h.level != Level::Content,
        });
    }
    // One entry per node: a directory's abstract and overview hits are one candidate.
    let mut seen = HashSet::new();
    candidates.retain(|c| seen.insert(c.base_uri.clone()));
    let rank = |a: &Candidate, b: &Candidate| {
        let o = |c: &Candidate| match c.origin {
            "actor_peer" => 0,
            "self" => 1,
            _ => 2,
        };
        b.ranked_score
            .total_cmp(&a.ranked_score)
            .then_with(|| o(a).cmp(&o(b)))
    };
    candidates.sort_by(rank);
    let searched_stats;
    match &quotas {
        None => {
            candidates.truncate(ask.limit);
            searched_stats = json!({"all": searched});
        }
        Some(q) => {
            let total: usize = q.iter().map(|(_, n)| *n).sum();
            let mut by_bucket: HashMap<&str, Vec<Candidate>> = HashMap::new();
            for c in &candidates {
                let bucket = if MEMORY_CATEGORIES.contains(&c.category.as_str())
                    || c.category == "resources"
                    || c.category == "skills"
                {
                    c.category.as_str()
                } else {
                    OTHER_MEMORY
                };
                by_bucket.entry(bucket).or_default().push(c.clone());
            }
            let mut first = Vec::new();
            let mut spare = Vec::new();
            let mut stats = Map::new();
            for (bucket, quota) in q.iter().filter(|(_, n)| *n > 0) {
                let found = by_bucket.remove(bucket.as_str()).unwrap_or_default();
                stats.insert(bucket.clone(), json!(found.len()));
                let cut = found.len().min(*quota);
                first.extend_from_slice(&found[..cut]);
                spare.extend_from_slice(&found[cut..]);
            }
            spare.sort_by(rank);
            for c in spare {
                if first.len() >= total {
                    break;
                }
                first.push(c);
            }
            first.sort_by(rank);
            candidates = first;
            searched_stats = Value::Object(stats);
        }
    }
    let mut origins = Map::new();
    for o in ["actor_peer", "self", "other_peer"] {
        origins.insert(
            o.into(),
            json!(candidates.iter().filter(|c| c.origin == o).count()),
        );
    }

    // Read only the bodies a reachable tier needs.
    let cap = (max_tokens / (candidates.len().max(1) as i64) * 2).max(1);
    let mut contents: HashMap<String, Option<String>> = HashMap::new();
    for c in &candidates {
        let (_, ceiling) = tier_window(c, pins.for_category(&c.category));
        let oversized = abstract_substitute(c) == Tier::Overview
            && !c.abstract_text.trim().is_empty()
            && make_entry(c, Tier::Abstract, c.abstract_text.trim().to_string()).tokens > cap;
        if ceiling >= Tier::Overview || oversized {
            let path = if c.is_directory {
                c.path.join(crate::uri::OVERVIEW_FILE).ok()
            } else {
                Some(c.path.clone())
            };
            let text = path.and_then(|p| read_text(api, &p, READ_MAX_BYTES));
            contents.insert(c.base_uri.clone(), text);
        }
    }
    let content = |c: &Candidate| contents.get(&c.base_uri).and_then(|t| t.as_deref());

    // Breadth first: every candidate at its start tier (or below) within the cap.
    struct Slot {
        c: Candidate,
        entry: Entry,
        ceiling: Tier,
    }
    let mut slots: Vec<Slot> = Vec::new();
    let (mut used, mut dropped, mut deduped) = (0i64, 0usize, 0usize);
    let mut bodies = HashSet::new();
    for c in candidates {
        let (start, ceiling) = tier_window(&c, pins.for_category(&c.category));
        let mut placed = None;
        for t in tiers_down_from(&c, start) {
            let Some(text) = tier_text(&c, t, content(&c)) else {
                continue;
            };
            let e = make_entry(&c, t, text);
            let cost = e.tokens
                + if slots.is_empty() {
                    0
                } else {
                    SEPARATOR_TOKENS
                };
            if t != Tier::Uri && e.tokens > cap {
                continue;
            }
            if used + cost > max_tokens {
                continue;
            }
            placed = Some((e, cost));
            break;
        }
        let Some((entry, cost)) = placed else {
            dropped += 1;
            continue;
        };
        let key = if entry.text.is_empty() {
            c.base_uri.clone()
        } else {
            entry.text.clone()
        };
        if !bodies.insert(key) {
            deduped += 1;
            continue;
        }
        used += cost;
        slots.push(Slot { c, entry, ceiling });
    }
    let floor_tokens = used;
    // Then depth: leftover budget raises the best entries toward their ceilings.
    let mut upgrade = |target: Tier, respect_cap: bool, slots: &mut Vec<Slot>| -> usize {
        let mut n = 0;
        for s in slots.iter_mut() {
            if s.entry.detail >= target || target > s.ceiling {
                continue;
            }
            let Some(text) = tier_text(&s.c, target, content(&s.c)) else {
                continue;
            };
            let e = make_entry(&s.c, target, text);
            if respect_cap && e.tokens > cap {
                continue;
            }
            let delta = e.tokens - s.entry.tokens;
            if used + delta > max_tokens {
                continue;
            }
            s.entry = e;
            used += delta;
            n += 1;
        }
        n
    };
    let overview_upgrades = upgrade(Tier::Overview, true, &mut slots);
    let full_upgrades = upgrade(Tier::Full, true, &mut slots);
    let spare_upgrades = upgrade(Tier::Full, false, &mut slots);

    let entries: Vec<Entry> = slots.into_iter().map(|s| s.entry).collect();
    let mut tier_counts = Map::new();
    for e in &entries {
        let n = tier_counts
            .get(e.detail.name())
            .and_then(Value::as_u64)
            .unwrap_or(0);
        tier_counts.insert(e.detail.name().into(), json!(n + 1));
    }
    let rendered = entries
        .iter()
        .map(render_entry)
        .collect::<Vec<_>>()
        .join("\n");
    let dedup_status = if dedup_turns > 0 {
        "unsupported"
    } else {
        "off"
    };
    ok(json!({
        "entries": entries.iter().map(|e| json!({
            "uri": e.uri,
            "category": e.category,
            "score": e.score,
            "detail": e.detail.name(),
            "text": e.text,
            "origin": e.origin,
        })).collect::<Vec<_>>(),
        "rendered": rendered,
        "digest": "",
        "stats": {
            "searched": searched_stats,
            "candidates": entries.len() + dropped + deduped,
            "excluded": excluded_count,
            "origins": origins,
            "peer_scope": peer_scope,
            "quotas": quotas.as_ref().map(|q| q.iter().map(|(k, n)| (k.clone(), json!(n)))
                .collect::<Map<_, _>>()),
            "max_tokens": max_tokens,
            "used_tokens": used,
            "per_entry_cap": cap,
            "returned": entries.len(),
            "dropped": dropped,
            "deduped": deduped,
            "detail": pins.stats(),
            "tier_counts": tier_counts,
            "fill": {
                "floor_tokens": floor_tokens,
                "overview_upgrades": overview_upgrades,
                "full_upgrades": full_upgrades,
                "spare_upgrades": spare_upgrades,
            },
            "purpose": b.purpose,
            "query_expansion": "off",
            "planned_queries": [ask.text],
            "score_threshold": b.score_threshold,
            "other_peer_penalties": penalties,
            "rewrite": "off",
            "rewrite_usage": Value::Null,
            "dedup": {"turns": dedup_turns, "status": dedup_status, "cooled": 0,
                      "turn": Value::Null},
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_estimated_as_openviking_does() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("I prefer dark mode in editors"), 8);
        assert_eq!(estimate_tokens("Noted."), 2);
        assert_eq!(estimate_tokens("中文"), 3);
    }

    #[test]
    fn bodies_cannot_forge_an_entry() {
        assert_eq!(body("a <memory uri=x> b"), "a <\\memory uri=x> b");
        assert_eq!(body("</MEMORY>"), "<\\/MEMORY>");
        assert_eq!(body("<memoryless>"), "<memoryless>");
    }

    #[test]
    fn overviews_and_categories() {
        let doc = "# Title\n\nFirst paragraph\nstill.\n\n## Part\n\ntext";
        assert_eq!(
            doc_overview(doc),
            "# Title\n  ## Part\n\nFirst paragraph\nstill."
        );
        assert_eq!(
            summary_section("# Summary\nshort one\n# Details\nlong").as_deref(),
            Some("short one")
        );
        assert_eq!(
            category_for("viking://user/u/memories/events/e.md"),
            "events"
        );
        assert_eq!(category_for("viking://user/u/memories/x.md"), "memories");
        assert_eq!(category_for("viking://resources/docs/a.md"), "resources");
        assert_eq!(category_for("viking://agent/skills/s/SKILL.md"), "skills");
    }
}
