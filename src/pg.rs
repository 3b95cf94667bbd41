//! PostgreSQL connections for the stores that live on a server (`storage.backend =
//! "postgres"`): parsing the DSN, a small pool of clients, the server's clock, and the
//! schema-version check every store runs at open — what [`crate::db`] is for SQLite files.
//!
//! A connection that broke (the server restarted, the network dropped) is never handed out
//! again: the pool drops closed clients and dials anew, so a store answers again as soon as
//! the server does. The password of a DSN is never printed: [`Pg::location`] names host,
//! port, database and user only.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use postgres::{Client, GenericClient, NoTls, Statement};

/// Clients kept open for reuse (more may be open while busy).
const MAX_IDLE: usize = 8;
/// How long dialling the server may take before the store says it is unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("bad PostgreSQL DSN (a libpq connection string such as \"host=127.0.0.1 port=5432 dbname=vikingfs user=vikingfs\")")]
    BadDsn(#[source] postgres::Error),
    #[error("PostgreSQL {at}")]
    Server {
        at: String,
        #[source]
        source: postgres::Error,
    },
    #[error("PostgreSQL {at} holds the stores of another workspace (id {theirs}, this one is {ours}): give each workspace a database of its own")]
    OtherWorkspace {
        at: String,
        theirs: String,
        ours: String,
    },
    #[error("PostgreSQL {at}: schema {what} is version {found}, newer than this vikingfs understands ({supported}); upgrade vikingfs")]
    SchemaTooNew {
        at: String,
        what: &'static str,
        found: i64,
        supported: i64,
    },
}

/// A pool of clients of one server and database; shareable between threads.
pub struct Pg {
    config: postgres::Config,
    at: String,
    idle: Mutex<Vec<Conn>>,
}

/// One connection and the statements prepared on it.
struct Conn {
    client: Client,
    prepared: Prepared,
}

/// Statements prepared on one connection, by their text: a statement is parsed and planned
/// once per connection, not at every call (which costs a round trip each time).
#[derive(Default)]
pub struct Prepared(HashMap<String, Statement>);

impl Prepared {
    /// `sql` prepared on the connection `c` belongs to (a client or one of its transactions).
    pub fn get(
        &mut self,
        c: &mut impl GenericClient,
        sql: &str,
    ) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.0.get(sql) {
            return Ok(s.clone());
        }
        let s = c.prepare(sql)?;
        self.0.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

/// Statements of one client or transaction, each prepared once per connection.
pub struct Session<'c, 'p, C: GenericClient> {
    c: &'c mut C,
    prep: &'p mut Prepared,
}

type Params<'a> = &'a [&'a (dyn postgres::types::ToSql + Sync)];

impl<'c, 'p, C: GenericClient> Session<'c, 'p, C> {
    pub fn new(c: &'c mut C, prep: &'p mut Prepared) -> Self {
        Session { c, prep }
    }

    pub fn opt(
        &mut self,
        sql: &str,
        p: Params<'_>,
    ) -> Result<Option<postgres::Row>, postgres::Error> {
        let s = self.prep.get(self.c, sql)?;
        self.c.query_opt(&s, p)
    }

    pub fn one(&mut self, sql: &str, p: Params<'_>) -> Result<postgres::Row, postgres::Error> {
        let s = self.prep.get(self.c, sql)?;
        self.c.query_one(&s, p)
    }

    pub fn all(&mut self, sql: &str, p: Params<'_>) -> Result<Vec<postgres::Row>, postgres::Error> {
        let s = self.prep.get(self.c, sql)?;
        self.c.query(&s, p)
    }

    pub fn exec(&mut self, sql: &str, p: Params<'_>) -> Result<u64, postgres::Error> {
        let s = self.prep.get(self.c, sql)?;
        self.c.execute(&s, p)
    }
}

impl Pg {
    /// Run `f` in one transaction of a pooled client, with prepared statements.
    pub fn transaction<T>(
        &self,
        f: impl FnOnce(&mut Session<'_, '_, postgres::Transaction<'_>>) -> Result<T, postgres::Error>,
    ) -> Result<T, PgError> {
        let mut pc = self.get()?;
        let (client, prep) = pc.parts();
        let run = || {
            let mut tx = client.transaction()?;
            let out = f(&mut Session::new(&mut tx, prep))?;
            tx.commit()?;
            Ok(out)
        };
        run().map_err(|e| self.err(e))
    }

    /// Run `f` on a pooled client outside a transaction (reads), with prepared statements.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&mut Session<'_, '_, Client>) -> Result<T, postgres::Error>,
    ) -> Result<T, PgError> {
        let mut pc = self.get()?;
        let (client, prep) = pc.parts();
        f(&mut Session::new(client, prep)).map_err(|e| self.err(e))
    }
}

/// A pooled client, handed back on drop unless its connection closed.
pub struct PgClient<'a> {
    pool: &'a Pg,
    conn: Option<Conn>,
}

impl PgClient<'_> {
    /// The client and its prepared statements, to use together.
    pub fn parts(&mut self) -> (&mut Client, &mut Prepared) {
        let c = self.conn.as_mut().expect("client present until drop");
        (&mut c.client, &mut c.prepared)
    }
}

impl std::ops::Deref for PgClient<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self
            .conn
            .as_ref()
            .expect("client present until drop")
            .client
    }
}

