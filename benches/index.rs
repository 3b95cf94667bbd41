//! Find latency over a large index, against a naive baseline in the same run.
//!
//! Builds a workspace of N synthetic documents (files on disk + index records with their terms
//! and word-hash vectors), then times the same queries:
//! - `lexical` / `hybrid`: in-process `Index::find` (BM25; BM25 fused with the dense scan), and
//!   hybrid with the query embedded by all-MiniLM-L6-v2 when `--dim 384` and the model is in
//!   `target/models` (`VIKINGFS_MODEL`);
//! - `packed`: in-process `Index::find --mode semantic` without a floor (int8 chunk scan + f32
//!   re-rank + existence checks);
//! - `naive`:  in-process row-by-row SQLite scan of every record's f32 blob (the baseline);
//! - `e2e`:    a fresh `vikingfs find --json` process per query, beside the bare process
//!   start-up floor (`vikingfs config show`).
//!
//! Each query is three of one document's ten rarest words; `recall@10` is the share of queries
//! whose document is in the top 10. It measures the embedder (the same for packed and naive,
//! which shows the int8 scan loses nothing), not the index: feature hashing into 256 dimensions
//! blurs at 100k documents (try `--dim 1024`).
//!
//! - on PostgreSQL, when `scripts/fetch-postgres.sh` fetched it (a server is started for the
//!   run; `--pg-dsn DSN` uses another, `--no-pg` skips it): the same records in an index on
//!   the server (pgvector HNSW, BM25 over postings), its build time and the same `find`s,
//!   beside SQLite's.
//!
//! `cargo bench --bench index -- [--docs N] [--dim D] [--queries Q] [--e2e-queries Q] [--keep DIR] [--pg-dsn DSN | --no-pg]`

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vikingfs::index::{Found, Hit, Index, Level, Mode, Record, SearchRequest, Verdict};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

// The tests' PostgreSQL fixture alone (the rest of tests/support is for test binaries).
#[allow(dead_code)]
#[path = "../tests/support/pg.rs"]
mod pg_support;

const K: usize = 10;

/// Vectors for the dense scan: words hashed into `dim` signed buckets. They stand in for a
/// model's (the scan costs the same for any vectors of the dimension) and keep the synthetic
/// queries findable, so recall shows the int8 scan loses nothing against the f32 baseline.
struct WordHash {
    dim: usize,
}

impl WordHash {
    fn new(dim: usize) -> Self {
        WordHash { dim }
    }

    fn model_id(&self) -> String {
        format!("bench-word-hash-{}", self.dim)
    }

    fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        for w in text.split_whitespace() {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in w.bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            h ^= h >> 33;
            let sign = if h >> 63 == 1 { -1.0 } else { 1.0 };
            v[(h % self.dim as u64) as usize] += sign;
        }
        v
    }
}

struct Args {
    docs: usize,
    dim: usize,
    queries: usize,
    e2e_queries: usize,
    /// Keep (and reuse) the corpus in this directory instead of a temporary one.
    keep: Option<std::path::PathBuf>,
    /// Also build and time an index on this PostgreSQL server.
    pg_dsn: Option<String>,
    no_pg: bool,
}

