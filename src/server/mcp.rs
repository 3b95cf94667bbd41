//! MCP: OpenViking 0.5.2's core MCP tools (its `openviking/server/mcp_endpoint.py`: their
//! names, argument names, annotations and result texts), served at `/mcp` over streamable HTTP
//! in the API's router ([`routes`]) and by `vikingfs mcp` over stdio ([`serve_stdio`]), with
//! rmcp, the official SDK, speaking the protocol.
//!
//! - A tool has no logic of its own: it is one request (or a few) to the HTTP API's routes —
//!   `find` is `POST /api/v1/search/find`, `read` is `GET /api/v1/content/read`, `forget` is
//!   `DELETE /api/v1/fs`, `remember` a session's messages and commit — sent in-process through
//!   the router, or to the daemon over the workspace's socket ([`Upstream`]), carrying the MCP
//!   caller's identity headers. The tool writes the envelope's result as OpenViking's text, and
//!   an error envelope as a tool error `CODE: message` with the error beside it.
//! - Who calls: `/mcp` answers a caller the API would refuse as OpenViking's identity middleware
//!   does (401 without a key, in JSON-RPC's shape), and each tool's requests carry the caller's
//!   headers, so the routes make the one access check. Over stdio the caller is the workspace's
//!   owner, like a request on the Unix socket.
//! - The tool list is data (`mcp_tools.json`): OpenViking's input schemas and annotations with
//!   descriptions of our own. ChatGPT's connectors expect `search` and `fetch`: OpenViking's
//!   `search` keeps its name and text, and its structured result also carries the connectors'
//!   `results` (`[{id, title, url}]`, the id a URI); `fetch(id)` answers `{id, title, text, url,
//!   metadata}`.
//! - Like OpenViking's (`stateless_http=True`), the HTTP endpoint keeps no MCP sessions: each
//!   POST is answered on its own, as JSON.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock, OnceLock};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{self, header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tower::ServiceExt as _;

use super::auth::Identity;
use super::reply::{ApiError, Code};
use super::routes::{any, Routes};
use super::{Api, Local};

/// The tools, as `tools/list` gives them.
pub static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("mcp_tools.json")).expect("mcp_tools.json is a tool list")
});

/// The largest answer of a route a tool reads (a file's content, a listing).
const MAX_ANSWER: usize = 1 << 30;
/// Image and audio bytes `read` returns inline, at most (OpenViking's
/// `MAX_INLINE_TOOL_RESULT_MEDIA_BYTES`); larger media are refused with a hint.
const MAX_INLINE_MEDIA: u64 = 3_932_160;

/// rmcp's streamable HTTP service over the tools.
type McpService = StreamableHttpService<Tools, NeverSessionManager>;

/// The service answering `/mcp` for `api`: its tools send their requests through this same
/// API in-process.
fn service(api: &Arc<Api>) -> McpService {
    let tools = Tools {
        up: Upstream::in_process(api.clone(), false),
    };
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(api.config.max_body_bytes);
    // rmcp checks the Host header against loopback names (DNS rebinding): right for an open
    // server, which binds to loopback only; a server with keys is reached by any name.
    if !api.auth.is_open() {
        config = config.disable_allowed_hosts();
    }
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// `/mcp` (and `/mcp/`): the caller is checked as every route checks it, then rmcp's streamable
/// HTTP service answers. The service is made at the first request, from the router's state
/// (so that the routes can be listed without an API: `routes::endpoints`).
pub fn routes() -> Routes {
    let made: Arc<OnceLock<McpService>> = Arc::default();
    let handler = move |axum::extract::State(api): axum::extract::State<Arc<Api>>, req: Request| {
        let made = made.clone();
        async move {
            let (parts, body) = req.into_parts();
            if let Err(e) = Identity::of(&api, &parts) {
                return unauthorized(e);
            }
            let service = made.get_or_init(|| service(&api)).clone();
            let resp = service
                .oneshot(Request::from_parts(parts, body))
                .await
                .unwrap_or_else(|never| match never {});
            resp.map(Body::new)
        }
    };
    Routes::new()
        .route("/mcp", any(handler.clone()))
        .route("/mcp/", any(handler))
}

/// A refused caller, as OpenViking's MCP identity middleware answers it: the HTTP status of the
/// error's code (401 without a key or with a wrong one), and a JSON-RPC error (-32001) naming
/// why.
fn unauthorized(e: ApiError) -> Response {
    let body =
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": e.message}});
    (e.status(), axum::Json(body)).into_response()
}

/// `vikingfs mcp`: serve the tools on standard input and output until the client closes them.
pub async fn serve_stdio(up: Upstream) -> anyhow::Result<()> {
    let running = Tools { up }
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP over stdio: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("MCP over stdio: {e}"))?;
    Ok(())
}

/// Where a tool's requests go.
#[derive(Clone)]
pub struct Upstream(Arc<Via>);

enum Via {
    /// The API's router in this process, built at the first call (the router serving `/mcp`
    /// holds this, so it cannot be handed itself). `owner`: every caller is the workspace's
    /// owner, as a request on the Unix socket is (`vikingfs mcp` with no daemon).
    Router {
        api: Option<Arc<Api>>,
        router: OnceLock<Router>,
        owner: bool,
    },
    /// The daemon serving the workspace, over its owner-only socket (`vikingfs mcp`).
    Socket(PathBuf),
}

impl Upstream {
    pub fn in_process(api: Arc<Api>, owner: bool) -> Upstream {
        Upstream(Arc::new(Via::Router {
            api: Some(api),
            router: OnceLock::new(),
            owner,
        }))
    }

    /// Through `router` as it is (the tests' stub routes).
    #[cfg(test)]
    fn router(router: Router) -> Upstream {
        Upstream(Arc::new(Via::Router {
            api: None,
            router: OnceLock::from(router),
            owner: false,
        }))
    }

    pub fn socket(path: PathBuf) -> Upstream {
        Upstream(Arc::new(Via::Socket(path)))
    }

    /// Send one request; its status and body.
    async fn send(
        &self,
        caller: &Caller,
        method: Method,
        uri: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Bytes), Failure> {
        let mut b = http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "localhost");
        for (k, v) in &caller.headers {
            b = b.header(k, v);
        }
        if let Some(call) = &caller.call {
            // Over the daemon's socket (the router in this process gets the extension too).
            b = b.header(super::caller::MCP_CALL_HEADER, call.as_str());
        }
        let bytes = match body {
            Some(v) => {
                b = b.header(header::CONTENT_TYPE, "application/json");
                serde_json::to_vec(v).unwrap_or_default()
            }
            None => Vec::new(),
        };
        let mut req = b.body(Body::from(bytes)).map_err(|e| {
            Failure::api(Code::InvalidArgument, format!("request {uri}: {e}"), None)
        })?;
        match &*self.0 {
            Via::Router { api, router, owner } => {
                if *owner || caller.local {
                    req.extensions_mut().insert(Local);
                }
                if let Some(call) = &caller.call {
                    req.extensions_mut()
                        .insert(super::caller::McpCall(call.clone()));
                }
                let router = router
                    .get_or_init(|| {
                        let api = api.clone().expect("a router, or the API to build it from");
                        super::routes::router(api)
                    })
                    .clone();
                let resp = router
                    .oneshot(req)
                    .await
                    .unwrap_or_else(|never| match never {});
                let status = resp.status();
                let body = axum::body::to_bytes(resp.into_body(), MAX_ANSWER)
                    .await
                    .map_err(|e| {
                        Failure::api(Code::Internal, format!("answer of {uri}: {e}"), None)
                    })?;
                Ok((status, body))
            }
            Via::Socket(path) => over_socket(path, req).await.map_err(|e| {
                Failure::api(
                    Code::Unavailable,
                    format!("the daemon at {}: {e}", path.display()),
                    None,
                )
            }),
        }
    }

    /// A request whose answer is OpenViking's envelope: the whole envelope when it is ok (a
    /// listing's `has_more` sits beside its `result`), the error as a [`Failure`] otherwise.
    async fn call(
        &self,
        caller: &Caller,
        method: Method,
        uri: &str,
        body: Option<&Value>,
    ) -> Result<Value, Failure> {
        let (status, bytes) = self.send(caller, method, uri, body).await?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() && v["status"] == "ok" {
            return Ok(v);
        }
        Err(Failure::of_answer(status, &bytes, &v))
    }

    /// `call`'s `result`.
    async fn result(
        &self,
        caller: &Caller,
        method: Method,
        uri: &str,
        body: Option<&Value>,
    ) -> Result<Value, Failure> {
        let mut v = self.call(caller, method, uri, body).await?;
        Ok(v["result"].take())
    }

    async fn get(
        &self,
        caller: &Caller,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Value, Failure> {
        self.result(caller, Method::GET, &with_query(path, query), None)
            .await
    }

    async fn post(&self, caller: &Caller, path: &str, body: &Value) -> Result<Value, Failure> {
        self.result(caller, Method::POST, path, Some(body)).await
    }
}

