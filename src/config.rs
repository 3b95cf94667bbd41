//! Configuration: OpenViking's key names where they exist, vikingfs's own under `vikingfs`.
//!
//! Looked up from `--config`, then `VIKINGFS_CONFIG`, then `~/.vikingfs/config.json`; a missing
//! default file means all defaults. Unknown keys and bad values are errors naming the key and file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `key`: where in the file (`storage.agfs.bogus`), when below the top.
    #[error("config {}{}", path.display(), key.as_deref().map(|k| format!(": {k}")).unwrap_or_default())]
    Parse {
        path: PathBuf,
        key: Option<String>,
        #[source]
        source: serde_json::Error,
    },
    #[error("config {path}: {key}: {msg}")]
    Value {
        path: PathBuf,
        key: String,
        msg: String,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub storage: RawStorage,
    #[serde(default)]
    pub embedding: RawEmbedding,
    #[serde(default)]
    pub vlm: Option<ChatConfig>,
    #[serde(default)]
    pub vikingfs: RawVikingfs,
    /// OpenViking's `server` section: where and for whom the daemon serves the HTTP API.
    #[serde(default)]
    pub server: RawServer,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub root_api_key: Option<String>,
    #[serde(default)]
    pub cors_origins: Option<Vec<String>>,
    /// vikingfs's own: the largest request body, in bytes.
    pub max_body_bytes: Option<usize>,
    /// vikingfs's own: the largest file `temp_upload` takes, in bytes.
    pub max_upload_bytes: Option<u64>,
    /// vikingfs's own: the longest a request may run, in seconds.
    pub request_timeout_secs: Option<f64>,
    /// vikingfs's own: how long a client may take to send a request's headers, in seconds.
    pub header_timeout_secs: Option<f64>,
    /// vikingfs's own: how long a request's body may take beyond what it carries at
    /// `min_body_bytes_per_sec`, in seconds.
    pub body_timeout_secs: Option<f64>,
    /// vikingfs's own: the slowest a request's body may arrive, in bytes a second.
    pub min_body_bytes_per_sec: Option<u64>,
    /// vikingfs's own: requests from one peer address served at once.
    pub max_connections_per_peer: Option<usize>,
    /// vikingfs's own: the most an uploaded archive may unpack to, in bytes.
    pub max_unpacked_bytes: Option<u64>,
    /// vikingfs's own: the most entries an uploaded archive may hold.
    pub max_unpacked_entries: Option<usize>,
}

/// The HTTP API's settings (`server.*`, OpenViking's key names).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// `server.host` (default 127.0.0.1).
    pub host: String,
    /// `server.port` (default 1933, OpenViking's).
    pub port: u16,
    /// Whether `server.host` or `server.port` was set: a mount then serves the API too.
    pub configured: bool,
    pub root_api_key: Option<String>,
    pub cors_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// The largest file `temp_upload` takes (`server.max_upload_bytes`; OpenViking 0.5.2's
    /// `temp_upload.shared_max_size_bytes`, 512 MiB, by default): apart from
    /// `max_body_bytes`, which bounds every other body.
    pub max_upload_bytes: u64,
    pub request_timeout: std::time::Duration,
    /// How long a client may take to send a request's headers (`server.header_timeout_secs`):
    /// a client that sends half a header and waits holds a connection no longer.
    pub header_timeout: std::time::Duration,
    /// A request's body must be whole within this (`server.body_timeout_secs`) plus the time
    /// its length takes at `min_body_rate`; else the request answers 408.
    pub body_timeout: std::time::Duration,
    /// `server.min_body_bytes_per_sec`: a body trickling slower is cut off (above).
    pub min_body_rate: u64,
    /// `server.max_connections_per_peer`: requests from one address served at once; more
    /// wait (`/health` never does), and connections beyond 8 times it are closed at once.
    pub max_connections_per_peer: usize,
    /// `server.max_unpacked_bytes`: what an uploaded zip may unpack to, at most (less when
    /// the disk has less room above the history's pressure line).
    pub max_unpacked_bytes: u64,
    /// `server.max_unpacked_entries`: files and directories an uploaded zip may hold.
    pub max_unpacked_entries: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 1933,
            configured: false,
            root_api_key: None,
            cors_origins: vec!["*".into()],
            max_body_bytes: 64 << 20,
            max_upload_bytes: 512 << 20,
            request_timeout: std::time::Duration::from_secs(600),
            header_timeout: std::time::Duration::from_secs(10),
            body_timeout: std::time::Duration::from_secs(30),
            min_body_rate: 16 << 10,
            max_connections_per_peer: 256,
            max_unpacked_bytes: 512 << 20,
            max_unpacked_entries: 100_000,
        }
    }
}

