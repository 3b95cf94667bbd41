//! `vikingfs find QUERY [--mode lexical|semantic|hybrid] [--limit N] [--under URI|PATH]
//! [--json] [--paths|--uris]` and `vikingfs find --queries FILE`: search over the derived index
//! that never names a missing file (records whose source is gone are deleted on the way) and
//! answers nothing, with exit status 1, when nothing matches (like grep). Results are named by
//! URI, or by their path under a mount of the workspace (`--paths`, the default when run inside
//! one).

use std::io::{BufRead, BufWriter, Write};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use super::discover::Mount;
use super::Ctx;
use crate::embed::{self, Embedder};
use crate::error::Chain;
use crate::index::{Evidence, Hit, Index, IndexError, Mode};
use crate::ops::search::{self, Query};
use crate::queue::Queue;

/// The most results one query may ask for.
const MAX_LIMIT: usize = 10_000;
/// Plain output shows this much of a snippet.
const SNIPPET_CHARS: usize = 120;

#[derive(Args, Debug)]
pub struct FindArgs {
    /// What to look for (omit with --queries). Its words rank; `"exact phrase"`, `-word`,
    /// `path:GLOB` (`path:*.md`, `path:docs/*`, `path:/resources/x/**`) and `ext:rs` filter.
    /// One identifier (`LockGuard`, `fg_wait`) puts the files that define it first.
    #[arg(required_unless_present = "queries")]
    pub query: Option<String>,
    /// How many results to print (1-10000).
    #[arg(long, short = 'n', default_value_t = 10)]
    pub limit: usize,
    /// Only results at or below this viking:// URI (or path under a mount of the workspace,
    /// such as `.`).
    #[arg(long, value_name = "URI|PATH")]
    pub under: Option<String>,
    /// lexical (BM25), semantic (the model's vectors) or hybrid (both, fused; lexical when
    /// no model is configured). Scores compare within a mode only: lexical, the BM25 score
    /// (0 and up); semantic, the cosine similarity of a file's best passage (up to 1);
    /// hybrid, 0 to 1: BM25 as a share of the query's best plus the cosine's rise from the
    /// floor towards the query's best, weighted; summaries weighted below files. Each result
    /// shows its best passage, with its lines (L12-40).
    #[arg(long, default_value = "hybrid", value_parser = ["lexical", "semantic", "hybrid"])]
    pub mode: String,
    /// Print a JSON array of {uri, path, score, level, snippet, evidence}, best first (`path`:
    /// under a mount of the workspace, when it is mounted).
    #[arg(long)]
    pub json: bool,
    /// Name results by their path under the workspace's mount (the default when the current
    /// directory is inside one) instead of by viking:// URI.
    #[arg(long, conflicts_with = "uris")]
    pub paths: bool,
    /// Name results by viking:// URI even inside a mount.
    #[arg(long)]
    pub uris: bool,
    /// Run every line of FILE ("-": standard input) as a query: each query's results after a
    /// `# QUERY` line, a blank line between; with --json, one JSON array per line (JSON
    /// Lines), in order.
    #[arg(long, value_name = "FILE", conflicts_with = "query")]
    pub queries: Option<String>,
}

#[derive(Serialize)]
struct JsonHit<'a> {
    uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<std::path::PathBuf>,
    score: f32,
    /// OpenViking's level: 0 abstract, 1 overview, 2 content.
    level: u8,
    snippet: &'a str,
    evidence: Evidence,
}

