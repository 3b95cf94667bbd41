//! `vikingfs generate man DIR | completions SHELL DIR` (hidden): man pages and shell
//! completions made from the command line's own definition, so they never drift from it;
//! `scripts/install.sh` installs them. Each man page adds what `--help` has no place for:
//! EXAMPLES (the commands a first hour needs) and FILES (where a workspace keeps what, and
//! `MNT/.history`), the same for every page but the examples.

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
            let mut cmd = cmd.disable_help_subcommand(true);
            cmd.build();
            man_pages(&cmd, dir).with_context(|| format!("man pages into {}", dir.display()))?;
        }
        GenerateCmd::Completions { shell, dir } => {
            let path = clap_complete::generate_to(*shell, &mut cmd, "vikingfs", dir)
                .with_context(|| format!("{shell} completions into {}", dir.display()))?;
            println!("{}", path.display());
        }
    }
    Ok(0)
}

/// Every page of `cmd` (the top one and one per visible subcommand, as clap_mangen names
/// them: vikingfs.1, vikingfs-mount.1, ...), each with its EXAMPLES and FILES.
fn man_pages(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub, dir)?;
    }
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    man.render(&mut page)?;
    let mut page = String::from_utf8_lossy(&page)
        // clap_mangen titles the top page's after-help "EXTRA": it is the exit-status table.
        .replace(".SH EXTRA", ".SH \"EXIT STATUS\"");
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    let examples = examples(name.strip_prefix("vikingfs-").unwrap_or(""));
    if !examples.is_empty() {
        page += ".SH EXAMPLES\n";
        for (what, lines) in examples {
            page += &format!(".PP\n{}\n.PP\n.nf\n.RS 4\n", roff(what));
            for l in *lines {
                page += &roff(l);
                page.push('\n');
            }
            page += ".RE\n.fi\n";
        }
    }
    page += ".SH FILES\n";
    for (path, what) in FILES {
        page += &format!(".TP\n\\fI{}\\fR\n{}\n", roff(path), roff(what));
    }
    page += ".SH \"SEE ALSO\"\nmount(8), fstab(5), umount(8), flock(1); the README and docs/ in /usr/local/share/doc/vikingfs (or PREFIX/share/doc/vikingfs)\n";
    std::fs::write(dir.join(man.get_filename()), page)
}

/// Text made safe for roff: backslashes and hyphens escaped (a `-` is a hyphen to roff, not
/// the minus an option needs), and a leading `.` or `'` kept from being read as a request.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// What a workspace and a mount hold, for every page's FILES.
const FILES: &[(&str, &str)] = &[
    (
        "~/.vikingfs/config.json",
        "The configuration (or --config, $VIKINGFS_CONFIG); vikingfs config show prints every value and where it came from.",
    ),
    (
        "~/.vikingfs/workspace",
        "The default workspace (--workspace, $VIKINGFS_WORKSPACE, storage.workspace name another).",
    ),
    (
        "WORKSPACE/viking/ACCOUNT/",
        "The files: resources/, user/, agent/, the source of truth.",
    ),
    (
        "WORKSPACE/.vikingfs/mount.log",
        "The log of a daemon that runs in the background (-o log=FILE, --log-file move it).",
    ),
    (
        "WORKSPACE/.vikingfs/daemon.sock",
        "The daemon's owner-only socket, which the CLI's commands ask when a daemon runs.",
    ),
    (
        "WORKSPACE/.vikingfs/index.db, queue.db, ops.db",
        "The derived index, the job queue and the operations journal (SQLite; on PostgreSQL with storage.backend postgres).",
    ),
    (
        "WORKSPACE/.vikingfs/keys.json",
        "The API's user keys, each kept as its SHA-256 (mode 0600).",
    ),
    (
        "WORKSPACE/.vikingfs/history/",
        "What removals and overwrites kept (mode 0700), for vikingfs history and vikingfs undo.",
    ),
    (
        "MNT/.history/@TIME/",
        "The namespace as it was at TIME (any RFC 3339 time), read-only through the mount; listed nowhere, reached by name (ls MNT/.history lists the points).",
    ),
    (
        "/sbin/mount.fuse.vikingfs",
        "The helper mount(8) runs for type fuse.vikingfs (mount -t, /etc/fstab).",
    ),
];

