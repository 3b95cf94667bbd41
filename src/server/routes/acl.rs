//! `GET /api/v1/acl` (OpenViking 0.5.2's `routers/acl.py`): a shared resource's ACL as
//! OpenViking reports it, read off vikingfs's access rule ([`Identity`]), which is fixed:
//! every user of the account reads and writes `viking://resources` (OpenViking's
//! `user:*` at `write`), and an admin or root manages it. vikingfs keeps no grants of its own,
//! so the report never has direct entries, and changing an ACL (`PUT`, `DELETE`, `grant`,
//! `revoke`) answers 501 (`super::unsupported`).
//!
//! As OpenViking's, an ACL is of `viking://resources` and below only (`INVALID_ARGUMENT`
//! elsewhere), and of a path that exists (`NOT_FOUND`).

use std::sync::Arc;

use axum::extract::State;
use serde::Deserialize;
use serde_json::json;

use super::{get, Routes};
use crate::server::auth::Identity;
use crate::server::extract::Params;
use crate::server::reply::{ok, ApiError, ApiResult};
use crate::server::{blocking, Api};

pub fn routes() -> Routes {
    Routes::new().route("/api/v1/acl", get(get_acl))
}

#[derive(Deserialize)]
struct AclQuery {
    uri: String,
}

async fn get_acl(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<AclQuery>,
) -> ApiResult {
    let p = who.path(&q.uri)?;
    if p.components().next() != Some("resources") {
        return Err(ApiError::invalid(
            "ACL is only supported for viking://resources",
        ));
    }
    blocking(move || {
        let view = super::fs::View::open(&api, &who)?;
        view.stat(&p)?.ok_or_else(|| super::fs::not_found(&p))?;
        // The rule every route applies: any user of the account reads and writes here.
        let everyone = json!([{ "principal": "user:*", "level": "write" }]);
        ok(json!({
            "uri": p.uri(),
            "acl_mode": "inherit",
            "direct_entries": [],
            "inherited_entries": everyone,
            "effective_entries": everyone,
        }))
    })
    .await
}