impl ServerConfig {
    /// `host:port` as a socket address.
    pub fn addr(&self) -> Result<std::net::SocketAddr, String> {
        let host = if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let s = format!("{host}:{}", self.port);
        std::net::ToSocketAddrs::to_socket_addrs(&s)
            .map_err(|e| format!("server.host {s}: {e}"))?
            .next()
            .ok_or_else(|| format!("server.host {s}: no address"))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    pub workspace: Option<PathBuf>,
    /// `"sqlite"` (default) or `"postgres"`.
    pub backend: Option<String>,
    #[serde(default)]
    pub postgres: RawPostgres,
    #[serde(default)]
    pub agfs: RawAgfs,
    #[serde(default)]
    pub transaction: RawTransaction,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPostgres {
    /// A libpq connection string; `VIKINGFS_PG_DSN` overrides it.
    pub dsn: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgfs {
    #[serde(default)]
    pub pathlock: RawPathlock,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPathlock {
    pub lock_timeout_secs: Option<f64>,
    pub lock_expire_secs: Option<f64>,
}

/// Legacy keys, used only when the `storage.agfs.pathlock` ones are unset.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransaction {
    pub lock_timeout: Option<f64>,
    pub lock_expire: Option<f64>,
    /// Deprecated in OpenViking and ignored; accepted so an `ov.conf` still loads.
    pub redo_recovery_enabled: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEmbedding {
    pub dense: Option<EmbeddingConfig>,
}

/// OpenViking's `embedding.dense`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// `local` (a sentence-transformers model directory named by `model`, run in process;
    /// with no `model`, search is lexical only) or `openai` (any OpenAI-compatible HTTP API).
    #[serde(default = "default_embed_provider")]
    pub provider: String,
    pub api_base: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
    #[serde(default = "default_dimension")]
    pub dimension: usize,
    /// vikingfs's own, from `vikingfs.index.model_precision` (not an OpenViking key).
    #[serde(skip)]
    pub precision: Precision,
}

fn default_embed_provider() -> String {
    "local".into()
}

fn default_dimension() -> usize {
    256
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
            provider: default_embed_provider(),
            api_base: None,
            model: None,
            api_key: None,
            dimension: default_dimension(),
            precision: Precision::default(),
        }
    }
}

/// OpenViking's `vlm`: an OpenAI-compatible chat model, used for summaries and memories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatConfig {
    #[serde(default = "default_chat_provider")]
    pub provider: String,
    pub api_base: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
}

fn default_chat_provider() -> String {
    "openai".into()
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVikingfs {
    pub account: Option<String>,
    pub user: Option<String>,
    #[serde(default)]
    pub workers: RawWorkers,
    #[serde(default)]
    pub index: RawIndex,
    #[serde(default)]
    pub history: RawHistory,
    /// `ADDR:PORT` to serve Prometheus metrics on (the mount's `-o metrics=` wins).
    pub metrics: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHistory {
    /// Keep what removals take (default true).
    pub enabled: Option<bool>,
    /// Days an entry is kept (default 30).
    pub keep_days: Option<f64>,
    /// Most bytes kept (default: a tenth of the filesystem).
    pub max_bytes: Option<u64>,
    /// Largest file whose content an overwrite copies into the history (default 64 MiB).
    pub max_file_bytes: Option<u64>,
}

/// What the history keeps ([`crate::journal::Entry`]) and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryConfig {
    pub enabled: bool,
    pub keep: Duration,
    /// `None`: a tenth of the filesystem holding the workspace.
    pub max_bytes: Option<u64>,
    /// Largest file an overwrite in place (a truncation) copies into the history; a bigger
    /// one gets an entry saying it was not kept. A reflink costs nothing, a copy its size.
    pub max_file_bytes: u64,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            enabled: true,
            keep: Duration::from_secs(30 * 86400),
            max_bytes: None,
            max_file_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIndex {
    /// Gitignore-syntax patterns that replace the built-in ignore defaults.
    pub ignore: Option<Vec<String>>,
    pub max_file_bytes: Option<u64>,
    /// How the local model computes: `auto` (default), `f32` or `int8`.
    pub model_precision: Option<Precision>,
}

/// How the local model's linear layers compute (`vikingfs.index.model_precision`): `auto`
/// runs them in 8-bit integers on a CPU with AVX-512 VNNI (several times faster, vectors
/// within a few thousandths of cosine of f32's: the same vector space) and in f32 elsewhere;
/// `int8` insists on the integers, `f32` on floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    Auto,
    F32,
    Int8,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkers {
    pub semantic: Option<usize>,
    pub embedding: Option<usize>,
    pub dense: Option<usize>,
    pub session_commit: Option<usize>,
}

/// Lock engine settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LockConfig {
    /// How long an acquire waits for a busy path (0: fail at once).
    pub timeout: Duration,
    /// How old a token of an owner we cannot check must be before it is stale.
    pub expire: Duration,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            timeout: Duration::ZERO,
            expire: Duration::from_secs(30),
        }
    }
}