pub fn run(ctx: &Ctx, args: &FindArgs) -> anyhow::Result<i32> {
    if args.limit == 0 || args.limit > MAX_LIMIT {
        return super::usage(format!(
            "find: --limit must be between 1 and {MAX_LIMIT}, got {}",
            args.limit
        ));
    }
    let mode = Mode::parse(&args.mode).expect("clap checked the mode");
    let queries: Vec<String> = match (&args.query, &args.queries) {
        (Some(q), _) => {
            if q.trim().is_empty() {
                bail!("find: the query is empty");
            }
            vec![q.trim().to_string()]
        }
        (None, Some(file)) => read_queries(file)?,
        (None, None) => bail!("find: give a query or --queries FILE"),
    };
    let under = match &args.under {
        Some(u) => Some(ctx.target(u).context("find: --under")?),
        None => None,
    };
    // Searching never creates a workspace: one that is not there has nothing to find.
    let ws = ctx.existing_workspace()?;
    let naming = naming(ctx, args)?;
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::find(&d, ctx, args, &queries, under.as_ref(), &naming);
    }
    crate::ops::check_backend(&ws, &ctx.config.backend).context("find")?;
    // The model is loaded only when the mode uses it. One thread embeds a short query faster
    // than two (13.5 vs 15.6 ms for all-MiniLM-L6-v2 here: the matrices are too small to
    // split), and a find process embeds nothing else.
    let embedder = if mode == Mode::Lexical {
        None
    } else {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build_global();
        embed::from_config(&ctx.config.embedding).context("find")?
    };
    let index = open_index(ctx, &ws, embedder.as_deref())?;
    if mode == Mode::Semantic && !index.has_dense() {
        bail!(
            "find: --mode semantic needs a model: set embedding.dense.provider \"local\" and \
             embedding.dense.model to a model directory (scripts/fetch-model.sh), and let the \
             daemon (or `vikingfs wait`) embed the records"
        );
    }
    // The queue says whether a summary's refresh is pending: opened at the first summary hit.
    let queue = LazyQueue::new(ws.clone(), ctx.config.backend.clone());
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut any = false;
    let mut orphans = 0;
    for (i, text) in queries.iter().enumerate() {
        query_header(&mut out, i, text, args)?;
        let started = Instant::now();
        let found = search::find(
            &ws,
            &index,
            Some(&queue),
            embedder.as_deref(),
            &Query {
                text,
                mode,
                limit: args.limit,
                under: under.as_ref(),
            },
        )
        .context("find")?;
        tracing::debug!(query = %text, ms = started.elapsed().as_secs_f64() * 1e3, "find");
        orphans += found.orphans_removed;
        any |= !found.hits.is_empty();
        print_hits(&mut out, &found.hits, args.json, &naming)?;
    }
    out.flush()?;
    if orphans > 0 {
        tracing::info!(removed = orphans, "deleted index records of missing files");
    }
    // The databases close cheaply: a one-shot process's connections leave their WALs to
    // the next process instead of checkpointing them (`crate::db::one_shot_process`).
    drop(index);
    drop(queue);
    // Like grep: 1 when nothing matched (a batch: when no query matched anything).
    Ok(if any { 0 } else { 1 })
}

/// The queue, opened on first use (most searches meet no summary).
struct LazyQueue {
    ws: crate::workspace::Workspace,
    backend: crate::config::Backend,
    queue: std::sync::OnceLock<Option<Queue>>,
}

impl LazyQueue {
    fn new(ws: crate::workspace::Workspace, backend: crate::config::Backend) -> Self {
        LazyQueue {
            ws,
            backend,
            queue: std::sync::OnceLock::new(),
        }
    }
}

impl search::PendingSummaries for LazyQueue {
    fn refresh_pending(&self, dir_key: &str) -> bool {
        self.queue
            .get_or_init(|| crate::ops::open_queue_of(&self.ws, &self.backend).ok())
            .as_ref()
            .is_some_and(|q| q.refresh_pending(dir_key))
    }
}

fn read_queries(file: &str) -> anyhow::Result<Vec<String>> {
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("find: --queries {file}"))?,
        ))
    };
    let mut out = Vec::new();
    for line in reader.lines() {
        out.push(
            line.with_context(|| format!("find: --queries {file}"))?
                .trim()
                .to_string(),
        );
    }
    Ok(out)
}

