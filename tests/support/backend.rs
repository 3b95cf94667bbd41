//! The backends a store's rules are checked on, as a value: each store's conformance suite is
//! one function taking a [`Backend`] (JuiceFS's `testMeta(t, m)`), and [`backends!`] makes of
//! it one test per backend (`name::sqlite`, `name::postgres`). Nothing is process-global: a
//! test that starts child processes hands them its backend explicitly (the queue's
//! `support::queue::Site`, a workspace's config), so any number of tests of either backend
//! share a process, under `cargo test` as under nextest.

use super::pg::PgServer;

/// Where a test's stores live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SQLite files in the test's own directory.
    Sqlite,
    /// A real PostgreSQL server started for the test ([`PgServer`]).
    Postgres,
}

impl Backend {
    /// What the backend needs for one test: nothing for SQLite (its files live in the
    /// test's directory), a server of the test's own for PostgreSQL.
    pub fn start(self) -> Db {
        match self {
            Backend::Sqlite => Db::Sqlite,
            Backend::Postgres => Db::Postgres(PgServer::start()),
        }
    }
}

/// One test's database server, if its backend has one; a PostgreSQL server stops on drop.
pub enum Db {
    Sqlite,
    Postgres(PgServer),
}

impl Db {
    pub fn backend(&self) -> Backend {
        match self {
            Db::Sqlite => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// The connection string of the server's database `vikingfs` (`None` on SQLite).
    pub fn dsn(&self) -> Option<String> {
        match self {
            Db::Sqlite => None,
            Db::Postgres(server) => Some(server.dsn()),
        }
    }

    pub fn server(&self) -> Option<&PgServer> {
        match self {
            Db::Sqlite => None,
            Db::Postgres(server) => Some(server),
        }
    }
}

/// One test per backend of a body taking the [`Backend`]:
///
/// - `backends!(rules_hold);` runs `fn rules_hold(backend: Backend)` as the tests
///   `rules_hold::sqlite` and `rules_hold::postgres` (a module and a function may share a
///   name);
/// - `backends!(name => |backend| run(backend, "x"));` runs the closure as `name::sqlite` and
///   `name::postgres`, the closure seeing the items of the calling module.
///
/// Attributes before a name (`#[cfg(...)]`, docs) go on its module.
#[allow(unused_macros)]
macro_rules! backends {
    ($($(#[$attr:meta])* $body:ident),+ $(,)?) => {
        $(
            $(#[$attr])*
            mod $body {
                #[test]
                fn sqlite() {
                    super::$body($crate::support::backend::Backend::Sqlite)
                }
                #[test]
                fn postgres() {
                    super::$body($crate::support::backend::Backend::Postgres)
                }
            }
        )+
    };
    ($($(#[$attr:meta])* $name:ident => $run:expr),+ $(,)?) => {
        $(
            $(#[$attr])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                #[test]
                fn sqlite() {
                    let run: fn($crate::support::backend::Backend) = $run;
                    run($crate::support::backend::Backend::Sqlite)
                }
                #[test]
                fn postgres() {
                    let run: fn($crate::support::backend::Backend) = $run;
                    run($crate::support::backend::Backend::Postgres)
                }
            }
        )+
    };
}
#[allow(unused_imports)]
pub(crate) use backends;
