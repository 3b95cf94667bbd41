//! Is an SQLite store's file whole? The index and the queue are derived state: a damaged one
//! is moved aside (kept for a post-mortem, never deleted) and rebuilt, never fatal.
//!
//! Also the one way every store opens its connections ([`open`]).
//!
//! Two looks, both cheap enough for every open: the file's header (SQLite's magic, and a
//! length at least what the header says the database holds — a file cut short is the common
//! damage of a full disk or a bad copy, see [`damage`]), and the error codes SQLite answers
//! with when it meets a damaged page ([`is_damage_code`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// Why the database file at `path` is damaged, judged by its header; `None` when it looks
/// whole (or does not exist, or is empty: SQLite creates it).
pub fn damage(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    if len == 0 {
        return None;
    }
    let mut h = [0u8; 100];
    if len < 100 || f.read_exact(&mut h).is_err() {
        return Some(format!("{len} bytes: shorter than a database header"));
    }
    if &h[..16] != b"SQLite format 3\0" {
        return Some("not an SQLite database (bad header)".into());
    }
    let page = match u16::from_be_bytes([h[16], h[17]]) {
        1 => 65_536,
        n => u64::from(n),
    };
    let pages = u64::from(u32::from_be_bytes([h[28], h[29], h[30], h[31]]));
    // The in-header size is valid only when its version stamp matches the change counter.
    let valid = h[92..96] == h[24..28];
    if valid && page >= 512 && pages * page > len {
        return Some(format!(
            "{len} bytes, but its header says {pages} pages of {page} bytes: cut short"
        ));
    }
    None
}

/// Whether SQLite's answer says the file is damaged (rather than busy, missing or full).
pub fn is_damage_code(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Check every page of the database `conn` is on (`PRAGMA quick_check`: the b-trees' shape,
/// not the indexes' agreement with their tables, in one read of the file). Damage comes back
/// as SQLite's own corrupt code, so that it is judged with [`is_damage_code`] like damage
/// met by any statement.
pub fn check_pages(conn: &Connection) -> Result<(), rusqlite::Error> {
    let first: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    if first == "ok" {
        return Ok(());
    }
    Err(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
        Some(format!("quick_check: {first}")),
    ))
}

/// Say (one warning, and the healed-stores counter) that the damaged `store` at `path` went to
/// `aside` and is started anew.
pub fn said_set_aside(store: &str, path: &Path, aside: &Path, why: &str) {
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
}

/// The disk (or the quota) had no room for a page: SQLite's own code for it.
pub fn is_disk_full(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

/// The files beside a database in WAL mode, by suffix.
const SIDE_FILES: [&str; 2] = ["-wal", "-shm"];

/// `path` with `suffix` appended (`index.db` → `index.db-wal`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The size on disk of the database at `path` with its WAL and shared-memory files.
pub fn size_on_disk(path: &Path) -> u64 {
    std::iter::once(path.to_path_buf())
        .chain(SIDE_FILES.iter().map(|s| with_suffix(path, s)))
        .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
        .sum()
}

/// Move the database at `path` (with its `-wal` and `-shm`) aside, to
/// `{path}.damaged-{unix seconds}`. Returns the new name of the main file.
pub fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    rename_aside(path, "damaged")
}

/// Rename the database at `path` with its `-wal` and `-shm` to `{path}.{tag}-{unix seconds}`
/// (never deleted: `damaged` for one set aside, `migrated` for one `vikingfs migrate` left
/// behind), so that nothing opens it by mistake. Returns the new name of the main file.
pub fn rename_aside(path: &Path, tag: &str) -> std::io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // A second one within the same second gets a number: an earlier one is never replaced.
    let aside = (0..)
        .map(|n| match n {
            0 => with_suffix(path, &format!(".{tag}-{stamp}")),
            n => with_suffix(path, &format!(".{tag}-{stamp}-{n}")),
        })
        .find(|p| !p.exists())
        .expect("a free name");
    std::fs::rename(path, &aside)?;
    for s in SIDE_FILES {
        match std::fs::rename(with_suffix(path, s), with_suffix(&aside, s)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(aside)
}

/// How a store's connections are opened: every process and every store the same way, so
/// that they agree on the journal (WAL) and its durability (`synchronous=NORMAL`: a commit
/// survives any process crash; a power loss may take the last commits, never the file).
#[derive(Debug, Clone, Copy)]
pub struct Open {
    /// How long a statement waits for another connection's write lock.
    pub busy_timeout: Duration,
    /// Bytes of the file read through a mapping rather than pread(2) (0: none). For stores
    /// read after nearly every commit of another connection (the queue, the index), whose
    /// page cache each of those commits makes stale.
    pub mmap_size: i64,
}

impl Default for Open {
    fn default() -> Self {
        Open {
            busy_timeout: Duration::from_secs(30),
            mmap_size: 0,
        }
    }
}

/// Set by a one-shot command (see [`one_shot_process`]).
static ONE_SHOT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process is a one-shot command (`vikingfs rm`, `mv`, `find`, …): its connections close
/// without checkpointing. SQLite's last close checkpoints and deletes each WAL — three fsyncs,
/// and the next process re-creates the WALs — which would cost a short command most of its
/// time; every commit is in the WAL already, and the next process reads it as usual.
pub fn one_shot_process() {
    ONE_SHOT.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Open (creating it when missing) the database at `path` as `how` says.
pub fn open(path: &Path, how: Open) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(how.busy_timeout)?;
    // journal_mode answers with a row; WAL persists in the file once set.
    let mode: String = retry_busy(how.busy_timeout, || {
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
    })?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidParameterName(format!(
            "cannot switch {} to WAL journal (got {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    if ONE_SHOT.load(std::sync::atomic::Ordering::Relaxed) {
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
    }
    if how.mmap_size > 0 {
        conn.pragma_update(None, "mmap_size", how.mmap_size)?;
    }
    Ok(conn)
}

/// Run `f` again, for up to `patience`, while SQLite answers busy without waiting: switching a
/// fresh database to WAL (or a first schema write) takes a lock for which the busy handler is
/// not called, so processes that open a new workspace at the same moment would otherwise
/// fail at once.
pub fn retry_busy<T>(
    patience: Duration,
    f: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    retry_while(patience, is_busy, f)
}

/// The one retry loop: [`retry_busy`] for any error that may carry SQLite's busy answer
/// (`busy` says which do), e.g. a store's own error wrapping the open's.
pub fn retry_while<T, E>(
    patience: Duration,
    busy: impl Fn(&E) -> bool,
    mut f: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match f() {
            Err(e) if busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// Whether SQLite answered "database is locked" (busy) without waiting.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_index_passes_and_a_cut_or_garbage_one_does_not() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("i.db");
        assert_eq!(damage(&p), None, "missing: SQLite creates it");
        {
            let conn = rusqlite::Connection::open(&p).unwrap();
            conn.execute_batch(
                "CREATE TABLE pad(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 \
                 FROM n WHERE i < 2000) INSERT INTO pad SELECT randomblob(200) FROM n;
                 ",
            )
            .unwrap();
        }
        assert_eq!(damage(&p), None);
        let len = std::fs::metadata(&p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len / 2).unwrap();
        assert!(damage(&p).is_some_and(|w| w.contains("cut short")));
        std::fs::write(&p, vec![0x5a; 4096]).unwrap();
        assert!(damage(&p).is_some_and(|w| w.contains("header")));
        let aside = move_aside(&p).unwrap();
        assert!(!p.exists() && aside.exists());
    }
}
