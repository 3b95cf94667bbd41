//! `vikingfs find QUERY [--limit N] [--under URI] [--json]`: semantic search over the derived
//! index that never names a missing file (records whose source is gone are deleted on the way).

use std::io::{BufWriter, Write};

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use super::Ctx;
use crate::embed;
use crate::index::{Hit, Index};

/// The most results one query may ask for.
const MAX_LIMIT: usize = 10_000;
/// Plain output shows this much of a snippet.
const SNIPPET_CHARS: usize = 120;

#[derive(Args, Debug)]
pub struct FindArgs {
    /// What to look for.
    pub query: String,
    /// How many results to print (1-10000).
    #[arg(long, short = 'n', default_value_t = 10)]
    pub limit: usize,
    /// Only results at or below this viking:// URI.
    #[arg(long, value_name = "URI")]
    pub under: Option<String>,
    /// Print a JSON array of {uri, score, level, snippet}, best first.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct JsonHit<'a> {
    uri: String,
    score: f32,
    /// OpenViking's level: 0 abstract, 1 overview, 2 content.
    level: u8,
    snippet: &'a str,
}

pub fn run(ctx: &Ctx, args: &FindArgs) -> anyhow::Result<i32> {
    let query = args.query.trim();
    if query.is_empty() {
        bail!("find: the query is empty");
    }
    if args.limit == 0 || args.limit > MAX_LIMIT {
        bail!(
            "find: --limit must be between 1 and {MAX_LIMIT}, got {}",
            args.limit
        );
    }
    let ws = ctx.workspace()?;
    let under = match &args.under {
        Some(u) => Some(ws.parse_uri(u).context("find: --under")?),
        None => None,
    };
    let embedder = embed::from_config(&ctx.config.embedding).context("find")?;
    let index =
        Index::open(&ws.index_db(), embedder.dim(), &embedder.model_id()).context("find")?;
    let vector = embedder
        .embed(&[query])
        .context("find: embedding the query")?
        .pop()
        .unwrap_or_default();
    let found = index
        .search_live(&vector, args.limit, under.as_ref(), |h| h.is_live_in(&ws))
        .context("find")?;
    if found.orphans_removed > 0 {
        tracing::info!(
            removed = found.orphans_removed,
            "deleted index records of missing files"
        );
    }
    print_hits(&found.hits, args.json)?;
    Ok(0)
}

fn print_hits(hits: &[Hit], json: bool) -> anyhow::Result<()> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    if json {
        let rows: Vec<JsonHit> = hits
            .iter()
            .map(|h| JsonHit {
                uri: h.uri.uri(),
                score: h.score,
                level: h.level as u8,
                snippet: &h.snippet,
            })
            .collect();
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else {
        for h in hits {
            let snippet: String = h
                .snippet
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(SNIPPET_CHARS)
                .collect();
            writeln!(out, "{:.4}\t{}\t{}\t{}", h.score, h.uri, h.level, snippet)?;
        }
    }
    out.flush()?;
    Ok(())
}
