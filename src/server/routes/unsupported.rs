//! What vikingfs does not serve of OpenViking 0.5.2's API ([`super::openviking::ROUTES`]):
//! each such route answers `501 UNIMPLEMENTED` in OpenViking's envelope, naming what is not
//! supported and why, so that a client (the SDK, `ov`) reports that instead of a missing file.
//!
//! Invariant: every route of OpenViking's table is either served by a route group or answered
//! here ([`routes`] fills in exactly the (method, path) pairs the groups do not serve). The
//! route probe (tests/api) asks every route of the table and fails on a 404 or a 405.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::{Method, Uri};

use super::openviking::{Route, ROUTES};
use super::{any, delete, get, patch, post, put, Endpoint, Methods, Routes};
use crate::server::reply::ApiError;

/// A route of OpenViking's path as vikingfs's router writes it: FastAPI's `{name:path}` is a
/// catch-all, and a parameter takes the name the served routes give the same segment (the
/// router refuses two names for one segment).
pub fn axum_path(path: &str) -> String {
    path.split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(p) => match p.split_once(':') {
                    Some((name, "path")) => format!("{{*{name}}}"),
                    _ => format!(
                        "{{{}}}",
                        match p {
                            "session_id" => "sid",
                            "tool_result_id" => "rid",
                            "archive_id" => "archive",
                            "task_id" => "id",
                            other => other,
                        }
                    ),
                },
                None => seg.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// Why vikingfs does not serve `r`: what the route is for in OpenViking, and what vikingfs
/// has (or lacks) in its place.
pub fn reason(r: &Route) -> &'static str {
    match (r.router, r.path) {
        ("acl", _) => {
            "vikingfs keeps no per-path grants: its access rule is fixed (every user of the \
             account reads and writes resources and agent; a user's tree is its own; root and \
             admins see all), so an ACL can be read (GET /api/v1/acl) but not changed"
        }
        ("admin", p) if p.contains("/groups") => {
            "vikingfs has no user groups: a key is one user (vikingfs key add)"
        }
        ("admin", p) if p.contains("memory-templates") => {
            "memory extraction templates belong to OpenViking's language-model memory \
             pipeline; vikingfs derives memories without per-account templates"
        }
        ("admin", p) if p.ends_with("/settings") || p.contains("configuration") => {
            "vikingfs's settings are its config file (~/.vikingfs/config.json, --config), read at start: there is \
             no per-account or per-user settings store to read or change over the API"
        }
        ("admin", "/api/v1/admin/migrate") => {
            "vikingfs migrates its stores itself when a daemon starts (vikingfs migrate)"
        }
        ("admin", "/api/v1/admin/restart") => {
            "a vikingfs daemon is restarted by its service manager, not over the API"
        }
        ("admin", _) | ("agent_evolution", _) => {
            "agent evolution (experiences, trajectories, outcomes) needs OpenViking's \
             language-model agent loop, which vikingfs does not run"
        }
        ("compile", _) => {
            "Compile is OpenViking's language-model compilation of skills and routing; \
             vikingfs runs no compile tasks"
        }
        ("debug", _) => {
            "vikingfs's vectors live in its own index (SQLite or PostgreSQL), not a vector \
             database to scroll: see GET /api/v1/observer/vikingdb and vikingfs status"
        }
        ("openviking_assets", _) => {
            "OpenViking's packaged assets (bundled skills and templates) are not part of \
             vikingfs"
        }
        ("pack", _) => {
            "the .ovpack export, import, backup and restore are not implemented; back up the \
             workspace directory, and use snapshot/restore for history"
        }
        ("privacy_configs", _) => {
            "vikingfs keeps no privacy configurations (saved secrets and their versions): \
             files are stored as they are and the access rule decides who reads them"
        }
        ("sessions", _) => {
            "vikingfs does not externalize large tool results: a session's messages are kept \
             whole, so there are no tool results to search"
        }
        ("snapshot", "/api/v1/snapshot/versions") => {
            "the versions of a Compile output file are OpenViking's Compile records; vikingfs \
             keeps every version of every file in its history: see GET /api/v1/snapshot/log \
             with paths=URI"
        }
        ("snapshot", "/api/v1/snapshot/diff-paths") => {
            "listing every path changed between two snapshots is not implemented; \
             GET /api/v1/snapshot/log with paths names the changes and their paths"
        }
        ("stats", _) => {
            "memory statistics need per-memory access counts (OpenViking's hotness) and \
             extraction counts per session, which vikingfs does not keep"
        }
        ("snapshot", _) => {
            "vikingfs's history keeps every version of every file (no commit-level ignore \
             file): .ovgitignore is not kept; .vikingignore decides what is indexed"
        }
        ("skills", "/api/v1/skills/find") => {
            "vikingfs does not rank skills apart from other files: a skill is a directory of \
             files, found by POST /api/v1/search/find with target_uri set to the skills' root"
        }
        ("user_settings", _) => {
            "vikingfs keeps no per-user add locations: add-resource takes its target in the \
             request (`to`/`parent`)"
        }
        ("watches", _) => {
            "vikingfs keeps no watches (periodic re-adds of a path); re-run add-resource, or \
             work in the mount, which the daemon indexes as files change"
        }
        ("webdav", _) => {
            "vikingfs serves no WebDAV: the same tree is its FUSE mount and the HTTP API"
        }
        _ => "not part of vikingfs",
    }
}