/// HTTP/1 over a fresh connection to the daemon's socket (cheap, and no pool to keep).
async fn over_socket(
    path: &std::path::Path,
    req: http::Request<Body>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    use http_body_util::BodyExt;
    let stream = tokio::net::UnixStream::connect(path).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

fn with_query(path: &str, query: &[(&str, String)]) -> String {
    match serde_urlencoded::to_string(query) {
        Ok(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
    }
}

/// Who calls a tool: the identity headers of the MCP request (none over stdio), and whether it
/// came over the owner-only Unix socket.
#[derive(Clone, Default)]
struct Caller {
    headers: HeaderMap,
    local: bool,
    /// This tool call, as the history names it (`client C, tool T, call R`): every request it
    /// makes is one command for `undo` (`super::caller`).
    call: Option<String>,
}

impl Caller {
    fn of(ctx: &RequestContext<RoleServer>) -> Caller {
        let Some(parts) = ctx.extensions.get::<http::request::Parts>() else {
            return Caller::default();
        };
        let mut headers = HeaderMap::new();
        for (k, v) in &parts.headers {
            let n = k.as_str();
            if n == "authorization" || n == "x-api-key" || n.starts_with("x-openviking-") {
                headers.append(k, v.clone());
            }
        }
        Caller {
            headers,
            local: parts.extensions.get::<Local>().is_some(),
            call: None,
        }
    }

    /// `self`, making tool call `tool`, named by the client's name from the `clientInfo` of
    /// its initialize request (a session over stdio). Streamable HTTP here is stateless: a
    /// tool call does not know the initialize that came before it (rmcp gives it its own
    /// default), so the client's `User-Agent` names it instead.
    fn calling(mut self, ctx: &RequestContext<RoleServer>, tool: &str) -> Caller {
        let said = ctx
            .peer
            .peer_info()
            .map(|i| i.client_info.clone())
            .filter(|c| *c != rmcp::model::Implementation::default());
        let agent = || {
            let parts = ctx.extensions.get::<http::request::Parts>()?;
            let ua = parts.headers.get(header::USER_AGENT)?.to_str().ok()?;
            Some(format!("user-agent {ua}"))
        };
        let client = match said {
            Some(c) => format!("client {}", c.name),
            None => agent().unwrap_or_else(|| "client unnamed".into()),
        };
        let call = super::caller::new_name();
        self.call = Some(format!("{client}, tool {tool}, call {call}"));
        self
    }
}

/// A failed tool call: its text, and OpenViking's error object when a route answered one.
#[derive(Debug)]
struct Failure {
    text: String,
    error: Option<Value>,
}

impl Failure {
    fn api(code: Code, message: impl Into<String>, details: Option<Value>) -> Failure {
        let message = message.into();
        Failure {
            text: format!("{code}: {message}"),
            error: Some(json!({"code": code, "message": message, "details": details})),
        }
    }

    fn text(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            error: None,
        }
    }

    fn invalid(message: impl Into<String>) -> Failure {
        Failure::api(Code::InvalidArgument, message, None)
    }

    /// The error of an answer: the envelope's, or the one OpenViking's handlers would make of a
    /// bare status.
    fn of_answer(status: StatusCode, bytes: &[u8], v: &Value) -> Failure {
        let e = &v["error"];
        if let (Some(code), Some(message)) = (e["code"].as_str(), e["message"].as_str()) {
            let details = Some(e["details"].clone()).filter(|d| !d.is_null());
            // Every code a route answers is one of OpenViking's (`Code`); a name it does not
            // have would be an answer from elsewhere, reported as `UNKNOWN` with the name kept.
            return match Code::from_name(code) {
                Some(code) => Failure::api(code, message, details),
                None => Failure::api(Code::Unknown, format!("{code}: {message}"), details),
            };
        }
        let text = String::from_utf8_lossy(bytes).trim().to_string();
        let status = if status.is_success() {
            StatusCode::BAD_GATEWAY
        } else {
            status
        };
        let e = ApiError::framework(status, text);
        Failure::api(e.code, e.message, e.details)
    }

    /// The failure's code; `None` for a plain text failure (an unknown tool).
    fn code(&self) -> Option<Code> {
        self.error
            .as_ref()
            .and_then(|e| e["code"].as_str())
            .and_then(Code::from_name)
    }

    fn message(&self) -> &str {
        self.error
            .as_ref()
            .and_then(|e| e["message"].as_str())
            .unwrap_or(&self.text)
    }
}

/// What a tool answers.
enum Done {
    /// OpenViking's text (structured as `{"result": text}` for a tool with an output schema).
    Text(String),
    /// Content blocks as they are (`read` of images and audio).
    Blocks(Vec<ContentBlock>),
    /// A text and the structured content beside it.
    Structured(String, Value),
}

type Outcome = Result<Done, Failure>;

fn to_result(outcome: Outcome, structured: bool) -> CallToolResult {
    match outcome {
        Ok(Done::Text(t)) => {
            let mut r = CallToolResult::success(vec![ContentBlock::text(t.clone())]);
            if structured {
                r.structured_content = Some(json!({ "result": t }));
            }
            r
        }
        Ok(Done::Blocks(b)) => CallToolResult::success(b),
        Ok(Done::Structured(t, v)) => {
            let mut r = CallToolResult::success(vec![ContentBlock::text(t)]);
            r.structured_content = Some(v);
            r
        }
        Err(f) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(f.text.clone())]);
            if structured {
                let mut s = json!({ "result": f.text });
                if let Some(e) = f.error {
                    s["error"] = e;
                }
                r.structured_content = Some(s);
            }
            r
        }
    }
}

/// The MCP server: the tools over an [`Upstream`].
#[derive(Clone)]
pub struct Tools {
    up: Upstream,
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("openviking", env!("CARGO_PKG_VERSION")).with_title("vikingfs"),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(TOOLS.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        TOOLS.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = self.get_tool(&request.name) else {
            let f = Failure::text(format!("Unknown tool: {}", request.name));
            return Ok(to_result(Err(f), false).into());
        };
        let caller = Caller::of(&context).calling(&context, &tool.name);
        let args = Value::Object(request.arguments.unwrap_or_default());
        let outcome = self.dispatch(&tool.name, &caller, args).await;
        Ok(to_result(outcome, tool.output_schema.is_some()).into())
    }
}

/// The arguments of tool `name` as a `T`; a tool error naming the misfit otherwise.
fn args<T: DeserializeOwned>(name: &str, v: Value) -> Result<T, Failure> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        Failure::invalid(format!(
            "invalid arguments for {name}: {}: {}",
            e.path(),
            e.inner()
        ))
    })
}

