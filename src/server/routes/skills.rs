//! The skill routes of OpenViking 0.5.2: `POST /api/v1/skills` (its `resources.py`
//! `add_skill`), and `routers/skills.py`'s `GET /api/v1/skills` (list), `GET` and `DELETE
//! /api/v1/skills/{name}`, `PUT /api/v1/skills/{name}` (update) and `POST
//! /api/v1/skills/validate` (the Agent Skills format rules: `validate_skill_format`).
//! `POST /api/v1/skills/find` is not served here yet.
//!
//! - A skill is a directory of files with its definition `SKILL.md` (YAML frontmatter with
//!   `name` and `description`, then the Markdown body) at the top, installed where OpenViking
//!   installs it: `viking://user/{id}/skills/{name}` (the caller's own, the default) or
//!   `viking://agent/skills/{name}` (`target_uri="viking://agent/skills"`: shared with the
//!   account). `{name}` is the frontmatter's, checked as OpenViking checks it (ASCII letters,
//!   digits, `_` and `-`, at most 64).
//! - Installed through the locked add (`ops::Locked::add_skill`): staged, journalled, under the
//!   skill directory's TREE lock, indexed and summarised like any resource. Installing under
//!   a name that is there replaces the files the new version has and keeps the others, as
//!   OpenViking's does; an update (`PUT`) is the same add, of the skill of that name only.
//! - Files are stored as they are: `SKILL.md` byte for byte as given (OpenViking rewrites its
//!   frontmatter; here it is the user's file), every other file of an uploaded package beside
//!   it. A skill given as a JSON object (`name`, `description`, `content`, `tags`,
//!   `allowed_tools`) is written as the `SKILL.md` OpenViking's `SkillLoader.to_skill_md` makes.
//! - The content comes inline (`data`: the SKILL.md text, or an object) or uploaded
//!   (`temp_file_id`: a SKILL.md, or a zip of a skill directory or of a directory of skills,
//!   unpacked safely as add-resource unpacks). A Git URL answers `UNIMPLEMENTED` (vikingfs
//!   fetches nothing), a host path `PERMISSION_DENIED` (as OpenViking refuses one over HTTP).
//! - The access rule is the one every route applies: the target is a URI the caller may
//!   name (`Identity::path`), and a listing shows what the caller may see.
//! - The frontmatter is read for its top-level fields (scalars, quoted strings, inline
//!   `[a, b]` lists and `- item` lists): what OpenViking's routes use of it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::fs::{not_found, wait_drained, View};
use super::resources::upload;
use super::{get, post, Routes};
use crate::server::auth::Identity;
use crate::server::extract::{Body, Params};
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};
use crate::uri::VPath;

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/skills", post(add).get(list))
        .route("/api/v1/skills/validate", post(validate))
        .route(
            "/api/v1/skills/{skill_name}",
            get(show).put(update).delete(remove),
        )
}

/// The definition file of a skill.
pub const SKILL_MD: &str = "SKILL.md";
const AGENT_ROOT: &str = "viking://agent/skills";
const MAX_NAME: usize = 64;

// ---- SKILL.md --------------------------------------------------------------------------

/// A parsed SKILL.md: its frontmatter's top-level fields and its body.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillDoc {
    pub meta: Map<String, Value>,
    pub body: String,
}

impl SkillDoc {
    pub fn name(&self) -> Option<&str> {
        self.meta.get("name").and_then(Value::as_str)
    }

