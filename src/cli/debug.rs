//! `vikingfs debug ...`: introspection for tests and developers.

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum DebugCmd {
    /// List every crash point (arm one with VIKINGFS_CRASH_AT=NAME in a --features failpoints build).
    Failpoints,
    /// Work the queues in this process with the real job handlers until they are drained.
    Drain {
        /// Give up after this many seconds (exit 1).
        #[arg(long, value_name = "SECS", default_value_t = 600.0)]
        timeout: f64,
    },
}

pub fn run(ctx: &super::Ctx, cmd: &DebugCmd) -> anyhow::Result<i32> {
    match cmd {
        DebugCmd::Failpoints => {
            for name in crate::failpoint::ALL {
                println!("{name}");
            }
            Ok(0)
        }
        DebugCmd::Drain { timeout } => {
            if !(timeout.is_finite() && *timeout >= 0.0) {
                anyhow::bail!("--timeout {timeout}: must be a number of seconds >= 0");
            }
            let ops = crate::ops::Ops::open(&ctx.workspace()?, &ctx.config)?;
            let t = std::time::Duration::from_secs_f64(*timeout);
            if ops.drain(&ctx.config.workers, t, |_| {})? {
                Ok(0)
            } else {
                anyhow::bail!("debug drain: jobs still outstanding after {timeout}s")
            }
        }
    }
}