impl Tools {
    async fn dispatch(&self, name: &str, c: &Caller, v: Value) -> Outcome {
        match name {
            "find" => self.find(c, args(name, v)?).await,
            "search" => self.search(c, args(name, v)?).await,
            "read" => self.read(c, args(name, v)?).await,
            "list" => self.list(c, args(name, v)?).await,
            "tree" => self.tree(c, args(name, v)?).await,
            "grep" => self.grep(c, args(name, v)?).await,
            "glob" => self.glob(c, args(name, v)?).await,
            "write" => self.write(c, args(name, v)?).await,
            "edit" => self.edit(c, args(name, v)?).await,
            "remember" => self.remember(c, args(name, v)?).await,
            "forget" => self.forget(c, args(name, v)?).await,
            "add_resource" => self.add_resource(c, args(name, v)?).await,
            "add_skill" => self.add_skill(c, args(name, v)?).await,
            "health" => Ok(self.health(c).await),
            "fetch" => self.fetch(c, args(name, v)?).await,
            "list_users" => self.list_users(c, args(name, v)?).await,
            "get_acl" => self.get_acl(c, args(name, v)?).await,
            "list_groups" | "set_acl" | "privacy_tree" | "privacy_resolve" | "privacy_upsert"
            | "download" | "list_watches" | "cancel_watch" => Err(not_supported(name)),
            _ => Err(Failure::text(format!("Unknown tool: {name}"))),
        }
    }
}

/// A tool of OpenViking's that vikingfs does not serve, and why: a tool error
/// (`UNIMPLEMENTED`), so an agent is told rather than handed an empty answer.
fn not_supported(tool: &str) -> Failure {
    let why = match tool {
        "list_groups" => "vikingfs has no user groups: a key is one user",
        "set_acl" => {
            "vikingfs's access rule is fixed (every user of the account reads and writes \
             viking://resources; a user's tree is its own) and it keeps no grants: get_acl shows it"
        }
        "privacy_tree" | "privacy_resolve" | "privacy_upsert" => {
            "vikingfs keeps no privacy configurations (saved secrets and their versions)"
        }
        "download" => {
            "vikingfs issues no signed download links: read text with the read tool, or fetch \
             GET /api/v1/content/download?uri=... with the API key"
        }
        _ => "vikingfs keeps no watches (periodic re-adds of a path): run add_resource again",
    };
    Failure::api(
        Code::Unimplemented,
        format!("{tool} is not supported by vikingfs: {why}"),
        None,
    )
}

/// `list_users`' arguments.
#[derive(Deserialize)]
struct ListUsersArgs {
    #[serde(default)]
    query: String,
    #[serde(default = "default_users_limit")]
    limit: u32,
    #[serde(default = "default_page")]
    page: u32,
    #[serde(default)]
    include_credentials: bool,
}

fn default_users_limit() -> u32 {
    100
}

fn default_page() -> u32 {
    1
}

/// A tool's one `uri` argument.
#[derive(Deserialize)]
struct UriArgs {
    uri: String,
}

/// A string or a list of strings (OpenViking's `str | list[str]`).
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

fn ten() -> i64 {
    10
}

fn min_score() -> f64 {
    0.35
}

/// `v` without its null fields (an argument not given is not sent).
fn body(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, x)| !x.is_null()).collect()),
        v => v,
    }
}

/// A value as Python's `str()` writes it in OpenViking's texts (`None` for null).
fn py(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        v => v.to_string(),
    }
}

// -- find / search -----------------------------------------------------------------------------

#[derive(Deserialize)]
struct FindArgs {
    query: String,
    #[serde(default)]
    target_uri: String,
    #[serde(default = "ten")]
    limit: i64,
    #[serde(default = "min_score")]
    min_score: f64,
    #[serde(default)]
    level: Option<Value>,
    #[serde(default)]
    context_type: Option<Value>,
    #[serde(default)]
    read_content: bool,
    #[serde(default)]
    events_time_decay_protection: Option<String>,
}

#[derive(Deserialize)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    search_type: Option<String>,
    #[serde(default)]
    target_uri: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default = "ten")]
    limit: i64,
    #[serde(default)]
    min_score: Option<f64>,
    #[serde(default)]
    level: Option<Value>,
    #[serde(default)]
    context_type: Option<Value>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    query_expansion: Option<String>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    quotas: Option<Value>,
    #[serde(default)]
    purpose: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    detail_by_category: Option<Map<String, Value>>,
    #[serde(default)]
    dedup_turns: Option<i64>,
    #[serde(default)]
    exclude_uris: Option<Vec<String>>,
    #[serde(default)]
    peer_scope: Option<String>,
    #[serde(default)]
    other_peer_penalty: Option<f64>,
    #[serde(default)]
    other_peer_penalties: Option<Map<String, Value>>,
    #[serde(default)]
    rewrite: Option<String>,
    #[serde(default)]
    rewrite_max_bullets: Option<i64>,
    #[serde(default)]
    read_content: bool,
    #[serde(default)]
    events_time_decay_protection: Option<String>,
}

/// The URI an agent should read for a hit: a skill is indexed as a whole package, and the hit
/// may be any file in it (or its summaries); the skill is its `SKILL.md`.
fn hit_uri(context_type: &str, uri: &str) -> String {
    if context_type != "skill" {
        return uri.to_string();
    }
    let bare = uri.trim_end_matches('/');
    let bare = [".abstract.md", ".overview.md"]
        .iter()
        .find_map(|s| bare.strip_suffix(&format!("/{s}")))
        .unwrap_or(bare);
    let Some(path) = bare.strip_prefix("viking://") else {
        return uri.to_string();
    };
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // viking://agent/skills/NAME/... or viking://user/ID/skills/NAME/...
    let at = match parts.as_slice() {
        ["agent", "skills", ..] => 1,
        ["user", _, "skills", ..] => 2,
        _ => return uri.to_string(),
    };
    match parts.get(at + 1) {
        Some(name) if !name.starts_with('.') => {
            format!("viking://{}/SKILL.md", parts[..at + 2].join("/"))
        }
        _ => uri.to_string(),
    }
}

/// A find/search result (`memories`, `resources`, `skills`) as OpenViking's MCP text, and the
/// hits as ChatGPT connectors' `results`.
fn format_hits(result: &Value, read_content: bool) -> (String, Vec<Value>) {
    struct Item {
        kind: &'static str,
        uri: String,
        score: f64,
        abstract_: String,
        origin_score: Value,
        time_score: Value,
        content: Option<String>,
    }
    let mut items: Vec<Item> = Vec::new();
    for (kind, key) in [
        ("memory", "memories"),
        ("resource", "resources"),
        ("skill", "skills"),
    ] {
        for m in result[key].as_array().into_iter().flatten() {
            let uri = hit_uri(kind, m["uri"].as_str().unwrap_or(""));
            let text = |k: &str| m[k].as_str().filter(|s| !s.is_empty()).map(str::to_string);
            let item = Item {
                kind,
                score: m["score"].as_f64().unwrap_or(0.0),
                abstract_: text("abstract")
                    .or_else(|| text("overview"))
                    .unwrap_or_default(),
                origin_score: m["origin_score"].clone(),
                time_score: m["time_score"].clone(),
                content: m["content"].as_str().map(str::to_string),
                uri,
            };
            // Several files of one skill package can match: the best-scored one stays.
            match items.iter().position(|i| i.uri == item.uri) {
                Some(p) if item.score > items[p].score => items[p] = item,
                Some(_) => {}
                None => items.push(item),
            }
        }
    }
    if items.is_empty() {
        return ("No matching context found.".into(), Vec::new());
    }
    let mut lines = Vec::new();
    let mut results = Vec::new();
    for i in &items {
        let abstract_ = if i.abstract_.is_empty() {
            "(no abstract)"
        } else {
            i.abstract_.trim()
        };
        let mut line = format!(
            "- [{} {:.0}%] {}\n    {}",
            i.kind,
            i.score * 100.0,
            i.uri,
            abstract_
        );
        if !i.origin_score.is_null() || !i.time_score.is_null() {
            line.push_str(&format!(
                "\n    origin_score={}, time_score={}",
                py(&i.origin_score),
                py(&i.time_score)
            ));
        }
        if read_content {
            if let Some(c) = &i.content {
                line.push_str(&format!("\n\n    {c}"));
            }
        }
        lines.push(line);
        results.push(json!({ "id": i.uri, "title": title_of(&i.uri), "url": i.uri }));
    }
    let text = format!(
        "Found {} item(s):\n\n{}{}",
        items.len(),
        lines.join("\n"),
        if read_content {
            ""
        } else {
            "\n\nUse the read tool to expand a URI."
        }
    );
    (text, results)
}