/// What is derived from the files (see `crate::content`).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexConfig {
    /// The built-in ignore patterns (`.vikingignore` files add to them at any level).
    pub ignore: Vec<String>,
    /// How much of a text file is indexed; a longer file is indexed up to here (and `status`
    /// counts it), so a huge log never stalls the queue.
    pub max_file_bytes: u64,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            ignore: crate::content::DEFAULT_IGNORE
                .iter()
                .map(|s| s.to_string())
                .collect(),
            max_file_bytes: 1024 * 1024,
        }
    }
}

/// Worker threads per queue.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    pub semantic: usize,
    pub embedding: usize,
    /// The model's threads use every core already: one job at a time is enough.
    pub dense: usize,
    pub session_commit: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            semantic: 1,
            embedding: 2,
            dense: 1,
            session_commit: 1,
        }
    }
}

/// Where the derived stores live (`storage.backend`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Backend {
    /// SQLite files in `WORKSPACE/.vikingfs/`: one host.
    #[default]
    Sqlite,
    /// A PostgreSQL database (`storage.postgres.dsn`, a libpq connection string), shared by
    /// the daemons of every host that mounts the workspace.
    Postgres { dsn: String },
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres { .. } => "postgres",
        }
    }
}

/// The environment variable that overrides `storage.postgres.dsn`.
pub const PG_DSN_ENV: &str = "VIKINGFS_PG_DSN";

/// The effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it was read from, if any.
    pub source: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    /// Where the queue lives (and, later, the index and the journal).
    pub backend: Backend,
    pub account: String,
    pub user: String,
    pub lock: LockConfig,
    pub embedding: EmbeddingConfig,
    pub vlm: Option<ChatConfig>,
    pub workers: WorkerConfig,
    pub index: IndexConfig,
    pub history: HistoryConfig,
    /// Where the daemon serves Prometheus metrics (`vikingfs.metrics`); off when `None`.
    pub metrics: Option<std::net::SocketAddr>,
    /// The HTTP API (`server.*`).
    pub server: ServerConfig,
    /// Where each key that did not keep its default came from (`file PATH`, `env NAME`, `flag`).
    pub origins: std::collections::BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            source: None,
            workspace: None,
            backend: Backend::Sqlite,
            account: "default".into(),
            user: "default".into(),
            lock: LockConfig::default(),
            embedding: EmbeddingConfig::default(),
            vlm: None,
            workers: WorkerConfig::default(),
            index: IndexConfig::default(),
            history: HistoryConfig::default(),
            metrics: None,
            server: ServerConfig::default(),
            origins: Default::default(),
        }
    }
}

/// One line of `vikingfs config show`.
#[derive(Debug, Clone, Serialize)]
pub struct Setting {
    pub key: &'static str,
    pub value: serde_json::Value,
    pub origin: String,
}