    pub fn description(&self) -> &str {
        self.meta
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    fn list(&self, key: &str) -> Vec<Value> {
        match self.meta.get(key) {
            Some(Value::Array(a)) => a.clone(),
            // `allowed-tools: Read Grep` is a space-separated list (SkillLoader).
            Some(Value::String(s)) if !s.trim().is_empty() => s
                .split_whitespace()
                .map(|t| Value::String(t.to_string()))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn tags(&self) -> Vec<Value> {
        self.list("tags")
    }

    pub fn allowed_tools(&self) -> Vec<Value> {
        let t = self.list("allowed-tools");
        if t.is_empty() {
            self.list("allowed_tools")
        } else {
            t
        }
    }
}

/// Why a SKILL.md is refused (OpenViking's `SkillLoader.parse` messages).
fn skill_invalid(msg: impl Into<String>) -> ApiError {
    ApiError::invalid(msg)
}

/// A YAML scalar as a JSON value: quotes removed, `true`/`false`/numbers/null typed.
fn scalar(raw: &str) -> Value {
    let s = raw.trim();
    if s.len() >= 2
        && ((s.starts_with('"') && s.ends_with('"')) || (s.starts_with('\'') && s.ends_with('\'')))
    {
        let inner = &s[1..s.len() - 1];
        return Value::String(if s.starts_with('"') {
            inner.replace("\\\"", "\"").replace("\\n", "\n")
        } else {
            inner.replace("''", "'")
        });
    }
    match s {
        "" | "~" | "null" => Value::Null,
        "true" | "True" => Value::Bool(true),
        "false" | "False" => Value::Bool(false),
        _ => s
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(s.to_string())),
    }
}

/// The frontmatter and body of a SKILL.md, with its `name` and `description` (OpenViking's
/// `SkillLoader.parse`; module doc: top-level fields only).
pub fn parse_skill_md(text: &str) -> Result<SkillDoc, ApiError> {
    let doc = parse_frontmatter(text)?;
    if !doc.meta.contains_key("name") {
        return Err(skill_invalid("Skill must have 'name' field"));
    }
    if !doc.meta.contains_key("description") {
        return Err(skill_invalid("Skill must have 'description' field"));
    }
    Ok(doc)
}

/// The frontmatter and body of a SKILL.md, whatever fields it has.
fn parse_frontmatter(text: &str) -> Result<SkillDoc, ApiError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(|| skill_invalid("SKILL.md must have YAML frontmatter"))?;
    let (front, body) = match rest.find("\n---") {
        Some(i) => {
            let after = &rest[i + 4..];
            let body = after.split_once('\n').map_or("", |(_, b)| b);
            (&rest[..i], body)
        }
        None => return Err(skill_invalid("SKILL.md must have YAML frontmatter")),
    };
    let mut meta = Map::new();
    let mut open_list: Option<String> = None;
    for line in front.lines() {
        let l = line.trim_end();
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        if let (Some(key), Some(item)) = (&open_list, l.trim_start().strip_prefix("- ")) {
            if line.starts_with(' ') || line.starts_with('-') {
                if let Some(Value::Array(a)) = meta.get_mut(key) {
                    a.push(scalar(item));
                }
                continue;
            }
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            // A nested block (metadata: …): kept out of the top-level fields.
            continue;
        }
        open_list = None;
        let Some((k, v)) = l.split_once(':') else {
            return Err(skill_invalid("Invalid YAML frontmatter"));
        };
        let k = k.trim().to_string();
        let v = v.trim();
        let value = if v.is_empty() {
            open_list = Some(k.clone());
            Value::Array(Vec::new())
        } else if let Some(inner) = v.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Value::Array(
                inner
                    .split(',')
                    .filter(|x| !x.trim().is_empty())
                    .map(scalar)
                    .collect(),
            )
        } else {
            scalar(v)
        };
        meta.insert(k, value);
    }
    Ok(SkillDoc {
        meta,
        body: body.trim().to_string(),
    })
}

/// A skill's name as OpenViking's `validate_skill_name` takes it.
pub fn valid_name(name: Option<&Value>) -> Result<String, ApiError> {
    let field = || json!({ "field": "name" });
    let Some(v) = name else {
        return Err(ApiError::invalid("Skill must have 'name' field").with_details(field()));
    };
    let Some(s) = v.as_str().map(str::trim).filter(|s| !s.is_empty()) else {
        return Err(
            ApiError::invalid("Skill 'name' must be a non-empty string").with_details(field())
        );
    };
    if s.len() > MAX_NAME {
        return Err(
            ApiError::invalid(format!("Skill name cannot exceed {MAX_NAME} characters"))
                .with_details(
                    json!({"field": "name", "max_length": MAX_NAME, "actual_length": s.len()}),
                ),
        );
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(ApiError::invalid(format!("Invalid skill name: {s}")).with_details(json!({
            "field": "name",
            "reason": "skill name may only contain ASCII letters, numbers, underscores, and hyphens",
        })));
    }
    Ok(s.to_string())
}

/// A JSON string for YAML (a double-quoted scalar is JSON's string syntax).
fn yaml_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The SKILL.md of a skill given as an object, as `SkillLoader.to_skill_md` writes it.
fn skill_md_of(obj: &Map<String, Value>) -> Result<String, ApiError> {
    let name = valid_name(obj.get("name"))?;
    let description = obj.get("description").and_then(Value::as_str).unwrap_or("");
    let mut front = format!(
        "name: {}\ndescription: {}\n",
        yaml_str(&name),
        yaml_str(description)
    );
    let tools = obj
        .get("allowed_tools")
        .or_else(|| obj.get("allowed-tools"));
    let tools: Vec<String> = match tools {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        Some(Value::String(s)) => s.split_whitespace().map(String::from).collect(),
        _ => Vec::new(),
    };
    if !tools.is_empty() {
        front.push_str(&format!("allowed-tools: {}\n", yaml_str(&tools.join(" "))));
    }
    if let Some(Value::Array(tags)) = obj.get("tags") {
        if !tags.is_empty() {
            front.push_str("tags:\n");
            for t in tags.iter().filter_map(Value::as_str) {
                front.push_str(&format!("- {}\n", yaml_str(t)));
            }
        }
    }
    let content = obj.get("content").and_then(Value::as_str).unwrap_or("");
    Ok(format!("---\n{front}---\n\n{content}"))
}

