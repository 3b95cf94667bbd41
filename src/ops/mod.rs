//! The locked operations: rm, mv, add-resource and single-file writes, each under the design's
//! locks and in its crash-safe order, plus the background jobs that derive the index and the
//! directory summaries from the files, and the repair (`fsck`) that rebuilds what is derived.
//!
//! Rules every operation here keeps (seed doc, "Consistency Issues and Solutions"):
//! - the files are the truth; the index is derived, so an index change that would make a search
//!   name a missing file happens *before* the file change (rm) or together with it (mv);
//! - an operation that moves or removes several things records an *intent* in the journal
//!   ([`journal`]) after taking its locks and clears it before releasing them, so a process that
//!   dies half-way leaves a record that [`Ops::recover`] finishes forward under the same locks
//!   (a dead owner's locks are free at once);
//! - queue work is idempotent and a job never writes a record for a source that changed or
//!   vanished since it read it (checked under the source's lock, [`jobs`]).
//!
//! Faces (CLI, FUSE mount, sessions) only call [`Ops`].

mod add;
mod at;
pub mod derive;
mod error;
pub mod fsck;
pub mod gauges;
pub mod jobs;
pub mod journal;
mod lifecycle;
mod light;
mod locked;
pub mod migrate;
mod mv;
pub mod rebuild;
mod recover;
mod reindex;
mod reserve;
mod rm;
pub mod search;
mod write;

pub use error::OpsError;
pub use light::Light;
pub use locked::LockedMutations;
pub use write::Release;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Backend, Config};
use crate::embed::{self, Embedder};
use crate::error::Chain;
use crate::fs::ToErrno;
use crate::index::{Index, IndexError, Level, Opened, Store};
use crate::lock::{LockGuard, LockKind, LockManager};
use crate::queue::{Queue, QueueError};
use crate::semantic::{self, Summarizer};
use crate::uri::VPath;
use crate::workspace::Workspace;

pub use add::{AddOptions, AddReport};
pub use fsck::{FsckReport, Problem};
pub use journal::{Intent, Journal};
pub use reindex::ReindexReport;
pub use rm::RmReport;

pub type Result<T, E = OpsError> = std::result::Result<T, E>;

/// The operations engine of one process: the workspace and every store it keeps consistent.
/// Cheap to share (`Arc<Ops>`); every method is safe to call from several threads.
pub struct Ops {
    ws: Workspace,
    /// The data root's descriptor: the hot paths' calls are relative to it ([`at`]).
    root: at::VRoot,
    locks: Arc<LockManager>,
    queue: Queue,
    index: Index,
    /// The dense model; `None`: search is lexical only.
    embedder: Option<Arc<dyn Embedder>>,
    summarizer: Arc<dyn Summarizer>,
    journal: Journal,
    /// Which paths get derived state, and how much of a file ([`derive`]).
    derive: derive::Derivation,
    /// Room to free room on a full disk ([`reserve`]).
    reserve: reserve::Reserve,
    /// How long background jobs wait for a lock a foreground operation holds.
    job_lock_wait: Duration,
    /// How long a foreground operation waits for a busy lock: the configured lock_timeout, but
    /// at least long enough to outwait a background job's write-back (milliseconds), so a
    /// user's rm never fails just because a worker was indexing the file.
    fg_wait: Duration,
    /// Lifecycles a job of this process is working for right now, with how many jobs: the
    /// refresher thread keeps their locks fresh however long a job runs (a chat model may
    /// take a minute; OpenViking #1165, #3273).
    working: Arc<parking_lot::Mutex<std::collections::HashMap<String, usize>>>,
    /// Set by the mount daemon: is this file open for writing through the mount right now?
    write_probe: std::sync::OnceLock<WriteProbe>,
    /// Marked by every foreground operation; the daemon's worker pool gives way to it.
    foreground: Arc<crate::queue::Foreground>,
    /// A rebuild of the index from the files running in the background ([`rebuild`]).
    rebuild: rebuild::Progress,
    /// This engine itself, for work finished after a reply ([`tail`]), which outlives `&self`.
    me: std::sync::Weak<Ops>,
}

