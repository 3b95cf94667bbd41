//! `vikingfs fsck [--repair] [--json]`: derived state against the files.

use clap::Args;

use super::ops::{done, open, open_existing};
use super::Ctx;

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status (as fsck(8)): 0 nothing wrong; 1 problems found and \
    repaired (--repair); 4 problems found and left (without --repair); other errors 1."
)]
pub struct FsckArgs {
    /// Rebuild what is derived from the files (records, summaries, jobs, locks) and remove
    /// leftover scratch. Never deletes a source file.
    #[arg(long)]
    pub repair: bool,
    /// With --repair: also remove lock files that hold no token (garbage, never treated as
    /// free), each named in the log. Only once their owner is known to be gone.
    #[arg(long, requires = "repair")]
    pub break_corrupt_locks: bool,
    /// Print a JSON object {problems: [...], repaired: N}.
    #[arg(long)]
    pub json: bool,
}

pub fn fsck(ctx: &Ctx, a: &FsckArgs) -> anyhow::Result<i32> {
    // The daemon answers the checks; a repair runs here, under the same locks.
    if !a.repair {
        if let Some(d) = super::client::Daemon::find(ctx)? {
            return super::remote::fsck(&d, a);
        }
    }
    // Only a repair may create the workspace it is asked to check.
    let ops = if a.repair {
        open(ctx)?
    } else {
        open_existing(ctx)?
    };
    let rep = ops.fsck(a.repair, a.break_corrupt_locks)?;
    let code = print(&rep, a)?;
    done(ops, code)
}

/// What `fsck` prints of its report (made here or by the daemon), and its exit status.
pub(super) fn print(rep: &crate::ops::FsckReport, a: &FsckArgs) -> anyhow::Result<i32> {
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