/// A document's title: the last name of its URI.
fn title_of(uri: &str) -> String {
    uri.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(uri)
        .to_string()
}

impl Tools {
    async fn find(&self, c: &Caller, a: FindArgs) -> Outcome {
        let req = body(json!({
            "query": a.query,
            "target_uri": a.target_uri,
            "limit": a.limit,
            "score_threshold": a.min_score,
            "level": a.level,
            "context_type": a.context_type,
            "read_content": a.read_content,
            "events_time_decay_protection": a.events_time_decay_protection,
        }));
        let result = self.up.post(c, "/api/v1/search/find", &req).await?;
        Ok(Done::Text(format_hits(&result, a.read_content).0))
    }

    /// OpenViking's `search`, list or context mode. The context-only arguments are sent only
    /// when given (not their defaults), so the route refuses them in list mode as OpenViking's
    /// does; the two this tool splits in two (`detail_by_category`, `other_peer_penalties`) are
    /// sent under the route's names.
    async fn search(&self, c: &Caller, a: SearchArgs) -> Outcome {
        let context = a.mode.as_deref() == Some("context");
        let given = |v: Option<String>, default: &str| v.filter(|s| s != default);
        let detail = given(a.detail, "auto");
        if context && detail.is_some() && a.detail_by_category.is_some() {
            return Err(Failure::invalid(
                "detail cannot be combined with detail_by_category in mode='context'",
            ));
        }
        if context && a.other_peer_penalty.is_some() && a.other_peer_penalties.is_some() {
            return Err(Failure::invalid(
                "other_peer_penalty cannot be combined with other_peer_penalties in mode='context'",
            ));
        }
        let detail = match a.detail_by_category {
            Some(m) => Some(Value::Object(m)),
            None => detail.map(Value::String),
        };
        let penalty = match a.other_peer_penalties {
            Some(m) => Some(Value::Object(m)),
            None => a.other_peer_penalty.map(|p| json!(p)),
        };
        let score = if context {
            a.min_score
        } else {
            Some(a.min_score.unwrap_or(0.35))
        };
        let req = body(json!({
            "query": a.query,
            "search_type": a.search_type,
            "mode": a.mode,
            "target_uri": Some(a.target_uri).filter(|t| !t.is_empty() || !context),
            "session_id": a.session_id,
            "limit": a.limit,
            "score_threshold": score,
            "level": a.level,
            "context_type": a.context_type,
            "read_content": Some(a.read_content).filter(|r| *r || !context),
            "events_time_decay_protection": a.events_time_decay_protection,
            "query_expansion": given(a.query_expansion, "auto"),
            "max_tokens": a.max_tokens.filter(|t| *t != 1600),
            "quotas": a.quotas,
            "purpose": a.purpose,
            "detail": detail,
            "dedup_turns": a.dedup_turns.filter(|d| *d != 0),
            "exclude_uris": a.exclude_uris,
            "peer_scope": given(a.peer_scope, "all"),
            "other_peer_penalty": penalty,
            "rewrite": given(a.rewrite, "off").map(|r| r == "auto"),
            "rewrite_max_bullets": a.rewrite_max_bullets.filter(|b| *b != 6),
        }));
        let result = self.up.post(c, "/api/v1/search/search", &req).await?;
        if context {
            for k in ["digest", "rendered"] {
                if let Some(t) = result[k].as_str().filter(|t| !t.trim().is_empty()) {
                    return Ok(Done::Text(t.to_string()));
                }
            }
            return Ok(Done::Text("No matching context found.".into()));
        }
        let (text, results) = format_hits(&result, a.read_content);
        let structured = json!({ "result": text, "results": results });
        Ok(Done::Structured(text, structured))
    }
}

// -- read / fetch ------------------------------------------------------------------------------

#[derive(Deserialize)]
struct ReadArgs {
    uris: OneOrMany,
    #[serde(default)]
    offset: i64,
    #[serde(default = "minus_one")]
    limit: i64,
}

fn minus_one() -> i64 {
    -1
}

#[derive(Clone, Copy, PartialEq)]
enum Media {
    Image,
    Audio,
    Video,
}

fn media_of(uri: &str) -> Option<Media> {
    let path = uri.split(['#', '?']).next().unwrap_or(uri);
    let name = path.rsplit('/').next().unwrap_or(path);
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    match ext.as_str() {
        "gif" | "jpeg" | "jpg" | "png" | "webp" => Some(Media::Image),
        "flac" | "m4a" | "mp3" | "oga" | "ogg" | "wav" => Some(Media::Audio),
        "avi" | "m4v" | "mkv" | "mov" | "mp4" | "webm" => Some(Media::Video),
        _ => None,
    }
}

/// The MIME type of image or audio bytes, from their magic numbers (what MCP clients render).
fn sniff(data: &[u8], media: Media, uri: &str) -> Option<&'static str> {
    let ext = uri.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match media {
        Media::Image if data.starts_with(b"\x89PNG\r\n\x1a\n") => Some("image/png"),
        Media::Image if data.starts_with(b"\xff\xd8\xff") => Some("image/jpeg"),
        Media::Image if data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a") => {
            Some("image/gif")
        }
        Media::Image
            if data.len() >= 12 && data.starts_with(b"RIFF") && &data[8..12] == b"WEBP" =>
        {
            Some("image/webp")
        }
        Media::Audio
            if data.len() >= 12 && data.starts_with(b"RIFF") && &data[8..12] == b"WAVE" =>
        {
            Some("audio/wav")
        }
        Media::Audio if data.starts_with(b"fLaC") => Some("audio/flac"),
        Media::Audio if data.starts_with(b"OggS") && (ext == "ogg" || ext == "oga") => {
            Some("audio/ogg")
        }
        Media::Audio
            if data.starts_with(b"ID3")
                || (data.len() >= 2 && data[0] == 0xFF && data[1] & 0xE0 == 0xE0) =>
        {
            Some("audio/mpeg")
        }
        Media::Audio if data.len() >= 12 && &data[4..8] == b"ftyp" && ext == "m4a" => {
            Some("audio/mp4")
        }
        _ => None,
    }
}

fn media_hint(uri: &str) -> String {
    let name = title_of(uri.split(['#', '?']).next().unwrap_or(uri));
    format!(
        "Fetch the original file with GET /api/v1/content/download?uri=..., or `ov get \"{uri}\" \
         \"./{name}\"`."
    )
}

/// One URI's reading: its text, or a media block.
enum Read {
    Text(String),
    Block(Box<ContentBlock>),
}

