//! `vikingfs key add|list|rm`: the HTTP API's user keys (`WORKSPACE/.vikingfs/keys.json`,
//! kept hashed; [`crate::server::auth::Keys`]). A key is printed once, when it is made; a
//! listing never shows one. A running daemon sees a change at once (it reads the file again
//! when it changes), so the command writes the file itself rather than asking the daemon.
//!
//! A workspace serves one account (`vikingfs.account`): a key for another account would never
//! be accepted, so it is refused.

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use super::Ctx;
use crate::server::auth::{KeyRecord, Keys, Role};

#[derive(Args, Debug)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub command: KeyCmd,
}

#[derive(Subcommand, Debug)]
pub enum KeyCmd {
    /// Make a key for a user of the workspace's account and print it (once: it is kept hashed).
    Add {
        /// The account (default and only choice: the workspace's, `vikingfs.account`).
        #[arg(long)]
        account: Option<String>,
        /// The user the key is of: it sees the account's shared trees and viking://user/USER.
        #[arg(long)]
        user: String,
        /// `admin`: every user's tree of the account, and the admin API for its users. A user
        /// who has keys already gets one more, of the role it has.
        #[arg(long, value_enum)]
        role: Option<KeyRole>,
        /// Print the new key's record, with the key, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the keys (their ids, users and roles; never a key).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a key (by the id `key list` shows): it stops working at once.
    Rm { id: String },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum KeyRole {
    User,
    Admin,
}

impl From<KeyRole> for Role {
    fn from(r: KeyRole) -> Role {
        match r {
            KeyRole::User => Role::User,
            KeyRole::Admin => Role::Admin,
        }
    }
}

fn record(r: &KeyRecord) -> serde_json::Value {
    json!({
        "id": r.id,
        "account": r.account,
        "user": r.user,
        "role": r.role.name(),
        "key_prefix": r.key_prefix,
        "created_at": r.created_at,
    })
}

/// The workspace's key file, without opening (or creating) the workspace.
fn keys_file(ctx: &Ctx) -> std::path::PathBuf {
    ctx.workspace_path
        .join(crate::workspace::INTERNAL_DIR)
        .join("keys.json")
}

pub fn run(ctx: &Ctx, args: &KeyArgs) -> anyhow::Result<i32> {
    let served = &ctx.config.account;
    match &args.command {
        KeyCmd::Add {
            account,
            user,
            role,
            json,
        } => {
            let account = account.as_deref().unwrap_or(served);
            if account != served {
                anyhow::bail!(
                    "key add: this workspace serves account {served} (vikingfs.account), not \
                     {account}: a workspace serves one account"
                );
            }
            let keys = Keys::of(&ctx.workspace()?);
            // No role named: the user's own, if it has keys; else a user.
            let role = match role {
                Some(r) => Role::from(*r),
                None => keys
                    .users(account)?
                    .into_iter()
                    .find(|u| u.user == *user)
                    .map_or(Role::User, |u| u.role),
            };
            let (rec, key) = keys.add(account, user, role, None, false)?;
            if *json {
                let mut v = record(&rec);
                v["key"] = key.into();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{key}");
                eprintln!(
                    "key {} for user {} of account {} ({}): shown this once, kept only hashed",
                    rec.id,
                    rec.user,
                    rec.account,
                    rec.role.name()
                );
            }
            Ok(0)
        }
        KeyCmd::List { json } => {
            // A listing creates no workspace: none there, no keys.
            let keys = Keys::at(keys_file(ctx)).list()?;
            if *json {
                let v: Vec<_> = keys.iter().map(record).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if keys.is_empty() {
                eprintln!("no keys (make one with `vikingfs key add --user USER`)");
            } else {
                println!(
                    "{:<12}  {:<16}  {:<16}  {:<5}  {:<8}  CREATED",
                    "ID", "ACCOUNT", "USER", "ROLE", "PREFIX"
                );
                for k in &keys {
                    println!(
                        "{:<12}  {:<16}  {:<16}  {:<5}  {:<8}  {}",
                        k.id,
                        k.account,
                        k.user,
                        k.role.name(),
                        k.key_prefix,
                        k.created_at
                    );
                }
            }
            Ok(0)
        }
        KeyCmd::Rm { id } => {
            let keys = Keys::at(keys_file(ctx));
            match keys.remove(|k| k.id == *id)? {
                0 => anyhow::bail!("key rm: no key {id} (see `vikingfs key list`)"),
                _ => {
                    eprintln!("key {id} removed");
                    Ok(0)
                }
            }
        }
    }
}