/// See [`Ops::set_write_probe`].
pub type WriteProbe = Box<dyn Fn(&VPath) -> bool + Send + Sync>;

/// The least a foreground operation waits for a lock (see `Ops::fg_wait`).
const FOREGROUND_MIN_WAIT: Duration = Duration::from_secs(1);

impl Ops {
    /// Open every store of `ws` as `config` says, and finish operations that a dead process
    /// left half-done ([`Ops::recover`]; failures there are logged, never fatal).
    pub fn open(ws: &Workspace, config: &Config) -> Result<Arc<Ops>> {
        Self::open_with_progress(ws, config, &mut |done, total| {
            if done == total || done % 1000 == 0 {
                tracing::info!(done, total, "rebuilding the lexical index from the files");
            }
        })
    }

    /// [`Ops::open`] that reports the progress of a rebuild of the index from the files (an
    /// index of an older format, or a missing one beside existing files) to `progress`
    /// as (done, total) files.
    pub fn open_with_progress(
        ws: &Workspace,
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Arc<Ops>> {
        let locks = LockManager::new(ws, config.lock.clone())?;
        let embedder = embed::from_config(&config.embedding)?;
        let summarizer =
            semantic::summarizer_from_config(config.vlm.as_ref()).map_err(OpsError::Summarizer)?;
        let ops = Self::assemble(ws, locks, embedder, summarizer, config)?;
        if ops.needs_rebuild()? && !ops.rebuilt_elsewhere() {
            // Derived state rebuilds itself: the terms at once, vectors and summaries queued.
            ops.rebuild_index(progress)?;
        }
        Ok(ops)
    }

    /// [`Ops::open`] for the mount daemon: an index to rebuild from the files is rebuilt by a
    /// thread of its own while the mount serves (searches answer from what is rebuilt so
    /// far; `status` shows how far), not before the mount comes up.
    pub fn open_serving(ws: &Workspace, config: &Config) -> Result<Arc<Ops>> {
        let locks = LockManager::new(ws, config.lock.clone())?;
        let embedder = embed::from_config(&config.embedding)?;
        let summarizer =
            semantic::summarizer_from_config(config.vlm.as_ref()).map_err(OpsError::Summarizer)?;
        let ops = Self::assemble(ws, locks, embedder, summarizer, config)?;
        if ops.needs_rebuild()? {
            ops.rebuild_in_background();
        }
        Ok(ops)
    }

    /// [`Ops::open`] with the parts given (tests, and a daemon that already has them) and
    /// the default content rules.
    pub fn with_parts(
        ws: &Workspace,
        locks: Arc<LockManager>,
        embedder: Option<Arc<dyn Embedder>>,
        summarizer: Arc<dyn Summarizer>,
    ) -> Result<Arc<Ops>> {
        Self::assemble(ws, locks, embedder, summarizer, &Config::default())
    }

    fn assemble(
        ws: &Workspace,
        locks: Arc<LockManager>,
        embedder: Option<Arc<dyn Embedder>>,
        summarizer: Arc<dyn Summarizer>,
        config: &Config,
    ) -> Result<Arc<Ops>> {
        let derive = derive::Derivation::new(&ws.data_root(), &config.index)?;
        // On a full disk the stores may not open (a WAL or shared-memory file to create):
        // the reserve makes the room, so that the user can then free space.
        let reserve = reserve::Reserve::new(&ws.internal_dir());
        let full = |e: &OpsError| e.is_disk_full() && reserve.release();
        // A daemon of the workspace has the stores open: a damaged one is its to heal.
        let holder = crate::daemon::running(ws)
            .ok()
            .and_then(|ds| ds.into_iter().find(|d| d.pid != std::process::id()))
            .map(|d| d.pid);
        // On a server, the queue and the journal share one pool of connections; its damage
        // is the server's to report, not a file to set aside.
        let server = match &config.backend {
            Backend::Postgres { dsn } => Some(server_of(ws, dsn)?),
            Backend::Sqlite => None,
        };
        let (queue, queue_lost) = match &server {
            Some(pg) => (queue_on(ws, pg.clone())?, false),
            None => match open_queue_healing(&ws.queue_db(), holder) {
                Err(e) if full(&e) => open_queue_healing(&ws.queue_db(), holder),
                r => r,
            }?,
        };
        let (index, _) = match &server {
            Some(pg) => {
                let (dim, model) = embedder
                    .as_deref()
                    .map_or((0, String::new()), |e| (e.dim(), e.model_id()));
                Index::open_or_reset_in(Store::Server(pg.clone()), dim, &model)?
            }
            None => match open_index(&ws.index_db(), embedder.as_deref(), holder) {
                Err(e) if full(&e) => open_index(&ws.index_db(), embedder.as_deref(), holder),
                r => r,
            }?,
        };
        let ops_db = ws.internal_dir().join("ops.db");
        let journal = match &server {
            Some(pg) => {
                Journal::with_engine(Box::new(journal::postgres::PgJournal::open(pg.clone())?))
            }
            None => match Journal::open(&ops_db).map_err(OpsError::from) {
                Err(e) if full(&e) => Journal::open(&ops_db).map_err(OpsError::from),
                r => r,
            }?,
        };
        reserve.ensure();
        let fg_wait = locks.config().timeout.max(FOREGROUND_MIN_WAIT);
        let root = at::VRoot::open(&ws.data_root()).map_err(|e| OpsError::io(ws.data_root(), e))?;
        let ops = Arc::new_cyclic(|me| Ops {
            ws: ws.clone(),
            root,
            locks,
            queue,
            index,
            embedder,
            summarizer,
            journal,
            derive,
            reserve,
            job_lock_wait: Duration::from_secs(2),
            working: Default::default(),
            write_probe: std::sync::OnceLock::new(),
            fg_wait,
            foreground: Default::default(),
            rebuild: Default::default(),
            me: me.clone(),
        });
        lifecycle::start_refresher(&ops);
        if ops.index.opened() == Opened::VectorsDropped {
            // Another model built the old vectors: the records stay, new vectors are queued.
            tracing::warn!("index vectors were built by another model; re-embedding every record");
        }
        if let Err(e) = ops.adopt_copied_index() {
            tracing::warn!("checking whether the workspace was copied: {}", Chain(&e));
        }
        if queue_lost {
            // The damaged queue's jobs: whatever the files have that the index does not.
            let mut n = 0;
            for scope in crate::uri::SCOPES {
                n += ops.refresh_under(&VPath::root().join(scope)?)?;
            }
            tracing::warn!(jobs = n, "queued again what the damaged queue held");
        }
        if queue_lost || matches!(ops.index.opened(), Opened::VectorsDropped | Opened::Claimed) {
            ops.backfill_vectors()?;
        }
        if let Err(e) = ops.recover() {
            tracing::warn!("recovering interrupted operations: {}", Chain(&e));
        }
        Ok(ops)
    }

    /// The mount daemon tells the jobs which files it has open for writing. Under FUSE
    /// passthrough their bytes reach the disk without the daemon seeing them, so an embedding
    /// made now could be stale with nothing queued to redo it if the daemon died before the
    /// close. Such a job retries later instead (the close queues a fresh one anyway).
    pub fn set_write_probe(&self, probe: WriteProbe) {
        let _ = self.write_probe.set(probe);
    }

    pub(crate) fn open_for_write(&self, p: &VPath) -> bool {
        self.write_probe.get().is_some_and(|probe| probe(p))
    }

    /// The `Arc` this engine lives in (every `Ops` is made by [`Ops::with_parts`]).
    fn arc(&self) -> Arc<Ops> {
        self.me
            .upgrade()
            .expect("an Ops is only reached through its Arc")
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub fn locks(&self) -> &Arc<LockManager> {
        &self.locks
    }

    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Drop the index records of `p` (its file's text is about to change).
    pub fn forget_records(&self, p: &VPath) -> std::result::Result<(), IndexError> {
        self.index.delete(p).map(drop)
    }

    /// The source version the record of `p` at `level` was made from, if it has one.
    pub fn record_version(
        &self,
        p: &VPath,
        level: Level,
    ) -> std::result::Result<Option<String>, IndexError> {
        self.index.version_of(p, level)
    }

    /// The dense model, when one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Parse a `viking://` URI in this workspace's user context.
    pub fn parse(&self, uri: &str) -> Result<VPath> {
        Ok(self.ws.parse_uri(uri)?)
    }

    /// Take locks for a foreground operation (see `fg_wait`).
    fn lock(&self, reqs: &[(VPath, LockKind)]) -> Result<LockGuard> {
        self.foreground.touch();
        Ok(self.locks.acquire(reqs, self.fg_wait)?)
    }

    /// The foreground operations' activity, for a worker pool to give way to
    /// ([`crate::queue::PoolOptions::foreground`]).
    pub fn foreground(&self) -> &Arc<crate::queue::Foreground> {
        &self.foreground
    }

    fn backing(&self, p: &VPath) -> PathBuf {
        self.ws.fs_path(p)
    }

    /// [`stat`] of a namespace path, relative to the data root's descriptor.
    fn lstat(&self, p: &VPath) -> Result<Option<crate::sys::Stat>> {
        self.root
            .lstat(p)
            .map_err(|e| OpsError::io(self.backing(p), e))
    }

    /// Search: the `limit` best live records for `query`, hybrid when a model is configured
    /// (records of missing files are dropped and deleted on the way; summaries whose refresh
    /// is queued are not shown).
    pub fn find(
        &self,
        query: &str,
        limit: usize,
        under: Option<&VPath>,
    ) -> Result<Vec<crate::index::Hit>> {
        let found = search::find(
            &self.ws,
            &self.index,
            Some(&self.queue as &dyn search::PendingSummaries),
            self.embedder.as_deref(),
            &search::Query {
                text: query,
                mode: crate::index::Mode::Hybrid,
                limit,
                under,
            },
        )?;
        Ok(found.hits)
    }
}

/// The workspace's queue where `backend` keeps it: `WORKSPACE/.vikingfs/queue.db`, or the
/// PostgreSQL database (its spool files stay in the workspace either way). For commands
/// that read or feed the queue without opening every store (`status`, `wait`, `find`).
pub fn open_queue_of(ws: &Workspace, backend: &Backend) -> Result<Queue> {
    match backend {
        Backend::Sqlite => open_queue(&ws.queue_db()),
        Backend::Postgres { dsn } => queue_on(ws, server_of(ws, dsn)?),
    }
}

/// Where a workspace's index lives under its storage backend.
pub enum IndexHome {
    /// `WORKSPACE/.vikingfs/index.db`.
    File(PathBuf),
    /// The PostgreSQL server, bound to the workspace.
    Server(Arc<crate::pg::Pg>),
}

impl IndexHome {
    pub fn store(&self) -> Store<'_> {
        match self {
            IndexHome::File(p) => Store::File(p),
            IndexHome::Server(pg) => Store::Server(pg.clone()),
        }
    }

    /// The index file, when it is one (damage checks, sizes on disk).
    pub fn file(&self) -> Option<&Path> {
        match self {
            IndexHome::File(p) => Some(p),
            IndexHome::Server(_) => None,
        }
    }
}

/// Where the workspace's index is under `backend` (dialling the server, for postgres).
pub fn index_home(ws: &Workspace, backend: &Backend) -> Result<IndexHome> {
    Ok(match backend {
        Backend::Sqlite => IndexHome::File(ws.index_db()),
        Backend::Postgres { dsn } => IndexHome::Server(server_of(ws, dsn)?),
    })
}

/// The PostgreSQL server of `dsn`, bound to this workspace (see [`crate::pg::Pg::bind_workspace`]).
fn server_of(ws: &Workspace, dsn: &str) -> Result<Arc<crate::pg::Pg>> {
    let pg = crate::pg::Pg::connect(dsn).map_err(QueueError::from)?;
    let id = ws
        .id()
        .map_err(|e| OpsError::io(ws.internal_dir().join("workspace-id"), e))?;
    pg.bind_workspace(&id).map_err(QueueError::from)?;
    Ok(Arc::new(pg))
}

/// The workspace's queue on the PostgreSQL server `pg` (spool files in the workspace).
fn queue_on(ws: &Workspace, pg: Arc<crate::pg::Pg>) -> Result<Queue> {
    let engine = crate::queue::postgres::PgEngine::open(pg)?;
    Ok(Queue::with_engine(
        Box::new(engine),
        &ws.queue_db(),
        crate::queue::QueueOptions::default(),
    )?)
}

/// Open the queue, retrying while a fresh database is being switched to WAL by another
/// process (see [`crate::db::retry_busy`]).
fn open_queue(path: &Path) -> Result<Queue> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Queue::open(path) {
            Err(QueueError::Open { source, .. })
                if source.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            r => return Ok(r?),
        }
    }
}