/// A page's examples: (what it does, the command lines).
fn examples(command: &str) -> &'static [(&'static str, &'static [&'static str])] {
    match command {
        "" => &[
            (
                "Mount a workspace made with defaults, put files in, search them:",
                &[
                    "mkdir -p /mnt/viking",
                    "vikingfs mount ~/.vikingfs/workspace /mnt/viking",
                    "cp -r ~/notes /mnt/viking/resources/",
                    "vikingfs wait",
                    "vikingfs find \"where the backups go\"",
                ],
            ),
            (
                "Undo a removal:",
                &[
                    "rm -r /mnt/viking/resources/notes",
                    "vikingfs undo viking://resources/notes",
                ],
            ),
        ],
        "mount" => &[
            (
                "Mount, and unmount once done:",
                &[
                    "vikingfs mount ~/.vikingfs/workspace /mnt/viking",
                    "vikingfs umount /mnt/viking",
                ],
            ),
            (
                "Serve OpenViking's HTTP API and MCP from the mount's daemon too:",
                &["vikingfs mount -o api=127.0.0.1:1933 /srv/ws /mnt/viking"],
            ),
            (
                "With mount(8) and an fstab line:",
                &[
                    "mount -t fuse.vikingfs /srv/ws /mnt/viking",
                    "/srv/ws  /mnt/viking  fuse.vikingfs  defaults,_netdev,nofail  0 0",
                ],
            ),
            (
                "Mount over a directory that holds files (hidden while mounted):",
                &["vikingfs mount --allow-non-empty /srv/ws /mnt/viking"],
            ),
        ],
        "find" => &[
            (
                "Search, as JSON with each result's evidence, below a directory:",
                &[
                    "vikingfs find \"backup schedule\"",
                    "vikingfs find -n 5 --json --under viking://resources/notes \"backup\"",
                    "vikingfs find 'LockGuard path:*.rs'",
                ],
            ),
        ],
        "history" => &[
            (
                "What was kept under a path, of the last two hours; everything, ignored paths too:",
                &[
                    "vikingfs history viking://resources/notes --since 2h",
                    "vikingfs history --all",
                ],
            ),
            (
                "Browse the past with plain tools:",
                &[
                    "ls /mnt/viking/.history/",
                    "diff /mnt/viking/.history/@2026-12-04T10:00:00Z/resources/a.md /mnt/viking/resources/a.md",
                ],
            ),
        ],
        "undo" => &[
            (
                "See, then put back, a path as before the last command that changed it; rewind ten minutes:",
                &[
                    "vikingfs undo viking://resources/notes --dry-run",
                    "vikingfs undo viking://resources/notes",
                    "vikingfs undo --since 10m",
                ],
            ),
        ],
        "status" => &[(
            "Daemons (with their API address and log), queues, locks, the index:",
            &["vikingfs status", "vikingfs status --json", "vikingfs status --watch"],
        )],
        "serve" => &[(
            "The daemon without a mount, for containers; then ask it over HTTP:",
            &[
                "vikingfs serve --port 1933",
                "curl -s -X POST http://127.0.0.1:1933/api/v1/search/find -H 'Content-Type: application/json' -d '{\"query\": \"backups\"}'",
            ],
        )],
        "mcp" => &[(
            "MCP on stdio, as an agent's .mcp.json runs it:",
            &["{\"mcpServers\": {\"vikingfs\": {\"command\": \"vikingfs\", \"args\": [\"mcp\"]}}}"],
        )],
        "rm" => &[(
            "Remove a tree (kept in the history; vikingfs undo puts it back):",
            &["vikingfs rm -r viking://resources/old"],
        )],
        "lock" => &[(
            "Hold a tree's lock while a command runs (exit 75 when busy):",
            &["vikingfs lock --tree viking://resources/docs -- rsync -a src/ /mnt/viking/resources/docs/"],
        )],
        "fsck" => &[(
            "Check, then repair:",
            &["vikingfs fsck", "vikingfs fsck --repair"],
        )],
        _ => &[],
    }
}