/// OpenViking's L0 of a skill: its header metadata as YAML (`_build_skill_abstract`).
fn abstract_of(name: &str, doc: &SkillDoc) -> String {
    let mut s = format!(
        "name: {}\ndescription: {}",
        yaml_str(name),
        yaml_str(doc.description())
    );
    for (key, list) in [("tags", doc.tags()), ("allowed_tools", doc.allowed_tools())] {
        if !list.is_empty() {
            s.push_str(&format!("\n{key}:"));
            for v in list {
                s.push_str(&format!("\n- {}", v));
            }
        }
    }
    s
}

// ---- where skills live ------------------------------------------------------------------

/// The caller's own skill root, `viking://user/{id}/skills`.
fn user_root(who: &Identity) -> String {
    format!("viking://user/{}/skills", who.user)
}

/// The root a `target_uri` names (OpenViking's `_resolve_skill_root_uri`): the agent's shared
/// root for `viking://agent/skills…`, the caller's own for its own root, nothing else.
fn target_root(who: &Identity, target: Option<&str>) -> Result<VPath, ApiError> {
    let raw = target.map(str::trim).filter(|t| !t.is_empty());
    let Some(raw) = raw else {
        return who.path(&user_root(who));
    };
    let p = who.path(raw)?;
    let mine = who.path(&user_root(who))?;
    let agent = who.path(AGENT_ROOT)?;
    if p.starts_with(&agent) {
        return Ok(agent);
    }
    if p == mine {
        return Ok(mine);
    }
    Err(ApiError::invalid(format!(
        "Unsupported skill root URI: {raw}; use {} or {AGENT_ROOT}",
        user_root(who)
    ))
    .with_details(json!({ "field": "target_uri", "allowed": [user_root(who), AGENT_ROOT] })))
}

/// The installed skill `name`: under `target_uri`'s root when given, else the caller's own,
/// then the agent's (OpenViking's `_require_skill`). 404 `Skill not found` otherwise.
fn require_skill(
    view: &View,
    who: &Identity,
    name: &str,
    target: Option<&str>,
) -> Result<VPath, ApiError> {
    let name = valid_name(Some(&Value::String(name.to_string())))?;
    let mut roots = Vec::new();
    if target.is_some_and(|t| !t.trim().is_empty()) {
        roots.push(target_root(who, target)?);
    }
    roots.push(who.path(&user_root(who))?);
    roots.push(who.path(AGENT_ROOT)?);
    for root in &roots {
        let dir = root
            .join(&name)
            .map_err(|e| ApiError::invalid_uri(&name, e))?;
        if view.stat(&dir)?.is_some_and(|st| st.is_dir()) {
            return Ok(dir);
        }
    }
    let missing = format!("{}/{name}", user_root(who));
    Err(
        ApiError::new(Code::NotFound, format!("Skill not found: {missing}"))
            .with_details(json!({ "type": "skill", "resource": missing })),
    )
}

/// The text of file `p` (invalid UTF-8 replaced).
fn read_text(view: &View, p: &VPath) -> Result<String, ApiError> {
    let (mut f, _) = view.open_file(p)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut bytes)
        .map_err(|e| ApiError::internal(format!("{}: {e}", p.uri())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A skill's summary (`_skill_summary_from_meta`).
fn summary(name: &str, dir: &VPath, doc: Option<&SkillDoc>) -> Value {
    json!({
        "type": "skill",
        "name": name,
        "uri": dir.uri(),
        "root_uri": dir.uri(),
        "skill_md_uri": format!("{}/{SKILL_MD}", dir.uri()),
        "description": doc.map_or("", SkillDoc::description),
        "tags": doc.map_or_else(Vec::new, SkillDoc::tags),
        "allowed_tools": doc.map_or_else(Vec::new, SkillDoc::allowed_tools),
    })
}

/// The skills under `root` the caller sees: each directory whose SKILL.md parses with a valid
/// name and a description (OpenViking's `_entry_looks_like_skill`).
fn skills_under(view: &View, who: &Identity, root: &VPath, limit: usize) -> Vec<Value> {
    let Ok(children) = view.children(root, who, false) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in children.into_iter().filter(|c| c.is_dir()).take(limit) {
        let Ok(md) = c.path.join(SKILL_MD) else {
            continue;
        };
        let Ok(doc) = read_text(view, &md).and_then(|t| parse_skill_md(&t)) else {
            continue;
        };
        if valid_name(doc.meta.get("name")).is_err() || doc.description().trim().is_empty() {
            continue;
        }
        out.push(summary(&c.name, &c.path, Some(&doc)));
    }
    out
}

// ---- list, show, delete -------------------------------------------------------------------

#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    node_limit: Option<i64>,
    target_uri: Option<String>,
}

async fn list(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<ListQuery>,
) -> ApiResult {
    let limit = match q.node_limit {
        Some(n) if n > 0 => n as usize,
        _ => 1000,
    };
    blocking(move || {
        let view = View::open(&api, &who)?;
        if let Some(t) = q.target_uri.as_deref().filter(|t| !t.trim().is_empty()) {
            let root = who.path(t)?;
            let skills = skills_under(&view, &who, &root, limit);
            return ok(json!({"root_uri": root.uri(), "total": skills.len(), "skills": skills}));
        }
        let mine = who.path(&user_root(&who))?;
        let agent = who.path(AGENT_ROOT)?;
        // Both scopes, not deduplicated: the same name in each is two skills, told apart by
        // `root_uri` (as OpenViking lists them).
        let mut skills = skills_under(&view, &who, &mine, limit);
        skills.extend(skills_under(&view, &who, &agent, limit));
        ok(json!({
            "root_uris": [mine.uri(), agent.uri()],
            "total": skills.len(),
            "skills": skills,
        }))
    })
    .await
}

#[derive(Deserialize)]
struct ShowQuery {
    target_uri: Option<String>,
    include_content: Option<String>,
    include_files: Option<String>,
    include_integrity: Option<String>,
    include_source: Option<String>,
    level: Option<i64>,
}

fn flag(v: &Option<String>, default: bool) -> Result<bool, ApiError> {
    match v.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => Ok(default),
        Some("true" | "1" | "yes" | "on") => Ok(true),
        Some("false" | "0" | "no" | "off") => Ok(false),
        Some(s) => Err(ApiError::invalid(format!("{s:?} is not a boolean"))),
    }
}

