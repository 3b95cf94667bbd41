//! The journal's rows on the PostgreSQL server of `storage.backend = "postgres"`, beside the
//! queue: intents of every host, so a host can finish what a dead host's process left
//! half-done once that process's locks expire. Times are the server's clock. Its statements
//! are [`super::rules`]' (the same for every database).

use std::sync::Arc;

use super::rules::{journal_err, Backend};
use super::Result;
use crate::pg::{Pg, Session};
use crate::sql::{Dialect, Remote, Sql};

/// The journal's spelling on PostgreSQL.
static DIALECT: Dialect = Dialect::postgres(&[
    ("intents", "vj_intents"),
    ("lifecycles", "vj_lifecycles"),
    ("keys", "vj_lifecycle_keys"),
    ("history", "vj_history"),
]);

const SCHEMA: &str = "
CREATE TABLE vj_intents (
    id      bigserial PRIMARY KEY,
    body    text NOT NULL,
    owner   text NOT NULL,
    created bigint NOT NULL
);
CREATE TABLE vj_lifecycles (
    handle  text PRIMARY KEY,
    target  text NOT NULL,
    kind    text NOT NULL,
    created bigint NOT NULL
);
CREATE INDEX vj_lifecycles_target ON vj_lifecycles (target);
CREATE TABLE vj_lifecycle_keys (
    handle text NOT NULL,
    key    text NOT NULL,
    PRIMARY KEY (handle, key)
);";

const HISTORY_SCHEMA: &str = "
CREATE TABLE vj_history (
    id      bigserial PRIMARY KEY,
    created bigint NOT NULL,
    op      text NOT NULL,
    path    text NOT NULL,
    kind    text NOT NULL,
    size    bigint NOT NULL,
    blob    text,
    reason  text,
    mode    bigint NOT NULL,
    uid     bigint NOT NULL,
    gid     bigint NOT NULL,
    pid     bigint,
    cmd     text,
    new_path text,
    born    bigint,
    sha256  text
);
CREATE INDEX vj_history_path ON vj_history (path);";

pub struct PgJournal {
    pg: Arc<Pg>,
}

impl PgJournal {
    /// The journal's tables on `pg`, created when missing.
    pub fn open(pg: Arc<Pg>) -> Result<PgJournal> {
        pg.migrate("journal", &[SCHEMA])?;
        // A store of its own in the schema table: a journal made before history had none.
        pg.migrate("history", &[HISTORY_SCHEMA])?;
        // A history made before entries had hashes gets the column (idempotent).
        pg.get()?
            .batch_execute("ALTER TABLE vj_history ADD COLUMN IF NOT EXISTS sha256 text")
            .map_err(|e| pg.err(e))?;
        Ok(PgJournal { pg })
    }

    /// Run `f` in a transaction `build` starts, or on the client itself.
    fn run<T>(
        &self,
        build: Option<fn(&mut postgres::Client) -> postgres::TransactionBuilder<'_>>,
        f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>,
    ) -> Result<T> {
        let mut pc = self.pg.get()?;
        let (client, prep) = pc.parts();
        let run = || -> crate::sql::Result<T> {
            let Some(build) = build else {
                return f(&mut Remote {
                    session: &mut Session::new(client, prep),
                    dialect: &DIALECT,
                });
            };
            let mut tx = build(client).start()?;
            let out = f(&mut Remote {
                session: &mut Session::new(&mut tx, prep),
                dialect: &DIALECT,
            })?;
            tx.commit()?;
            Ok(out)
        };
        run().map_err(|e| journal_err(Some(&self.pg), e))
    }
}

impl Backend for PgJournal {
    fn location(&self) -> String {
        format!("PostgreSQL {}", self.pg.location())
    }

    fn each<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T> {
        self.run(None, f)
    }

    fn write<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T> {
        self.run(Some(|c| c.build_transaction()), f)
    }

    /// REPEATABLE READ: every table from one snapshot.
    fn snapshot<T>(&self, f: impl FnOnce(&mut dyn Sql) -> crate::sql::Result<T>) -> Result<T> {
        self.run(
            Some(|c| {
                c.build_transaction()
                    .isolation_level(postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
            }),
            f,
        )
    }
}
