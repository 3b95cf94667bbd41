//! The history's entries: what each removal or overwrite kept, in the journal's store (a
//! `history` table in `ops.db`, or `vj_history` on the server), written by the same rules for
//! every database. The kept content itself is a file or tree under
//! `WORKSPACE/.vikingfs/history/blobs/` ([`crate::ops`] owns it); an entry names it.
//!
//! An entry is committed in the same transaction that closes the operation's intent
//! ([`super::Engine::finish_recording`]): until then the intent is open, and recovery either
//! records the entry or rolls the operation back, so a kept blob never lacks its entry once
//! its operation is done.
//!
//! The `sha256` column holds the kept content's hash (hex), NULL until the `history_hash`
//! job made it, or [`UNHASHABLE`] and why the job could not read the content (a blob the
//! daemon may not read, one gone): such an entry is not handed to the job again (it would
//! fail the same way each run, and hold up none of the others), and `fsck` names it; a hash
//! made later (`fsck --repair`) replaces the mark. [`Recorded`] splits the two.

use serde::{Deserialize, Serialize};

use crate::sql::{Row, Sql};

/// One version kept (or, with `blob` `None`, a removal or change whose content was not kept:
/// `reason` says why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// `rm` (a file or a tree removed), `overwrite`, `truncate`, `mv-over` (a version replaced),
    /// `mv` (a rename: no content), `undo` (what an undo restored).
    pub op: String,
    /// Namespace-relative path (`VPath::as_str`).
    pub path: String,
    /// For a rename (`mv`): where `path` went.
    #[serde(default)]
    pub new_path: Option<String>,
    /// When the file whose version is kept was created (ms since the epoch, its birth time):
    /// a rewind to a point before it knows the path did not hold it then.
    #[serde(default)]
    pub born_ms: Option<i64>,
    /// `file`, `dir`, `symlink`, or a special file kept from a removal: `fifo`, `socket`,
    /// `char` or `block` (a device node).
    pub kind: String,
    /// Bytes of content (a tree's files together).
    pub size: u64,
    /// The kept content's name under `history/blobs/`.
    pub blob: Option<String>,
    /// Why nothing was kept (a full disk).
    pub reason: Option<String>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// The process that asked, when known (a FUSE request's pid; the CLI's own).
    pub pid: Option<u32>,
    /// Its command line, as `/proc/PID/cmdline` said (arguments joined by spaces).
    pub cmd: Option<String>,
}

/// An entry as stored: its id and when it was recorded (milliseconds since the epoch, the
/// store's clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub id: i64,
    pub at_ms: i64,
    /// The kept content's SHA-256 (hex; a tree's over its files' paths, kinds and hashes),
    /// filled in after the entry by the `history_hash` job: `None` until then, and for an
    /// entry without content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Why the `history_hash` job could not hash the kept content (then `sha256` is `None`
    /// and the job leaves the entry alone; `fsck` names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_error: Option<String>,
    #[serde(flatten)]
    pub entry: Entry,
}

/// The start of a `sha256` value that is no hash but why there is none (a hex digest never
/// starts so).
const UNHASHABLE: &str = "!";

/// The table's columns, in [`row`]'s order.
const COLUMNS: &str =
    "id, created, op, path, kind, size, blob, reason, mode, uid, gid, pid, cmd, new_path, born, \
     sha256";

pub(super) fn insert(s: &mut dyn Sql, e: &Entry) -> crate::sql::Result<i64> {
    insert_row(s, e, None, None)
}

/// Insert `r` as it was recorded elsewhere: its time and hash kept (a new id, in the order
/// given).
pub(super) fn insert_recorded(s: &mut dyn Sql, r: &Recorded) -> crate::sql::Result<i64> {
    let failed = r
        .hash_error
        .as_ref()
        .map(|why| format!("{UNHASHABLE}{why}"));
    insert_row(
        s,
        &r.entry,
        Some(r.at_ms),
        r.sha256.as_deref().or(failed.as_deref()),
    )
}