impl Config {
    /// Every effective setting, with where it came from (`default` when nobody set it).
    pub fn settings(&self) -> Vec<Setting> {
        use serde_json::json;
        let secret = |k: &Option<String>| k.as_ref().map(|_| json!("(set)"));
        let vlm = self.vlm.as_ref();
        let rows: Vec<(&'static str, serde_json::Value)> = vec![
            ("storage.workspace", json!(self.workspace)),
            ("storage.backend", json!(self.backend.name())),
            (
                "storage.postgres.dsn",
                json!(match &self.backend {
                    Backend::Postgres { .. } => Some("(set)"),
                    Backend::Sqlite => None,
                }),
            ),
            (
                "storage.agfs.pathlock.lock_timeout_secs",
                json!(self.lock.timeout.as_secs_f64()),
            ),
            (
                "storage.agfs.pathlock.lock_expire_secs",
                json!(self.lock.expire.as_secs_f64()),
            ),
            ("embedding.dense.provider", json!(self.embedding.provider)),
            ("embedding.dense.api_base", json!(self.embedding.api_base)),
            ("embedding.dense.model", json!(self.embedding.model)),
            (
                "embedding.dense.api_key",
                json!(secret(&self.embedding.api_key)),
            ),
            ("embedding.dense.dimension", json!(self.embedding.dimension)),
            (
                "vikingfs.index.model_precision",
                json!(self.embedding.precision),
            ),
            ("vlm.provider", json!(vlm.map(|v| &v.provider))),
            ("vlm.api_base", json!(vlm.and_then(|v| v.api_base.as_ref()))),
            ("vlm.model", json!(vlm.and_then(|v| v.model.as_ref()))),
            ("vlm.api_key", json!(vlm.and_then(|v| secret(&v.api_key)))),
            ("vikingfs.account", json!(self.account)),
            ("vikingfs.user", json!(self.user)),
            ("vikingfs.workers.semantic", json!(self.workers.semantic)),
            ("vikingfs.workers.embedding", json!(self.workers.embedding)),
            ("vikingfs.workers.dense", json!(self.workers.dense)),
            (
                "vikingfs.workers.session_commit",
                json!(self.workers.session_commit),
            ),
            ("vikingfs.index.ignore", json!(self.index.ignore)),
            (
                "vikingfs.index.max_file_bytes",
                json!(self.index.max_file_bytes),
            ),
            ("vikingfs.history.enabled", json!(self.history.enabled)),
            (
                "vikingfs.history.keep_days",
                json!(self.history.keep.as_secs_f64() / 86400.0),
            ),
            ("vikingfs.history.max_bytes", json!(self.history.max_bytes)),
            (
                "vikingfs.history.max_file_bytes",
                json!(self.history.max_file_bytes),
            ),
            (
                "vikingfs.metrics",
                json!(self.metrics.map(|a| a.to_string())),
            ),
            ("server.host", json!(self.server.host)),
            ("server.port", json!(self.server.port)),
            (
                "server.root_api_key",
                json!(secret(&self.server.root_api_key)),
            ),
            ("server.cors_origins", json!(self.server.cors_origins)),
            ("server.max_body_bytes", json!(self.server.max_body_bytes)),
            (
                "server.max_upload_bytes",
                json!(self.server.max_upload_bytes),
            ),
            (
                "server.request_timeout_secs",
                json!(self.server.request_timeout.as_secs_f64()),
            ),
            (
                "server.header_timeout_secs",
                json!(self.server.header_timeout.as_secs_f64()),
            ),
            (
                "server.body_timeout_secs",
                json!(self.server.body_timeout.as_secs_f64()),
            ),
            (
                "server.min_body_bytes_per_sec",
                json!(self.server.min_body_rate),
            ),
            (
                "server.max_connections_per_peer",
                json!(self.server.max_connections_per_peer),
            ),
            (
                "server.max_unpacked_bytes",
                json!(self.server.max_unpacked_bytes),
            ),
            (
                "server.max_unpacked_entries",
                json!(self.server.max_unpacked_entries),
            ),
        ];
        rows.into_iter()
            .map(|(key, value)| Setting {
                key,
                value,
                origin: self.origin_of(key),
            })
            .collect()
    }

    fn origin_of(&self, key: &str) -> String {
        // Keys set as a group (embedding.dense, vlm) are recorded by their group.
        let mut k = key;
        loop {
            if let Some(o) = self.origins.get(k) {
                return o.clone();
            }
            match k.rfind('.') {
                Some(i) => k = &k[..i],
                None => return "default".into(),
            }
        }
    }

    /// Record that `key` was set by `origin` (used by the CLI for flags and environment).
    pub fn set_origin(&mut self, key: &str, origin: impl Into<String>) {
        self.origins.insert(key.to_string(), origin.into());
    }

