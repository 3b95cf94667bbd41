//! The store kernel: the workspace and every store the operations keep consistent — the data
//! root's descriptor, the path locks, the journal, the index, the queue, the disk reserve and
//! the foreground marker — opened, and healed when damaged, in one place.
//!
//! What holds once [`Stores::open`] returned:
//! - each store is open, or the open failed with the store named: a damaged SQLite store was
//!   moved aside (kept) and opened anew, unless another live daemon of the workspace holds it
//!   (then [`OpsError::DamagedInUse`]); a full disk first gives back the reserve and tries once
//!   more;
//! - on PostgreSQL the queue, the journal and the index share one server bound to the
//!   workspace, whose damage is the server's to report;
//! - an index built beside another data root (a copied workspace) has its records restamped
//!   to the copy's inodes.
//!
//! What a lost store lost is not derived here: [`Healed`] tells the composition root
//! ([`super::Ops`]) which derived work to queue again. The kernel knows no model and no
//! summariser: the index opens for the model identity the caller gives ([`Model`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{at, derive, reserve, same_but_inode, stat_version, OpsError, Result};
use crate::config::{Backend, Config};
use crate::db;
use crate::errno::ToErrno;
use crate::error::Chain;
use crate::index::{Index, IndexError, Level, Opened, Store};
use crate::lock::{LockGuard, LockKind, LockManager};
use crate::queue::{Foreground, Queue, QueueError};
use crate::uri::VPath;
use crate::workspace::Workspace;

/// The meta key holding a rebuild's progress (`done/total`; `pending` before the walk).
pub const META_KEY: &str = "rebuild";

/// A rebuild in progress, as the index records it: (done, total) files, `None` for the walk
/// before the first file.
pub fn recorded(index: &Index) -> Option<Option<(u64, u64)>> {
    let v = index.meta(META_KEY).ok()??;
    if v.is_empty() {
        return None;
    }
    Some(
        v.split_once('/')
            .and_then(|(d, t)| Some((d.parse().ok()?, t.parse().ok()?))),
    )
}

/// How long an open retries a database another process is switching to WAL.
const PATIENCE: Duration = Duration::from_secs(10);

/// The model identity the index is opened for.
pub enum Model {
    /// The configured model (dim 0: none, lexical only): vectors another model made are
    /// dropped and queued again — what a process that derives opens with.
    Embedding { dim: usize, id: String },
    /// The configured model, which must be the one the index was built with: an index with
    /// records of another model (or of none) is [`OpsError::BuiltWith`], never re-derived —
    /// what a one-shot command that derives opens with, so that its own environment never
    /// drops or remakes the workspace's vectors (only `vikingfs reindex` and a daemon's start
    /// do, with [`Model::Embedding`]).
    AsBuilt { dim: usize, id: String },
    /// Keep whatever vectors the index has, never writing any: for a process that only runs
    /// locked operations, so its own configuration never re-derives the workspace.
    AsStored,
}

impl Model {
    /// The identity of `embedder` (none: lexical only).
    pub fn of(embedder: Option<&dyn crate::embed::Embedder>) -> Model {
        let (dim, id) = embedder.map_or((0, String::new()), |e| (e.dim(), e.model_id()));
        Model::Embedding { dim, id }
    }

    /// [`Model::AsBuilt`] of `embedder`.
    pub fn as_built(embedder: Option<&dyn crate::embed::Embedder>) -> Model {
        match Model::of(embedder) {
            Model::Embedding { dim, id } => Model::AsBuilt { dim, id },
            m => m,
        }
    }

    fn open(&self, store: Store<'_>) -> std::result::Result<Index, IndexError> {
        match self {
            Model::Embedding { dim, id } | Model::AsBuilt { dim, id } => {
                Index::open_or_reset_in(store, *dim, id).map(|(i, _)| i)
            }
            Model::AsStored => Index::open_lexical_in(store),
        }
    }

    /// The model the index at `store` was built with, when opening it for this one
    /// re-derives its vectors ([`Model::Embedding`] only).
    fn rederives(&self, store: Store<'_>) -> Option<String> {
        let Model::Embedding { dim, id } = self else {
            return None;
        };
        if matches!(&store, Store::File(p) if !p.exists()) {
            return None;
        }
        Index::built_with_other(store, *dim, id)
            .ok()
            .flatten()
            .map(|(m, _)| m)
    }