/// Every entry below `dir`, breadth first (OpenViking's `_list_skill_files`).
fn files_below(view: &View, who: &Identity, dir: &VPath) -> Result<Vec<super::fs::Node>, ApiError> {
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([dir.clone()]);
    while let Some(d) = queue.pop_front() {
        for c in view.children(&d, who, true)? {
            if c.is_dir() {
                queue.push_back(c.path.clone());
            }
            out.push(c);
        }
        if out.len() > 10_000 {
            break;
        }
    }
    Ok(out)
}

async fn show(
    State(api): State<Arc<Api>>,
    who: Identity,
    UrlPath(name): UrlPath<String>,
    Params(q): Params<ShowQuery>,
) -> ApiResult {
    if q.level.is_some_and(|l| !(0..=2).contains(&l)) {
        return Err(ApiError::invalid("Skill show level must be 0, 1, or 2")
            .with_details(json!({"field": "level", "allowed": [0, 1, 2]})));
    }
    let include_content = q
        .include_content
        .as_ref()
        .map(|_| flag(&q.include_content, false))
        .transpose()?;
    let include_files = flag(&q.include_files, true)?;
    let include_integrity = flag(&q.include_integrity, false)?;
    let include_source = flag(&q.include_source, false)?;
    blocking(move || {
        let view = View::open(&api, &who)?;
        let dir = require_skill(&view, &who, &name, q.target_uri.as_deref())?;
        let md = dir
            .join(SKILL_MD)
            .map_err(|e| ApiError::invalid_uri(&name, e))?;
        let text = read_text(&view, &md)?;
        let doc = parse_skill_md(&text).ok();
        let mut r = summary(&name, &dir, doc.as_ref());
        let level = q.level;
        if level.is_none() || level == Some(0) {
            r["abstract"] = doc
                .as_ref()
                .map_or_else(String::new, |d| abstract_of(&name, d))
                .into();
        }
        if level.is_none() || level == Some(1) {
            // OpenViking's L1 of a skill is its instructions: the body of SKILL.md.
            r["overview"] = doc.as_ref().map_or("", |d| d.body.as_str()).into();
        }
        if level == Some(2)
            || include_content == Some(true)
            || (level.is_none() && include_content != Some(false))
        {
            r["content_sha256"] = hex::encode(Sha256::digest(text.as_bytes())).into();
            r["content"] = text.into();
        }
        if include_files {
            let mut files = Vec::new();
            let mut revision_items = Vec::new();
            for n in files_below(&view, &who, &dir)? {
                let rel = n.path.as_str()[dir.as_str().len() + 1..].to_string();
                let kind = match (n.is_dir(), rel.as_str()) {
                    (true, _) => "directory",
                    (false, SKILL_MD) => "definition",
                    (false, ".abstract.md" | ".overview.md") => "summary",
                    _ => "auxiliary",
                };
                let mut item = json!({
                    "name": n.name, "uri": n.path.uri(), "path": rel,
                    "is_dir": n.is_dir(), "kind": kind,
                });
                if include_integrity && !n.is_dir() {
                    let (mut f, _) = view.open_file(&n.path)?;
                    let mut bytes = Vec::new();
                    std::io::Read::read_to_end(&mut f, &mut bytes)
                        .map_err(|e| ApiError::internal(format!("{}: {e}", n.path.uri())))?;
                    item["size"] = bytes.len().into();
                    item["sha256"] = hex::encode(Sha256::digest(&bytes)).into();
                }
                revision_items.push(json!({
                    "path": item["path"], "is_dir": item["is_dir"],
                    "size": item.get("size"), "sha256": item.get("sha256"),
                }));
                files.push(item);
            }
            if include_integrity {
                revision_items.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
                let canon = serde_json::to_string(&revision_items).unwrap_or_default();
                r["revision"] = hex::encode(Sha256::digest(canon.as_bytes())).into();
            }
            r["files"] = files.into();
        }
        if include_source {
            // vikingfs keeps no source record beside a skill: its files are what it is.
            r["source"] = json!({});
        }
        ok(r)
    })
    .await
}

