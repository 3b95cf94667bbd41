//! Lock semantics for a process: batches, waiting, guards, background refresh, listing.
//!
//! One [`LockManager`] per process (shared as `Arc`). Each acquire is a new *handle* with its own
//! owner name, so two acquires of one process exclude each other exactly as two processes do;
//! a [`LockGuard::nested`] lock reuses its parent's handle, so an EXACT below its own TREE does
//! not conflict. Same-process conflicts are settled in the in-process table and wait on a
//! condvar; conflicts with other processes are polled with jittered back-off.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use parking_lot::{Condvar, Mutex};

use super::codec;
use super::engine::{Engine, Filter, Held, Verdict};
use super::pool::Spares;
use super::provider::{self, Cas};
use super::resolver::{At, LockFile, Resolver, EXACT_PREFIX, PATH_LOCK};
use super::table::Table;
use super::{walk, LockError, LockInfo, LockKind};
use crate::config::LockConfig;
use crate::error::Chain;
use crate::sys;
use crate::uri::VPath;
use crate::workspace::Workspace;

/// First and longest pause between polls of a lock held by another process (OpenViking's).
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(500);
/// How long a foreground request waits, at least, for locks held by vikingfs's background
/// work (a job's write-back holds one for milliseconds; a burst of them, a little longer).
const BACKGROUND_GRACE: Duration = Duration::from_secs(10);
/// The reason [`LockManager::clear_corrupt`] gives a file it removed.
const CLEARED: &str = "corrupt: removed";
/// How often a foreground batch that keeps its files looks again at a background lock.
const BACKGROUND_POLL: Duration = Duration::from_millis(5);