impl Tools {
    async fn read_one(
        &self,
        c: &Caller,
        uri: &str,
        offset: i64,
        limit: i64,
    ) -> Result<Read, Failure> {
        let Some(media) = media_of(uri) else {
            let q = [
                ("uri", uri.to_string()),
                ("offset", offset.to_string()),
                ("limit", limit.to_string()),
            ];
            let text = self.up.get(c, "/api/v1/content/read", &q).await?;
            return Ok(Read::Text(match text {
                Value::String(s) => s,
                v => v.to_string(),
            }));
        };
        let stat = self
            .up
            .get(c, "/api/v1/fs/stat", &[("uri", uri.to_string())])
            .await?;
        if stat["isDir"].as_bool() == Some(true) {
            return Err(Failure::text(format!(
                "Cannot render {uri}: URI points to a directory. Use the list tool (or `ov ls` / \
                 `ov tree`) to browse its contents."
            )));
        }
        if media == Media::Video {
            return Err(Failure::text(format!(
                "Cannot render {uri}: MCP has no standard VideoContent block. {}",
                media_hint(uri)
            )));
        }
        let Some(size) = stat["size"].as_u64() else {
            return Err(Failure::text(format!(
                "Cannot render {uri}: file size is unavailable. {}",
                media_hint(uri)
            )));
        };
        if size > MAX_INLINE_MEDIA {
            return Err(Failure::text(format!(
                "Media file is too large to inline through MCP ({size} bytes; limit \
                 {MAX_INLINE_MEDIA} bytes). {}",
                media_hint(uri)
            )));
        }
        let path = with_query("/api/v1/content/download", &[("uri", uri.to_string())]);
        let (status, data) = self.up.send(c, Method::GET, &path, None).await?;
        if !status.is_success() {
            let v = serde_json::from_slice(&data).unwrap_or(Value::Null);
            return Err(Failure::of_answer(status, &data, &v));
        }
        let Some(mime) = sniff(&data, media, uri) else {
            return Err(Failure::text(format!(
                "Cannot render {uri}: its bytes do not match a supported media format. {}",
                media_hint(uri)
            )));
        };
        let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
        Ok(Read::Block(Box::new(match media {
            Media::Image => ContentBlock::image(encoded, mime),
            _ => ContentBlock::audio(encoded, mime),
        })))
    }

    /// OpenViking's `read`: one URI's text as it is; several as `=== URI ===` sections, a failed
    /// one's section its error (the call fails only when every one failed).
    async fn read(&self, c: &Caller, a: ReadArgs) -> Outcome {
        let uris = a.uris.into_vec();
        let mut results = Vec::new();
        for uri in &uris {
            results.push(self.read_one(c, uri, a.offset, a.limit).await);
        }
        if uris.len() == 1 {
            return match results.pop() {
                Some(Ok(Read::Text(t))) => Ok(Done::Text(t)),
                Some(Ok(Read::Block(b))) => Ok(Done::Blocks(vec![
                    ContentBlock::text(format!("Source: {}", uris[0])),
                    *b,
                ])),
                Some(Err(f)) => Err(f),
                None => Ok(Done::Text(String::new())),
            };
        }
        if results.iter().any(|r| matches!(r, Ok(Read::Block(_)))) {
            let mut blocks = Vec::new();
            for (uri, r) in uris.iter().zip(results) {
                blocks.push(ContentBlock::text(format!("=== {uri} ===")));
                blocks.push(match r {
                    Ok(Read::Block(b)) => *b,
                    Ok(Read::Text(t)) => ContentBlock::text(t),
                    Err(f) => ContentBlock::text(f.text),
                });
            }
            return Ok(Done::Blocks(blocks));
        }
        let all_failed = results.iter().all(|r| r.is_err());
        let parts: Vec<String> = uris
            .iter()
            .zip(results)
            .map(|(uri, r)| {
                let text = match r {
                    Ok(Read::Text(t)) => t,
                    Ok(Read::Block(_)) => String::new(),
                    Err(f) => f.text,
                };
                format!("=== {uri} ===\n{text}")
            })
            .collect();
        let combined = parts.join("\n\n");
        if all_failed && !uris.is_empty() {
            return Err(Failure::text(combined));
        }
        Ok(Done::Text(combined))
    }

    /// ChatGPT connectors' `fetch`: the document a search result's id (its URI) names.
    async fn fetch(&self, c: &Caller, a: FetchArgs) -> Outcome {
        let q = [("uri", a.id.clone())];
        let text = match self.up.get(c, "/api/v1/content/read", &q).await? {
            Value::String(s) => s,
            v => v.to_string(),
        };
        let doc = json!({
            "id": a.id,
            "title": title_of(&a.id),
            "text": text,
            "url": a.id,
            "metadata": { "uri": a.id },
        });
        Ok(Done::Structured(doc.to_string(), doc))
    }
}

#[derive(Deserialize)]
struct FetchArgs {
    id: String,
}

// -- list / tree / grep / glob -----------------------------------------------------------------

fn root_uri() -> String {
    "viking://".into()
}

#[derive(Deserialize)]
struct ListArgs {
    #[serde(default = "root_uri")]
    uri: String,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    offset: i64,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    sort_by: Option<String>,
    #[serde(default)]
    sort_order: Option<String>,
}

#[derive(Deserialize)]
struct TreeArgs {
    #[serde(default = "root_uri")]
    uri: String,
    #[serde(default = "three")]
    level_limit: i64,
    #[serde(default = "thousand")]
    node_limit: i64,
    #[serde(default)]
    include_abstract: bool,
    #[serde(default)]
    offset: i64,
    #[serde(default)]
    limit: Option<i64>,
}

fn three() -> i64 {
    3
}

fn thousand() -> i64 {
    1000
}

#[derive(Deserialize)]
struct GrepArgs {
    uri: String,
    pattern: OneOrMany,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default = "ten")]
    node_limit: i64,
}

#[derive(Deserialize)]
struct GlobArgs {
    pattern: String,
    #[serde(default = "root_uri")]
    uri: String,
    #[serde(default = "hundred")]
    node_limit: i64,
}

fn hundred() -> i64 {
    100
}

/// A listing's entries: the result itself, or its `entries`.
fn entries(result: &Value) -> Vec<Value> {
    match result {
        Value::Array(a) => a.clone(),
        v => v["entries"].as_array().cloned().unwrap_or_default(),
    }
}

fn page_checks(offset: i64, limit: Option<i64>) -> Result<(), Failure> {
    if offset < 0 {
        return Err(Failure::invalid(
            "offset must be greater than or equal to 0",
        ));
    }
    if limit.is_some_and(|l| l <= 0) {
        return Err(Failure::invalid("limit must be greater than 0"));
    }
    Ok(())
}

/// A directory summary as `tree` shows it: none for the placeholder of one not made yet.
fn tree_abstract(e: &Value) -> String {
    let a = e["abstract"].as_str().unwrap_or("").trim();
    let uri = e["uri"].as_str().unwrap_or("");
    if a == "[.abstract.md is not ready]"
        || a == format!("# {uri} [Directory abstract is not ready]")
    {
        return String::new();
    }
    crate::index::text::one_line(a, usize::MAX)
}

impl Tools {
    async fn list(&self, c: &Caller, a: ListArgs) -> Outcome {
        page_checks(a.offset, a.limit)?;
        let mut q = vec![
            ("uri", a.uri.clone()),
            ("recursive", a.recursive.to_string()),
            ("output", "original".to_string()),
        ];
        if a.offset != 0 {
            q.push(("offset", a.offset.to_string()));
        }
        if let Some(l) = a.limit {
            q.push(("node_limit", l.to_string()));
        }
        if let Some(s) = a.sort_by {
            q.push(("sort_by", s));
            q.push(("sort_order", a.sort_order.unwrap_or_else(|| "asc".into())));
        }
        let env = self
            .up
            .call(c, Method::GET, &with_query("/api/v1/fs/ls", &q), None)
            .await?;
        let list = entries(&env["result"]);
        if list.is_empty() {
            return Ok(Done::Text(format!("(no entries under {})", a.uri)));
        }
        let mut lines: Vec<String> = list
            .iter()
            .map(|e| {
                let kind = if e["isDir"].as_bool().unwrap_or(false) {
                    "dir"
                } else {
                    "file"
                };
                let uri = e["uri"].as_str().unwrap_or("");
                if a.recursive && !uri.is_empty() {
                    format!("[{kind}] {uri}")
                } else {
                    format!("[{kind}] {}", e["name"].as_str().unwrap_or("?"))
                }
            })
            .collect();
        if env["has_more"] == true || env["result"]["has_more"] == true {
            lines.push(
                "(more entries available; use offset and limit to view the next page)".into(),
            );
        }
        Ok(Done::Text(lines.join("\n")))
    }