/// The index for searching. One of an older format is upgraded first by opening the engine
/// (which rebuilds it from the files, with a progress bar); one whose vectors came from
/// another model is searched lexically, with a warning, until the daemon re-embeds it.
fn open_index(
    ctx: &Ctx,
    ws: &crate::workspace::Workspace,
    embedder: Option<&dyn Embedder>,
) -> anyhow::Result<Index> {
    let home = crate::ops::index_home(ws, &ctx.config.backend).context("find")?;
    if home.file().is_some_and(|p| crate::db::damage(p).is_some()) {
        // Opening the engine moves the damaged file aside and rebuilds it from the files.
        drop(super::ops::open_existing(ctx).context("find: rebuilding a damaged index")?);
    }
    let open = || match embedder {
        Some(e) => Index::open_in(home.store(), e.dim(), &e.model_id()),
        None => Index::open_lexical_in(home.store()),
    };
    match open() {
        Ok(i) => Ok(i),
        // An older format, or a damaged file: opening the engine rebuilds it from the files.
        Err(e) if matches!(e, IndexError::Schema { .. }) || e.is_damage() => {
            let ops = super::ops::open_existing(ctx).context("find: upgrading the index")?;
            drop(ops);
            Ok(open().context("find")?)
        }
        Err(e @ IndexError::ModelMismatch { .. }) => {
            eprintln!(
                "vikingfs: find: {}; searching lexically until the daemon re-embeds it",
                Chain(&e)
            );
            Ok(Index::open_lexical_in(home.store()).context("find")?)
        }
        Err(e) => Err(anyhow::Error::new(e).context("find")),
    }
}

/// How results are named: the mount of the workspace their paths are under (the current
/// directory's, else the first live one), and whether text output uses those paths.
pub(super) struct Naming<'a> {
    mount: Option<&'a Mount>,
    paths: bool,
}

pub(super) fn naming<'a>(ctx: &'a Ctx, args: &FindArgs) -> anyhow::Result<Naming<'a>> {
    let here = ctx.cwd_mount().filter(|m| m.dead().is_none());
    let mount = here.or_else(|| {
        ctx.workspace_mounts()
            .into_iter()
            .find(|m| m.dead().is_none())
    });
    if args.paths && mount.is_none() {
        bail!(
            "find --paths: workspace {} is not mounted (vikingfs mount {} MOUNTPOINT; or leave \
             out --paths for viking:// URIs)",
            ctx.workspace_path.display(),
            ctx.workspace_path.display()
        );
    }
    Ok(Naming {
        mount,
        paths: args.paths || (here.is_some() && !args.uris),
    })
}

/// With `--queries` in text, each query's results follow a `# QUERY` line, blocks apart by
/// a blank line (JSON Lines need none: one array per query, in order).
pub(super) fn query_header(
    out: &mut impl Write,
    i: usize,
    text: &str,
    args: &FindArgs,
) -> anyhow::Result<()> {
    if args.queries.is_some() && !args.json {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "# {text}")?;
    }
    Ok(())
}

pub(super) fn print_hits(
    out: &mut impl Write,
    hits: &[Hit],
    json: bool,
    naming: &Naming,
) -> anyhow::Result<()> {
    if json {
        let rows: Vec<JsonHit> = hits
            .iter()
            .map(|h| JsonHit {
                uri: h.uri.uri(),
                path: naming.mount.map(|m| m.path_of(&h.uri)),
                score: h.score,
                level: h.level as u8,
                snippet: &h.snippet,
                evidence: h.evidence,
            })
            .collect();
        serde_json::to_writer(&mut *out, &rows)?;
        writeln!(out)?;
    } else {
        for h in hits {
            let text = crate::index::text::one_line(&h.snippet, SNIPPET_CHARS);
            // The lines of the passage shown, as `grep -n` would point at them.
            let snippet = match h.evidence.lines {
                Some([a, b]) if a == b => format!("L{a}: {text}"),
                Some([a, b]) => format!("L{a}-{b}: {text}"),
                None => text,
            };
            match naming.mount.filter(|_| naming.paths) {
                Some(m) => writeln!(
                    out,
                    "{:.4}\t{}\t{}\t{}",
                    h.score,
                    m.path_of(&h.uri).display(),
                    h.level,
                    snippet
                )?,
                None => writeln!(out, "{:.4}\t{}\t{}\t{}", h.score, h.uri, h.level, snippet)?,
            }
        }
    }
    Ok(())
}