thread_local! {
    /// Set by [`without_waiting`] on this thread: a batch that would wait fails instead.
    static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set when a batch failed for that reason.
    static WOULD_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` on this thread with every lock it takes taken only if that needs no wait: a batch
/// that meets a lock held elsewhere (which it would wait for, or answer busy for after a
/// wait) fails at once instead. `None` when one did: `f`'s outcome is void, and the caller
/// runs it again where waiting is fine (the mount's worker pool). A lock is the first thing
/// such an `f` waits for, so it has changed nothing by then.
pub fn without_waiting<T>(f: impl FnOnce() -> T) -> Option<T> {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            NO_WAIT.with(|n| n.set(self.0));
        }
    }
    let _reset = Reset(NO_WAIT.with(|n| n.replace(true)));
    WOULD_WAIT.with(|w| w.set(false));
    let out = f();
    (!WOULD_WAIT.with(|w| w.replace(false))).then_some(out)
}

/// In [`without_waiting`]: note that a batch would have waited, and say whether to give up.
fn give_up_waiting() -> bool {
    let no_wait = NO_WAIT.with(|n| n.get());
    if no_wait {
        WOULD_WAIT.with(|w| w.set(true));
    }
    no_wait
}

struct State {
    res: Resolver,
    pool: Spares,
    cfg: LockConfig,
    table: Mutex<Table>,
    released: Condvar,
    /// Lock files held on disk, by guard id; the refresh thread rewrites their tokens.
    held: Mutex<HashMap<u64, Vec<Held>>>,
    next_id: AtomicU64,
}

/// The process's lock engine. Dropping it stops the refresh thread.
pub struct LockManager {
    inner: Arc<State>,
    _stop: Sender<()>,
}

/// An owner identity: every lock file of one handle carries its owner name.
struct Holder {
    id: u64,
    owner: Arc<str>,
    /// May taking a lock create the directories its lock file needs? Not for work on paths
    /// that exist already (see [`LockManager::acquire_existing`]).
    create_dirs: bool,
    /// Background work (a job's write-back): yields to blocked foreground requests.
    background: bool,
}

/// Holds a set of locks; releases them on drop (also on error and panic paths).
pub struct LockGuard {
    inner: Arc<State>,
    id: u64,
    handle: Arc<Holder>,
    done: bool,
}

/// De-duplicate (TREE wins over EXACT) and order by `(len(path), path)`, as OpenViking does.
pub fn normalize(reqs: &[(VPath, LockKind)]) -> Vec<(VPath, LockKind)> {
    let mut v: Vec<(VPath, LockKind)> = reqs.to_vec();
    v.sort_by(|a, b| {
        (a.0.as_str().len(), a.0.as_str(), std::cmp::Reverse(a.1)).cmp(&(
            b.0.as_str().len(),
            b.0.as_str(),
            std::cmp::Reverse(b.1),
        ))
    });
    v.dedup_by(|later, first| later.0 == first.0);
    v
}

/// `d` times a factor from 0.8 to 1.2, different at each call (std's randomly keyed hasher
/// is random enough to spread retries apart; no generator crate needed for that).
fn jitter(d: Duration) -> Duration {
    use std::hash::BuildHasher;
    let r = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    d.mul_f64(0.8 + 0.4 * (r as f64 / u64::MAX as f64))
}

/// What a batch of locks is taken for (the public `acquire*` functions name one each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// A foreground change that may create the paths' directories (and their lock files).
    Creating,
    /// A foreground change of paths whose directories exist: none is created.
    Existing,
    /// A background job's write-back: like `Existing`, and it gives way to foreground work.
    Background,
    /// vikingfs's own operation in the foreground (rm, mv, add, a session's cut): like
    /// `Creating`, under an owner that others wait out as they wait out a job's.
    Brief,
    /// A short section of paths whose directories exist (a single-path change through the
    /// mount, held until just after its reply): like `Existing`, waited out like `Brief`.
    BriefExisting,
}

impl LockManager {
    pub fn new(ws: &Workspace, cfg: LockConfig) -> Result<Arc<LockManager>, LockError> {
        let inner = Arc::new(State {
            res: Resolver::new(ws),
            pool: Spares::open(ws.internal_dir().join("lockpool")),
            cfg,
            table: Mutex::new(Table::default()),
            released: Condvar::new(),
            held: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        });
        let (stop, stopped) = bounded::<()>(0);
        let weak: Weak<State> = Arc::downgrade(&inner);
        let period = (inner.cfg.expire / 3).max(Duration::from_millis(10));
        std::thread::Builder::new()
            .name("vikingfs-lock-refresh".into())
            .spawn(move || loop {
                match stopped.recv_timeout(period) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                match weak.upgrade() {
                    Some(inner) => inner.refresh_all(),
                    None => return,
                }
            })
            .map_err(|e| LockError::io("(refresh thread)", e))?;
        Ok(Arc::new(LockManager { inner, _stop: stop }))
    }

    pub fn config(&self) -> &LockConfig {
        &self.inner.cfg
    }

    /// EXACT lock on one path, waiting up to the configured timeout.
    pub fn exact(&self, p: &VPath) -> Result<LockGuard, LockError> {
        self.acquire(&[(p.clone(), LockKind::Exact)], self.inner.cfg.timeout)
    }

    /// TREE lock on one path, waiting up to the configured timeout.
    pub fn tree(&self, p: &VPath) -> Result<LockGuard, LockError> {
        self.acquire(&[(p.clone(), LockKind::Tree)], self.inner.cfg.timeout)
    }

    /// Locks for a move ([`super::mv_batch`]), waiting up to the configured timeout.
    pub fn mv(&self, src: &VPath, dst: &VPath, src_is_dir: bool) -> Result<LockGuard, LockError> {
        self.acquire(
            &super::mv_batch(src, dst, src_is_dir),
            self.inner.cfg.timeout,
        )
    }

    /// Take every lock of a batch, or none, waiting up to `timeout`.
    pub fn acquire(
        &self,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        self.acquire_with(reqs, timeout, Work::Creating)
    }

    /// [`acquire`](Self::acquire) for a change to paths whose directories exist: a lock file
    /// whose directory is missing is not created (nor the directory), the batch fails with
    /// [`LockError::Gone`] instead. A background job or a change through the mount that lost
    /// a race with an rm of the directory must not bring the directory back.
    pub fn acquire_existing(
        &self,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        self.acquire_with(reqs, timeout, Work::Existing)
    }

    /// [`acquire_existing`](Self::acquire_existing) for background work: it also waits for
    /// foreground requests of this process that are blocked on a conflicting lock, so a
    /// user's operation is never starved by a stream of job write-backs.
    pub fn acquire_background(
        &self,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        self.acquire_with(reqs, timeout, Work::Background)
    }

    /// [`acquire`](Self::acquire) for vikingfs's own operations (rm, mv, add, a session's
    /// append or commit cut), held until just after their reply: a foreground request of any
    /// vikingfs process that meets one waits it out (up to 10 s), as it waits out a job's
    /// write-back, whatever its timeout; only a user's hold (`vikingfs lock`, another
    /// program's) answers busy, at once by default.
    pub fn acquire_brief(
        &self,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        self.acquire_with(reqs, timeout, Work::Brief)
    }

    /// [`acquire_brief`](Self::acquire_brief) for paths whose directories exist, as
    /// [`acquire_existing`](Self::acquire_existing): a single-path change through the mount,
    /// whose lock outlives its reply by a moment that the next request must not fail on.
    pub fn acquire_brief_existing(
        &self,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        self.acquire_with(reqs, timeout, Work::BriefExisting)
    }

    /// A batch under a fresh handle (its own owner, so it conflicts with every other handle).
    fn acquire_with(
        &self,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
        work: Work,
    ) -> Result<LockGuard, LockError> {
        let create_dirs = matches!(work, Work::Creating | Work::Brief);
        let background = work == Work::Background;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let owner = match work {
            Work::Background => codec::new_background_owner(),
            Work::Brief | Work::BriefExisting => codec::new_brief_owner(),
            Work::Creating | Work::Existing => codec::new_owner(),
        };
        let handle = Arc::new(Holder {
            id,
            owner: owner.into(),
            create_dirs,
            background,
        });
        State::acquire_for(&self.inner, handle, &normalize(reqs), timeout)
    }

    /// Every lock file in the workspace.
    pub fn list(&self) -> Result<Vec<LockInfo>, LockError> {
        self.inner.scan(false, false).map(|(v, _)| v)
    }

    /// Remove every stale lock file (by compare-and-swap); corrupt ones are left and reported
    /// by [`list`](Self::list). Returns how many were removed.
    pub fn clear_stale(&self) -> Result<usize, LockError> {
        self.inner.scan(true, false).map(|(_, n)| n)
    }

    /// Remove every lock file whose content is not a token (by compare-and-swap: one that
    /// became a token meanwhile stays), logging each. Only on request (`fsck --repair
    /// --break-corrupt-locks`): such a file may be an OpenViking build's we cannot read.
    /// Returns the files removed.
    pub fn clear_corrupt(&self) -> Result<Vec<PathBuf>, LockError> {
        let (list, _) = self.inner.scan(false, true)?;
        Ok(list
            .into_iter()
            .filter(|l| l.owner.is_empty() && l.stale_reason.as_deref() == Some(CLEARED))
            .map(|l| l.file)
            .collect())
    }
}