    async fn tree(&self, c: &Caller, a: TreeArgs) -> Outcome {
        page_checks(a.offset, a.limit)?;
        let limit = a.limit.unwrap_or(a.node_limit);
        let q = [
            ("uri", a.uri.clone()),
            (
                "output",
                if a.include_abstract {
                    "agent"
                } else {
                    "original"
                }
                .to_string(),
            ),
            ("abs_limit", "1024".to_string()),
            ("node_limit", limit.to_string()),
            ("level_limit", a.level_limit.to_string()),
            ("offset", a.offset.to_string()),
        ];
        let env = match self
            .up
            .call(c, Method::GET, &with_query("/api/v1/fs/tree", &q), None)
            .await
        {
            Ok(env) => env,
            // A missing directory is an empty tree, as OpenViking's tool has it (not a route
            // that does not exist).
            Err(f)
                if f.code() == Some(Code::NotFound) && !f.message().starts_with("Not Found: /") =>
            {
                Value::Null
            }
            Err(f) => return Err(f),
        };
        let list = entries(&env["result"]);
        if list.is_empty() {
            return Ok(Done::Text(format!("(nothing under {})", a.uri)));
        }
        let n = list.len();
        let mut lines = vec![format!(
            "Tree of {} (depth <= {}, {} entr{}):",
            a.uri,
            a.level_limit,
            n,
            if n == 1 { "y" } else { "ies" }
        )];
        for e in &list {
            let rel = e["rel_path"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| e["name"].as_str().filter(|s| !s.is_empty()))
                .unwrap_or("?")
                .trim_matches('/');
            let name = rel.rsplit('/').next().unwrap_or(rel);
            let depth = rel.split('/').filter(|p| !p.is_empty()).count();
            let indent = "  ".repeat(depth.saturating_sub(1));
            if e["isDir"].as_bool().unwrap_or(false) {
                lines.push(format!("{indent}{name}/"));
            } else {
                lines.push(format!(
                    "{indent}{name} ({} B)",
                    e["size"].as_u64().unwrap_or(0)
                ));
            }
            let abstract_ = tree_abstract(e);
            if a.include_abstract && !abstract_.is_empty() {
                lines.push(format!("{indent}  - {abstract_}"));
            }
        }
        if env["has_more"] == true || env["result"]["has_more"] == true {
            lines.push(format!(
                "(truncated at node_limit={limit}; narrow the uri or raise node_limit to see more)"
            ));
        }
        Ok(Done::Text(lines.join("\n")))
    }

    /// OpenViking's `grep`: one route call per pattern, the matches merged by file; a pattern
    /// that could not be searched is reported beside the others' matches.
    async fn grep(&self, c: &Caller, a: GrepArgs) -> Outcome {
        let patterns = a.pattern.into_vec();
        // Per file, in the order first found: (line, content, pattern) of each match.
        type Hits = Vec<(Value, String, String)>;
        let mut merged: Vec<(String, Hits)> = Vec::new();
        let mut failures: Vec<(String, String)> = Vec::new();
        let mut total = 0;
        for p in &patterns {
            let req = json!({
                "uri": a.uri, "pattern": p,
                "case_insensitive": a.case_insensitive, "node_limit": a.node_limit,
            });
            let matches = match self.up.post(c, "/api/v1/search/grep", &req).await {
                Ok(r) => r["matches"].as_array().cloned().unwrap_or_default(),
                Err(f) => {
                    failures.push((p.clone(), f.text));
                    continue;
                }
            };
            total += matches.len();
            for m in matches {
                let uri = m["uri"].as_str().unwrap_or("?").to_string();
                let hit = (
                    m["line"].clone(),
                    m["content"].as_str().unwrap_or("").to_string(),
                    p.clone(),
                );
                match merged.iter_mut().find(|(u, _)| *u == uri) {
                    Some((_, hits)) => hits.push(hit),
                    None => merged.push((uri, vec![hit])),
                }
            }
        }
        let failure_lines: Vec<String> = failures
            .iter()
            .map(|(p, e)| format!("  {p}: {e}"))
            .collect();
        if merged.is_empty() {
            if !failures.is_empty() && failures.len() == patterns.len() {
                return Err(Failure::text(format!(
                    "grep failed for every pattern:\n{}",
                    failure_lines.join("\n")
                )));
            }
            if !failures.is_empty() {
                let ok: Vec<&str> = patterns
                    .iter()
                    .filter(|p| !failures.iter().any(|(f, _)| f == *p))
                    .map(String::as_str)
                    .collect();
                return Ok(Done::Text(format!(
                    "No matches found for successful pattern(s): {}\nPatterns that could not be \
                     searched:\n{}",
                    ok.join(", "),
                    failure_lines.join("\n")
                )));
            }
            return Ok(Done::Text(format!(
                "No matches found for pattern(s): {}",
                patterns.join(", ")
            )));
        }
        let mut lines = vec![format!(
            "Found {total} match(es) across {} pattern(s):",
            patterns.len()
        )];
        for (uri, mut hits) in merged {
            hits.sort_by_key(|(line, _, _)| line.as_u64().unwrap_or(0));
            lines.push(format!("\n{uri}"));
            for (line, content, p) in hits {
                lines.push(format!("  L{} [{p}]: {content}", py(&line)));
            }
        }
        if !failures.is_empty() {
            lines.push("\nPatterns that could not be searched:".into());
            lines.extend(failure_lines);
        }
        Ok(Done::Text(lines.join("\n")))
    }

    async fn glob(&self, c: &Caller, a: GlobArgs) -> Outcome {
        let req = json!({ "pattern": a.pattern, "uri": a.uri, "node_limit": a.node_limit });
        let result = self.up.post(c, "/api/v1/search/glob", &req).await?;
        let matches = result["matches"].as_array().cloned().unwrap_or_default();
        if matches.is_empty() {
            return Ok(Done::Text(format!(
                "No files found matching: {}",
                a.pattern
            )));
        }
        let mut lines = vec![format!("Found {} file(s):", matches.len())];
        for m in &matches {
            let uri = match m {
                Value::String(s) => s.clone(),
                m => m["uri"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| m.to_string()),
            };
            lines.push(format!("  {uri}"));
        }
        Ok(Done::Text(lines.join("\n")))
    }
}

// -- write / edit / forget ---------------------------------------------------------------------

#[derive(Deserialize)]
struct WriteArgs {
    uri: String,
    content: String,
    #[serde(default = "replace")]
    mode: String,
    #[serde(default)]
    wait: bool,
    #[serde(default)]
    acl: Option<Value>,
}

fn replace() -> String {
    "replace".into()
}

#[derive(Deserialize)]
struct EditArgs {
    uri: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
    #[serde(default)]
    wait: bool,
}

#[derive(Deserialize)]
struct ForgetArgs {
    uri: String,
    #[serde(default)]
    recursive: bool,
}

/// The indexing line after a write (OpenViking's `_indexing_hint`).
fn indexing_hint(r: &Value) -> String {
    let (semantic, vector) = (&r["semantic_status"], &r["vector_status"]);
    let mut parts = vec![
        format!("semantic={}", py(semantic)),
        format!("vector={}", py(vector)),
    ];
    if !r["overview_status"].is_null() {
        parts.push(format!("overview={}", py(&r["overview_status"])));
    }
    let mut hint = format!("\nIndexing: {}.", parts.join(", "));
    if semantic == "queued" || vector == "queued" {
        hint.push_str(
            " Search indexes update in the background; pass wait=true if a follow-up search must \
             see this change immediately.",
        );
    }
    hint
}