/// [`open_queue`], moving a damaged queue database aside (its header, or SQLite's answer)
/// and starting an empty one; returns whether it did. The jobs it held are derived: the
/// caller queues again what the files and the index say is missing (and the spool's jobs
/// are replayed by the new queue).
fn open_queue_healing(path: &Path, holder: Option<u32>) -> Result<(Queue, bool)> {
    let set_aside = |why: &str| set_aside("queue", path, why, holder);
    if let Some(why) = crate::db::damage(path) {
        set_aside(&why)?;
        return Ok((open_queue(path)?, true));
    }
    match open_queue(path) {
        Err(OpsError::Queue(QueueError::Open { source, .. } | QueueError::Sql(source)))
            if crate::db::is_damage_code(&source) =>
        {
            set_aside(&source.to_string())?;
            Ok((open_queue(path)?, true))
        }
        r => Ok((r?, false)),
    }
}

/// Move the damaged `store` at `path` aside (kept, never deleted) with a one-line warning, so
/// that it is opened anew and rebuilt from the files — unless `holder`, another live daemon,
/// has it open.
fn set_aside(store: &'static str, path: &Path, why: &str, holder: Option<u32>) -> Result<()> {
    if let Some(pid) = holder {
        return Err(OpsError::DamagedInUse {
            store,
            path: path.to_path_buf(),
            why: why.to_string(),
            pid,
        });
    }
    let aside = crate::db::move_aside(path).map_err(|e| OpsError::io(path, e))?;
    crate::metrics::get()
        .store_healed
        .with_label_values(&[store])
        .inc();
    let then = match store {
        "queue" => "its jobs are derived again from the files",
        _ => "rebuilding it from the files",
    };
    tracing::warn!(
        "{store} {} is damaged ({why}): moved to {}; {then}",
        path.display(),
        aside.display()
    );
    Ok(())
}