impl State {
    fn engine(&self) -> Engine<'_> {
        Engine {
            res: &self.res,
            pool: &self.pool,
            expire: self.cfg.expire,
        }
    }

    /// Take the batch for `handle`, counting the wait (or the busy answer) in the metrics.
    fn acquire_for(
        this: &Arc<State>,
        handle: Arc<Holder>,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        let start = Instant::now();
        let work = if handle.background {
            "background"
        } else {
            "foreground"
        };
        let r = Self::take_batch(this, handle, reqs, timeout, start);
        let m = crate::metrics::get();
        match &r {
            Ok(_) => m
                .lock_wait
                .with_label_values(&[work])
                .observe(start.elapsed().as_secs_f64()),
            Err(LockError::Busy { .. }) => m.lock_busy.with_label_values(&[work]).inc(),
            Err(_) => {}
        }
        r
    }

    fn take_batch(
        this: &Arc<State>,
        handle: Arc<Holder>,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
        start: Instant,
    ) -> Result<LockGuard, LockError> {
        let mut deadline = start + timeout;
        // Foreground first: a lock a vikingfs job holds (for its write-back, milliseconds)
        // is waited for, whatever the timeout, as is any of vikingfs's own short sections
        // (a mount request's, released after its reply; a session's cut): only a user's hold
        // answers busy, at once by default.
        let grace = start + BACKGROUND_GRACE;
        let outwait = |deadline: &mut Instant, owner: &str| {
            if !handle.background && codec::is_outwaited_owner(owner) {
                *deadline = (*deadline).max(grace);
            }
        };
        let id = this.next_id.fetch_add(1, Ordering::Relaxed);
        let mut backoff = BACKOFF_FIRST;
        loop {
            {
                let mut t = this.table.lock();
                let mut listed = false;
                loop {
                    let blocker = t.conflict(reqs, handle.id).or_else(|| {
                        // Background work lets a blocked foreground request go first.
                        handle
                            .background
                            .then(|| t.conflict_waiting(reqs, handle.id))
                            .flatten()
                    });
                    let Some(e) = blocker else { break };
                    outwait(&mut deadline, &e.owner);
                    if Instant::now() >= deadline || give_up_waiting() {
                        let busy = LockError::Busy {
                            path: e.path.uri(),
                            kind: e.kind,
                            owner: e.owner.to_string(),
                        };
                        if listed {
                            t.stop_waiting(id);
                            this.released.notify_all();
                        }
                        return Err(busy);
                    }
                    if !handle.background && !listed {
                        t.wait(reqs, handle.id, id, &handle.owner);
                        listed = true;
                    }
                    this.released.wait_until(&mut t, deadline);
                }
                if listed {
                    t.stop_waiting(id);
                    this.released.notify_all();
                }
                t.insert(reqs, handle.id, id, &handle.owner);
            }
            let keep_until = (!handle.background).then_some(start + BACKGROUND_GRACE);
            match this.take_all(reqs, &handle.owner, handle.create_dirs, keep_until) {
                Ok(held) => {
                    this.held.lock().insert(id, held);
                    return Ok(LockGuard {
                        inner: this.clone(),
                        id,
                        handle,
                        done: false,
                    });
                }
                Err(e) => {
                    this.table.lock().remove_guard(id);
                    this.released.notify_all();
                    if let LockError::Busy { owner, .. } = &e {
                        outwait(&mut deadline, owner);
                    }
                    let now = Instant::now();
                    match e {
                        LockError::Busy { .. } if now < deadline && !give_up_waiting() => {
                            std::thread::sleep(jitter(backoff).min(deadline - now));
                            backoff = backoff.mul_f64(1.5).min(BACKOFF_MAX);
                        }
                        e => return Err(e),
                    }
                }
            }
        }
    }

    /// The disk protocol for a whole batch, all or nothing. With `outwait` (a foreground
    /// batch), a check that meets a lock of vikingfs's background work keeps this batch's
    /// files and looks again until then: the job's own check sees them and gives way (a
    /// background batch never keeps its files on a conflict), so the user's request is not
    /// starved by a stream of write-backs that each back off in turn.
    fn take_all(
        &self,
        reqs: &[(VPath, LockKind)],
        me: &str,
        create_dirs: bool,
        outwait: Option<Instant>,
    ) -> Result<Vec<Held>, LockError> {
        let eng = self.engine();
        let mut held = Vec::with_capacity(reqs.len());
        let mut checks = Vec::with_capacity(reqs.len());
        let undo = |held: Vec<Held>| {
            for h in held.into_iter().rev() {
                eng.remove(h);
            }
        };
        // Write every lock file first, then check them all: each check still follows its own
        // write, and ancestors the paths share (a rename within one directory) are probed
        // once for the batch.
        for (p, k) in reqs {
            match eng.place(p, *k, me, create_dirs) {
                Ok(Some((h, r))) => {
                    held.push(h);
                    checks.push(r);
                }
                Ok(None) => {}
                Err(e) => {
                    undo(held);
                    return Err(e);
                }
            }
        }
        let mut free = Vec::new();
        for r in &checks {
            loop {
                match eng.recheck(r, me, &mut free) {
                    Ok(()) => break,
                    Err(LockError::Busy { ref owner, .. })
                        if codec::is_background_owner(owner)
                            && outwait.is_some_and(|t| Instant::now() < t)
                            && !give_up_waiting() =>
                    {
                        std::thread::sleep(BACKGROUND_POLL);
                    }
                    Err(e) => {
                        undo(held);
                        return Err(e);
                    }
                }
            }
        }
        Ok(held)
    }

    /// Rewrite every held token with the current time, by compare-and-swap.
    fn refresh_all(&self) {
        let mut held = self.held.lock();
        for h in held.values_mut().flatten().filter(|h| !h.lost) {
            let owner = token_owner(&h.token).to_string();
            self.rewrite(h, &owner);
        }
    }

    /// Rewrite the tokens of guard `id` for `owner`, by compare-and-swap.
    fn hand_over(&self, id: u64, owner: &str) -> Result<(), LockError> {
        let mut held = self.held.lock();
        for h in held.get_mut(&id).into_iter().flatten() {
            if h.lost || !self.rewrite(h, owner) {
                return Err(LockError::Lost {
                    file: h.file.path.clone(),
                });
            }
        }
        Ok(())
    }

    /// Write `h`'s token again, now, for `owner` (compare-and-swap); whether it was ours.
    fn rewrite(&self, h: &mut Held, owner: &str) -> bool {
        let new = codec::format(owner, codec::now_ns(), h.kind);
        let r = self.res.at(&h.file).and_then(|at| {
            at.call_or(Cas::Changed, |d, n| {
                provider::cas_replace(d, n, h.token.as_bytes(), new.as_bytes())
            })
        });
        match r {
            Ok(Cas::Done) => {
                h.token = new;
                true
            }
            Ok(Cas::Changed) => {
                tracing::error!(file = %h.file.path.display(), "lock lost: token no longer ours");
                h.lost = true;
                false
            }
            Err(e) => {
                tracing::warn!(file = %h.file.path.display(), error = %e, "lock refresh failed");
                true
            }
        }
    }

    /// Release a guard: its files first, then its table entries, then wake waiters.
    fn release(&self, id: u64) -> Result<(), LockError> {
        let held = self.held.lock().remove(&id).unwrap_or_default();
        let eng = self.engine();
        let mut first_err = None;
        for h in held.into_iter().rev() {
            let file = h.file.path.clone();
            if !eng.remove(h) && first_err.is_none() {
                first_err = Some(LockError::Lost { file });
            }
        }
        self.table.lock().remove_guard(id);
        self.released.notify_all();
        first_err.map_or(Ok(()), Err)
    }

    /// Walk every lock file; with `clear`, remove the stale ones.
    fn scan(&self, clear: bool, corrupt: bool) -> Result<(Vec<LockInfo>, usize), LockError> {
        let root = self.res.workspace().data_root();
        let base = self.res.root().map_err(|e| LockError::io(&root, e))?;
        let eng = self.engine();
        let mut out = Vec::new();
        let mut removed = 0;
        let mut buf = Vec::new();
        let io_err = |dir, e| LockError::io(dir, e);
        walk::lock_files(base.as_fd(), b"", &root, &io_err, &mut |found| {
            let name = found.name.to_string_lossy().into_owned();
            let file = root.join(found.rel_dir).join(&name);
            let at = At {
                dir: found.dir_fd,
                rel: found.name,
                path: &file,
            };
            if !provider::read(found.dir_fd, found.name, &mut buf)
                .map_err(|e| LockError::io(&file, e))?
            {
                return Ok(());
            }
            let Some(dir) = VPath::from_rel(&found.rel_dir.to_string_lossy())
                .ok()
                .or_else(|| found.rel_dir.as_os_str().is_empty().then(VPath::root))
            else {
                return Ok(());
            };
            let uri = if name == PATH_LOCK {
                dir.uri()
            } else {
                let sibs: Vec<String> = sys::dir_names(found.dir_fd)
                    .map(|names| {
                        names
                            .iter()
                            .map(|n| n.to_string_lossy().into_owned())
                            .filter(|n| !n.starts_with(EXACT_PREFIX))
                            .collect()
                    })
                    .unwrap_or_default();
                self.res
                    .locked_path(&dir, &name, sibs.iter().map(|s| s.as_str()))
            };
            let name_kind = if name == PATH_LOCK {
                LockKind::Tree
            } else {
                LockKind::Exact
            };
            let (kind, owner, time) = match codec::parse(&buf) {
                Some(codec::Content::Token(t)) => (t.kind, t.owner.to_string(), Some(t.time_ns)),
                _ => (name_kind, String::new(), None),
            };
            let time = time
                .or_else(|| at.call(provider::mtime_ns).ok())
                .unwrap_or(0);
            let age_secs = codec::now_ns().saturating_sub(time) as f64 / 1e9;
            let (stale, mut reason) = match eng.judge(at, &buf, "", Filter::Any, name_kind) {
                Ok(Verdict::Stale(why)) => (true, Some(why)),
                Ok(_) => (false, None),
                Err(e) => (false, Some(Chain(&e).to_string())),
            };
            if corrupt && !stale && codec::parse(&buf).is_none() {
                if let Ok(Cas::Done) =
                    at.call_or(Cas::Changed, |d, n| provider::cas_remove(d, n, &buf))
                {
                    tracing::warn!(file = %file.display(), content = %String::from_utf8_lossy(&buf), "removed a corrupt lock file");
                    reason = Some(CLEARED.to_string());
                }
            }
            if clear && stale {
                if let Ok(Cas::Done) =
                    at.call_or(Cas::Changed, |d, n| provider::cas_remove(d, n, &buf))
                {
                    removed += 1;
                }
            }
            out.push(LockInfo {
                uri,
                file,
                kind,
                owner,
                age_secs,
                stale,
                stale_reason: reason,
            });
            Ok(())
        })?;
        Ok((out, removed))
    }
}