/// One row of `e`, recorded at `at_ms` (`None`: now, by the store's clock).
fn insert_row(
    s: &mut dyn Sql,
    e: &Entry,
    at_ms: Option<i64>,
    sha256: Option<&str>,
) -> crate::sql::Result<i64> {
    let created = if at_ms.is_some() { "?14" } else { "{now}" };
    let mut p = vec![
        e.op.as_str().into(),
        e.path.as_str().into(),
        e.kind.as_str().into(),
        (e.size as i64).into(),
        e.blob.as_deref().into(),
        e.reason.as_deref().into(),
        i64::from(e.mode).into(),
        i64::from(e.uid).into(),
        i64::from(e.gid).into(),
        e.pid.map(i64::from).into(),
        e.cmd.as_deref().into(),
        e.new_path.as_deref().into(),
        e.born_ms.into(),
    ];
    let hash = match at_ms {
        Some(t) => {
            p.push(t.into());
            p.push(sha256.into());
            "?15"
        }
        None => "NULL",
    };
    s.insert(
        &format!(
            "INSERT INTO {{history}} (created, op, path, kind, size, blob, reason, mode, uid,
                                     gid, pid, cmd, new_path, born, sha256)
             VALUES ({created}, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, {hash})"
        ),
        &p,
    )
}

fn row(r: Row) -> Recorded {
    let (sha256, hash_error) = match r.opt_text(15) {
        Some(v) => match v.strip_prefix(UNHASHABLE) {
            Some(why) => (None, Some(why.to_string())),
            None => (Some(v), None),
        },
        None => (None, None),
    };
    Recorded {
        id: r.int(0),
        at_ms: r.int(1),
        sha256,
        hash_error,
        entry: Entry {
            op: r.text(2),
            path: r.text(3),
            kind: r.text(4),
            size: r.int(5).max(0) as u64,
            blob: r.opt_text(6),
            reason: r.opt_text(7),
            mode: r.int(8) as u32,
            uid: r.int(9) as u32,
            gid: r.int(10) as u32,
            pid: r.opt_int(11).map(|p| p as u32),
            cmd: r.opt_text(12),
            new_path: r.opt_text(13),
            born_ms: r.opt_int(14),
        },
    }
}

/// Entries of `path` and everything below it — a rename's by where it came from or where it
/// went — (all of them for `None`), recorded at or after `since_ms`, newest first.
pub(super) fn list(
    s: &mut dyn Sql,
    under: Option<&str>,
    since_ms: i64,
) -> crate::sql::Result<Vec<Recorded>> {
    let rows = match under {
        Some(p) => s.rows(
            &format!(
                "SELECT {COLUMNS} FROM {{history}}
                 WHERE created >= ?1 AND (path = ?2 OR substr(path, 1, ?3) = ?4
                                          OR new_path = ?2 OR substr(new_path, 1, ?3) = ?4)
                 ORDER BY id DESC"
            ),
            &[
                since_ms.into(),
                p.into(),
                (p.len() as i64 + 1).into(),
                format!("{p}/").as_str().into(),
            ],
        )?,
        None => s.rows(
            &format!("SELECT {COLUMNS} FROM {{history}} WHERE created >= ?1 ORDER BY id DESC"),
            &[since_ms.into()],
        )?,
    };
    Ok(rows.into_iter().map(row).collect())
}

/// Up to `limit` entries with content and no hash yet (nor a mark that it could not be
/// made), oldest first: (id, blob).
pub(super) fn unhashed(s: &mut dyn Sql, limit: usize) -> crate::sql::Result<Vec<(i64, String)>> {
    let rows = s.rows(
        "SELECT id, blob FROM {history} WHERE sha256 IS NULL AND blob IS NOT NULL
         ORDER BY id LIMIT ?1",
        &[(limit as i64).into()],
    )?;
    Ok(rows.into_iter().map(|r| (r.int(0), r.text(1))).collect())
}

/// Mark entries whose content could not be hashed, each with why (by id; one gone since is
/// no matter): [`unhashed`] passes them over.
pub(super) fn set_hash_failures(
    s: &mut dyn Sql,
    failures: &[(i64, String)],
) -> crate::sql::Result<()> {
    for (id, why) in failures {
        s.exec(
            "UPDATE {history} SET sha256 = ?2 WHERE id = ?1",
            &[(*id).into(), format!("{UNHASHABLE}{why}").as_str().into()],
        )?;
    }
    Ok(())
}

/// Set the hashes of entries (by id; one gone since is no matter; a mark of a failure
/// before is replaced).
pub(super) fn set_hashes(s: &mut dyn Sql, hashes: &[(i64, String)]) -> crate::sql::Result<()> {
    for (id, h) in hashes {
        s.exec(
            "UPDATE {history} SET sha256 = ?2 WHERE id = ?1",
            &[(*id).into(), h.as_str().into()],
        )?;
    }
    Ok(())
}

/// Remove the entries `ids`.
pub(super) fn forget(s: &mut dyn Sql, ids: &[i64]) -> crate::sql::Result<()> {
    for id in ids {
        s.exec("DELETE FROM {history} WHERE id = ?1", &[(*id).into()])?;
    }
    Ok(())
}
