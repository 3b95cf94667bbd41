//! The queue's rows on a PostgreSQL server (`storage.backend = "postgres"`), shared by the
//! daemons of every host that mounts the workspace: the same rows, states and fences as
//! [`super::sqlite`], each state change one transaction, by the same rules ([`super::rules`]).
//!
//! What differs from SQLite, and why it keeps the [`super::engine`] rules:
//! - a claim takes its row `FOR UPDATE SKIP LOCKED`: workers of several hosts claiming at once
//!   each get a different row, and none waits behind another's claim;
//! - every instant (`due`, `created`, `updated`) is the server's clock ([`crate::pg::NOW_MS`]),
//!   so hosts whose clocks differ still agree when a lease ran out;
//! - a keyed enqueue first bumps the key's row in `vq_key_versions` (`INSERT … ON CONFLICT DO
//!   UPDATE`), which locks it until commit: two enqueues of one key are serialised, so at most
//!   one pending row of a key exists (the partial unique index checks it too);
//! - a claim racing an enqueue of the same key: the enqueue's `UPDATE … WHERE state = 0` waits
//!   for the claim's row lock and then no longer matches, so it inserts a new pending row —
//!   the claimed job goes stale, as on SQLite;
//! - a held job going back to pending (a retry, a hand-back) locks its key's row first, as an
//!   enqueue does, so it either sees the newer version and is dropped or the enqueue coalesces
//!   into it: never two pending rows of a key (which the unique index would refuse).

use super::rules::Backend;
use super::QueueError;
use crate::pg::{Pg, Session};
use crate::sql::{Dialect, Remote, Sql};

/// The queue's spelling on PostgreSQL.
static DIALECT: Dialect = Dialect::postgres(&[("jobs", "vq_jobs"), ("keys", "vq_key_versions")]);

const SCHEMA: &str = "
CREATE TABLE vq_jobs (
    id         bigserial PRIMARY KEY,
    queue      text NOT NULL,
    key        text,
    version    bigint NOT NULL DEFAULT 0,
    payload    text NOT NULL,
    state      smallint NOT NULL DEFAULT 0,
    due        bigint NOT NULL,
    attempts   integer NOT NULL DEFAULT 0,
    worker     text,
    last_error text,
    created    bigint NOT NULL,
    updated    bigint NOT NULL
);
CREATE INDEX vq_jobs_due ON vq_jobs (queue, due) WHERE state < 2;
CREATE UNIQUE INDEX vq_jobs_pending_key ON vq_jobs (queue, key) WHERE state = 0 AND key IS NOT NULL;
CREATE INDEX vq_jobs_key ON vq_jobs (queue, key) WHERE key IS NOT NULL;
CREATE TABLE vq_key_versions (
    queue   text NOT NULL,
    key     text NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (queue, key)
);";

/// The queue on one PostgreSQL database.
pub struct PgEngine {
    pg: std::sync::Arc<Pg>,
}

impl PgEngine {
    /// The queue's tables on `pg`, created when missing; a schema from a newer vikingfs is
    /// refused.
    pub fn open(pg: std::sync::Arc<Pg>) -> Result<PgEngine, QueueError> {
        pg.migrate("queue", &[SCHEMA])?;
        Ok(PgEngine { pg })
    }

    fn err(&self, e: crate::sql::Error) -> QueueError {
        match e {
            crate::sql::Error::Pg(e) => QueueError::Pg(self.pg.err(e)),
            crate::sql::Error::Sqlite(e) => QueueError::Sql(e),
        }
    }
}

impl Backend for PgEngine {
    fn location(&self) -> String {
        format!("PostgreSQL {}", self.pg.location())
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T, QueueError> {
        let mut pc = self.pg.get()?;
        let (client, prep) = pc.parts();
        let run = || {
            let mut tx = client.transaction()?;
            let out = f(&mut Remote {
                session: &mut Session::new(&mut tx, prep),
                dialect: &DIALECT,
            })?;
            tx.commit()?;
            Ok(out)
        };
        run().map_err(|e| self.err(e))
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T, QueueError> {
        let mut pc = self.pg.get()?;
        let (client, prep) = pc.parts();
        f(&mut Remote {
            session: &mut Session::new(client, prep),
            dialect: &DIALECT,
        })
        .map_err(|e| self.err(e))
    }
}