#[derive(Deserialize)]
struct DeleteQuery {
    target_uri: Option<String>,
}

async fn remove(
    State(api): State<Arc<Api>>,
    who: Identity,
    UrlPath(name): UrlPath<String>,
    Params(q): Params<DeleteQuery>,
) -> ApiResult {
    blocking(move || {
        let view = View::open(&api, &who)?;
        let dir = require_skill(&view, &who, &name, q.target_uri.as_deref())?;
        let report = api
            .ops
            .rm(&dir, true)
            .map_err(|e| ApiError::from_ops(&dir.uri(), e))?;
        ok(json!({
            "name": name, "uri": dir.uri(), "root_uri": dir.uri(),
            "estimated_deleted_count": report.records,
            "privacy_deleted": false,
        }))
    })
    .await
}

// ---- validate ---------------------------------------------------------------------------

/// `ValidateSkillRequest` (which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidateBody {
    data: Value,
    #[serde(default)]
    strict: bool,
    source_path: Option<String>,
    skill_dir_name: Option<String>,
    #[allow(dead_code)]
    target_uri: Option<String>,
}

fn issue(rule: &str, message: &str, field: &str) -> Value {
    json!({ "rule": rule, "message": message, "field": field })
}

/// A list field as the validator reads it: a list, or one value as a list of one.
fn as_list(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => json!([]),
        Some(Value::Array(a)) => Value::Array(a.clone()),
        Some(other) => json!([other]),
    }
}

/// OpenViking's `validate_skill_format`: the SKILL.md text (or an object) checked against the
/// Agent Skills rules; a rule's breach is an error with `strict`, a warning without.
fn validate_format(b: &ValidateBody) -> Value {
    let source_path = b.source_path.clone().unwrap_or_default();
    let parsed = match &b.data {
        Value::String(t) => parse_frontmatter(t).map(|d| {
            let mut m = d.meta;
            m.insert("content".into(), d.body.into());
            m
        }),
        Value::Object(o) => Ok(o.clone()),
        other => Err(ApiError::invalid(format!(
            "Unsupported data type: {}",
            if other.is_array() { "list" } else { "scalar" }
        ))),
    };
    let meta = match parsed {
        Ok(m) => m,
        Err(e) => {
            return json!({
                "valid": false, "strict": b.strict,
                "errors": [issue("yaml_format", &e.message, "data")],
                "warnings": [], "source_path": source_path,
            })
        }
    };
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let name = meta.get("name").and_then(Value::as_str).map(str::trim);
    let description = meta.get("description").and_then(Value::as_str);
    if name.is_none_or(str::is_empty) {
        errors.push(issue("name_required", "name is required", "name"));
    }
    if description.is_none_or(|d| d.trim().is_empty()) {
        errors.push(issue(
            "description_required",
            "description is required",
            "description",
        ));
    }
    let mut breach = |i: Value| {
        if b.strict {
            errors.push(i)
        } else {
            warnings.push(i)
        }
    };
    if let Some(n) = name.filter(|n| !n.is_empty()) {
        let dir = b.skill_dir_name.as_deref().map(str::trim).unwrap_or("");
        if !dir.is_empty() && n != dir {
            breach(issue(
                "name_matches_directory",
                &format!("name '{n}' does not match directory name '{dir}'"),
                "name",
            ));
        }
        if n.chars().count() > MAX_NAME {
            breach(issue(
                "name_max_length",
                "name must not exceed 64 characters",
                "name",
            ));
        }
        if !n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            breach(issue(
                "name_allowed_characters",
                "name may only contain letters, numbers, underscores, and hyphens",
                "name",
            ));
        }
    }
    if description.is_some_and(|d| d.chars().count() > 1024) {
        breach(issue(
            "description_max_length",
            "description must not exceed 1024 characters",
            "description",
        ));
    }
    let content = meta.get("content").and_then(Value::as_str).unwrap_or("");
    let body_lines = content.lines().count();
    if b.strict && body_lines > 500 {
        warnings.push(issue(
            "body_max_lines",
            "SKILL.md body exceeds 500 lines",
            "content",
        ));
    }
    let tools = meta
        .get("allowed_tools")
        .filter(|v| !v.is_null() && *v != &json!([]) && *v != &json!(""))
        .or_else(|| meta.get("allowed-tools"));
    json!({
        "valid": errors.is_empty(),
        "strict": b.strict,
        "name": meta.get("name").cloned().unwrap_or_else(|| json!("")),
        "description": meta.get("description").cloned().unwrap_or_else(|| json!("")),
        "tags": as_list(meta.get("tags")),
        "allowed_tools": as_list(tools),
        "body_lines": body_lines,
        "source_path": source_path,
        "skill_dir_name": b.skill_dir_name.clone().unwrap_or_default(),
        "errors": errors,
        "warnings": warnings,
    })
}