impl Tools {
    async fn write(&self, c: &Caller, a: WriteArgs) -> Outcome {
        let req = body(json!({
            "uri": a.uri, "content": a.content, "mode": a.mode, "wait": a.wait, "acl": a.acl,
        }));
        let r = self.up.post(c, "/api/v1/content/write", &req).await?;
        Ok(Done::Text(format!(
            "Wrote {} bytes to {} (mode={}).{}",
            r["written_bytes"].as_u64().unwrap_or(0),
            r["uri"].as_str().unwrap_or(&a.uri),
            r["mode"].as_str().unwrap_or(&a.mode),
            indexing_hint(&r)
        )))
    }

    /// OpenViking's `edit`: read the file, replace the exact string, write the whole file back.
    async fn edit(&self, c: &Caller, a: EditArgs) -> Outcome {
        let uri = &a.uri;
        if a.old_string.is_empty() {
            return Err(Failure::invalid("old_string must not be empty"));
        }
        let current = match self
            .up
            .get(c, "/api/v1/content/read", &[("uri", uri.clone())])
            .await
        {
            Ok(Value::String(s)) => s,
            Ok(v) => v.to_string(),
            Err(f)
                if matches!(
                    f.code(),
                    Some(
                        Code::InvalidArgument
                            | Code::InvalidUri
                            | Code::PermissionDenied
                            | Code::Unauthenticated
                    )
                ) =>
            {
                return Err(f)
            }
            Err(_) => {
                return Err(Failure::api(
                    Code::NotFound,
                    format!("File not found: {uri}"),
                    Some(json!({"type": "file", "resource": uri})),
                ))
            }
        };
        let occurrences = current.matches(a.old_string.as_str()).count();
        if occurrences == 0 {
            let crlf = current
                .replace("\r\n", "\n")
                .contains(&a.old_string.replace("\r\n", "\n"));
            let hint = if crlf {
                " old_string matches only after normalizing CRLF/LF line endings."
            } else {
                ""
            };
            return Err(Failure::invalid(format!(
                "old_string not found in {uri}.{hint} Re-read the file with the read tool to get \
                 its current content."
            )));
        }
        if occurrences > 1 && !a.replace_all {
            return Err(Failure::invalid(format!(
                "old_string matches {occurrences} locations in {uri}. Include more surrounding \
                 context to make it unique, or set replace_all=true."
            )));
        }
        let updated = current.replace(a.old_string.as_str(), &a.new_string);
        if updated == current {
            return Ok(Done::Text(format!(
                "No changes: {uri} already matches the requested edit."
            )));
        }
        let req = json!({ "uri": uri, "content": updated, "mode": "replace", "wait": a.wait });
        let r = self.up.post(c, "/api/v1/content/write", &req).await?;
        Ok(Done::Text(format!(
            "Edited {} ({} bytes written).{}",
            r["uri"].as_str().unwrap_or(uri),
            r["written_bytes"].as_u64().unwrap_or(0),
            indexing_hint(&r)
        )))
    }

    async fn forget(&self, c: &Caller, a: ForgetArgs) -> Outcome {
        let q = [
            ("uri", a.uri.clone()),
            ("recursive", a.recursive.to_string()),
        ];
        let r = self
            .up
            .result(c, Method::DELETE, &with_query("/api/v1/fs", &q), None)
            .await?;
        Ok(Done::Text(format!(
            "Deleted: {}",
            r["uri"].as_str().unwrap_or(&a.uri)
        )))
    }
}

// -- remember / add_resource / health ----------------------------------------------------------

#[derive(Deserialize)]
struct RememberArgs {
    messages: Vec<StoreMessage>,
}

#[derive(Deserialize)]
struct StoreMessage {
    role: String,
    content: String,
}

#[derive(Deserialize)]
struct AddResourceArgs {
    #[serde(default)]
    path: String,
    #[serde(default)]
    temp_file_id: String,
    #[serde(default)]
    add_type: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    watch_interval: f64,
    #[serde(default)]
    processing_mode: Option<String>,
    #[serde(default)]
    to: String,
    #[serde(default)]
    parent: String,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    tag_mode: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    acl: Option<Value>,
}

#[derive(Deserialize)]
struct AddSkillArgs {
    #[serde(default)]
    data: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    skills: Option<Vec<String>>,
    #[serde(default)]
    target_uri: String,
    #[serde(default)]
    list_only: bool,
}

/// OpenViking's `TEMP_FILE_ID_RE`: `upload_…` or `shared_…`, an optional extension.
fn looks_like_temp_file_id(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("upload_")
        .or_else(|| s.strip_prefix("shared_"))
    else {
        return false;
    };
    let (id, ext) = match rest.split_once('.') {
        Some((id, ext)) => (id, Some(ext)),
        None => (rest, None),
    };
    !id.is_empty()
        && id.chars().all(|c| c.is_ascii_alphanumeric())
        && ext.is_none_or(|e| !e.is_empty() && !e.contains(['/', '\\']))
}