/// Open the index (dropping vectors of another model, recreating one of an older format),
/// retrying like [`open_queue`]. A damaged one (its header, or SQLite's answer) is moved
/// aside with a one-line warning and opened anew: it is derived, so the caller rebuilds it
/// from the files ([`Opened::Created`]).
fn open_index(
    path: &Path,
    embedder: Option<&dyn Embedder>,
    holder: Option<u32>,
) -> Result<(Index, bool)> {
    use crate::db as health;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (dim, model) = embedder.map_or((0, String::new()), |e| (e.dim(), e.model_id()));
    let set_aside = |why: &str| set_aside("index", path, why, holder);
    if let Some(why) = health::damage(path) {
        set_aside(&why)?;
    }
    let mut healed = false;
    loop {
        match Index::open_or_reset(path, dim, &model) {
            Err(IndexError::Sqlite { source, .. })
                if source.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if !healed && e.is_damage() => {
                set_aside(&Chain(&e).to_string())?;
                healed = true;
            }
            r => return Ok(r?),
        }
    }
}

/// What a source looked like when it was read: a record built from it carries this, and a
/// job writes back only if the source still has it. rename(2) keeps all three, so an `mv`
/// does not make moved records look stale.
pub fn source_version(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format_version(meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
}

/// The one format of a source version: `{ino}-{size}-{mtime_ns}` in hex.
fn format_version(ino: u64, size: u64, mtime: i64, mtime_nsec: i64) -> String {
    let mtime_ns = mtime as i128 * 1_000_000_000 + mtime_nsec as i128;
    format!("{ino:x}-{size:x}-{mtime_ns:x}")
}

/// Whether two source versions differ only in the inode number: the same size and the same
/// modification time to the nanosecond, under another inode — a copy (`cp -a`, `rsync -a`,
/// a restore), whose content is the one the record was built from.
pub(crate) fn same_but_inode(a: &str, b: &str) -> bool {
    match (a.split_once('-'), b.split_once('-')) {
        (Some((ia, ra)), Some((ib, rb))) => ia != ib && ra == rb,
        _ => false,
    }
}

impl Ops {
    /// A workspace copied whole (`cp -a`, `rsync -a`, a backup restore) opens as it was: its
    /// records name their sources by inode too, and every inode changed. When the data root
    /// is not the one the index was built beside, every record whose source differs only in
    /// its inode gets the new version (no re-indexing); anything else changed is left to the
    /// jobs and `fsck` as usual.
    fn adopt_copied_index(&self) -> Result<()> {
        let here = self
            .lstat(&VPath::root())?
            .map(|st| format!("{}:{}", st.0.st_dev, st.0.st_ino))
            .unwrap_or_default();
        let built = self.index.meta("data_root")?;
        if built.as_deref() == Some(here.as_str()) {
            return Ok(());
        }
        let mut restamped = 0usize;
        if built.is_some() {
            for (uri, level) in self.index.all_uris()? {
                let src = match level {
                    crate::index::Level::Content => uri.clone(),
                    crate::index::Level::Abstract => uri.join(jobs::ABSTRACT_FILE)?,
                    crate::index::Level::Overview => uri.join(jobs::OVERVIEW_FILE)?,
                };
                let (Some(v), Some(st)) = (self.index.version_of(&uri, level)?, self.lstat(&src)?)
                else {
                    continue;
                };
                let now = stat_version(&st);
                if same_but_inode(&v, &now) && self.index.restamp(&uri, level, &v, &now)? {
                    restamped += 1;
                }
            }
            tracing::info!(
                restamped,
                "the workspace was copied: records follow their files"
            );
        }
        self.index.set_meta("data_root", &here)?;
        Ok(())
    }
}

/// [`source_version`] from an `lstat` made relative to the data root (the same string).
pub(crate) fn stat_version(st: &crate::sys::Stat) -> String {
    let (mtime, mtime_ns) = st.mtime();
    format_version(st.st_ino, st.st_size as u64, mtime, mtime_ns)
}

/// The metadata of a path without following a final symlink; `None` when it does not exist.
pub(crate) fn stat(path: &Path) -> Result<Option<std::fs::Metadata>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
        Err(e) => Err(OpsError::io(path, e)),
    }
}