/// The 501 answer of a request (`method` at `uri`), OpenViking's route being `r`.
fn answer(r: &Route, method: &Method, uri: &Uri) -> ApiError {
    ApiError::unimplemented(format!("{method} {}", uri.path()), reason(r))
}

/// A 501 handler for `r` (a catch-all's request names its own method).
fn handler(
    r: Route,
) -> impl Fn(Method, Uri) -> std::future::Ready<ApiError> + Clone + Send + Sync + 'static {
    move |method: Method, uri: Uri| std::future::ready(answer(&r, &method, &uri))
}

/// The 501 routes: every route of OpenViking's table that `served` does not answer. A path with a method axum's router has no filter for (WebDAV's
/// `PROPFIND`, `MKCOL`, `MOVE`, `OPTIONS`) answers 501 whatever its method.
pub fn routes(served: &[Endpoint]) -> Routes {
    let served: BTreeSet<(&str, &str)> =
        served.iter().map(|e| (e.method, e.path.as_str())).collect();
    let mut by_path: BTreeMap<String, Vec<Route>> = BTreeMap::new();
    for r in ROUTES {
        let path = axum_path(r.path);
        if served.contains(&(r.method, path.as_str())) || served.contains(&("ANY", path.as_str())) {
            continue;
        }
        by_path.entry(path).or_default().push(*r);
    }
    let mut out = Routes::new();
    for (path, rs) in by_path {
        let standard = |m: &str| matches!(m, "GET" | "POST" | "PUT" | "PATCH" | "DELETE");
        if !rs.iter().all(|r| standard(r.method)) {
            out = out.route(&path, any(handler(rs[0])));
            continue;
        }
        let mut m: Option<Methods> = None;
        for r in rs {
            let h = handler(r);
            m = Some(match (m, r.method) {
                (None, "GET") => get(h),
                (None, "POST") => post(h),
                (None, "PUT") => put(h),
                (None, "PATCH") => patch(h),
                (None, _) => delete(h),
                (Some(m), "GET") => m.get(h),
                (Some(m), "POST") => m.post(h),
                (Some(m), "PUT") => m.put(h),
                (Some(m), "PATCH") => m.patch(h),
                (Some(m), _) => m.delete(h),
            });
        }
        if let Some(m) = m {
            out = out.route(&path, m);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_written_as_the_router_matches_them() {
        assert_eq!(
            axum_path("/webdav/resources/{resource_path:path}"),
            "/webdav/resources/{*resource_path}"
        );
        assert_eq!(
            axum_path("/api/v1/sessions/{session_id}/tool-results/{tool_result_id}/search"),
            "/api/v1/sessions/{sid}/tool-results/{rid}/search"
        );
    }

    #[test]
    fn every_unserved_route_has_a_reason() {
        let served = super::super::served();
        let answered = routes(&served).served;
        assert!(answered.len() > 50, "{answered:?}");
        for e in answered {
            let r = ROUTES
                .iter()
                .find(|r| axum_path(r.path) == e.path)
                .expect("a route of the table");
            assert_ne!(reason(r), "not part of vikingfs", "{r:?}");
        }
    }
}
