//! `vikingfs migrate --to postgres [--dsn DSN] [--force]` and `vikingfs migrate --to sqlite`:
//! move the workspace's queue, journal and index to the other storage backend and switch the
//! configuration file to it (the steps and their crash safety: [`crate::ops::migrate`]).

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

use super::ops::{bar, done};
use super::Ctx;
use crate::config::{self, Backend};
use crate::ops::{migrate, Ops};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    Sqlite,
    Postgres,
}

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The backend to move the stores to.
    #[arg(long, value_enum)]
    pub to: Target,
    /// For postgres: the libpq connection string (default: `VIKINGFS_PG_DSN`, then the
    /// configuration's `storage.postgres.dsn`).
    #[arg(long, value_name = "DSN")]
    pub dsn: Option<String>,
    /// Empty the target's stores of this workspace first when they hold data.
    #[arg(long)]
    pub force: bool,
}

pub fn run(ctx: &Ctx, a: &MigrateArgs) -> anyhow::Result<i32> {
    let ws = ctx.workspace()?;
    let from = &ctx.config.backend;
    let Some(file) = ctx.config.file() else {
        bail!("migrate: no configuration file to switch (--config FILE, or set HOME)");
    };
    let env_dsn = std::env::var(config::PG_DSN_ENV)
        .ok()
        .filter(|v| !v.is_empty());
    let to = match a.to {
        Target::Sqlite => Backend::Sqlite,
        Target::Postgres => match a
            .dsn
            .clone()
            .or(env_dsn)
            .or_else(|| config::file_dsn(&file))
        {
            Some(dsn) => Backend::Postgres { dsn },
            None => bail!(
                "migrate --to postgres: no server named: pass --dsn 'host=… dbname=… user=…' \
                 (or set {})",
                config::PG_DSN_ENV
            ),
        },
    };
    let b = bar(0, "migrate");
    let copied = migrate::copy(&ws, from, &to, a.force, &mut |d, t| {
        b.set_length(t);
        b.set_position(d);
    });
    b.finish_and_clear();
    let copied = copied.context("migrate")?;

    // The DSN goes into the file when it was named here or the file has none (one from the
    // environment only would be gone at the next start without it).
    let dsn = match &to {
        Backend::Postgres { dsn } if a.dsn.is_some() || config::file_dsn(&file).is_none() => {
            Some(dsn.as_str())
        }
        _ => None,
    };
    let patched = config::with_storage(&file, &to, dsn).context("migrate")?;
    if let Err(e) = migrate::switch(&file, &patched) {
        eprintln!(
            "vikingfs: migrate: cannot write {} ({e}): the stores are copied to {}, but {} stays \
             in force until that file holds this JSON (then run any command to rebuild the index \
             there):",
            file.display(),
            copied.location,
            from.name()
        );
        println!("{}", serde_json::to_string_pretty(&patched)?);
        return Ok(1);
    }
    let aside = migrate::retire(&ws, from).context("migrate: after the switch")?;

    // The next open on the new backend rebuilds the index from the files: do it now.
    let mut config = ctx.config.clone();
    config.backend = to.clone();
    let rb = bar(0, "reindex");
    let ops = Ops::open_with_progress(&ws, &config, &mut |d, t| {
        rb.set_length(t);
        rb.set_position(d);
    })
    .context("migrate: rebuilding the index on the new backend")?;
    rb.finish_and_clear();
    let records = ops.index().count().context("migrate: index")?;
    println!(
        "migrated to {}: {} pending and {} dead job(s), {} key version(s), {} intent(s), {} \
         lifecycle(s), {} history entr(ies){}; index rebuilt from the files ({records} records; summaries and \
         vectors queued: `vikingfs wait` or the daemon finishes them)",
        copied.location,
        copied.pending,
        copied.dead,
        copied.keys,
        copied.intents,
        copied.lifecycles,
        copied.history,
        if copied.emptied {
            " (the target's old rows emptied first)"
        } else {
            ""
        }
    );
    println!(
        "config {}: storage.backend = \"{}\"",
        file.display(),
        to.name()
    );
    for p in &aside {
        println!("old store kept as {}", p.display());
    }
    if let Backend::Postgres { .. } = from {
        println!("the server's tables (vq_*, vj_*, vi_*) are left as they were");
    }
    done(ops, 0)
}
