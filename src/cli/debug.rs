//! `vikingfs debug ...`: introspection for tests and developers.

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum DebugCmd {
    /// List every crash point (arm one with VIKINGFS_CRASH_AT=NAME in a --features failpoints build).
    Failpoints,
}

pub fn run(cmd: &DebugCmd) -> anyhow::Result<i32> {
    match cmd {
        DebugCmd::Failpoints => {
            for name in crate::failpoint::ALL {
                println!("{name}");
            }
            Ok(0)
        }
    }
}
