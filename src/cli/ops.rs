//! `vikingfs rm`, `mv`, `write`, `add-resource` and `fsck`: the locked operations of
//! [`crate::ops`] on the command line. A busy lock exits 75 with one line naming the holder.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::{Ctx, EXIT_BUSY};
use crate::ops::{AddOptions, Ops, OpsError};

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short, long)]
    pub recursive: bool,
    /// The viking:// URIs to remove.
    #[arg(required = true, value_name = "URI")]
    pub uris: Vec<String>,
}

#[derive(Args, Debug)]
pub struct MvArgs {
    /// Source viking:// URI.
    pub src: String,
    /// Destination viking:// URI; an existing directory receives SRC under its own name.
    pub dst: String,
}

#[derive(Args, Debug)]
pub struct WriteArgs {
    /// The viking:// URI of the file to write (its directory must exist).
    pub uri: String,
    /// Read the content from this file instead of standard input.
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// Local file or directory to add.
    pub local_path: PathBuf,
    /// Target viking:// URI (default viking://resources/NAME, then NAME_1, NAME_2, ...).
    /// An existing target is updated incrementally.
    #[arg(long, value_name = "URI")]
    pub to: Option<String>,
    /// Wait until every summary and embedding of it is done (works the queue in this process).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub timeout: f64,
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Rebuild what is derived from the files (records, summaries, jobs, locks) and remove
    /// leftover scratch. Never deletes a source file.
    #[arg(long)]
    pub repair: bool,
    /// Print a JSON object {problems: [...], repaired: N}.
    #[arg(long)]
    pub json: bool,
}

fn open(ctx: &Ctx) -> anyhow::Result<Arc<Ops>> {
    let ws = ctx.workspace()?;
    Ok(Ops::open(&ws, &ctx.config)?)
}

/// Busy: one line, exit 75; anything else: the usual error path.
fn outcome(what: &str, r: Result<(), OpsError>) -> anyhow::Result<i32> {
    match r {
        Ok(()) => Ok(0),
        Err(e) if e.is_busy() => {
            eprintln!("vikingfs: {what}: {e}");
            Ok(EXIT_BUSY)
        }
        Err(e) => Err(anyhow::Error::new(e).context(what.to_string())),
    }
}

pub fn rm(ctx: &Ctx, a: &RmArgs) -> anyhow::Result<i32> {
    let ops = open(ctx)?;
    for uri in &a.uris {
        let p = ops.parse(uri).with_context(|| format!("rm {uri}"))?;
        let code = outcome(&format!("rm {uri}"), ops.rm(&p, a.recursive).map(drop))?;
        if code != 0 {
            return Ok(code);
        }
    }
    Ok(0)
}

pub fn mv(ctx: &Ctx, a: &MvArgs) -> anyhow::Result<i32> {
    let ops = open(ctx)?;
    let what = format!("mv {} {}", a.src, a.dst);
    let src = ops.parse(&a.src).with_context(|| what.clone())?;
    let mut dst = ops.parse(&a.dst).with_context(|| what.clone())?;
    if ops.workspace().fs_path(&dst).is_dir() && !src.is_root() {
        dst = dst.join(src.name()).with_context(|| what.clone())?;
    }
    outcome(&what, ops.mv(&src, &dst))
}

pub fn write(ctx: &Ctx, a: &WriteArgs) -> anyhow::Result<i32> {
    let ops = open(ctx)?;
    let what = format!("write {}", a.uri);
    let p = ops.parse(&a.uri).with_context(|| what.clone())?;
    let bytes = match &a.from {
        Some(f) => std::fs::read(f).with_context(|| format!("{what}: {}", f.display()))?,
        None => {
            let mut v = Vec::new();
            std::io::stdin()
                .read_to_end(&mut v)
                .context("reading standard input")?;
            v
        }
    };
    outcome(&what, ops.write_file(&p, &bytes))
}

fn bar(len: u64, msg: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b.set_message(msg);
    b
}

pub fn add(ctx: &Ctx, a: &AddArgs) -> anyhow::Result<i32> {
    if !(a.timeout.is_finite() && a.timeout >= 0.0) {
        anyhow::bail!("--timeout {}: must be a number of seconds >= 0", a.timeout);
    }
    let ops = open(ctx)?;
    let what = format!("add-resource {}", a.local_path.display());
    let to = match &a.to {
        Some(u) => Some(ops.parse(u).with_context(|| what.clone())?),
        None => None,
    };
    let copy = bar(0, "copying");
    let res = ops.add_resource(&a.local_path, &AddOptions { to }, &mut |done, total| {
        copy.set_length(total);
        copy.set_position(done);
    });
    copy.finish_and_clear();
    let report = match res {
        Ok(r) => r,
        Err(e) => return outcome(&what, Err(e)),
    };
    println!("{}", report.target.uri());
    if !a.wait {
        return Ok(0);
    }
    let work = bar(report.jobs as u64, "processing");
    let drained = ops.drain(
        &ctx.config.workers,
        Duration::from_secs_f64(a.timeout),
        |p| {
            work.set_length(p.completed + p.outstanding);
            work.set_position(p.completed);
        },
    )?;
    work.finish_and_clear();
    if !drained {
        anyhow::bail!("{what}: jobs still outstanding after {}s", a.timeout);
    }
    Ok(0)
}

pub fn fsck(ctx: &Ctx, a: &FsckArgs) -> anyhow::Result<i32> {
    let ops = open(ctx)?;
    let rep = ops.fsck(a.repair)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        for p in &rep.problems {
            println!("{p}");
        }
        if a.repair {
            println!(
                "{} problem(s), {} repair action(s)",
                rep.problems.len(),
                rep.repaired
            );
        } else {
            println!("{} problem(s)", rep.problems.len());
        }
    }
    // fsck(8): 0 clean, 1 errors corrected, 4 errors left uncorrected.
    Ok(match (rep.problems.is_empty(), a.repair) {
        (true, _) => 0,
        (false, true) => 1,
        (false, false) => 4,
    })
}
