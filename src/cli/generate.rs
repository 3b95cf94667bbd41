//! `vikingfs generate man DIR | completions SHELL DIR` (hidden): man pages and shell
//! completions made from the command line's own definition, so they never drift from it;
//! `scripts/install.sh` installs them.

use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, Subcommand};

#[derive(Subcommand, Debug)]
pub enum GenerateCmd {
    /// Man pages into DIR: vikingfs.1 and one per command (vikingfs-mount.1, …).
    Man { dir: PathBuf },
    /// Completions for SHELL (bash, zsh, fish, elvish, powershell) into DIR.
    Completions {
        shell: clap_complete::Shell,
        dir: PathBuf,
    },
}

pub fn run(c: &GenerateCmd) -> anyhow::Result<i32> {
    let mut cmd = super::Cli::command();
    let dir = match c {
        GenerateCmd::Man { dir } | GenerateCmd::Completions { dir, .. } => dir,
    };
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    match c {
        GenerateCmd::Man { dir } => {
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("man pages into {}", dir.display()))?;
        }
        GenerateCmd::Completions { shell, dir } => {
            let path = clap_complete::generate_to(*shell, &mut cmd, "vikingfs", dir)
                .with_context(|| format!("{shell} completions into {}", dir.display()))?;
            println!("{}", path.display());
        }
    }
    Ok(0)
}
