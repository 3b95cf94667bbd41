//! OpenViking's admin routes for accounts and users (`/api/v1/admin/accounts…`, its
//! `routers/admin.py`), over the workspace's key store ([`crate::server::auth::Keys`], the one
//! `vikingfs key` writes): a user of the account is a user that has a key.
//!
//! - Who may call: the root key for the account routes; the root key or an admin key of the
//!   account for its users' routes (OpenViking's `require_auth_root` and
//!   `require_auth_root_or_admin`). A server with no key configured is open and has no users
//!   to manage: every admin route answers `PERMISSION_DENIED`, as OpenViking's dev mode does.
//! - One account per workspace (`vikingfs.account`): listing the accounts gives that one;
//!   creating it again is `ALREADY_EXISTS`; creating another, or deleting the served one (that
//!   is deleting the workspace), is `UNIMPLEMENTED` (501) saying so; any other account is
//!   `NOT_FOUND`.
//! - Deleting a user revokes its keys at once; unlike OpenViking, its files
//!   (`viking://user/{id}`) stay, for the owner to remove with `rm`.
//! - Groups, account settings, configuration and memory templates are not served.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{get, post, put, Routes};
use crate::server::auth::{check_name, Identity, KeyUser, KeysError, Role};
use crate::server::extract::{Body, Params};
use crate::server::reply::{self, ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};

pub fn routes() -> Routes {
    const A: &str = "/api/v1/admin/accounts";
    Routes::new()
        .route(A, post(create_account).get(list_accounts))
        .route(
            &format!("{A}/{{account_id}}"),
            get(get_account).delete(delete_account),
        )
        .route(
            &format!("{A}/{{account_id}}/users"),
            post(register_user).get(list_users),
        )
        .route(
            &format!("{A}/{{account_id}}/users/{{user_id}}"),
            get(get_user).delete(remove_user),
        )
        .route(
            &format!("{A}/{{account_id}}/users/{{user_id}}/role"),
            put(set_role),
        )
        .route(
            &format!("{A}/{{account_id}}/users/{{user_id}}/key"),
            post(regenerate_key),
        )
}

/// OpenViking's `NotFoundError(id, what)`.
fn not_found(what: &str, id: &str) -> ApiError {
    ApiError::new(
        Code::NotFound,
        format!("{} not found: {id}", capitalized(what)),
    )
    .with_details(json!({ "type": what, "resource": id }))
}

