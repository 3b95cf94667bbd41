//! The ops tests' fixture: a workspace in a temp dir driven through the real `vikingfs`
//! binary ([`Env`], on the [`Backend`] it is given: SQLite, or a PostgreSQL server), and the
//! consistency checks every test ends with.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

pub use super::backend::Backend;
use super::pg::PgServer;
use super::{assert_fsck_clean, hits, model_dir, vikingfs};

/// A workspace and a place for local sources, both in one temp dir.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// The server its stores live on ([`Backend::Postgres`]); stopped with the last `Env`
    /// using it.
    server: Option<std::sync::Arc<PgServer>>,
}

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The PostgreSQL server the `Env`s on [`Backend::Postgres`] alive at once share (a database
/// each): a cache of a running server, not a setting; what backend an `Env` is on is only
/// ever the argument of [`Env::on`].
static SERVER: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());
static DATABASES: AtomicUsize = AtomicUsize::new(0);

impl Env {
    /// A workspace on SQLite (the default backend).
    pub fn new() -> Env {
        Env::on(Backend::Sqlite)
    }

    /// A workspace on `backend`: on PostgreSQL, `storage.backend = "postgres"` with a
    /// database of its own, on one server shared by the `Env`s alive at once.
    pub fn on(backend: Backend) -> Env {
        let server = (backend == Backend::Postgres).then(|| {
            let mut s = SERVER.lock().unwrap();
            s.upgrade().unwrap_or_else(|| {
                let fresh = Arc::new(PgServer::start());
                *s = Arc::downgrade(&fresh);
                fresh
            })
        });
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
            server,
        };
        if let Some(server) = &env.server {
            let n = DATABASES.fetch_add(1, Ordering::Relaxed);
            let dsn = server.new_database(&format!("ws{n}"));
            env.merge_config(serde_json::json!({
                "storage": { "backend": "postgres", "postgres": { "dsn": dsn } }
            }));
        }
        env
    }

    /// Merge `patch` (top-level keys) into this environment's `~/.vikingfs/config.json`.
    pub fn merge_config(&self, patch: Value) {
        let dir = self.dir.path().join(".vikingfs");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.json");
        let mut config: Value = std::fs::read_to_string(&path)
            .map(|s| serde_json::from_str(&s).unwrap())
            .unwrap_or_else(|_| serde_json::json!({}));
        for (k, v) in patch.as_object().unwrap() {
            config[k] = v.clone();
        }
        std::fs::write(path, config.to_string()).unwrap();
    }

    pub fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// Lose the derived index, as a deleted file (SQLite) or a server's emptied tables
    /// (postgres) would: the next command to open the engine rebuilds it from the files.
    pub fn lose_index(&self) {
        let Some(_server) = &self.server else {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(self.ws().join(format!(".vikingfs/index.db{suffix}")));
            }
            return;
        };
        let config: Value = serde_json::from_str(
            &std::fs::read_to_string(self.dir.path().join(".vikingfs/config.json")).unwrap(),
        )
        .unwrap();
        let dsn = config["storage"]["postgres"]["dsn"].as_str().unwrap();
        let mut c = postgres::Client::connect(dsn, postgres::NoTls).unwrap();
        c.batch_execute("TRUNCATE vi_parts, vi_postings, vi_records; DELETE FROM vi_meta;")
            .unwrap();
    }

    /// `WORKSPACE/viking/default/` + rel.
    pub fn data(&self, rel: &str) -> PathBuf {
        self.ws().join("viking/default").join(rel)
    }

    /// A local directory `name` with `files` (relative path, content).
    pub fn local(&self, name: &str, files: &[(&str, String)]) -> PathBuf {
        let root = self.dir.path().join("local").join(name);
        for (rel, text) in files {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::fs::create_dir_all(&root).unwrap();
        root
    }

    /// Configure the local model (all-MiniLM-L6-v2, [`model_dir`]) for every later command.
    pub fn use_dense_model(&self) {
        self.merge_config(
            serde_json::json!({"embedding": {"dense": {"provider": "local", "model": model_dir()}}}),
        );
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = vikingfs(self.dir.path());
        c.arg("--workspace")
            .arg(self.ws())
            .args(args)
            // A job whose worker was killed is handed on after this.
            .env("VIKINGFS_JOB_LEASE_MS", "1500")
            .env("RUST_LOG", "warn");
        c
    }

    /// Run and return the output (any status).
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Run, expecting success.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "vikingfs {args:?} failed ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Work the queues until drained.
    /// `add-resource LOCAL --to TO --wait`: added, indexed and summarised when it returns.
    pub fn add_waited(&self, local: &std::path::Path, to: &str) -> String {
        self.ok(&[
            "add-resource",
            local.to_str().unwrap(),
            "--to",
            to,
            "--wait",
        ])
    }

    pub fn drain(&self) {
        self.ok(&["wait", "--timeout", "120"]);
    }

    /// `find --json` results as (uri, level).
    pub fn find(&self, query: &str, limit: usize) -> Vec<(String, u64)> {
        self.find_scored(query, limit)
            .into_iter()
            .map(|(u, l, _)| (u, l))
            .collect()
    }

    /// `find --json` results as (uri, level, score), best first.
    pub fn find_scored(&self, query: &str, limit: usize) -> Vec<(String, u64, f64)> {
        hits(&self.run(&["find", query, "--json", "--limit", &limit.to_string()]))
    }

    /// The file or directory on disk a viking:// URI names.
    pub fn fs_of(&self, uri: &str) -> PathBuf {
        let rel = uri.strip_prefix("viking://").unwrap();
        self.data(rel)
    }

    /// The checks every operation must leave true, for `files` (URI, unique token) that must
    /// exist: each holds its token and is what `find TOKEN` names first among file results;
    /// every result of every such search names something that exists; no lock blocks; fsck
    /// finds nothing derived missing or orphaned.
    pub fn check(&self, files: &[(String, String)]) {
        for (uri, token) in files {
            let fs = self.fs_of(uri);
            let text = std::fs::read_to_string(&fs)
                .unwrap_or_else(|e| panic!("source file {uri} lost: {e}"));
            assert!(text.contains(token.as_str()), "{uri} lost its content");
            let hits = self.find_scored(token, 5);
            for (u, _, _) in &hits {
                assert!(self.fs_of(u).exists(), "find {token} named missing {u}");
            }
            // The file holding the word is the best file result. (The local embedder hashes
            // words into buckets: another file may tie with it through a collision, never
            // beat it.)
            let files: Vec<_> = hits.iter().filter(|h| h.1 == 2).collect();
            let best = files
                .first()
                .unwrap_or_else(|| panic!("find {token}: no file result ({hits:?})"))
                .2;
            let mine = files
                .iter()
                .find(|h| &h.0 == uri)
                .unwrap_or_else(|| panic!("find {token} does not name {uri}: {hits:?}"));
            assert!(mine.2 >= best - 1e-4, "find {token}: {hits:?}");
            let holder = std::fs::read_to_string(self.fs_of(&mine.0)).unwrap();
            assert!(holder.contains(token.as_str()));
        }
        self.check_no_lock_blocks();
        self.check_fsck_clean();
    }

    pub fn check_no_lock_blocks(&self) {
        let out = self.ok(&["locks", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        for l in v.as_array().unwrap() {
            assert!(
                l["stale"].as_bool().unwrap(),
                "a live lock is left behind: {l}"
            );
        }
        let out = self.run(&["lock", "--tree", "viking://resources", "--", "true"]);
        assert!(
            out.status.success(),
            "a fresh TREE lock on viking://resources failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// fsck reports no index or job problem (leftover scratch and stale locks are fine before
    /// a repair; they are checked by `check_repair`).
    pub fn check_fsck_clean(&self) {
        assert_fsck_clean(&self.run(&["fsck", "--json"]));
    }

    /// After `fsck --repair`, fsck finds nothing at all.
    pub fn check_repair(&self) {
        let out = self.run(&["fsck", "--repair"]);
        assert!(
            matches!(out.status.code(), Some(0) | Some(1)),
            "fsck --repair: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.drain();
        let out = self.run(&["fsck"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "fsck after repair: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