impl LockGuard {
    /// Take more locks as the same owner: an EXACT below this guard's own TREE does not
    /// conflict with it. The new guard releases only what it took.
    pub fn nested(&self, reqs: &[(VPath, LockKind)]) -> Result<LockGuard, LockError> {
        let timeout = self.inner.cfg.timeout;
        State::acquire_for(&self.inner, self.handle.clone(), &normalize(reqs), timeout)
    }

    /// The owner name written in this guard's tokens.
    pub fn owner(&self) -> &str {
        &self.handle.owner
    }

    /// The lock files this guard holds on disk.
    pub fn files(&self) -> Vec<PathBuf> {
        self.inner
            .held
            .lock()
            .get(&self.id)
            .map(|v| v.iter().map(|h| h.file.path.clone()).collect())
            .unwrap_or_default()
    }

    /// The holder itself is moving the directory `dir` (an absolute path) out of the
    /// namespace, and the lock files inside it with it (`rm -r` renames a tree into the
    /// scratch directory before the guard is released): they are no longer refreshed, so the
    /// refresh thread does not take their absence for a lock taken away ("lock lost").
    pub fn moving_out(&self, dir: &std::path::Path) {
        if let Some(v) = self.inner.held.lock().get_mut(&self.id) {
            for h in v.iter_mut().filter(|h| h.file.path.starts_with(dir)) {
                h.lost = true;
            }
        }
    }

