//! The queue database's schema: opening a connection with the pragmas every process must use,
//! and migrations keyed by `PRAGMA user_version`.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::queue::QueueError;

/// The schema version this code writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;

pub(super) fn open_connection(
    path: &Path,
    busy_timeout: std::time::Duration,
) -> Result<Connection, rusqlite::Error> {
    crate::db::open(
        path,
        crate::db::Open {
            busy_timeout,
            // The queue is read after nearly every commit of another connection.
            mmap_size: 1 << 28,
        },
    )
}

/// Bring the schema to [`SCHEMA_VERSION`], one step per version, in one write transaction so
/// that several processes opening a fresh database at once do not race.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), QueueError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(QueueError::SchemaTooNew {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < 1 {
        tx.execute_batch(
            "CREATE TABLE jobs (
                id       INTEGER PRIMARY KEY AUTOINCREMENT,
                queue    TEXT NOT NULL,
                key      TEXT,
                version  INTEGER NOT NULL DEFAULT 0,
                payload  TEXT NOT NULL,
                state    INTEGER NOT NULL DEFAULT 0,
                due      INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                worker   TEXT,
                last_error TEXT,
                created  INTEGER NOT NULL,
                updated  INTEGER NOT NULL
            );
            CREATE INDEX jobs_due ON jobs(queue, due) WHERE state < 2;
            CREATE UNIQUE INDEX jobs_pending_key ON jobs(queue, key)
                WHERE state = 0 AND key IS NOT NULL;
            CREATE INDEX jobs_key ON jobs(queue, key) WHERE key IS NOT NULL;
            CREATE TABLE key_versions (
                queue   TEXT NOT NULL,
                key     TEXT NOT NULL,
                version INTEGER NOT NULL,
                PRIMARY KEY (queue, key)
            ) WITHOUT ROWID;",
        )?;
    }
    // Future migrations: `if found < 2 { ... }`.
    if found < SCHEMA_VERSION {
        // Written only when it changes: an open that writes nothing works on a full disk.
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    tx.commit()?;
    Ok(())
}