    /// [`Model::AsBuilt`]: refuse an index built with another model, before opening it.
    fn refuse_other(&self, store: Store<'_>) -> Result<()> {
        let Model::AsBuilt { dim, id } = self else {
            return Ok(());
        };
        if matches!(&store, Store::File(p) if !p.exists()) {
            return Ok(());
        }
        // An index that cannot be read here (damaged, of another format) is healed by the
        // open that follows, from the files: nothing of another model to keep.
        match Index::built_with_other(store, *dim, id).ok().flatten() {
            None => Ok(()),
            Some((stored, _)) => Err(OpsError::BuiltWith {
                stored: model_name(&stored),
                configured: model_name(id),
            }),
        }
    }
}

/// A model identity as messages name it.
pub fn model_name(id: &str) -> String {
    if id.is_empty() {
        "none (lexical only)".to_string()
    } else {
        id.to_string()
    }
}

/// The meta key naming the model whose vectors the last re-derivation dropped (`""`: none),
/// for `status` to say why every record is being embedded again.
pub const REDERIVED_KEY: &str = "rederived_from";

/// How long each kind of work waits for a busy lock.
pub(crate) struct Waits {
    /// A foreground operation: the configured lock_timeout (0: a user's hold answers busy at
    /// once). vikingfs's own holds (a job's write-back, this process's other requests, a
    /// session's cut) are waited out whatever it says ([`crate::lock::LockManager`]), so a
    /// user's rm never fails just because a worker was indexing the file.
    pub(crate) foreground: Duration,
    /// A background job, for a lock a foreground operation holds.
    pub(crate) job: Duration,
}

/// What opening the stores healed, for the caller to derive again.
#[derive(Debug, Clone, Copy, Default)]
pub struct Healed {
    /// The queue was damaged and started empty: its jobs are to be derived from the files.
    pub queue_lost: bool,
}

/// The stores of one workspace in one process. Cheap to share (`Arc<Stores>`); every method
/// is safe to call from several threads.
pub struct Stores {
    pub(super) ws: Workspace,
    /// The data root's descriptor: the hot paths' calls are relative to it ([`at`]).
    pub(super) root: at::VRoot,
    pub(super) locks: Arc<LockManager>,
    pub(super) queue: Queue,
    pub(super) index: Index,
    pub(super) journal: crate::journal::Journal,
    /// Which paths get derived state, and how much of a file ([`mod@derive`]).
    pub(super) derive: Arc<derive::Derivation>,
    /// Room to free room on a full disk ([`reserve`]).
    pub(super) reserve: reserve::Reserve,
    pub(super) waits: Waits,
    /// Marked by every foreground operation; the daemon's worker pool gives way to it.
    pub(super) foreground: Arc<Foreground>,
    /// No other daemon of the workspace had the stores open: damage met later is this
    /// process's to heal.
    pub(super) sole: bool,
    /// What the history keeps ([`super::history`]).
    pub(super) history: crate::config::HistoryConfig,
    /// When the history was last pruned.
    pub(super) pruned: parking_lot::Mutex<Option<std::time::Instant>>,
    /// What the history holds, as last counted ([`super::prune`]'s running tally).
    pub(super) tally: parking_lot::Mutex<Option<super::prune::Tally>>,
    /// Since when the disk has been below the history's line, at every look.
    pub(super) below_since: parking_lot::Mutex<Option<std::time::Instant>>,
    /// History entries waiting to be recorded ([`Stores::record_soon`]).
    pub(super) waiting_entries: parking_lot::Mutex<Vec<crate::journal::Entry>>,
    /// The history's blobs directory was made by this process ([`Stores::new_blob`]).
    pub(super) blobs_made: std::sync::atomic::AtomicBool,
    /// The last requester's command line ([`Stores::command_of`]).
    pub(super) last_command: parking_lot::Mutex<Option<(u32, Option<String>)>>,
    /// The source version of the file each copy kept lately was made from, by path: a
    /// file that still is that version is kept already ([`Stores::keep_version`]).
    pub(super) copied_from: parking_lot::Mutex<std::collections::HashMap<String, String>>,
}