fn args() -> Args {
    let mut a = Args {
        docs: 100_000,
        dim: 256,
        queries: 200,
        e2e_queries: 50,
        keep: None,
        pg_dsn: None,
        no_pg: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || -> usize {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{flag} needs a number"))
        };
        match flag.as_str() {
            "--docs" => a.docs = val(),
            "--dim" => a.dim = val(),
            "--queries" => a.queries = val(),
            "--e2e-queries" => a.e2e_queries = val(),
            "--keep" => a.keep = Some(it.next().expect("--keep needs a directory").into()),
            "--pg-dsn" => a.pg_dsn = Some(it.next().expect("--pg-dsn needs a DSN")),
            "--no-pg" => a.no_pg = true,
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// Pronounceable synthetic words, drawn Zipf-like so documents share common words and differ
/// in rare ones, like real text.
struct Vocab {
    words: Vec<String>,
    cdf: Vec<f64>,
}

impl Vocab {
    fn new(n: usize, rng: &mut StdRng) -> Vocab {
        const SYL: [&str; 16] = [
            "ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "an", "el", "dor", "qua", "zen", "pi",
            "ur", "bex",
        ];
        let mut seen = std::collections::HashSet::new();
        let mut words = Vec::with_capacity(n);
        while words.len() < n {
            let len = rng.random_range(2..5);
            let w: String = (0..len)
                .map(|_| SYL[rng.random_range(0..SYL.len())])
                .collect();
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        let mut acc = 0.0;
        let cdf = (1..=n)
            .map(|r| {
                acc += 1.0 / r as f64;
                acc
            })
            .collect();
        Vocab { words, cdf }
    }

    fn word(&self, rng: &mut StdRng) -> &str {
        let x = rng.random_range(0.0..*self.cdf.last().unwrap());
        let i = self.cdf.partition_point(|&c| c < x);
        &self.words[i.min(self.words.len() - 1)]
    }
}

/// The dense search alone, as `find --mode semantic` runs it but with no floor: the packed
/// scan's cost, and the recall the int8 codes keep against the naive f32 scan.
fn dense_live(index: &Index, ws: &Workspace, v: &[f32], under: Option<&VPath>) -> Found {
    let req = SearchRequest {
        text: "",
        vector: Some(v),
        mode: Mode::Semantic,
        limit: K,
        under,
        floor: f32::MIN,
    };
    index
        .find(&req, |h| {
            if h.is_live_in(ws) {
                Verdict::Show
            } else {
                Verdict::Gone
            }
        })
        .unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Timing {
    name: &'static str,
    p50: Duration,
    p99: Duration,
    recall: Option<f64>,
}

fn time(
    name: &'static str,
    queries: &[(String, VPath)],
    mut f: impl FnMut(&str, &VPath) -> Vec<String>,
) -> Timing {
    let mut times = Vec::with_capacity(queries.len());
    let mut found = 0;
    for (q, want) in queries {
        let t = Instant::now();
        let uris = f(q, want);
        times.push(t.elapsed());
        found += uris.iter().any(|u| *u == want.uri()) as usize;
    }
    times.sort();
    Timing {
        name,
        p50: percentile(&times, 0.5),
        p99: percentile(&times, 0.99),
        recall: Some(found as f64 / queries.len() as f64),
    }
}

/// The baseline: every record's f32 blob read through one SQLite row step each.
fn naive_search(conn: &rusqlite::Connection, q: &[f32], ws: &Workspace) -> Vec<String> {
    let mut stmt = conn
        .prepare_cached("SELECT uri, level, vec FROM records")
        .unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut heap: BinaryHeap<Reverse<(u32, String, i64)>> = BinaryHeap::new();
    while let Some(row) = rows.next().unwrap() {
        let blob = row.get_ref(2).unwrap().as_blob().unwrap();
        let score: f32 = blob
            .chunks_exact(4)
            .zip(q)
            .map(|(b, x)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x)
            .sum();
        // Order-preserving key for a non-negative-first float sort.
        let key = (score + 2.0).to_bits();
        if heap.len() < K || heap.peek().is_some_and(|Reverse(w)| key > w.0) {
            heap.push(Reverse((key, row.get(0).unwrap(), row.get(1).unwrap())));
            if heap.len() > K {
                heap.pop();
            }
        }
    }
    let mut out: Vec<_> = heap.into_iter().map(|Reverse(x)| x).collect();
    out.sort_by_key(|x| Reverse(x.0));
    out.into_iter()
        .filter_map(|(_, uri, level)| {
            let hit = Hit {
                uri: VPath::from_rel(&uri).unwrap(),
                level: Level::from_i64(level).unwrap(),
                score: 0.0,
                snippet: String::new(),
                source_version: String::new(),
                evidence: Default::default(),
            };
            hit.is_live_in(ws).then(|| hit.uri.uri())
        })
        .collect()
}

fn build(
    ws: &Workspace,
    docs: usize,
    dim: usize,
    rng: &mut StdRng,
    write: bool,
    pg: Option<&Index>,
) -> (Vec<String>, Vocab, Duration, Duration) {
    let vocab = Vocab::new(20_000, rng);
    let e = WordHash::new(dim);
    let index = Index::open_or_reset(&ws.index_db(), dim, &e.model_id())
        .unwrap()
        .0;
    let t = Instant::now();
    let mut pg_time = Duration::ZERO;
    let mut texts = Vec::with_capacity(docs);
    let mut batch = Vec::with_capacity(1000);
    let put = |batch: &mut Vec<Record>, pg_time: &mut Duration| {
        index.upsert_many(batch).unwrap();
        if let Some(pg) = pg {
            let t = Instant::now();
            pg.upsert_many(batch).unwrap();
            *pg_time += t.elapsed();
        }
        batch.clear();
    };
    for i in 0..docs {
        let n = rng.random_range(40..120);
        let text: Vec<&str> = (0..n).map(|_| vocab.word(rng)).collect();
        let text = text.join(" ");
        let uri =
            VPath::from_rel(&format!("resources/bench/d{:03}/doc{i:06}.md", i / 1000)).unwrap();
        if !write && pg.is_none() {
            texts.push(text);
            continue;
        }
        let path = ws.fs_path(&uri);
        if write && i % 1000 == 0 {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        }
        if write {
            std::fs::write(&path, &text).unwrap();
        }
        batch.push(Record {
            uri,
            level: Level::Content,
            text: text.clone(),
            vector: Some(e.embed_one(&text)),
            snippet: text.chars().take(120).collect(),
            source_version: format!("{:016x}", i * 7919),
            partial: false,
        });
        if batch.len() == 1000 {
            put(&mut batch, &mut pg_time);
        }
        texts.push(text);
    }
    put(&mut batch, &mut pg_time);
    let took = t.elapsed() - pg_time;
    (texts, vocab, took, pg_time)
}

fn size_mb(p: &Path) -> f64 {
    let wal = p.with_extension("db-wal");
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    (len(p) + len(&wal)) as f64 / 1e6
}

fn main() {
    let a = args();
    let tmp = tempfile::Builder::new()
        .prefix("vikingfs-bench-index")
        .tempdir()
        .unwrap();
    let dir = a.keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    // The corpus is a function of (seed, docs, dim): a kept one is reused as is.
    let marker = dir.join(format!("built-{}-{}", a.docs, a.dim));
    let reuse = marker.exists();
    if a.keep.is_some() && !reuse && dir.join("ws").exists() {
        std::fs::remove_dir_all(dir.join("ws")).unwrap();
    }
    let ws = Workspace::open(dir.join("ws"), "default", "default").unwrap();
    let mut rng = StdRng::seed_from_u64(42);
    eprintln!(
        "{} {} documents...",
        if reuse { "reusing" } else { "building" },
        a.docs
    );
    let e = WordHash::new(a.dim);
    let have_pg = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/postgres/bin/postgres")
        .exists()
        || std::env::var_os("VIKINGFS_PG_BIN").is_some();
    let server = (a.pg_dsn.is_none() && have_pg && !a.no_pg).then(pg_support::PgServer::start);
    let pg_dsn = a.pg_dsn.clone().or(server.as_ref().map(|s| s.dsn()));
    // The server's index, emptied first: it is built beside the file's from the same records.
    let pg_index = pg_dsn.as_ref().map(|dsn| {
        let pg = std::sync::Arc::new(vikingfs::pg::Pg::connect(dsn).unwrap());
        pg.bind_workspace(&ws.id().unwrap()).unwrap();
        let mut c = postgres::Client::connect(dsn, postgres::NoTls).unwrap();
        let _ = c.batch_execute("TRUNCATE vi_postings, vi_records; DELETE FROM vi_meta;");
        Index::open_or_reset_in(vikingfs::index::Store::Server(pg), a.dim, &e.model_id())
            .unwrap()
            .0
    });
    let (texts, vocab, build_time, pg_build) =
        build(&ws, a.docs, a.dim, &mut rng, !reuse, pg_index.as_ref());
    std::fs::write(&marker, "").unwrap();
    let rank: std::collections::HashMap<&str, usize> = vocab
        .words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.as_str(), i))
        .collect();
    let queries: Vec<(String, VPath)> = (0..a.queries.max(a.e2e_queries))
        .map(|_| {
            let i = rng.random_range(0..texts.len());
            // Three of the document's ten rarest words: a query of a few distinctive words.
            let mut words: Vec<&str> = texts[i].split(' ').collect();
            words.sort_by_key(|w| std::cmp::Reverse(rank[w]));
            words.dedup();
            let q: Vec<&str> = (0..3)
                .map(|_| words[rng.random_range(0..words.len().min(10))])
                .collect();
            let uri =
                VPath::from_rel(&format!("resources/bench/d{:03}/doc{i:06}.md", i / 1000)).unwrap();
            (q.join(" "), uri)
        })
        .collect();

    let index = Index::open(&ws.index_db(), a.dim, &e.model_id()).unwrap();
    let conn = rusqlite::Connection::open(ws.index_db()).unwrap();
    let inproc = &queries[..a.queries];
    // Warm the page cache for both, so neither pays the other's first read.
    for (q, _) in inproc.iter().take(5) {
        let v = e.embed_one(q);
        dense_live(&index, &ws, &v, None);
        naive_search(&conn, &v, &ws);
    }
    let packed = time("in-process packed int8 + f32 re-rank", inproc, |q, _| {
        let v = e.embed_one(q);
        let found = dense_live(&index, &ws, &v, None);
        found.hits.iter().map(|h| h.uri.uri()).collect()
    });
    // What `find` runs: BM25 alone, and fused with the dense scan (this bench's hashing
    // vectors stand in for a model's: the scan costs the same for any vectors of the
    // dimension; a model's query embedding is timed by its own bench).
    let find_in = |index: &Index, q: &str, mode: Mode, under: Option<&VPath>| -> Vec<String> {
        let v = e.embed_one(q);
        let req = SearchRequest {
            text: q,
            vector: Some(&v),
            mode,
            limit: K,
            under,
            floor: 0.35,
        };
        let found = index
            .find(&req, |h| {
                if h.is_live_in(&ws) {
                    Verdict::Show
                } else {
                    Verdict::Gone
                }
            })
            .unwrap();
        found.hits.iter().map(|h| h.uri.uri()).collect()
    };
    let find = |q: &str, mode: Mode, under: Option<&VPath>| find_in(&index, q, mode, under);
    let lexical = time("in-process find --mode lexical (BM25)", inproc, |q, _| {
        find(q, Mode::Lexical, None)
    });
    let hybrid = time(
        "in-process find --mode hybrid (BM25 + dense)",
        inproc,
        |q, _| find(q, Mode::Hybrid, None),
    );
    // With the local model's query embedding (when its files are there and the dimension
    // fits): what hybrid costs in a process that has the model loaded.
    let model_dir = std::env::var_os("VIKINGFS_MODEL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/models/all-MiniLM-L6-v2")
        });
    // One thread for the query's embedding, as `vikingfs find` runs it.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global();
    let model = vikingfs::embed::BertEmbedder::load(&model_dir)
        .ok()
        .filter(|m| vikingfs::embed::Embedder::dim(m) == a.dim);
    let with_model = model.as_ref().map(|m| {
        time(
            "in-process find --mode hybrid, query by MiniLM",
            inproc,
            |q, _| {
                // What `find` runs: the query embedded, then the fused search.
                let found = vikingfs::ops::search::find(
                    &ws,
                    &index,
                    None,
                    Some(m as &dyn vikingfs::embed::Embedder),
                    &vikingfs::ops::search::Query {
                        text: q,
                        mode: Mode::Hybrid,
                        limit: K,
                        under: None,
                    },
                )
                .unwrap();
                found.hits.iter().map(|h| h.uri.uri()).collect()
            },
        )
    });
    // The same finds on the server's index.
    let on_pg = pg_index.as_ref().map(|pg| {
        for (q, _) in inproc.iter().take(5) {
            find_in(pg, q, Mode::Hybrid, None);
        }
        [
            time("PostgreSQL: find --mode lexical (BM25)", inproc, |q, _| {
                find_in(pg, q, Mode::Lexical, None)
            }),
            time(
                "PostgreSQL: find --mode hybrid (BM25 + HNSW)",
                inproc,
                |q, _| find_in(pg, q, Mode::Hybrid, None),
            ),
            time("PostgreSQL: semantic, HNSW, no floor", inproc, |q, _| {
                let v = e.embed_one(q);
                let found = dense_live(pg, &ws, &v, None);
                found.hits.iter().map(|h| h.uri.uri()).collect()
            }),
            time(
                "PostgreSQL:   same, --under the target's dir",
                inproc,
                |q, want| {
                    let v = e.embed_one(q);
                    let dir = want.parent().unwrap();
                    let found = dense_live(pg, &ws, &v, Some(&dir));
                    found.hits.iter().map(|h| h.uri.uri()).collect()
                },
            ),
        ]
    });
    let naive = time("in-process naive row-by-row f32 scan", inproc, |q, _| {
        naive_search(&conn, &e.embed_one(q), &ws)
    });
    let scope = VPath::from_rel("resources").unwrap();
    let under_scope = time(
        "  same, --under viking://resources (all)",
        inproc,
        |q, _| {
            let v = e.embed_one(q);
            let found = dense_live(&index, &ws, &v, Some(&scope));
            found.hits.iter().map(|h| h.uri.uri()).collect()
        },
    );
    let under_dir = time(
        "  same, --under the target's dir (1000 docs)",
        inproc,
        |q, want| {
            let v = e.embed_one(q);
            let dir = want.parent().unwrap();
            let found = dense_live(&index, &ws, &v, Some(&dir));
            found.hits.iter().map(|h| h.uri.uri()).collect()
        },
    );

    let exe = env!("CARGO_BIN_EXE_vikingfs");
    let config = dir.join("config.json");
    // Out of the box (no model): the process runs BM25.
    std::fs::write(&config, "{}").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(exe)
            .arg("--workspace")
            .arg(ws.root())
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let e2e_q = &queries[..a.e2e_queries];
    let e2e = time(
        "end-to-end `vikingfs find --json` (lexical)",
        e2e_q,
        |q, _| {
            let out = run(&["find", "--json", "--limit", "10", q]);
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            v.as_array()
                .unwrap()
                .iter()
                .map(|h| h["uri"].as_str().unwrap().to_string())
                .collect()
        },
    );
    let mut floor = time("process floor `vikingfs config show`", e2e_q, |_, _| {
        run(&["config", "show"]);
        Vec::new()
    });
    floor.recall = None;

    let built = if reuse {
        "reused".to_string()
    } else {
        format!(
            "built in {:.1} s ({:.0} docs/s incl. files)",
            build_time.as_secs_f64(),
            a.docs as f64 / build_time.as_secs_f64()
        )
    };
    println!(
        "index: {} documents, dim {}, {built}, {:.0} MB",
        a.docs,
        a.dim,
        size_mb(&ws.index_db())
    );
    if pg_index.is_some() {
        println!(
            "PostgreSQL index: the same records written in {:.1} s ({:.0} docs/s, no files)",
            pg_build.as_secs_f64(),
            a.docs as f64 / pg_build.as_secs_f64()
        );
    }
    println!(
        "find latency, top-{K}, {} in-process / {} end-to-end queries:",
        a.queries, a.e2e_queries
    );
    println!(
        "{:<46} {:>9} {:>9} {:>10}",
        "", "p50 ms", "p99 ms", "recall@10"
    );
    let mut rows = vec![&packed, &under_scope, &under_dir, &lexical, &hybrid];
    rows.extend(with_model.as_ref());
    rows.extend(on_pg.iter().flatten());
    rows.extend([&naive, &e2e, &floor]);
    for t in rows {
        let recall = t.recall.map_or("-".to_string(), |r| format!("{:.2}", r));
        println!(
            "{:<46} {:>9.2} {:>9.2} {:>10}",
            t.name,
            ms(t.p50),
            ms(t.p99),
            recall
        );
    }
    let met = |t: &Timing| if ms(t.p50) <= 20.0 { "met" } else { "NOT met" };
    // How much of the exact top-10 (SQLite's scan, f32 re-ranked) the graph search finds: the
    // HNSW's own recall, whatever the embedder's.
    let graph_recall = pg_index.as_ref().map(|pg| {
        let mut shared = 0usize;
        let mut total = 0usize;
        for (q, _) in inproc {
            let v = e.embed_one(q);
            let exact: std::collections::HashSet<String> = dense_live(&index, &ws, &v, None)
                .hits
                .iter()
                .map(|h| h.uri.uri())
                .collect();
            let graph = dense_live(pg, &ws, &v, None);
            total += exact.len();
            shared += graph
                .hits
                .iter()
                .filter(|h| exact.contains(&h.uri.uri()))
                .count();
        }
        shared as f64 / total.max(1) as f64
    });
    if let Some([pg_lex, pg_hybrid, ..]) = &on_pg {
        let met = |t: &Timing| if ms(t.p50) <= 30.0 { "met" } else { "NOT met" };
        let gap = |pg: &Timing, lite: &Timing| pg.recall.unwrap() - lite.recall.unwrap();
        println!(
            "PostgreSQL: target find p50 <= 30 ms: lexical {} ({:.2} ms), hybrid {} ({:.2} ms); recall@10 against SQLite: lexical {:+.3}, hybrid {:+.3} (target within 0.02)",
            met(pg_lex),
            ms(pg_lex.p50),
            met(pg_hybrid),
            ms(pg_hybrid.p50),
            gap(pg_lex, &lexical),
            gap(pg_hybrid, &hybrid),
        );
        println!(
            "PostgreSQL: the HNSW search finds {:.3} of the exact top-{K} (SQLite's f32-re-ranked scan)",
            graph_recall.unwrap_or(0.0)
        );
    }
    println!(
        "speed-up of packed over naive: p50 {:.1}x, p99 {:.1}x; target find p50 <= 20 ms in process: lexical {}, hybrid {}; end-to-end {}",
        ms(naive.p50) / ms(packed.p50),
        ms(naive.p99) / ms(packed.p99),
        met(&lexical),
        met(&hybrid),
        met(&e2e),
    );
}