    /// Release now, reporting a lock that was taken away meanwhile.
    pub fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        self.inner.release(self.id)
    }

    /// Make `owner` the holder on disk (its tokens rewritten): a lock that lives as long as
    /// another process does, as `vikingfs lock -- CMD` hands its lock to CMD, so that the
    /// lock outlives a holder killed with SIGKILL while CMD runs, as flock(1)'s does. This
    /// guard still releases it.
    pub fn hand_over(&self, owner: &str) -> Result<(), LockError> {
        self.inner.hand_over(self.id, owner)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.inner.release(self.id) {
                tracing::error!(error = %Chain(&e), "lock release");
            }
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("owner", &self.handle.owner)
            .field("files", &self.files())
            .finish()
    }
}

/// Locks owned by a persistent name rather than by this process (added for ops' resource
/// lifecycle: a TREE lock held from add-resource until its background jobs are done, which must
/// outlive the CLI that took it). Such an owner is never judged dead by process liveness, only
/// by token age against `lock_expire`, so whoever works for it must [`refresh_owned`] it.
///
/// [`refresh_owned`]: LockManager::refresh_owned
impl LockManager {
    /// Take a batch as owner `owner` (no `:`). Locks that `owner` already holds on disk (in any
    /// process) do not conflict, so a worker can take an EXACT below its lifecycle's TREE.
    pub fn acquire_as(
        &self,
        owner: &str,
        reqs: &[(VPath, LockKind)],
        timeout: Duration,
    ) -> Result<LockGuard, LockError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(Holder {
            id,
            owner: owner.into(),
            create_dirs: true,
            background: false,
        });
        State::acquire_for(&self.inner, handle, &normalize(reqs), timeout)
    }

    /// The lock file holding `owner`'s token for `p`, with that token, if any.
    fn owned_file(&self, p: &VPath, owner: &str) -> Result<Option<(LockFile, Vec<u8>)>, LockError> {
        let res = &self.inner.res;
        let mut buf = Vec::new();
        let candidates = [Some(res.dir_lock_file(p)), res.sidecar_file(p)];
        for f in candidates.into_iter().flatten() {
            let read = res
                .at(&f)
                .and_then(|at| at.call_or(false, |d, n| provider::read(d, n, &mut buf)));
            match read {
                Ok(true) => {
                    if matches!(codec::parse(&buf), Some(codec::Content::Token(t)) if t.owner == owner)
                    {
                        return Ok(Some((f, buf)));
                    }
                }
                Ok(false) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {}
                Err(e) => return Err(LockError::io(&f.path, e)),
            }
        }
        Ok(None)
    }

    /// Rewrite `owner`'s token on `p` with the current time (compare-and-swap). `Ok(false)`
    /// when no lock file of `p` holds `owner`'s token any more. Several workers of one owner
    /// may refresh at once: losing the swap to another refresh of the same owner is success,
    /// and a token younger than a tenth of `lock_expire` is left as it is.
    pub fn refresh_owned(&self, p: &VPath, owner: &str) -> Result<bool, LockError> {
        for _ in 0..8 {
            let Some((file, old)) = self.owned_file(p, owner)? else {
                return Ok(false);
            };
            let Some(codec::Content::Token(t)) = codec::parse(&old) else {
                return Ok(false);
            };
            let age = codec::now_ns().saturating_sub(t.time_ns);
            if age < (self.inner.cfg.expire / 10).as_nanos() as u64 {
                return Ok(true);
            }
            let new = codec::format(owner, codec::now_ns(), t.kind);
            let replaced = self.inner.res.at(&file).and_then(|at| {
                at.call_or(Cas::Changed, |d, n| {
                    provider::cas_replace(d, n, &old, new.as_bytes())
                })
            });
            match replaced.map_err(|e| LockError::io(&file.path, e))? {
                Cas::Done => return Ok(true),
                Cas::Changed => continue,
            }
        }
        Ok(self.owned_file(p, owner)?.is_some())
    }

    /// Remove `owner`'s token on `p` (compare-and-swap). `Ok(false)` when it was not there.
    pub fn release_owned(&self, p: &VPath, owner: &str) -> Result<bool, LockError> {
        let Some((file, old)) = self.owned_file(p, owner)? else {
            return Ok(false);
        };
        let done = self
            .inner
            .res
            .at(&file)
            .and_then(|at| at.call_or(Cas::Changed, |d, n| provider::cas_remove(d, n, &old)))
            .map_err(|e| LockError::io(&file.path, e))?;
        self.inner.released.notify_all();
        Ok(done == Cas::Done)
    }
}

impl LockGuard {
    /// Leave this guard's lock files on disk, unrefreshed and unreleased by this process: for
    /// an owner that outlives it ([`LockManager::acquire_as`]). Other handles of this process
    /// still see them on disk.
    pub fn persist(mut self) {
        self.done = true;
        self.inner.held.lock().remove(&self.id);
        self.inner.table.lock().remove_guard(self.id);
        self.inner.released.notify_all();
    }
}

/// The owner part of a token (`OWNER:TIME:KIND`; an owner may hold colons).
fn token_owner(token: &str) -> &str {
    token.rsplitn(3, ':').nth(2).unwrap_or_default()
}