    /// Find and load the configuration: `explicit`, then `VIKINGFS_CONFIG`, then
    /// `~/.vikingfs/config.json` (defaults when that one is missing); `VIKINGFS_PG_DSN`
    /// then replaces the PostgreSQL DSN of a postgres backend.
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        let mut cfg = Self::load_file(explicit)?;
        if let Backend::Postgres { dsn } = &mut cfg.backend {
            if let Some(env) = std::env::var(PG_DSN_ENV).ok().filter(|v| !v.is_empty()) {
                *dsn = env;
                cfg.set_origin("storage.postgres.dsn", format!("env {PG_DSN_ENV}"));
            }
        }
        Ok(cfg)
    }

    fn load_file(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        if let Some(p) = explicit {
            return Self::from_file(p);
        }
        if let Some(p) = std::env::var_os("VIKINGFS_CONFIG").filter(|v| !v.is_empty()) {
            return Self::from_file(Path::new(&p));
        }
        if let Some(home) = std::env::var_os("HOME") {
            let p = Path::new(&home).join(".vikingfs/config.json");
            if p.exists() {
                return Self::from_file(&p);
            }
        }
        Ok(Config::default())
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text, path)
    }

    pub fn from_json(text: &str, path: &Path) -> Result<Config, ConfigError> {
        // serde_path_to_error names the full key (`storage.agfs.bogus`), not just the leaf.
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = key_path(e.path());
            ConfigError::Parse {
                path: path.to_path_buf(),
                key,
                source: e.into_inner(),
            }
        })?;
        let mut cfg = Self::from_raw(raw, path)?;
        cfg.source = Some(path.to_path_buf());
        Ok(cfg)
    }

    fn from_raw(raw: RawConfig, path: &Path) -> Result<Config, ConfigError> {
        let bad = |key: &str, msg: &str| ConfigError::Value {
            path: path.to_path_buf(),
            key: key.to_string(),
            msg: msg.to_string(),
        };
        let secs = |key: &str, v: f64| -> Result<Duration, ConfigError> {
            if !v.is_finite() || v < 0.0 {
                return Err(bad(key, "must be a non-negative number of seconds"));
            }
            Ok(Duration::from_secs_f64(v))
        };
        let mut cfg = Config::default();
        let from = format!("file {}", path.display());
        let set = |cfg: &mut Config, key: &str| {
            cfg.origins.insert(key.to_string(), from.clone());
        };
        let pl = &raw.storage.agfs.pathlock;
        let tx = &raw.storage.transaction;
        if let Some(v) = pl.lock_timeout_secs {
            cfg.lock.timeout = secs("storage.agfs.pathlock.lock_timeout_secs", v)?;
            set(&mut cfg, "storage.agfs.pathlock.lock_timeout_secs");
        } else if let Some(v) = tx.lock_timeout {
            cfg.lock.timeout = secs("storage.transaction.lock_timeout", v)?;
            cfg.origins.insert(
                "storage.agfs.pathlock.lock_timeout_secs".into(),
                format!("{from} (legacy storage.transaction.lock_timeout)"),
            );
        }
        if let Some(v) = pl.lock_expire_secs {
            cfg.lock.expire = secs("storage.agfs.pathlock.lock_expire_secs", v)?;
            set(&mut cfg, "storage.agfs.pathlock.lock_expire_secs");
        } else if let Some(v) = tx.lock_expire {
            cfg.lock.expire = secs("storage.transaction.lock_expire", v)?;
            cfg.origins.insert(
                "storage.agfs.pathlock.lock_expire_secs".into(),
                format!("{from} (legacy storage.transaction.lock_expire)"),
            );
        }
        if cfg.lock.expire.is_zero() {
            return Err(bad("storage.agfs.pathlock.lock_expire_secs", "must be > 0"));
        }
        if raw.storage.workspace.is_some() {
            set(&mut cfg, "storage.workspace");
        }
        cfg.workspace = raw.storage.workspace;
        let dsn = raw.storage.postgres.dsn;
        match raw.storage.backend.as_deref() {
            None | Some("sqlite") => {}
            Some("postgres") => match dsn {
                Some(dsn) => {
                    cfg.backend = Backend::Postgres { dsn };
                    set(&mut cfg, "storage.backend");
                    set(&mut cfg, "storage.postgres.dsn");
                }
                None if std::env::var_os(PG_DSN_ENV).is_some() => {
                    cfg.backend = Backend::Postgres { dsn: String::new() };
                    set(&mut cfg, "storage.backend");
                }
                None => {
                    return Err(bad(
                        "storage.postgres.dsn",
                        "required for backend postgres (or set VIKINGFS_PG_DSN)",
                    ))
                }
            },
            Some(_) => {
                return Err(bad(
                    "storage.backend",
                    "expected \"sqlite\" or \"postgres\"",
                ))
            }
        }
        if let Some(e) = raw.embedding.dense {
            if e.provider == "hash" {
                return Err(bad(
                    "embedding.dense.provider",
                    "\"hash\" (the hashing embedder) was retired: lexical search replaces it; \
                     remove the key, or set \"local\" with \"model\": a model directory",
                ));
            }
            if !["local", "openai"].contains(&e.provider.as_str()) {
                return Err(bad(
                    "embedding.dense.provider",
                    "expected \"local\" or \"openai\"",
                ));
            }
            if e.dimension == 0 || e.dimension > 8192 {
                return Err(bad("embedding.dense.dimension", "must be 1..=8192"));
            }
            if e.provider == "openai" && e.api_base.is_none() {
                return Err(bad(
                    "embedding.dense.api_base",
                    "required for provider openai",
                ));
            }
            cfg.embedding = e;
            set(&mut cfg, "embedding.dense");
        }
        if let Some(v) = raw.vlm {
            if v.provider != "openai" {
                return Err(bad("vlm.provider", "expected \"openai\""));
            }
            if v.api_base.is_none() {
                return Err(bad("vlm.api_base", "required"));
            }
            cfg.vlm = Some(v);
            set(&mut cfg, "vlm");
        }
        if let Some(a) = raw.vikingfs.account {
            cfg.account = a;
            set(&mut cfg, "vikingfs.account");
        }
        if let Some(u) = raw.vikingfs.user {
            cfg.user = u;
            set(&mut cfg, "vikingfs.user");
        }
        let w = &raw.vikingfs.workers;
        let mut worker_keys = Vec::new();
        for (key, v, slot) in [
            (
                "vikingfs.workers.semantic",
                w.semantic,
                &mut cfg.workers.semantic,
            ),
            (
                "vikingfs.workers.embedding",
                w.embedding,
                &mut cfg.workers.embedding,
            ),
            ("vikingfs.workers.dense", w.dense, &mut cfg.workers.dense),
            (
                "vikingfs.workers.session_commit",
                w.session_commit,
                &mut cfg.workers.session_commit,
            ),
        ] {
            if let Some(v) = v {
                if v == 0 || v > 64 {
                    return Err(bad(key, "must be 1..=64"));
                }
                *slot = v;
                worker_keys.push(key);
            }
        }
        for key in worker_keys {
            set(&mut cfg, key);
        }
        if let Some(pats) = raw.vikingfs.index.ignore {
            crate::content::rules::check_patterns(&pats)
                .map_err(|m| bad("vikingfs.index.ignore", &m))?;
            cfg.index.ignore = pats;
            set(&mut cfg, "vikingfs.index.ignore");
        }
        if let Some(p) = raw.vikingfs.index.model_precision {
            cfg.embedding.precision = p;
            set(&mut cfg, "vikingfs.index.model_precision");
        }
        if let Some(n) = raw.vikingfs.index.max_file_bytes {
            if n < 4096 {
                return Err(bad(
                    "vikingfs.index.max_file_bytes",
                    "must be at least 4096",
                ));
            }
            cfg.index.max_file_bytes = n;
            set(&mut cfg, "vikingfs.index.max_file_bytes");
        }
        if let Some(on) = raw.vikingfs.history.enabled {
            cfg.history.enabled = on;
            set(&mut cfg, "vikingfs.history.enabled");
        }
        if let Some(d) = raw.vikingfs.history.keep_days {
            if !(d.is_finite() && d >= 0.0) {
                return Err(bad("vikingfs.history.keep_days", "must be 0 or more days"));
            }
            cfg.history.keep = Duration::from_secs_f64(d * 86400.0);
            set(&mut cfg, "vikingfs.history.keep_days");
        }
        if let Some(n) = raw.vikingfs.history.max_bytes {
            cfg.history.max_bytes = Some(n);
            set(&mut cfg, "vikingfs.history.max_bytes");
        }
        if let Some(n) = raw.vikingfs.history.max_file_bytes {
            cfg.history.max_file_bytes = n;
            set(&mut cfg, "vikingfs.history.max_file_bytes");
        }
        if let Some(a) = raw.vikingfs.metrics {
            cfg.metrics = Some(a.parse().map_err(|_| {
                bad(
                    "vikingfs.metrics",
                    "must be an address and port, such as 127.0.0.1:9464",
                )
            })?);
            set(&mut cfg, "vikingfs.metrics");
        }
        let sv = raw.server;
        if let Some(h) = sv.host {
            cfg.server.host = h;
            cfg.server.configured = true;
            set(&mut cfg, "server.host");
        }
        if let Some(p) = sv.port {
            cfg.server.port = p;
            cfg.server.configured = true;
            set(&mut cfg, "server.port");
        }
        if let Some(k) = sv.root_api_key.filter(|k| !k.is_empty()) {
            cfg.server.root_api_key = Some(k);
            set(&mut cfg, "server.root_api_key");
        }
        if let Some(o) = sv.cors_origins {
            cfg.server.cors_origins = o;
            set(&mut cfg, "server.cors_origins");
        }
        if let Some(n) = sv.max_body_bytes {
            if n < 1024 {
                return Err(bad("server.max_body_bytes", "must be at least 1024"));
            }
            cfg.server.max_body_bytes = n;
            set(&mut cfg, "server.max_body_bytes");
        }
        if let Some(n) = sv.max_upload_bytes {
            if n < 1024 {
                return Err(bad("server.max_upload_bytes", "must be at least 1024"));
            }
            cfg.server.max_upload_bytes = n;
            set(&mut cfg, "server.max_upload_bytes");
        }
        if let Some(t) = sv.request_timeout_secs {
            if !(t.is_finite() && t > 0.0) {
                return Err(bad(
                    "server.request_timeout_secs",
                    "must be a positive number",
                ));
            }
            cfg.server.request_timeout = std::time::Duration::from_secs_f64(t);
            set(&mut cfg, "server.request_timeout_secs");
        }
        if let Some(t) = sv.header_timeout_secs {
            if !(t.is_finite() && t > 0.0 && t <= 3600.0) {
                return Err(bad(
                    "server.header_timeout_secs",
                    "must be a positive number of seconds, at most 3600",
                ));
            }
            cfg.server.header_timeout = std::time::Duration::from_secs_f64(t);
            set(&mut cfg, "server.header_timeout_secs");
        }
        if let Some(t) = sv.body_timeout_secs {
            if !(t.is_finite() && t > 0.0 && t <= 86400.0) {
                return Err(bad(
                    "server.body_timeout_secs",
                    "must be a positive number of seconds, at most 86400",
                ));
            }
            cfg.server.body_timeout = std::time::Duration::from_secs_f64(t);
            set(&mut cfg, "server.body_timeout_secs");
        }
        if let Some(n) = sv.min_body_bytes_per_sec {
            if n == 0 {
                return Err(bad("server.min_body_bytes_per_sec", "must be at least 1"));
            }
            cfg.server.min_body_rate = n;
            set(&mut cfg, "server.min_body_bytes_per_sec");
        }
        if let Some(n) = sv.max_connections_per_peer {
            if n == 0 {
                return Err(bad("server.max_connections_per_peer", "must be at least 1"));
            }
            cfg.server.max_connections_per_peer = n;
            set(&mut cfg, "server.max_connections_per_peer");
        }
        if let Some(n) = sv.max_unpacked_bytes {
            cfg.server.max_unpacked_bytes = n;
            set(&mut cfg, "server.max_unpacked_bytes");
        }
        if let Some(n) = sv.max_unpacked_entries {
            if n == 0 {
                return Err(bad("server.max_unpacked_entries", "must be at least 1"));
            }
            cfg.server.max_unpacked_entries = n;
            set(&mut cfg, "server.max_unpacked_entries");
        }
        if cfg.server.configured {
            cfg.server.addr().map_err(|m| bad("server.host", &m))?;
        }
        Ok(cfg)
    }
}