/// OpenViking's `AlreadyExistsError(id, what)`.
fn already_exists(what: &str, id: &str) -> ApiError {
    ApiError::new(
        Code::AlreadyExists,
        format!("{} already exists: {id}", capitalized(what)),
    )
    .with_details(json!({ "type": what, "resource": id }))
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn keys_failed(account: &str, e: KeysError) -> ApiError {
    match e {
        KeysError::Exists { user, .. } => already_exists("user", &user),
        KeysError::NoUser { user, .. } => not_found("user", &user),
        KeysError::Role { .. } | KeysError::Name { .. } | KeysError::EmptySeed => {
            ApiError::invalid(e.to_string())
        }
        KeysError::Io(e) => ApiError::internal(format!("API keys of account {account}: {e}")),
    }
}

/// The admin API needs keys (OpenViking: "api_key mode with root_api_key configured").
fn keyed(api: &Api) -> Result<(), ApiError> {
    if api.auth.is_open() {
        return Err(ApiError::denied(
            "the admin API needs a keyed server: no API key is configured, so every caller is \
             root and there are no users to manage (set server.root_api_key, or make a key \
             with `vikingfs key add`)",
        ));
    }
    Ok(())
}

fn root_only(api: &Api, who: &Identity) -> Result<(), ApiError> {
    keyed(api)?;
    if who.role != Role::Root {
        return Err(ApiError::denied("Requires role: root"));
    }
    Ok(())
}

/// The root key, or an admin key of `account`; and `account` is the one served.
fn manages(api: &Api, who: &Identity, account: &str) -> Result<(), ApiError> {
    keyed(api)?;
    match who.role {
        Role::Root => {}
        Role::Admin if who.account == account => {}
        Role::Admin => {
            return Err(ApiError::denied(format!(
                "ADMIN can only manage account: {}",
                who.account
            )))
        }
        Role::User => return Err(ApiError::denied("Requires role: root, admin")),
    }
    served(api, account)
}

fn served(api: &Api, account: &str) -> Result<(), ApiError> {
    if account == api.auth.account {
        Ok(())
    } else {
        Err(not_found("account", account))
    }
}

fn users(api: &Api) -> Result<Vec<KeyUser>, ApiError> {
    let account = &api.auth.account;
    api.auth
        .keys
        .users(account)
        .map_err(|e| keys_failed(account, e.into()))
}

/// OpenViking's `AccountSummary` of the served account: made when the workspace was.
fn account_summary(api: &Api) -> Result<Value, ApiError> {
    let ws = api.ops.workspace();
    let made = std::fs::metadata(ws.internal_dir())
        .and_then(|m| m.created().or_else(|_| m.modified()))
        .ok()
        .and_then(|t| jiff::Timestamp::try_from(t).ok())
        .map(isoformat);
    Ok(json!({
        "account_id": api.auth.account,
        "created_at": made,
        "user_count": users(api)?.len(),
        "status": "active",
    }))
}

/// As OpenViking's `datetime.isoformat()` writes a UTC time: microseconds and `+00:00`.
fn isoformat(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

/// `*` and `?` wildcards, as OpenViking's `fnmatch` filters use them.
fn wildcard(pat: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pat.chars().collect(), s.chars().collect());
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// OpenViking's `_paginate`: `limit` items of 1-based `page`, or all without a limit.
fn page<T>(items: Vec<T>, limit: Option<u64>, page: u64) -> Vec<T> {
    match limit {
        None => items,
        Some(l) => items
            .into_iter()
            .skip(((page.max(1) - 1) * l) as usize)
            .take(l as usize)
            .collect(),
    }
}

fn check_paging(limit: Option<u64>, page: Option<u64>) -> Result<u64, ApiError> {
    if limit == Some(0) || page == Some(0) {
        return Err(ApiError::invalid(
            "limit and page must be at least 1 (omit limit for every item)",
        ));
    }
    Ok(page.unwrap_or(1))
}

#[derive(Deserialize)]
struct CreateAccount {
    account_id: String,
    admin_user_id: String,
}

async fn create_account(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<CreateAccount>,
) -> ApiResult {
    root_only(&api, &who)?;
    check_name("account", &b.account_id)?;
    check_name("user", &b.admin_user_id)?;
    if b.account_id == api.auth.account {
        return Err(already_exists("account", &b.account_id));
    }
    Err(ApiError::new(
        Code::Unimplemented,
        format!(
            "this workspace serves one account, {served} (vikingfs.account): account {new} \
             needs a workspace of its own (a daemon with vikingfs.account = {new})",
            served = api.auth.account,
            new = b.account_id
        ),
    )
    .with_details(json!({ "account_id": b.account_id, "served_account": api.auth.account })))
}

#[derive(Deserialize)]
struct ListAccounts {
    name: Option<String>,
    limit: Option<u64>,
    page: Option<u64>,
    query: Option<String>,
}

async fn list_accounts(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<ListAccounts>,
) -> ApiResult {
    root_only(&api, &who)?;
    let p = check_paging(q.limit, q.page)?;
    blocking(move || {
        let id = &api.auth.account;
        let query = q.query.as_deref().unwrap_or("").trim().to_lowercase();
        let shown =
            q.name.as_deref().is_none_or(|n| wildcard(n, id)) && id.to_lowercase().contains(&query);
        let all = if shown {
            vec![account_summary(&api)?]
        } else {
            Vec::new()
        };
        ok(page(all, q.limit, p))
    })
    .await
}

async fn get_account(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(account_id): Path<String>,
) -> ApiResult {
    root_only(&api, &who)?;
    served(&api, &account_id)?;
    blocking(move || ok(account_summary(&api)?)).await
}

async fn delete_account(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(account_id): Path<String>,
) -> ApiResult {
    root_only(&api, &who)?;
    served(&api, &account_id)?;
    Err(ApiError::new(
        Code::Unimplemented,
        format!(
            "account {account_id} is the one this workspace serves: deleting it is deleting \
             the workspace (stop its daemon and remove the workspace directory)"
        ),
    )
    .with_details(json!({ "account_id": account_id })))
}

#[derive(Deserialize)]
struct RegisterUser {
    user_id: String,
    #[serde(default = "user_role")]
    role: String,
    seed: Option<String>,
    user_config: Option<Value>,
}

fn user_role() -> String {
    "user".into()
}

/// OpenViking's `validate_account_user_role`.
fn account_role(role: &str) -> Result<Role, ApiError> {
    match role {
        "user" => Ok(Role::User),
        "admin" => Ok(Role::Admin),
        "root" => Err(ApiError::denied(
            "Account users cannot be assigned ROOT; use server.root_api_key for ROOT access.",
        )),
        _ => Err(ApiError::invalid(
            "Account user role must be user or admin.",
        )),
    }
}

async fn register_user(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(account_id): Path<String>,
    Body(b): Body<RegisterUser>,
) -> ApiResult {
    manages(&api, &who, &account_id)?;
    let role = account_role(&b.role)?;
    check_name("user", &b.user_id)?;
    if b.user_config.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(ApiError::new(
            Code::Unimplemented,
            "user_config (memory policy, add targets) is not kept by vikingfs: register the \
             user without it",
        ));
    }
    blocking(move || {
        let (_, key) = api
            .auth
            .keys
            .add(&account_id, &b.user_id, role, b.seed.as_deref(), true)
            .map_err(|e| keys_failed(&account_id, e))?;
        ok(json!({ "account_id": account_id, "user_id": b.user_id, "user_key": key }))
    })
    .await
}

#[derive(Deserialize)]
struct ListUsers {
    limit: Option<u64>,
    page: Option<u64>,
    #[serde(default = "yes")]
    include_credentials: bool,
    name: Option<String>,
    role: Option<String>,
    query: Option<String>,
    #[serde(default)]
    include_summary: bool,
}

fn yes() -> bool {
    true
}

async fn list_users(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(account_id): Path<String>,
    Params(q): Params<ListUsers>,
) -> ApiResult {
    manages(&api, &who, &account_id)?;
    let p = check_paging(q.limit, q.page)?;
    blocking(move || {
        let all = users(&api)?;
        let query = q.query.as_deref().unwrap_or("").trim().to_lowercase();
        let picked: Vec<&KeyUser> = all
            .iter()
            .filter(|u| {
                q.name.as_deref().is_none_or(|n| wildcard(n, &u.user))
                    && q.role.as_deref().is_none_or(|r| r == u.role.name())
                    && u.user.to_lowercase().contains(&query)
            })
            .collect();
        let total = picked.len();
        let prefix = |u: &KeyUser| {
            u.keys
                .last()
                .map(|k| k.key_prefix.clone())
                .filter(|p| !p.is_empty())
        };
        let shown: Vec<Value> = page(picked, q.limit, p)
            .into_iter()
            .map(|u| {
                let mut v = json!({ "user_id": u.user, "role": u.role.name() });
                if !q.include_credentials {
                    // The keys are kept hashed: none can be handed to a gateway.
                    v["api_key_available"] = false.into();
                } else if let Some(p) = prefix(u) {
                    v["key_prefix"] = p.into();
                }
                v
            })
            .collect();
        if !q.include_summary {
            return ok(shown);
        }
        ok(json!({
            "users": shown,
            "total": total,
            "account_total": all.len(),
            "manager_count": all.iter().filter(|u| u.role != Role::User).count(),
            "key_count": if q.include_credentials {
                all.iter().filter(|u| prefix(u).is_some()).count()
            } else {
                0
            },
        }))
    })
    .await
}

async fn get_user(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path((account_id, user_id)): Path<(String, String)>,
) -> ApiResult {
    manages(&api, &who, &account_id)?;
    blocking(move || {
        let u = users(&api)?
            .into_iter()
            .find(|u| u.user == user_id)
            .ok_or_else(|| not_found("user", &user_id))?;
        ok(json!({ "user_id": u.user, "role": u.role.name() }))
    })
    .await
}

async fn remove_user(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path((account_id, user_id)): Path<(String, String)>,
) -> Result<(StatusCode, reply::Ok), ApiError> {
    manages(&api, &who, &account_id)?;
    blocking(move || {
        let n = api
            .auth
            .keys
            .remove(|k| k.account == account_id && k.user == user_id)
            .map_err(|e| keys_failed(&account_id, e))?;
        if n == 0 {
            return Err(not_found("user", &user_id));
        }
        let result = ok(json!({
            "account_id": account_id,
            "user_id": user_id,
            "status": "revoked",
            "keys_revoked": n,
        }))?;
        Ok((StatusCode::ACCEPTED, result))
    })
    .await
}

#[derive(Deserialize)]
struct SetRole {
    role: String,
}

async fn set_role(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path((account_id, user_id)): Path<(String, String)>,
    Body(b): Body<SetRole>,
) -> ApiResult {
    manages(&api, &who, &account_id)?;
    if b.role != "admin" {
        return Err(ApiError::invalid(
            "set_user_role only supports promotion to admin.",
        ));
    }
    blocking(move || {
        api.auth
            .keys
            .set_role(&account_id, &user_id, Role::Admin)
            .map_err(|e| keys_failed(&account_id, e))?;
        ok(json!({ "account_id": account_id, "user_id": user_id, "role": "admin" }))
    })
    .await
}

#[derive(Deserialize, Default)]
struct Regenerate {
    seed: Option<String>,
}

async fn regenerate_key(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path((account_id, user_id)): Path<(String, String)>,
    Body(b): Body<Option<Regenerate>>,
) -> ApiResult {
    manages(&api, &who, &account_id)?;
    let seed = b.unwrap_or_default().seed;
    blocking(move || {
        let (_, key) = api
            .auth
            .keys
            .regenerate(&account_id, &user_id, seed.as_deref())
            .map_err(|e| keys_failed(&account_id, e))?;
        ok(json!({ "user_key": key }))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_fnmatch_does() {
        for (p, s, m) in [
            ("*", "", true),
            ("*", "acme", true),
            ("ac*", "acme", true),
            ("a?me", "acme", true),
            ("a?me", "ame", false),
            ("*me", "acme", true),
            ("*x*", "acme", false),
            ("acme", "acme", true),
            ("acm", "acme", false),
            ("a*c*e", "abcde", true),
        ] {
            assert_eq!(wildcard(p, s), m, "{p} {s}");
        }
    }

    #[test]
    fn times_are_as_openvikings_isoformat() {
        let t: jiff::Timestamp = "2026-12-02T15:00:35.9955961Z".parse().unwrap();
        assert_eq!(isoformat(t), "2026-12-02T15:00:35.995596+00:00");
    }

    #[test]
    fn pages_are_one_based() {
        let v: Vec<u32> = (1..=5).collect();
        assert_eq!(page(v.clone(), None, 1), v);
        assert_eq!(page(v.clone(), Some(2), 1), [1, 2]);
        assert_eq!(page(v.clone(), Some(2), 3), [5]);
        assert_eq!(page(v, Some(2), 4), Vec::<u32>::new());
    }
}