impl std::ops::DerefMut for PgClient<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self
            .conn
            .as_mut()
            .expect("client present until drop")
            .client
    }
}

impl Drop for PgClient<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            let mut idle = self.pool.idle.lock();
            if !c.client.is_closed() && idle.len() < MAX_IDLE {
                idle.push(c);
            }
        }
    }
}

impl Pg {
    /// Parse `dsn` and dial the server once, so a bad DSN or an unreachable server is
    /// refused here, before anything is written anywhere.
    pub fn connect(dsn: &str) -> Result<Pg, PgError> {
        let mut config: postgres::Config = dsn.parse().map_err(PgError::BadDsn)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("vikingfs");
        }
        let pg = Pg {
            at: describe(&config),
            config,
            idle: Mutex::new(Vec::new()),
        };
        let first = pg.dial()?;
        pg.idle.lock().push(Conn {
            client: first,
            prepared: Prepared::default(),
        });
        Ok(pg)
    }

    /// Host, port, database and user of the server (never the password).
    pub fn location(&self) -> &str {
        &self.at
    }

    /// Wrap a client error with where it happened.
    pub fn err(&self, source: postgres::Error) -> PgError {
        PgError::Server {
            at: self.at.clone(),
            source,
        }
    }

    fn dial(&self) -> Result<Client, PgError> {
        self.config.connect(NoTls).map_err(|e| self.err(e))
    }

    /// A client: an idle one whose connection is still open, else a new one.
    pub fn get(&self) -> Result<PgClient<'_>, PgError> {
        loop {
            let cached = self.idle.lock().pop();
            match cached {
                Some(c) if c.client.is_closed() => continue,
                Some(c) => {
                    return Ok(PgClient {
                        pool: self,
                        conn: Some(c),
                    })
                }
                None => {
                    return Ok(PgClient {
                        pool: self,
                        conn: Some(Conn {
                            client: self.dial()?,
                            prepared: Prepared::default(),
                        }),
                    })
                }
            }
        }
    }

    /// Bind this database to workspace `id` at its first use, and refuse it to any other
    /// workspace after: two workspaces' jobs and intents in one database would name each
    /// other's files.
    pub fn bind_workspace(&self, id: &str) -> Result<(), PgError> {
        let mut c = self.get()?;
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(7424891);
             CREATE TABLE IF NOT EXISTS vikingfs_workspace (id text PRIMARY KEY);",
        )
        .map_err(|e| self.err(e))?;
        let theirs: Option<String> = tx
            .query_opt("SELECT id FROM vikingfs_workspace LIMIT 1", &[])
            .map_err(|e| self.err(e))?
            .map(|r| r.get(0));
        match theirs {
            Some(theirs) if theirs != id => {
                return Err(PgError::OtherWorkspace {
                    at: self.at.clone(),
                    theirs,
                    ours: id.to_string(),
                })
            }
            Some(_) => {}
            None => {
                tx.execute("INSERT INTO vikingfs_workspace (id) VALUES ($1)", &[&id])
                    .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Check and record the version of one store's schema in the shared `vikingfs_schema`
    /// table. `steps[0]` creates the store (version 1) and `steps[k]` takes version `k` to
    /// `k + 1`: the steps the stored version lacks run in one transaction, under an advisory
    /// lock so that several hosts opening the database at once do not race.
    pub fn migrate(&self, what: &'static str, steps: &[&str]) -> Result<(), PgError> {
        let version = steps.len() as i64;
        let mut c = self.get()?;
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(7424891);
             CREATE TABLE IF NOT EXISTS vikingfs_schema (
                 store   text PRIMARY KEY,
                 version bigint NOT NULL
             );",
        )
        .map_err(|e| self.err(e))?;
        let found: Option<i64> = tx
            .query_opt(
                "SELECT version FROM vikingfs_schema WHERE store = $1",
                &[&what],
            )
            .map_err(|e| self.err(e))?
            .map(|r| r.get(0));
        match found {
            Some(found) if found > version => {
                return Err(PgError::SchemaTooNew {
                    at: self.at.clone(),
                    what,
                    found,
                    supported: version,
                })
            }
            Some(found) if found == version => {}
            found => {
                for step in &steps[found.unwrap_or(0) as usize..] {
                    tx.batch_execute(step).map_err(|e| self.err(e))?;
                }
                tx.execute(
                    "INSERT INTO vikingfs_schema (store, version) VALUES ($1, $2)
                     ON CONFLICT (store) DO UPDATE SET version = excluded.version",
                    &[&what, &version],
                )
                .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))
    }
}

/// The server's clock in milliseconds since the epoch, read inside a statement: every host
/// then judges leases and back-offs by one clock, whatever its own says.
pub const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
/// [`NOW_MS`] as a statement of its own.
pub const NOW_SQL: &str = "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint";

fn describe(c: &postgres::Config) -> String {
    let host = c
        .get_hosts()
        .first()
        .map(|h| match h {
            postgres::config::Host::Tcp(s) => s.clone(),
            postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = c.get_ports().first().copied().unwrap_or(5432);
    format!(
        "host={host} port={port} dbname={} user={}",
        c.get_dbname().unwrap_or("(default)"),
        c.get_user().unwrap_or("(default)")
    )
}