impl Config {
    /// The file this configuration is (or, with none, would be) kept in: the one it was loaded
    /// from, else `~/.vikingfs/config.json`. What `vikingfs migrate` rewrites.
    pub fn file(&self) -> Option<PathBuf> {
        self.source.clone().or_else(|| {
            std::env::var_os("HOME").map(|h| Path::new(&h).join(".vikingfs/config.json"))
        })
    }
}

/// The key path of a parse error as a reader writes it (`storage.agfs.bogus`,
/// `server.cors_origins[1]`), up to the first segment serde could not name: a syntax error
/// inside an object leaves an unnamed one (`?`), which says nothing (the error's own line and
/// column say where). `None` at the top level.
fn key_path(p: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut key = String::new();
    for seg in p.iter() {
        match seg {
            Segment::Unknown => break,
            Segment::Seq { index } => key += &format!("[{index}]"),
            Segment::Map { key: k } | Segment::Enum { variant: k } => {
                if !key.is_empty() {
                    key.push('.');
                }
                key += k;
            }
        }
    }
    (!key.is_empty()).then_some(key)
}

/// The configuration file at `path` (`{}` when missing) with only `storage.backend` set to
/// `to`'s name and, for postgres with `dsn` given, `storage.postgres.dsn` — every other key,
/// known or not, as it was. Read as plain JSON, so an `ov.conf`'s keys stay untouched.
pub fn with_storage(
    path: &Path,
    to: &Backend,
    dsn: Option<&str>,
) -> Result<serde_json::Value, ConfigError> {
    let mut v: serde_json::Value = match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            key: None,
            source,
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::json!({}),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !v.is_object() {
        v = serde_json::json!({});
    }
    if !v["storage"].is_object() {
        v["storage"] = serde_json::json!({});
    }
    v["storage"]["backend"] = to.name().into();
    if let Some(dsn) = dsn {
        if !v["storage"]["postgres"].is_object() {
            v["storage"]["postgres"] = serde_json::json!({});
        }
        v["storage"]["postgres"]["dsn"] = dsn.into();
    }
    Ok(v)
}

