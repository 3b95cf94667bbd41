//! Which hits a `find` / `search` request accepts: OpenViking's shortcuts (`context_type`,
//! `level`, `since` / `until` / `time_field`, `tags`, `score_threshold`) and the part of its
//! metadata filter DSL (`{"op": "and" | "or" | "must" | "must_not" | "time_range", ...}`)
//! that means something for files: fields `context_type`, `level`, `uri` (a prefix, as
//! OpenViking's path scope) and the times (`updated_at`, `created_at`: the file's modification
//! time, the one time a file keeps). Anything else is refused as `INVALID_FILTER` rather than
//! ignored, so no filter silently widens a search. Nothing here carries tags, so a tag
//! filter matches nothing.

use serde_json::Value;

use crate::index::Hit;
use crate::server::reply::{ApiError, Code};
use crate::workspace::Workspace;

use super::context_type;

#[derive(Debug, Clone)]
enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Must { field: Field, values: Vec<Value> },
    MustNot { field: Field, values: Vec<Value> },
    Time(TimeRange),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    ContextType,
    Level,
    Uri,
    Tags,
}

/// Bounds on a file's modification time, in seconds since the epoch.
#[derive(Debug, Clone, Copy, Default)]
struct TimeRange {
    gte: Option<f64>,
    lte: Option<f64>,
    gt: Option<f64>,
    lt: Option<f64>,
}

impl TimeRange {
    fn is_empty(&self) -> bool {
        self.gte.is_none() && self.lte.is_none() && self.gt.is_none() && self.lt.is_none()
    }

    fn holds(&self, t: f64) -> bool {
        self.gte.is_none_or(|b| t >= b)
            && self.lte.is_none_or(|b| t <= b)
            && self.gt.is_none_or(|b| t > b)
            && self.lt.is_none_or(|b| t < b)
    }
}

/// What a request accepts.
#[derive(Debug, Clone, Default)]
pub struct Accept {
    types: Option<Vec<&'static str>>,
    levels: Option<Vec<u8>>,
    filter: Option<Filter>,
    time: Option<TimeRange>,
    /// A tag was asked for: no record here has one.
    tags: bool,
    /// The least normalised score a hit needs (`score_threshold`; the retrieval applies it,
    /// to the score it answers with).
    threshold: Option<f32>,
}

fn bad_filter(msg: impl Into<String>) -> ApiError {
    ApiError::new(Code::InvalidFilter, msg)
}