async fn validate(_who: Identity, Body(b): Body<ValidateBody>) -> ApiResult {
    ok(validate_format(&b))
}

// ---- add and update ---------------------------------------------------------------------

/// `AddSkillRequest` (which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct AddBody {
    #[serde(default)]
    data: Value,
    temp_file_id: Option<String>,
    #[serde(default)]
    skills: Vec<String>,
    #[serde(default)]
    list_only: bool,
    #[serde(default)]
    wait: bool,
    source_metadata: Option<Value>,
    target_uri: Option<String>,
    #[serde(default)]
    telemetry: Value,
}

/// `UpdateSkillRequest` (which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct UpdateBody {
    #[serde(default)]
    data: Value,
    temp_file_id: Option<String>,
    #[serde(default)]
    from_source: bool,
    #[serde(default)]
    wait: bool,
    source_metadata: Option<Value>,
    #[serde(default)]
    telemetry: Value,
    target_uri: Option<String>,
}

/// Sources OpenViking clones itself (`GIT_SKILL_SOURCE_PREFIXES`).
const GIT: [&str; 5] = ["https://", "http://", "git@", "ssh://", "git://"];

/// Does a one-line string look like a path on the caller's disk (OpenViking's
/// `looks_like_local_path`, which its HTTP server refuses as skill data)?
fn looks_like_local_path(s: &str) -> bool {
    let s = s.trim();
    !s.contains('\n')
        && (s.starts_with('/')
            || s.starts_with("./")
            || s.starts_with("../")
            || s.starts_with("~/")
            || s.ends_with("SKILL.md")
            || s.ends_with(".zip"))
}

/// Where the skills to install are: staged directories, each holding a SKILL.md at its top.
struct Sources {
    /// Kept until the adds have copied it in.
    _staging: tempfile::TempDir,
    dirs: Vec<PathBuf>,
}

/// Write `text` as the SKILL.md of a fresh staged skill directory.
fn stage_inline(text: &str) -> Result<Sources, ApiError> {
    let staging = upload::uploads()?.staging()?;
    let dir = staging.path().join("skill");
    std::fs::create_dir(&dir).map_err(|e| ApiError::internal(e.to_string()))?;
    std::fs::write(dir.join(SKILL_MD), text).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Sources {
        _staging: staging,
        dirs: vec![dir],
    })
}

/// The skill directories below `root`: each directory holding a SKILL.md owns its subtree
/// (OpenViking's `_skill_paths`), in name order.
fn skill_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        if d.join(SKILL_MD).is_file() {
            out.push(d);
            continue;
        }
        let mut subs: Vec<PathBuf> = std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        subs.sort();
        subs.reverse();
        stack.extend(subs);
    }
    out.sort();
    out
}

/// The sources of a request: inline `data` or the upload `temp_file_id`.
fn sources(
    api: &Api,
    who: &Identity,
    data: &Value,
    temp_file_id: Option<&str>,
) -> Result<Sources, ApiError> {
    if let Some(id) = temp_file_id.map(str::trim).filter(|s| !s.is_empty()) {
        let uploads = upload::uploads()?;
        let up = uploads.take(id, who)?;
        let staging = uploads.staging()?;
        let dest = staging.path().join("upload");
        std::fs::create_dir(&dest).map_err(|e| ApiError::internal(e.to_string()))?;
        if upload::is_zip(&up.path) {
            // A skill package: the zip is always a directory of skills (a SKILL.md is text).
            let ws = api.ops.workspace().internal_dir();
            let budget = upload::Budget::new(
                api.config.max_unpacked_bytes,
                api.config.max_unpacked_entries,
                &[staging.path(), &ws],
            );
            upload::unpack(&up.path, &dest, &budget)?;
        } else {
            std::fs::rename(&up.path, dest.join(SKILL_MD))
                .map_err(|e| ApiError::internal(e.to_string()))?;
        }
        let dirs = skill_dirs(&dest);
        if dirs.is_empty() {
            return Err(ApiError::invalid("No SKILL.md found in the skill source"));
        }
        return Ok(Sources {
            _staging: staging,
            dirs,
        });
    }
    match data {
        Value::String(s) if s.trim().is_empty() => Err(ApiError::invalid(
            "Either 'data' or 'temp_file_id' must be provided",
        )),
        Value::String(s) if GIT.iter().any(|g| s.starts_with(g)) && !s.contains('\n') => {
            Err(ApiError::new(
                Code::Unimplemented,
                "installing a skill from a Git source is not supported by vikingfs (it fetches \
                 nothing remote): upload the skill directory with temp_upload",
            ))
        }
        Value::String(s) if looks_like_local_path(s) => Err(ApiError::denied(
            "HTTP server only accepts raw skill content or temp-uploaded files; direct host \
             filesystem paths are not allowed.",
        )),
        Value::String(s) => stage_inline(s),
        Value::Object(o) => stage_inline(&skill_md_of(o)?),
        Value::Null => Err(ApiError::invalid(
            "Either 'data' or 'temp_file_id' must be provided",
        )),
        other => Err(ApiError::invalid(format!(
            "Unsupported skill data type: {}",
            match other {
                Value::Array(_) => "list",
                Value::Bool(_) => "bool",
                _ => "number",
            }
        ))),
    }
}