impl Tools {
    /// OpenViking's `remember`: the messages into a new session, committed (memories are
    /// extracted in the background).
    async fn remember(&self, c: &Caller, a: RememberArgs) -> Outcome {
        let id = format!(
            "mcp-store-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let messages: Vec<Value> = a
            .messages
            .iter()
            .filter(|m| !m.content.is_empty())
            .map(|m| json!({ "role": m.role, "content": m.content }))
            .collect();
        let added = messages.len();
        let base = format!("/api/v1/sessions/{id}");
        self.up
            .post(
                c,
                &format!("{base}/messages/batch"),
                &json!({ "messages": messages }),
            )
            .await?;
        let r = self
            .up
            .post(c, &format!("{base}/commit"), &json!({}))
            .await?;
        let task = r["task_id"].as_str().filter(|t| !t.is_empty());
        let Some(task) = task else {
            let reason = [&r["reason"], &r["status"]]
                .into_iter()
                .find_map(|v| v.as_str().filter(|s| !s.is_empty()))
                .unwrap_or("unknown");
            return Ok(Done::Text(format!(
                "Nothing was committed for memory extraction (reason: {reason})."
            )));
        };
        Ok(Done::Text(format!(
            "Submitted {added} message(s) for memory extraction (session {id}, task_id={task}). \
             Extraction runs in the background and decides which memories to create or update."
        )))
    }

    /// OpenViking's `add_resource`: `POST /api/v1/resources` (a path, or an uploaded
    /// `temp_file_id`); whether a local path is accepted is the route's decision.
    async fn add_resource(&self, c: &Caller, a: AddResourceArgs) -> Outcome {
        if a.watch_interval < 0.0 {
            return Err(Failure::text(
                "Error: watch_interval must be >= 0. Use 0 for one-shot add (no watch); use a \
                 positive number of minutes (>=1440 recommended) to subscribe to auto-refresh.",
            ));
        }
        let add_type = a.add_type.trim();
        let refusal = if !add_type.is_empty() && !a.temp_file_id.is_empty() {
            Some("Error: add_type cannot be combined with temp_file_id.")
        } else if !add_type.is_empty() && a.path.is_empty() {
            Some("Error: add_type requires 'path'.")
        } else if !add_type.is_empty() && !a.parent.is_empty() {
            Some("Error: add_type cannot be combined with parent.")
        } else if !add_type.is_empty() && a.to.is_empty() {
            Some("Error: add_type requires an exact 'to' target.")
        } else if !a.to.is_empty() && !a.parent.is_empty() {
            Some("Error: Cannot specify both 'to' and 'parent' at the same time.")
        } else if a.temp_file_id.is_empty() && a.path.is_empty() {
            Some("Error: provide either 'path' (remote URL or local file) or 'temp_file_id'.")
        } else {
            None
        };
        if let Some(r) = refusal {
            return Err(Failure::text(r));
        }
        if a.temp_file_id.is_empty() && looks_like_temp_file_id(&a.path) {
            return Err(Failure::text(format!(
                "Error: '{}' looks like a temp_file_id, not a path. Pass it as the temp_file_id \
                 kwarg: add_resource(temp_file_id=\"{}\")",
                a.path, a.path
            )));
        }
        let nonempty = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
        let uploaded = !a.temp_file_id.is_empty();
        let req = body(json!({
            "path": if uploaded { None } else { nonempty(&a.path) },
            "temp_file_id": nonempty(&a.temp_file_id),
            "add_type": nonempty(add_type),
            "to": nonempty(a.to.trim()),
            "parent": nonempty(a.parent.trim()),
            "create_parent": !a.parent.trim().is_empty(),
            "reason": a.description,
            "wait": false,
            "watch_interval": if uploaded { None } else { Some(a.watch_interval) },
            "processing_mode": a.processing_mode,
            "args": a.args,
            "tags": a.tags,
            "tag_mode": a.tag_mode,
            "acl": a.acl,
        }));
        let r = match self.up.post(c, "/api/v1/resources", &req).await {
            Ok(r) => r,
            Err(f) if f.error.is_none() => {
                return Err(Failure::text(format!("Error adding resource: {}", f.text)))
            }
            Err(f) => return Err(f),
        };
        if r["status"] == "error" {
            let detail = r["message"]
                .as_str()
                .or_else(|| r["errors"][0].as_str())
                .unwrap_or("resource processing failed");
            return Err(Failure::text(format!("Error adding resource: {detail}")));
        }
        let root = r["root_uri"].as_str().filter(|s| !s.is_empty());
        if uploaded {
            return Ok(Done::Text(match root {
                Some(root) => format!("Resource added: {root}"),
                None => "Resource added (processing in background).".into(),
            }));
        }
        let watch = if a.watch_interval > 0.0 {
            format!(
                " (watch enabled, refresh every {} minute(s))",
                py(&json!(a.watch_interval)).trim_end_matches(".0")
            )
        } else {
            String::new()
        };
        let task = r["task_id"].as_str().filter(|s| !s.is_empty());
        Ok(Done::Text(match (root, task) {
            (Some(root), _) => format!("Resource added: {root}{watch}"),
            (None, Some(task)) => {
                format!("Resource accepted (task_id: {task}; processing in background){watch}.")
            }
            (None, None) => format!("Resource added (processing in background){watch}."),
        }))
    }

    /// OpenViking's `add_skill`: SKILL.md text as `data` is installed through
    /// `POST /api/v1/skills` (the route's target rules and access rule); a `path` is refused
    /// with the reason, as vikingfs fetches no Git source and issues no upload tokens (a
    /// local skill is uploaded with `temp_upload` and added by `temp_file_id` over HTTP).
    async fn add_skill(&self, c: &Caller, a: AddSkillArgs) -> Outcome {
        let path = a.path.trim();
        let data = a.data.trim();
        if !data.is_empty() && !path.is_empty() {
            return Err(Failure::text(
                "Error: pass either 'data' (SKILL.md text) or 'path', not both.",
            ));
        }
        if data.is_empty() && path.is_empty() {
            return Err(Failure::text(
                "Error: provide 'data' (full SKILL.md text) or 'path' (Git URL or local path).",
            ));
        }
        if path.starts_with("viking://") {
            return Err(Failure::text(
                "Error: 'path' must be a Git URL or a local path. To copy a skill already in \
                 OpenViking, read its SKILL.md and pass the text as 'data'.",
            ));
        }
        if !path.is_empty() {
            return Err(Failure::text(format!(
                "Error: vikingfs installs a skill from its SKILL.md text only: it fetches no Git \
                 source and issues no upload links. Pass the SKILL.md text as 'data', or upload \
                 the zipped skill directory (POST /api/v1/resources/temp_upload) and add it with \
                 POST /api/v1/skills {{\"temp_file_id\": ...}}. Path given: {path}"
            )));
        }
        let req = body(json!({
            "data": a.data,
            "skills": a.skills.unwrap_or_default(),
            "list_only": a.list_only,
            "target_uri": Some(a.target_uri.trim()).filter(|t| !t.is_empty()),
        }));
        let r = self.up.post(c, "/api/v1/skills", &req).await?;
        if a.list_only {
            let found = r["skills"].as_array().cloned().unwrap_or_default();
            let mut lines = vec![format!(
                "Skills in the source ({}); nothing was installed:",
                found.len()
            )];
            for f in found {
                let desc = f["description"].as_str().unwrap_or("");
                lines.push(format!(
                    "- {} ({}): {}",
                    f["name"].as_str().unwrap_or("?"),
                    f["path"].as_str().unwrap_or(""),
                    desc.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
            return Ok(Done::Text(lines.join("\n")));
        }
        let installed = match r.get("installed").and_then(Value::as_array) {
            Some(list) => list.clone(),
            None => vec![r],
        };
        let mut lines: Vec<String> = installed
            .iter()
            .map(|i| format!("Skill added: {}", i["root_uri"].as_str().unwrap_or("?")))
            .collect();
        lines.push(
            "Read <uri>/SKILL.md to use it now; semantic search finds it once indexing completes."
                .into(),
        );
        Ok(Done::Text(lines.join("\n")))
    }

    /// OpenViking's `list_users`: the admin route's page of the caller's account, user ids
    /// only (vikingfs keeps no key to disclose: `include_credentials` is refused).
    async fn list_users(&self, c: &Caller, a: ListUsersArgs) -> Outcome {
        if a.include_credentials {
            return Err(Failure::api(
                Code::PermissionDenied,
                "include_credentials: vikingfs keeps only each key's hash; a key is shown once, \
                 when it is made (vikingfs key add, or the admin routes)",
                None,
            ));
        }
        let status = self.up.get(c, "/api/v1/system/status", &[]).await?;
        let account = status["account"].as_str().unwrap_or("default").to_string();
        let mut q = vec![
            ("limit", a.limit.to_string()),
            ("page", a.page.to_string()),
            ("include_summary", "true".to_string()),
        ];
        if !a.query.is_empty() {
            q.push(("query", a.query));
        }
        // An account id is a plain name (`auth::check_name`): nothing to encode.
        let path = format!("/api/v1/admin/accounts/{account}/users");
        let r = self.up.get(c, &path, &q).await?;
        let rows: &[Value] = r["users"].as_array().map_or(&[], |a| a.as_slice());
        let users: Vec<Value> = rows
            .iter()
            .map(|u| json!({ "user_id": u["user_id"] }))
            .collect();
        let out = json!({ "users": users, "total": r["total"] });
        Ok(Done::Structured(out.to_string(), out))
    }

    /// OpenViking's `get_acl`: `GET /api/v1/acl`.
    async fn get_acl(&self, c: &Caller, a: UriArgs) -> Outcome {
        let r = self.up.get(c, "/api/v1/acl", &[("uri", a.uri)]).await?;
        Ok(Done::Structured(r.to_string(), r))
    }

    /// OpenViking's `health` (never a tool error: an unhealthy server says so).
    async fn health(&self, c: &Caller) -> Done {
        Done::Text(match self.up.call(c, Method::GET, "/health", None).await {
            Ok(v) if v["healthy"] == true => {
                "OpenViking is healthy (service initialized, storage: VikingFS)".into()
            }
            Ok(v) => format!("OpenViking is unhealthy: {v}"),
            Err(f) => format!("OpenViking is unhealthy: {}", f.text),
        })
    }
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;