/// OpenViking's `context_type` values.
pub fn parse_types(items: &[String]) -> Result<Vec<&'static str>, ApiError> {
    let mut out = Vec::new();
    for item in items {
        for v in item.split(',') {
            let v = v.trim().to_ascii_lowercase();
            if v.is_empty() {
                continue;
            }
            let t = match v.as_str() {
                "memory" => "memory",
                "resource" => "resource",
                "skill" => "skill",
                _ => {
                    return Err(ApiError::invalid(
                        "context_type must be one or more of: memory, resource, skill",
                    ))
                }
            };
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// `level`: an integer, `"0,1"`, or a list (OpenViking's `_resolve_levels`).
fn parse_levels(v: &Value) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    let mut push = |n: i64| -> Result<(), ApiError> {
        match u8::try_from(n) {
            Ok(l @ 0..=2) => {
                out.push(l);
                Ok(())
            }
            _ => Err(ApiError::invalid(format!(
                "level must be 0, 1 or 2, got {n}"
            ))),
        }
    };
    match v {
        Value::Null => {}
        Value::Number(n) => push(n.as_i64().unwrap_or(-1))?,
        Value::String(s) => {
            for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                push(part.parse().unwrap_or(-1))?;
            }
        }
        Value::Array(a) => {
            for item in a {
                match item {
                    Value::Number(n) => push(n.as_i64().unwrap_or(-1))?,
                    Value::String(s) => {
                        if let Ok(n) = s.trim().parse() {
                            push(n)?;
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {
            return Err(ApiError::invalid(
                "level must be an integer, a string or a list",
            ))
        }
    }
    Ok(out)
}

/// A time as OpenViking's filters take it: RFC 3339, or a date (its start, or with
/// `end_of_day` its end), or relative to now (`30m`, `2h`, `7d`, `1w`, `10s`: that long ago).
fn parse_time(s: &str, end_of_day: bool) -> Result<f64, ApiError> {
    let s = s.trim();
    let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    if let Some(unit) = s.chars().last().filter(|c| "smhdw".contains(*c)) {
        if let Ok(n) = s[..s.len() - 1].parse::<u64>() {
            let secs = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86400,
                _ => 7 * 86400,
            };
            return Ok(now - (n * secs) as f64);
        }
    }
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t.as_millisecond() as f64 / 1000.0);
    }
    if let Ok(d) = s.parse::<jiff::civil::Date>() {
        let start = d
            .to_zoned(jiff::tz::TimeZone::UTC)
            .map_err(|e| ApiError::invalid(format!("time {s:?}: {e}")))?
            .timestamp()
            .as_second() as f64;
        return Ok(if end_of_day { start + 86399.999 } else { start });
    }
    if let Ok(dt) = s.parse::<jiff::civil::DateTime>() {
        let t = dt
            .to_zoned(jiff::tz::TimeZone::UTC)
            .map_err(|e| ApiError::invalid(format!("time {s:?}: {e}")))?;
        return Ok(t.timestamp().as_millisecond() as f64 / 1000.0);
    }
    Err(ApiError::invalid(format!(
        "invalid time {s:?}: use an ISO 8601 time, a date (YYYY-MM-DD) or a relative time \
         such as 30m, 2h, 7d"
    )))
}

fn time_field_ok(f: &str) -> Result<(), ApiError> {
    match f {
        "updated_at" | "created_at" => Ok(()),
        other => Err(ApiError::invalid(format!(
            "time_field must be 'updated_at' or 'created_at', got {other:?}"
        ))),
    }
}

fn parse_filter(v: &Value) -> Result<Filter, ApiError> {
    let obj = v
        .as_object()
        .ok_or_else(|| bad_filter("a filter is a JSON object with an \"op\""))?;
    if !obj.contains_key("op") {
        // OpenViking 0.5.2 hands the node to its index engine as it is, which makes a node
        // without an op its `Noop` (no condition): the search is answered unfiltered, 200.
        return Ok(Filter::And(Vec::new()));
    }
    let op = obj.get("op").and_then(Value::as_str).unwrap_or("");
    let conds = || -> Result<&Vec<Value>, ApiError> {
        obj.get("conds")
            .and_then(Value::as_array)
            .ok_or_else(|| bad_filter(format!("filter op {op:?} needs a \"conds\" list")))
    };
    let field = || -> Result<Field, ApiError> {
        match obj.get("field").and_then(Value::as_str).unwrap_or("") {
            "context_type" => Ok(Field::ContextType),
            "level" => Ok(Field::Level),
            "uri" => Ok(Field::Uri),
            "tags" | "search_tags" => Ok(Field::Tags),
            other => Err(bad_filter(format!(
                "filter field {other:?} is not supported here (context_type, level, uri, \
                 tags, and time_range on updated_at / created_at are)"
            ))),
        }
    };
    Ok(match op {
        "and" => Filter::And(
            conds()?
                .iter()
                .map(parse_filter)
                .collect::<Result<_, _>>()?,
        ),
        "or" => Filter::Or(
            conds()?
                .iter()
                .map(parse_filter)
                .collect::<Result<_, _>>()?,
        ),
        "must" => Filter::Must {
            field: field()?,
            values: conds()?.clone(),
        },
        "must_not" => Filter::MustNot {
            field: field()?,
            values: conds()?.clone(),
        },
        "time_range" => {
            time_field_ok(
                obj.get("field")
                    .and_then(Value::as_str)
                    .unwrap_or("updated_at"),
            )
            .map_err(|e| bad_filter(e.message))?;
            let bound = |k: &str, end: bool| -> Result<Option<f64>, ApiError> {
                match obj.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => parse_time(s, end).map(Some),
                    Some(Value::Number(n)) => Ok(n.as_f64()),
                    Some(_) => Err(bad_filter(format!("time_range {k} must be a time"))),
                }
            };
            Filter::Time(TimeRange {
                gte: bound("gte", false)?,
                lte: bound("lte", true)?,
                gt: bound("gt", false)?,
                lt: bound("lt", false)?,
            })
        }
        other => {
            return Err(bad_filter(format!(
                "filter op {other:?} is not supported here (and, or, must, must_not, \
                 time_range are)"
            )))
        }
    })
}

/// The hit's source's modification time (seconds since the epoch).
fn mtime(ws: &Workspace, h: &Hit) -> Option<f64> {
    // The link itself, never what it points at (a link made through the mount).
    let m = std::fs::symlink_metadata(ws.fs_path(&h.uri)).ok()?;
    let d = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(d.as_secs_f64())
}

fn field_matches(field: Field, values: &[Value], h: &Hit) -> bool {
    match field {
        Field::ContextType => {
            let t = context_type(&h.uri);
            values.iter().any(|v| v.as_str() == Some(t))
        }
        Field::Level => values.iter().any(|v| {
            v.as_i64() == Some(h.level as i64)
                || v.as_str().and_then(|s| s.trim().parse::<i64>().ok()) == Some(h.level as i64)
        }),
        Field::Uri => values.iter().filter_map(Value::as_str).any(|u| {
            let Ok(p) = crate::uri::VPath::parse_uri(u.trim_end_matches('/'), "") else {
                return false;
            };
            p.is_root()
                || h.uri == p
                || (h.uri.as_str().starts_with(p.as_str())
                    && h.uri.as_str().as_bytes().get(p.as_str().len()) == Some(&b'/'))
        }),
        Field::Tags => false,
    }
}

fn eval(f: &Filter, ws: &Workspace, h: &Hit) -> bool {
    match f {
        Filter::And(v) => v.iter().all(|f| eval(f, ws, h)),
        Filter::Or(v) => v.iter().any(|f| eval(f, ws, h)),
        Filter::Must { field, values } => field_matches(*field, values, h),
        Filter::MustNot { field, values } => !field_matches(*field, values, h),
        Filter::Time(r) => mtime(ws, h).is_some_and(|t| r.holds(t)),
    }
}

impl Accept {
    /// The least normalised score a hit needs (`score_threshold`).
    pub fn threshold(&self) -> Option<f32> {
        self.threshold
    }

    #[allow(clippy::too_many_arguments)]
    pub fn from_request(
        context_type: Option<Vec<String>>,
        level: Option<&Value>,
        filter: Option<&Value>,
        tags: Option<&[String]>,
        since: Option<&str>,
        until: Option<&str>,
        time_field: Option<&str>,
        score_threshold: Option<f64>,
    ) -> Result<Accept, ApiError> {
        let types = match context_type {
            Some(items) => Some(parse_types(&items)?).filter(|t| !t.is_empty()),
            None => None,
        };
        let levels = match level {
            Some(v) => Some(parse_levels(v)?).filter(|l| !l.is_empty()),
            None => None,
        };
        if let Some(f) = time_field {
            time_field_ok(f)?;
        }
        let time = TimeRange {
            gte: since
                .filter(|s| !s.trim().is_empty())
                .map(|s| parse_time(s, false))
                .transpose()?,
            lte: until
                .filter(|s| !s.trim().is_empty())
                .map(|s| parse_time(s, true))
                .transpose()?,
            ..Default::default()
        };
        if let (Some(a), Some(b)) = (time.gte, time.lte) {
            if a > b {
                return Err(ApiError::invalid("since must not be later than until"));
            }
        }
        let filter = match filter {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) if o.is_empty() => None,
            Some(v) => Some(parse_filter(v)?),
        };
        let tags = tags.is_some_and(|t| t.iter().any(|t| !t.trim().is_empty()));
        Ok(Accept {
            types,
            levels,
            filter,
            time: (!time.is_empty()).then_some(time),
            tags,
            threshold: score_threshold.map(|t| t as f32),
        })
    }

    /// Are hits of kind `t` (`memory`, `resource`, `skill`) asked for by name?
    pub fn wants(&self, t: &str) -> bool {
        self.types.as_ref().is_some_and(|v| v.contains(&t))
    }

    /// Nothing can pass (a tag was asked for).
    pub fn matches_nothing(&self) -> bool {
        self.tags
    }

    pub fn accepts(&self, ws: &Workspace, h: &Hit) -> bool {
        if let Some(t) = &self.types {
            if !t.contains(&context_type(&h.uri)) {
                return false;
            }
        }
        if let Some(l) = &self.levels {
            if !l.contains(&(h.level as u8)) {
                return false;
            }
        }
        if let Some(f) = &self.filter {
            if !eval(f, ws, h) {
                return false;
            }
        }
        if let Some(r) = &self.time {
            if !mtime(ws, h).is_some_and(|t| r.holds(t)) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_parse_or_are_refused() {
        assert!(parse_filter(&json!({"op": "must", "field": "context_type",
                                     "conds": ["memory"]}))
        .is_ok());
        assert!(parse_filter(&json!({"op": "and", "conds": [
            {"op": "time_range", "field": "updated_at", "gte": "2026-01-01"},
            {"op": "must_not", "field": "uri", "conds": ["viking://resources/x"]}]}))
        .is_ok());
        assert_eq!(
            parse_filter(&json!({"op": "must", "field": "owner", "conds": ["x"]}))
                .unwrap_err()
                .code,
            Code::InvalidFilter
        );
        assert_eq!(
            parse_filter(&json!({"op": "range", "field": "level"}))
                .unwrap_err()
                .code,
            Code::InvalidFilter
        );
        // No op: OpenViking's engine's no-op, which every hit passes.
        assert!(
            matches!(parse_filter(&json!({"field": "context_type", "conds": ["memory"]})),
                Ok(Filter::And(v)) if v.is_empty())
        );
        assert_eq!(
            parse_types(&["memory,skill".into()]).unwrap(),
            ["memory", "skill"]
        );
        assert!(parse_types(&["memo".into()]).is_err());
        assert_eq!(parse_levels(&json!("0, 2")).unwrap(), [0, 2]);
        assert!(parse_levels(&json!(7)).is_err());
    }

    #[test]
    fn times_are_absolute_dates_or_relative() {
        let now = jiff::Timestamp::now().as_second() as f64;
        let week = parse_time("7d", false).unwrap();
        assert!((now - week - 7.0 * 86400.0).abs() < 5.0);
        assert_eq!(parse_time("1970-01-02", false).unwrap(), 86400.0);
        assert!(parse_time("1970-01-02", true).unwrap() > 86400.0 * 1.9);
        assert_eq!(parse_time("1970-01-01T00:01:00Z", false).unwrap(), 60.0);
        assert!(parse_time("soon", false).is_err());
    }
}