/// One staged skill, read: its directory, name and SKILL.md.
struct Staged {
    dir: PathBuf,
    name: String,
    doc: SkillDoc,
}

fn read_staged(dir: &Path) -> Result<Staged, ApiError> {
    let text = std::fs::read(dir.join(SKILL_MD)).map_err(|e| ApiError::internal(e.to_string()))?;
    let doc = parse_skill_md(&String::from_utf8_lossy(&text))?;
    let name = valid_name(doc.meta.get("name"))?;
    Ok(Staged {
        dir: dir.to_path_buf(),
        name,
        doc,
    })
}

/// Install `s` under `root` through the locked add; OpenViking's result of one skill.
fn install(api: &Api, root: &VPath, s: &Staged) -> Result<Value, ApiError> {
    let to = root
        .join(&s.name)
        .map_err(|e| ApiError::invalid_uri(&s.name, e))?;
    let add = || api.ops.add_skill(&s.dir, &to);
    let report = match add() {
        // The skill's last install still holds its lifecycle lock until its indexing is
        // done: waited for, as OpenViking's install waits for the package's lock. A hold
        // that is not the queue's (a user's lock) is still busy after it.
        Err(e) if e.is_busy() => {
            wait_drained(api)?;
            add()
        }
        r => r,
    }
    .map_err(|e| ApiError::from_ops(&to.uri(), e))?;
    Ok(json!({
        "status": "success",
        "root_uri": report.target.uri(),
        "uri": report.target.uri(),
        "name": s.name,
        "auxiliary_files": report.files.saturating_sub(1),
    }))
}

async fn add(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<AddBody>) -> ApiResult {
    if b.data.is_null()
        && b.temp_file_id
            .as_deref()
            .is_none_or(|s| s.trim().is_empty())
    {
        return Err(ApiError::invalid(
            "Either 'data' or 'temp_file_id' must be provided",
        ));
    }
    let root = target_root(&who, b.target_uri.as_deref())?;
    blocking(move || {
        let src = sources(&api, &who, &b.data, b.temp_file_id.as_deref())?;
        let mut staged = src
            .dirs
            .iter()
            .map(|d| read_staged(d))
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<&str> = b.skills.iter().map(|s| s.trim()).collect();
        if !names.is_empty() && names != ["*"] {
            for n in &names {
                valid_name(Some(&Value::String(n.to_string())))?;
                let hits = staged
                    .iter()
                    .filter(|s| s.dir.file_name().and_then(|f| f.to_str()) == Some(n))
                    .count();
                if hits != 1 {
                    return Err(ApiError::invalid(format!(
                        "Skill '{n}' must identify exactly one source directory"
                    )));
                }
            }
            staged.retain(|s| {
                s.dir
                    .file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| names.contains(&f))
            });
        }
        if b.list_only {
            let skills: Vec<Value> = staged
                .iter()
                .map(|s| {
                    json!({
                        "name": s.name, "description": s.doc.description(),
                        "path": s.dir.file_name().and_then(|f| f.to_str()).unwrap_or(""),
                    })
                })
                .collect();
            return ok(json!({"skills": skills, "total": skills.len()}));
        }
        let mut installed = Vec::new();
        for s in &staged {
            installed.push(install(&api, &root, s)?);
        }
        if b.wait {
            wait_drained(&api)?;
        }
        if installed.len() == 1 {
            return ok(installed.remove(0));
        }
        ok(json!({"total": installed.len(), "installed": installed}))
    })
    .await
}