/// The DSN the configuration file at `path` names, whatever its backend (`vikingfs migrate
/// --to postgres` without `--dsn`).
pub fn file_dsn(path: &Path) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["storage"]["postgres"]["dsn"].as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, ConfigError> {
        Config::from_json(s, Path::new("/etc/x.json"))
    }

    #[test]
    fn index_keys_replace_defaults_and_refuse_bad_values() {
        let c =
            parse(r#"{"vikingfs":{"index":{"ignore":["*.tmp"],"max_file_bytes":8192}}}"#).unwrap();
        assert_eq!(c.index.ignore, vec!["*.tmp".to_string()]);
        assert_eq!(c.index.max_file_bytes, 8192);
        assert!(Config::default()
            .index
            .ignore
            .contains(&".git/".to_string()));
        let e = parse(r#"{"vikingfs":{"index":{"ignore":["{a"]}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("vikingfs.index.ignore") && e.contains("{a"),
            "{e}"
        );
        let e = parse(r#"{"vikingfs":{"index":{"max_file_bytes":10}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("vikingfs.index.max_file_bytes"), "{e}");
    }

    #[test]
    fn the_model_precision_is_auto_unless_set_and_survives_the_embedding_section() {
        assert_eq!(Config::default().embedding.precision, Precision::Auto);
        // Set beside an embedding section (OpenViking's, which has no such key) in any order.
        let c = parse(
            r#"{"vikingfs":{"index":{"model_precision":"f32"}},
                "embedding":{"dense":{"provider":"local","model":"/m"}}}"#,
        )
        .unwrap();
        assert_eq!(c.embedding.precision, Precision::F32);
        assert_eq!(c.embedding.model.as_deref(), Some("/m"));
        let e = parse(r#"{"vikingfs":{"index":{"model_precision":"fp16"}}}"#).unwrap_err();
        let e = crate::error::Chain(&e).to_string();
        assert!(
            e.contains("vikingfs.index.model_precision") && e.contains("fp16") && e.contains("f32"),
            "{e}"
        );
        let e = parse(r#"{"embedding":{"dense":{"precision":"f32"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("precision"), "not an OpenViking key: {e}");
    }

    #[test]
    fn new_keys_win_over_legacy() {
        let c = parse(
            r#"{"storage":{"agfs":{"pathlock":{"lock_expire_secs":5}},
                "transaction":{"lock_timeout":2,"lock_expire":99}}}"#,
        )
        .unwrap();
        assert_eq!(c.lock.expire, Duration::from_secs(5));
        assert_eq!(c.lock.timeout, Duration::from_secs(2));
    }

    #[test]
    fn unknown_keys_and_bad_values_name_key_and_file() {
        let e = parse(r#"{"storage":{"bogus":1}}"#).unwrap_err().to_string();
        assert!(
            e.contains("storage.bogus") && e.contains("/etc/x.json"),
            "{e}"
        );
        let e = parse(r#"{"storage":{"agfs":{"pathlock":{"lock_expire_secs":"x"}}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("storage.agfs.pathlock.lock_expire_secs"), "{e}");
        let e = parse(r#"{"storage":{"agfs":{"pathlock":{"lock_timeout_secs":-1}}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lock_timeout_secs"), "{e}");
        let e = parse(r#"{"vikingfs":{"workers":{"embedding":0}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("vikingfs.workers.embedding"), "{e}");
    }

    /// A syntax error names the key it sits under (never serde's unnamed `?`) and the line
    /// and column; one at the top names none.
    #[test]
    fn syntax_errors_name_the_key_path_not_a_question_mark() {
        let chain = |s: &str| crate::error::Chain(&parse(s).unwrap_err()).to_string();
        let e = chain("{\"storage\": {\"agfs\": {\"pathlock\": {\"lock_timeout_secs\": 1,}}}}");
        assert!(!e.contains('?'), "{e}");
        assert!(
            e.contains("config /etc/x.json: storage.agfs.pathlock:"),
            "{e}"
        );
        assert!(e.contains("line 1 column"), "{e}");
        let e = chain("{\"server\": {\"cors_origins\": [\"a\", ]}}");
        assert!(!e.contains('?'), "{e}");
        assert!(e.contains("server.cors_origins"), "{e}");
        let e = chain("{,}");
        assert!(
            !e.contains('?') && e.starts_with("config /etc/x.json: "),
            "{e}"
        );
    }

    #[test]
    fn settings_say_where_each_value_came_from() {
        let c = parse(r#"{"storage":{"transaction":{"lock_expire":7}},"vikingfs":{"user":"ann"}}"#)
            .unwrap();
        let rows = c.settings();
        let get = |k: &str| rows.iter().find(|r| r.key == k).unwrap().clone();
        assert_eq!(get("vikingfs.user").origin, "file /etc/x.json");
        assert_eq!(get("vikingfs.user").value, serde_json::json!("ann"));
        assert!(get("storage.agfs.pathlock.lock_expire_secs")
            .origin
            .contains("legacy"));
        assert_eq!(get("vikingfs.account").origin, "default");
    }
}