impl Stores {
    /// Open every store of `ws` as `config` says, with `locks`, the index for `model`.
    pub fn open(
        ws: &Workspace,
        config: &Config,
        locks: Arc<LockManager>,
        model: &Model,
    ) -> Result<(Arc<Stores>, Healed)> {
        let derive = Arc::new(derive::Derivation::new(&ws.data_root(), &config.index)?);
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
        let index_db = ws.index_db();
        let store = || match &server {
            Some(pg) => Store::Server(pg.clone()),
            None => Store::File(&index_db),
        };
        model.refuse_other(store())?;
        // What this open re-derives, if it does: said in the log and kept for `status`.
        let rederives = model.rederives(store());
        let index = match &server {
            Some(pg) => model.open(Store::Server(pg.clone()))?,
            None => match open_index(&ws.index_db(), model, holder) {
                Err(e) if full(&e) => open_index(&ws.index_db(), model, holder),
                r => r,
            }?,
        };
        let ops_db = ws.internal_dir().join("ops.db");
        let journal = match &server {
            Some(pg) => crate::journal::Journal::with_engine(Box::new(
                crate::journal::postgres::PgJournal::open(pg.clone())?,
            )),
            None => match crate::journal::Journal::open(&ops_db).map_err(OpsError::from) {
                Err(e) if full(&e) => {
                    crate::journal::Journal::open(&ops_db).map_err(OpsError::from)
                }
                r => r,
            }?,
        }
        .with_spool(ws.internal_dir().join(crate::journal::spool::DIR));
        reserve.ensure();
        let waits = Waits {
            foreground: locks.config().timeout,
            job: Duration::from_secs(2),
        };
        let root = at::VRoot::open(&ws.data_root()).map_err(|e| OpsError::io(ws.data_root(), e))?;
        let stores = Arc::new(Stores {
            ws: ws.clone(),
            root,
            locks,
            queue,
            index,
            journal,
            derive,
            reserve,
            waits,
            foreground: Default::default(),
            sole: holder.is_none(),
            history: config.history.clone(),
            pruned: Default::default(),
            tally: Default::default(),
            below_since: Default::default(),
            last_command: Default::default(),
            copied_from: Default::default(),
            waiting_entries: Default::default(),
            blobs_made: Default::default(),
        });
        if let (Some(stored), Opened::VectorsDropped | Opened::Claimed) =
            (rederives, stores.index.opened())
        {
            // Another model (or none) built the old vectors: the records stay, new vectors
            // are queued.
            tracing::warn!(
                "re-deriving: the index was built with model {}, this configuration names {}: \
                 its vectors are dropped and every record is embedded again",
                model_name(&stored),
                model_name(stores.index.model_id())
            );
            stores.index.set_meta(REDERIVED_KEY, &stored)?;
        }
        if let Err(e) = stores.adopt_copied_index() {
            tracing::warn!("checking whether the workspace was copied: {}", Chain(&e));
        }
        Ok((stores, Healed { queue_lost }))
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

    pub fn journal(&self) -> &crate::journal::Journal {
        &self.journal
    }

    /// Parse a `viking://` URI in this workspace's user context.
    pub fn parse(&self, uri: &str) -> Result<VPath> {
        Ok(self.ws.parse_uri(uri)?)
    }

    /// Take locks for a foreground operation (see [`Waits::foreground`]).
    pub(super) fn lock(&self, reqs: &[(VPath, LockKind)]) -> Result<LockGuard> {
        self.foreground.touch();
        // vikingfs's own operation, held until just after its reply: waited out by the next.
        Ok(self.locks.acquire_brief(reqs, self.waits.foreground)?)
    }

    /// [`Self::lock`] of paths that must exist already: no directory is made for a lock file
    /// (a missing one fails the lock with `ENOENT`).
    pub(super) fn lock_existing(&self, reqs: &[(VPath, LockKind)]) -> Result<LockGuard> {
        self.foreground.touch();
        Ok(self
            .locks
            .acquire_brief_existing(reqs, self.waits.foreground)?)
    }

    /// Whether the index must be rebuilt from the files: it was just created or recreated, or
    /// a rebuild was interrupted.
    pub fn needs_rebuild(&self) -> Result<bool> {
        if matches!(self.index.opened(), Opened::Created | Opened::Recreated) {
            self.index.set_meta(META_KEY, "pending")?;
            return Ok(true);
        }
        Ok(recorded(&self.index).is_some())
    }

    /// The foreground operations' activity, for a worker pool to give way to
    /// ([`crate::queue::PoolOptions::foreground`]).
    pub fn foreground(&self) -> &Arc<Foreground> {
        &self.foreground
    }

    pub(super) fn backing(&self, p: &VPath) -> PathBuf {
        self.ws.fs_path(p)
    }

    /// [`super::stat`] of a namespace path, relative to the data root's descriptor.
    pub(super) fn lstat(&self, p: &VPath) -> Result<Option<crate::sys::Stat>> {
        self.root
            .lstat(p)
            .map_err(|e| OpsError::io(self.backing(p), e))
    }
}

impl Stores {
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
                    crate::index::Level::Abstract => uri.join(crate::uri::ABSTRACT_FILE)?,
                    crate::index::Level::Overview => uri.join(crate::uri::OVERVIEW_FILE)?,
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

impl Stores {
    /// The entries of `dir` that are sources (files and directories; not sidecars, internal
    /// names, symlinks or special files), with whether each is a directory.
    pub(super) fn children(&self, dir: &VPath) -> Result<Vec<(VPath, bool)>> {
        let fs = self.backing(dir);
        let rd = match std::fs::read_dir(&fs) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(OpsError::io(&fs, e)),
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !super::is_source_name(&name) {
                continue;
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() || ft.is_file() {
                if let Ok(p) = dir.join(&name) {
                    out.push((p, ft.is_dir()));
                }
            }
        }
        Ok(out)
    }

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
            if !super::is_source_name(name) {
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
pub(super) fn server_of(ws: &Workspace, dsn: &str) -> Result<Arc<crate::pg::Pg>> {
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
    let busy = |e: &QueueError| matches!(e, QueueError::Open { source, .. } if db::is_busy(source));
    Ok(db::retry_while(PATIENCE, busy, || Queue::open(path))?)
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
    crate::db::said_set_aside(store, path, &aside, why);
    Ok(())
}

/// Open the index (dropping vectors of another model, recreating one of an older format),
/// retrying like [`open_queue`]. A damaged one (its header, or SQLite's answer) is moved
/// aside with a one-line warning and opened anew: it is derived, so the caller rebuilds it
/// from the files ([`Opened::Created`]).
fn open_index(path: &Path, model: &Model, holder: Option<u32>) -> Result<Index> {
    let set_aside = |why: &str| set_aside("index", path, why, holder);
    if let Some(why) = db::damage(path) {
        set_aside(&why)?;
    }
    let busy =
        |e: &IndexError| matches!(e, IndexError::Sqlite { source, .. } if db::is_busy(source));
    let open = || db::retry_while(PATIENCE, busy, || model.open(Store::File(path)));
    match open() {
        Err(e) if e.is_damage() => {
            set_aside(&Chain(&e).to_string())?;
            Ok(open()?)
        }
        r => Ok(r?),
    }
}

impl Stores {
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
}

/// The marker of a migration's copy not switched to yet ([`super::migrate`]), in the
/// workspace's internal directory: it holds the target's backend name.
pub const MIGRATE_MARKER: &str = "migrate.incomplete";

/// Refuse a one-shot command whose configured storage backend is not the one the workspace's
/// stores are on (it would open empty stores of its own beside them and derive them again):
/// SQLite configured where the SQLite stores were migrated away (only their
/// `index.db.migrated-*` is left), or PostgreSQL configured beside a live SQLite index.
/// A daemon's start and `vikingfs migrate` do not ask.
pub fn check_backend(ws: &Workspace, backend: &Backend) -> Result<()> {
    let index = ws.index_db();
    let migrated = || {
        std::fs::read_dir(ws.internal_dir())
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("index.db.migrated-"))
            })
    };
    match backend {
        Backend::Sqlite if !index.exists() && !ws.queue_db().exists() && migrated() => {
            Err(OpsError::BuiltOn {
                stored: "postgres",
                configured: "sqlite",
                why: format!(
                    "its SQLite files were migrated away: {}.migrated-*",
                    index.display()
                ),
            })
        }
        Backend::Postgres { .. }
            if index.exists() && !ws.internal_dir().join(MIGRATE_MARKER).exists() =>
        {
            Err(OpsError::BuiltOn {
                stored: "sqlite",
                configured: "postgres",
                why: format!("{} is the live index", index.display()),
            })
        }
        _ => Ok(()),
    }
}