async fn update(
    State(api): State<Arc<Api>>,
    who: Identity,
    UrlPath(name): UrlPath<String>,
    Body(b): Body<UpdateBody>,
) -> ApiResult {
    if b.from_source {
        if !b.data.is_null() || b.temp_file_id.is_some() {
            return Err(ApiError::invalid(
                "from_source cannot be combined with data or temp_file_id",
            ));
        }
        return Err(ApiError::invalid(
            "Skill has no recorded Git source; supply content or an upload",
        ));
    }
    if b.data.is_null()
        && b.temp_file_id
            .as_deref()
            .is_none_or(|s| s.trim().is_empty())
    {
        return Err(ApiError::invalid(
            "Either data, temp_file_id, or from_source must be provided",
        ));
    }
    blocking(move || {
        let view = View::open(&api, &who)?;
        let dir = require_skill(&view, &who, &name, b.target_uri.as_deref())?;
        let root = dir.parent().ok_or_else(|| not_found(&dir))?;
        let src = sources(&api, &who, &b.data, b.temp_file_id.as_deref())?;
        let staged = src
            .dirs
            .iter()
            .map(|d| read_staged(d))
            .collect::<Result<Vec<_>, _>>()?;
        let mut matching: Vec<&Staged> = if staged.len() > 1 {
            staged.iter().filter(|s| s.name == name).collect()
        } else {
            staged.iter().collect()
        };
        if matching.len() != 1 {
            return Err(ApiError::invalid(
                "Update source must identify exactly one skill",
            ));
        }
        let s = matching.remove(0);
        if s.name != name {
            return Err(ApiError::invalid(format!(
                "Skill name mismatch: path name is '{name}', content name is '{}'",
                s.name
            ))
            .with_details(json!({"expected": name, "actual": s.name})));
        }
        let mut r = install(&api, &root, s)?;
        if b.wait {
            wait_drained(&api)?;
        }
        r["action"] = "update".into();
        ok(r)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_md_is_read_as_openviking_reads_it() {
        let d = parse_skill_md(
            "---\nname: pdf-tools\ndescription: \"Work: with PDFs\"\nallowed-tools: Read Grep\n\
             tags:\n  - docs\n  - pdf\nmetadata:\n  owner: x\n---\n\n# Body\ntext\n",
        )
        .unwrap();
        assert_eq!(d.name(), Some("pdf-tools"));
        assert_eq!(d.description(), "Work: with PDFs");
        assert_eq!(d.allowed_tools(), [json!("Read"), json!("Grep")]);
        assert_eq!(d.tags(), [json!("docs"), json!("pdf")]);
        assert_eq!(d.body, "# Body\ntext");
        assert!(
            !d.meta.contains_key("owner"),
            "nested blocks are not top-level"
        );
        let inline = parse_skill_md("---\nname: a\ndescription: b\ntags: [x, 'y']\n---\n").unwrap();
        assert_eq!(inline.tags(), [json!("x"), json!("y")]);
        for (text, why) in [
            ("no frontmatter", "SKILL.md must have YAML frontmatter"),
            ("---\ndescription: d\n---\n", "Skill must have 'name' field"),
            ("---\nname: n\n---\n", "Skill must have 'description' field"),
        ] {
            assert_eq!(parse_skill_md(text).unwrap_err().message, why);
        }
    }

    #[test]
    fn skills_are_validated_by_the_agent_skills_rules() {
        let v = |data: Value, strict: bool, dir: Option<&str>| {
            validate_format(&ValidateBody {
                data,
                strict,
                source_path: None,
                skill_dir_name: dir.map(String::from),
                target_uri: None,
            })
        };
        let good = v(
            json!("---\nname: s\ndescription: d\n---\nbody\n"),
            true,
            Some("s"),
        );
        assert_eq!(
            (good["valid"].as_bool(), good["body_lines"].as_u64()),
            (Some(true), Some(1)),
            "{good}"
        );
        let r = v(json!("no frontmatter"), false, None);
        assert_eq!(r["errors"][0]["rule"], "yaml_format", "{r}");
        let r = v(json!("---\nname: a b\n---\n"), false, Some("x"));
        let rules = |k: &str| -> Vec<String> {
            r[k].as_array()
                .unwrap()
                .iter()
                .map(|i| i["rule"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(rules("errors"), ["description_required"]);
        assert_eq!(
            rules("warnings"),
            ["name_matches_directory", "name_allowed_characters"]
        );
        let r = v(
            json!({"name": "x", "description": "d", "tags": "one"}),
            true,
            Some("y"),
        );
        assert_eq!(r["valid"], false, "a breach is an error when strict: {r}");
        assert_eq!(r["tags"], json!(["one"]));
    }

    #[test]
    fn skill_names_and_objects_are_checked_as_openviking_checks_them() {
        assert_eq!(
            valid_name(Some(&json!(" ok_name-1 "))).unwrap(),
            "ok_name-1"
        );
        for bad in [
            json!("a b"),
            json!("../x"),
            json!(""),
            json!(3),
            json!("x".repeat(65)),
        ] {
            assert!(valid_name(Some(&bad)).is_err(), "{bad}");
        }
        let md = skill_md_of(
            json!({"name": "s", "description": "d", "content": "Do it.", "tags": ["t"]})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        let back = parse_skill_md(&md).unwrap();
        assert_eq!((back.name(), back.description()), (Some("s"), "d"));
        assert_eq!(back.tags(), [json!("t")]);
        assert_eq!(back.body, "Do it.");
    }
}