/// Whether a directory entry is a source file the index covers: not a lock, internal or
/// sidecar name.
pub(crate) fn is_source_name(name: &str) -> bool {
    !crate::uri::is_internal_name(name) && !crate::uri::is_sidecar_name(name)
}

impl Ops {
    /// Every source file and directory below `dir` (itself excluded) that gets derived
    /// state, as namespace paths: ignored paths are skipped, and not descended into. Read
    /// relative to the data root, so a tree deeper than PATH_MAX as a backing path is walked
    /// too.
    pub(crate) fn walk(
        &self,
        dir: &VPath,
        files: &mut Vec<VPath>,
        dirs: &mut Vec<VPath>,
    ) -> Result<()> {
        let names = match self.root.names(dir) {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Ok(())
            }
            Err(e) => return Err(OpsError::io(self.backing(dir), e)),
        };
        for name in names {
            let Some(name) = name.to_str() else { continue };
            if !is_source_name(name) {
                continue;
            }
            let Ok(p) = dir.join(name) else { continue };
            let Some(st) = self.lstat(&p)? else { continue };
            if self.derive.rules.is_ignored(&p, st.is_dir()) {
                continue;
            }
            if st.is_dir() {
                dirs.push(p.clone());
                self.walk(&p, files, dirs)?;
            } else if st.is_file() {
                files.push(p);
            }
        }
        Ok(())
    }
}
