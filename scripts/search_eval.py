#!/usr/bin/env python3
"""Known-item retrieval benchmark for `vikingfs find`: corpora, qrels, the BM25 baseline, runs
of the vikingfs binaries and their scores. Python 3.11 standard library only.

Driven by scripts/bench-search.sh; each subcommand is usable on its own:

  build   --corpus pydoc|man --out DIR [--queries N] [--seed S]
          Write DIR/docs/sNN/dNNNNN.txt (opaque names, <= 500 files a directory),
          DIR/qrels.tsv (qid, expected relative path, query), DIR/queries.txt (one query a line,
          in qid order) and DIR/corpus.json (sizes and caveat counts).
  bm25    DIR --out RUN [--meta META]      SQLite FTS5 bm25 (porter unicode61) over DIR/docs.
  index   --bin B --workspace WS [--config F] --src DIR/docs --meta META
          Time `vikingfs add-resource SRC --to viking://resources/corpus --wait`.
  run-cli   --bin B --workspace WS [--config F] [--mode M] --corpus DIR --out RUN
          One `vikingfs find --json --limit 10 -- QUERY` process per query (wall time each).
  run-batch --bin B --workspace WS [--config F] --mode M --corpus DIR --out RUN
          One `vikingfs find --json --mode M --limit 10 --queries FILE` process (JSON Lines).
  score   DIR RUN --system NAME [--meta META] [--latency KIND] --results RESULTS
          Append one row (recall@1, recall@10, MRR@10, latency, index docs/s) to RESULTS.
  table   RESULTS [--title T]                Print the table of the rows in RESULTS.
  status  --bin B --workspace WS [--config F] Print the counts `vikingfs status --json` exposes.
  selftest                                   Check the metric code; exit 1 on a failure.

A run file is JSON Lines, one object a query in qid order:
  {"qid": N, "ms": float, "hits": [{uri, score, level, snippet, ...}], "error": str|null}
"""

import argparse
import ast
import collections
import gzip
import hashlib
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import sysconfig
import textwrap
import time

K = 10
URI_PREFIX = "viking://resources/corpus/"
FILES_PER_DIR = 500
MIN_QUERY_WORDS = 3
MIN_DOC_WORDS = 20
# Documents longer than this are cut at a word boundary (man pages reach 24,000 words; the
# old build reads the first 32 KiB of a file). Every system sees the same cut text.
MAX_DOC_WORDS = 1000
# Two documents whose first NEAR_DUP_WORDS words (normalised) agree are near-duplicates.
NEAR_DUP_WORDS = 40

WORD_RE = re.compile(r"[A-Za-z]{2,}")


def norm(s):
    return " ".join(s.lower().split())


def count_words(s):
    return len(s.split())


def cap_words(text, n=MAX_DOC_WORDS):
    """`text` cut after its n-th whitespace-separated word (line structure kept)."""
    m = None
    for i, m in enumerate(re.finditer(r"\S+", text)):
        if i + 1 == n:
            return text[: m.end()], True
    return text, False


# ---------------------------------------------------------------------------------------------
# Corpus A: Python standard library docstrings


PY_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def pydoc_items():
    """(source, query, body) for every module, class and function docstring of the stdlib."""
    root = sysconfig.get_paths()["stdlib"]
    for dp, dns, fns in os.walk(root):
        dns[:] = sorted(d for d in dns if d not in PY_SKIP_DIRS)
        for fn in sorted(fns):
            if not fn.endswith(".py") or fn.startswith("test_"):
                continue
            path = os.path.join(dp, fn)
            rel = os.path.relpath(path, root)
            try:
                with open(path, "rb") as f:
                    tree = ast.parse(f.read(), filename=path)
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if not isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    continue
                doc = ast.get_docstring(node, clean=True)
                if not doc:
                    continue
                first, _, rest = doc.partition("\n")
                name = getattr(node, "name", "<module>")
                yield f"{rel}:{node.lineno if hasattr(node, 'lineno') else 0}:{name}", " ".join(
                    first.split()
                ), rest.strip()


# ---------------------------------------------------------------------------------------------
# Corpus B: man pages (troff, stripped here: man or groff need not be installed)

MAN_ROOT = "/usr/share/man"
MAN_SECTIONS = ["man1", "man2", "man3", "man4", "man5", "man6", "man7", "man8"]
# google-cloud-cli is not a Debian package; its ~16,600 generated pages (each command three
# times: GA, alpha, beta) would be 93% of man1 and are near-duplicates of one another.
MAN_SKIP_PREFIXES = ("gcloud",)

ESC_CHARS = {
    "em": "—", "en": "–", "bu": "", "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'",
    "cq": "'", "co": "©", "rg": "®", "tm": "™", "rs": "\\", "ti": "~", "ha": "^", "mi": "-",
    "hy": "-", "pl": "+", "mu": "×", ">=": "≥", "<=": "≤", "->": "→", "<-": "←", "de": "°",
    "sc": "§", "Fo": "«", "Fc": "»", "ga": "`", "ul": "_", "ba": "|", "or": "|", "at": "@",
    "sh": "#", "Do": "$", "lB": "[", "rB": "]", "lC": "{", "rC": "}", "sl": "/", "eq": "=",
}
STR_CHARS = {'L"': '"', 'R"': '"', "C'": "'", "C`": "'", "Aq": "'", "lq": '"', "rq": '"',
             "Tm": "™", "R": "®", "Lq": '"', "Rq": '"'}
JOIN_MACROS = {"BR", "RB", "IR", "RI", "BI", "IB"}
TEXT_MACROS = {
    "B", "I", "SM", "SB", "Nm", "Ar", "Fl", "Op", "Xr", "Pa", "Em", "Sy", "Dq", "Ql", "Qq", "Sq",
    "Cm", "Li", "Ev", "Va", "Fn", "Fa", "Dv", "Er", "Ic", "Tn", "Nd", "Ad", "An", "Cd", "Ft",
    "In", "Ms", "St", "Ux", "At", "Bx", "Ox", "Nx", "Fx", "Lk", "Mt", "Pq", "UR", "MT", "D1",
    "Dl", "Aq", "Bq", "Brq", "Oo", "Oc", "Xo", "Xc", "No", "Ta", "Vt", "Ot", "Sx",
}
BREAK_MACROS = {"PP", "P", "LP", "TP", "IP", "HP", "Pp", "Lp", "It", "sp", "br", "Bl", "El",
                "Bd", "Ed", "RS", "RE", "SS", "Ss", "TQ", "EX", "EE", "nf", "fi", "Dl", "D1"}
MDOC_INLINE = re.compile(
    r"^(Nm|Ar|Fl|Op|Oo|Oc|Xr|Pa|Em|Sy|Dq|Ql|Qq|Sq|Cm|Li|Ev|Va|Fn|Fa|Dv|Er|Ic|Tn|Ns|No|Pq|Aq|"
    r"Bq|Brq|Ad|Ap|Xo|Xc|Ek|Bk|Ta|Vt|Sx|Pf)$"
)


def troff_inline(s):
    s = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", s)
    s = re.sub(r"\\s[+-]?(\[[^\]]*\]|\(..|\d+)", "", s)
    s = re.sub(r"\\\((..)", lambda m: ESC_CHARS.get(m.group(1), ""), s)
    s = re.sub(r"\\\[([^\]]*)\]", lambda m: ESC_CHARS.get(m.group(1), ""), s)
    s = re.sub(r"\\\*(\[[^\]]*\]|\(..|.)",
               lambda m: STR_CHARS.get(m.group(1).strip("[]").lstrip("("), ""), s)
    s = re.sub(r"\\[nkgmMYF](\[[^\]]*\]|\(..|.)", "", s)
    s = re.sub(r"\\[hvwlLoDbxXNZRSAC]'[^']*'", "", s)
    s = s.replace("\\-", "-").replace("\\e", "\\").replace("\\ ", " ").replace("\\~", " ")
    s = s.replace("\\0", " ").replace("\\t", " ")
    s = re.sub(r"\\[&|^,/%c:!pdurtaz)\"]", "", s)
    s = re.sub(r"\\(.)", r"\1", s)
    return s


def troff_args(rest):
    out = []
    for m in re.finditer(r'"((?:[^"]|"")*)"?|(\S+)', rest):
        out.append(m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2))
    return out


def troff_paragraphs(lines):
    """The text of troff source lines as a list of paragraphs (macros stripped, their text
    arguments kept)."""
    paras, cur = [], []

    def brk():
        if cur:
            paras.append(" ".join(" ".join(cur).split()))
            cur.clear()

    skip_until = None  # ".." after .de/.ig, ".TE"-format line, ".EN"
    tbl_format = False
    for ln in lines:
        if skip_until is not None:
            if ln.strip().startswith(skip_until):
                skip_until = None
            continue
        if tbl_format:  # a tbl block's options and format lines end with "."
            if ln.rstrip().endswith("."):
                tbl_format = False
            continue
        if ln.startswith((".\\\"", "'\\\"", "\\\"", '.\\"', ".\\#")):
            continue
        if ln.startswith((".", "'")):
            m = re.match(r"[.']\s*(\S+)\s*(.*)", ln)
            if not m:
                continue
            mac, rest = m.group(1), m.group(2)
            if mac in ("de", "de1", "am", "ig"):
                skip_until = ".."
                continue
            if mac == "EQ":
                skip_until = ".EN"
                continue
            if mac == "TS":
                brk()
                tbl_format = True
                continue
            if mac in BREAK_MACROS:
                brk()
            if mac in JOIN_MACROS:
                cur.append(troff_inline("".join(troff_args(rest))))
            elif mac in TEXT_MACROS or mac == "It":
                words, dash = [], False
                for a in troff_args(rest):
                    if a == "Fl":
                        dash = True
                    elif MDOC_INLINE.match(a) or a in ("It",):
                        continue
                    else:
                        words.append(("-" if dash else "") + a)
                        dash = False
                if mac == "Fl":
                    words = ["-" + w for w in words] or ["-"]
                cur.append(troff_inline(" ".join(words)))
            elif mac in ("IP", "TP") and rest:
                a = troff_args(rest)
                if a and re.search(r"[A-Za-z0-9]", troff_inline(a[0])):
                    cur.append(troff_inline(a[0]))
            continue
        ln = ln.replace("T{", " ").replace("T}", " ").replace("\t", " ")
        if not ln.strip():
            brk()
            continue
        cur.append(troff_inline(ln))
    brk()
    return [p for p in paras if p]


def troff_sections(src):
    secs, cur = {}, None
    for ln in src.split("\n"):
        m = re.match(r"[.']\s*S[Hh]\s+(.*)", ln)
        if m:
            cur = " ".join(troff_inline(" ".join(troff_args(m.group(1)))).split()).upper()
            if cur in secs:  # a second NAME or DESCRIPTION heading: keep the first
                cur = cur + "#"
            secs.setdefault(cur, [])
            continue
        if cur is not None:
            secs[cur].append(ln)
    return secs


NAMES_DASH = re.compile(r"^[\w.+:\[\]-]+(\s*,\s*[\w.+:\[\]-]+)*\s+(?:-+|—|–)\s+")


def man_query(name_lines):
    """The NAME line's description: the text after the first `\\-` (mdoc: .Nd)."""
    nd = [ln for ln in name_lines if re.match(r"[.']Nd\b", ln)]
    if nd:
        return " ".join(troff_paragraphs([ln.split(None, 1)[1] for ln in nd if " " in ln]))
    paras = troff_paragraphs(name_lines)
    if not paras:
        return None
    parts = re.split(r"\s+(?:-+|—|–)\s+", paras[0], maxsplit=1)
    if len(parts) < 2:
        return None
    q = parts[1]
    # ronn-style pages repeat the names: "lz4 - lz4, unlz4, lz4cat - Compress ..."
    q = NAMES_DASH.sub("", q, count=1) if NAMES_DASH.match(q) else q
    return q.strip()


def read_man(path):
    with gzip.open(path) as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def man_items(stats):
    seen_real = set()
    for sec in MAN_SECTIONS:
        d = os.path.join(MAN_ROOT, sec)
        if not os.path.isdir(d):
            continue
        for fn in sorted(os.listdir(d)):
            path = os.path.join(d, fn)
            if fn.startswith(MAN_SKIP_PREFIXES):
                stats["man_skipped_gcloud"] += 1
                continue
            if os.path.islink(path) or not fn.endswith(".gz"):
                stats["man_skipped_link"] += 1
                continue
            real = os.path.realpath(path)
            if real in seen_real:
                continue
            seen_real.add(real)
            try:
                src = read_man(path)
            except (OSError, EOFError, gzip.BadGzipFile):
                stats["man_skipped_unreadable"] += 1
                continue
            if re.match(r"\s*\.so\s", src):
                stats["man_skipped_so"] += 1
                continue
            secs = troff_sections(src)
            if "NAME" not in secs or "DESCRIPTION" not in secs:
                stats["man_skipped_no_name_or_description"] += 1
                continue
            q = man_query(secs["NAME"])
            if q is None:
                stats["man_skipped_no_name_dash"] += 1
                continue
            body = "\n\n".join(
                textwrap.fill(p, 100, break_long_words=False, break_on_hyphens=False)
                for p in troff_paragraphs(secs["DESCRIPTION"])
            )
            yield f"{sec}/{fn}", " ".join(q.split()), body


# ---------------------------------------------------------------------------------------------
# Building a corpus


def build(args):
    stats = collections.Counter()
    if args.corpus == "pydoc":
        items = list(pydoc_items())
        max_docs = args.max_docs or 4000
    else:
        items = list(man_items(stats))
        max_docs = args.max_docs or 3000
    stats["items_parsed"] = len(items)
    rng = random.Random(args.seed)

    # Documents: body of at least MIN_DOC_WORDS words; exact and near duplicates collapse to
    # their first copy, which is then never queried (its query could name either copy).
    docs, by_full, by_head = [], {}, {}
    for src, q, body in items:
        if count_words(body) < MIN_DOC_WORDS:
            stats["skipped_short_document"] += 1
            continue
        body, cut = cap_words(body)
        full = norm(body)
        head = " ".join(full.split()[:NEAR_DUP_WORDS])
        if full in by_full or head in by_head:
            first = by_full.get(full, by_head.get(head))
            first["ambiguous"] = True
            stats["dropped_duplicate_document" if full in by_full else
                  "dropped_near_duplicate_document"] += 1
            continue
        d = {"src": src, "query": q, "body": body, "cut": cut, "ambiguous": False}
        by_full[full] = d
        by_head[head] = d
        docs.append(d)
    if len(docs) > max_docs:
        docs = sorted(rng.sample(docs, max_docs), key=lambda d: d["src"])
        stats["sampled_from"] = len(by_full)

    # Queries: at least MIN_QUERY_WORDS words, and unique (case- and space-insensitively)
    # among all parsed items, the indexed or not.
    qcount = collections.Counter(norm(q) for _, q, _ in items)
    queryable = []
    for d in docs:
        nq = norm(d["query"])
        if len(WORD_RE.findall(d["query"])) < MIN_QUERY_WORDS:
            stats["unqueried_short_query"] += 1
        elif qcount[nq] > 1:
            stats["unqueried_repeated_query"] += 1
        elif d["ambiguous"]:
            stats["unqueried_duplicate_document"] += 1
        else:
            queryable.append(d)

    # Opaque names: documents shuffled, numbered, spread into directories of <= 500 files.
    rng.shuffle(docs)
    docdir = os.path.join(args.out, "docs")
    os.makedirs(docdir, exist_ok=True)
    for i, d in enumerate(docs):
        sub = f"s{i // FILES_PER_DIR:02d}"
        d["rel"] = f"{sub}/d{i + 1:05d}.txt"
        os.makedirs(os.path.join(docdir, sub), exist_ok=True)
        with open(os.path.join(docdir, d["rel"]), "w", encoding="utf-8") as f:
            f.write(d["body"].rstrip() + "\n")

    # Queried: a seeded sample of the queryable, in a fixed order (--queries N takes a prefix,
    # so a --quick run asks a subset of a full run's queries).
    order = sorted(queryable, key=lambda d: d["rel"])
    random.Random(args.seed + 1).shuffle(order)
    asked = order[: args.queries]
    with open(os.path.join(args.out, "qrels.tsv"), "w", encoding="utf-8") as fq, open(
        os.path.join(args.out, "queries.txt"), "w", encoding="utf-8"
    ) as fl:
        for qid, d in enumerate(asked):
            fq.write(f"{qid}\t{d['rel']}\t{d['query']}\n")
            fl.write(d["query"] + "\n")
    with open(os.path.join(args.out, "sources.tsv"), "w", encoding="utf-8") as f:
        for d in sorted(docs, key=lambda d: d["rel"]):
            f.write(f"{d['rel']}\t{d['src']}\n")

    sub_in_doc = sum(1 for d in asked if norm(d["query"]) in norm(d["body"]))
    info = {
        "corpus": args.corpus,
        "seed": args.seed,
        "documents": len(docs),
        "words": sum(count_words(d["body"]) for d in docs),
        "queryable": len(queryable),
        "queries": len(asked),
        "queries_verbatim_in_document": sub_in_doc,
        "documents_cut_at_words": sum(1 for d in docs if d["cut"]),
        "max_doc_words": MAX_DOC_WORDS,
        **dict(sorted(stats.items())),
    }
    if args.corpus == "man":
        info["documents_by_section"] = dict(
            sorted(collections.Counter(d["src"].split("/")[0] for d in docs).items())
        )
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


def read_qrels(corpus):
    out = []
    with open(os.path.join(corpus, "qrels.tsv"), encoding="utf-8") as f:
        for ln in f:
            qid, rel, q = ln.rstrip("\n").split("\t", 2)
            out.append((int(qid), rel, q))
    return out


def doc_files(docdir):
    for dp, dns, fns in os.walk(docdir):
        dns.sort()
        for fn in sorted(fns):
            p = os.path.join(dp, fn)
            yield os.path.relpath(p, docdir), p


# ---------------------------------------------------------------------------------------------
# BM25 baseline: SQLite FTS5


def fts_query(q):
    toks = []
    for t in re.findall(r"[^\W_]+", q.lower()):
        if t not in toks:
            toks.append(t)
    return " OR ".join(f'"{t}"' for t in toks)


def bm25(args):
    t0 = time.perf_counter()
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(path UNINDEXED, body, "
               "tokenize='porter unicode61')")
    n = 0
    with db:
        for rel, p in doc_files(os.path.join(args.corpus, "docs")):
            with open(p, encoding="utf-8") as f:
                db.execute("INSERT INTO docs(path, body) VALUES (?, ?)", (rel, f.read()))
            n += 1
    index_secs = time.perf_counter() - t0
    with open(args.out, "w") as out:
        for qid, _, q in read_qrels(args.corpus):
            t = time.perf_counter()
            match = fts_query(q)
            rows = db.execute(
                "SELECT path, bm25(docs) FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) "
                "LIMIT ?", (match, K)).fetchall() if match else []
            ms = (time.perf_counter() - t) * 1000
            hits = [{"uri": URI_PREFIX + p, "score": -s, "level": 2} for p, s in rows]
            out.write(json.dumps({"qid": qid, "ms": ms, "hits": hits, "error": None}) + "\n")
    if args.meta:
        write_meta(args.meta, {"documents": n, "index_secs": index_secs})


def write_meta(path, upd):
    meta = {}
    if os.path.exists(path):
        with open(path) as f:
            meta = json.load(f)
    meta.update(upd)
    with open(path, "w") as f:
        json.dump(meta, f)


# ---------------------------------------------------------------------------------------------
# vikingfs runs


def vk(args, *rest):
    cmd = [args.bin, "--workspace", args.workspace]
    if getattr(args, "config", None):
        cmd += ["--config", args.config]
    return cmd + list(rest)


def index(args):
    n = sum(1 for _ in doc_files(args.src))
    # Create the workspace outside the timing.
    subprocess.run(vk(args, "config", "show"), stdout=subprocess.DEVNULL, check=True,
                   timeout=120)
    help_txt = subprocess.run(vk(args, "add-resource", "--help"), capture_output=True,
                              text=True, timeout=60).stdout
    cmd = vk(args, "add-resource", args.src, "--to", URI_PREFIX.rstrip("/"), "--wait")
    if "--timeout" in help_txt:
        cmd += ["--timeout", str(args.timeout)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=args.timeout + 60)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        sys.exit(f"index: {' '.join(cmd)} exited {r.returncode}")
    write_meta(args.meta, {"documents": n, "index_secs": secs})
    print(f"indexed {n} documents in {secs:.1f} s ({n / secs:.1f} documents/s)")


def parse_hits(text):
    hits = json.loads(text)
    if not isinstance(hits, list):
        raise ValueError("not a JSON array")
    return hits


def run_cli(args):
    extra = ["--mode", args.mode] if args.mode else []
    errors = 0
    with open(args.out, "w") as out:
        for qid, _, q in read_qrels(args.corpus):
            cmd = vk(args, "find", "--json", "--limit", str(K), *extra, "--", q)
            t = time.perf_counter()
            err, hits = None, []
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                ms = (time.perf_counter() - t) * 1000
                if r.returncode != 0:
                    err = f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
                else:
                    hits = parse_hits(r.stdout)
            except subprocess.TimeoutExpired:
                ms, err = args.timeout * 1000.0, "timeout"
            except ValueError as e:
                err = f"bad JSON: {e}"
            if err:
                errors += 1
                if errors <= 3:
                    print(f"run-cli: query {qid}: {err}", file=sys.stderr)
            out.write(json.dumps({"qid": qid, "ms": ms, "hits": hits, "error": err}) + "\n")


def run_batch(args):
    qr = read_qrels(args.corpus)
    qfile = os.path.join(args.corpus, "queries.txt")
    cmd = vk(args, "find", "--json", "--mode", args.mode, "--limit", str(K), "--queries", qfile)
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"run-batch: {' '.join(cmd)} timed out after {args.timeout} s")
    total_ms = (time.perf_counter() - t) * 1000
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        sys.exit(f"run-batch: {' '.join(cmd)} exited {r.returncode}")
    lines = [ln for ln in r.stdout.split("\n") if ln.strip()]
    if len(lines) != len(qr):
        print(f"run-batch: {len(lines)} result lines for {len(qr)} queries", file=sys.stderr)
    per = total_ms / max(1, len(qr))
    with open(args.out, "w") as out:
        for i, (qid, _, _) in enumerate(qr):
            err, hits = None, []
            if i < len(lines):
                try:
                    hits = parse_hits(lines[i])
                except ValueError as e:
                    err = f"bad JSON: {e}"
            else:
                err = "no result line"
            out.write(json.dumps({"qid": qid, "ms": per, "hits": hits, "error": err}) + "\n")
    print(f"batch of {len(qr)} queries: {total_ms / 1000:.1f} s ({per:.1f} ms/query)")


def status(args):
    try:
        r = subprocess.run(vk(args, "status", "--json"), capture_output=True, text=True,
                           timeout=120)
        st = json.loads(r.stdout)
    except (subprocess.TimeoutExpired, ValueError) as e:
        print(f"status --json: not readable ({e})")
        return
    counts = []

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, path + [str(k)])
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, path + [str(i)])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            key = ".".join(path)
            if re.search(r"count|record|chunk|doc|vector|embed|index|term|token", key, re.I):
                counts.append(f"{key}={v}")

    walk(st, [])
    print("status --json counts: " + (", ".join(counts) if counts else "(none exposed)"))


# ---------------------------------------------------------------------------------------------
# Scoring


def rel_of(uri):
    """The corpus-relative path a hit names, or None (another tree)."""
    uri = uri.split("#", 1)[0]
    if not uri.startswith(URI_PREFIX):
        return None
    return uri[len(URI_PREFIX):]


def ranked_files(hits, k=K):
    """Distinct corpus files of the content (level 2) hits, best first, at most k."""
    out = []
    for h in hits:
        if h.get("level", 2) != 2:
            continue  # a directory's summary is never the answer
        rel = rel_of(h.get("uri", ""))
        if rel is not None and rel not in out:
            out.append(rel)
        if len(out) == k:
            break
    return out


def metrics(pairs, k=K):
    """pairs: [(expected, ranked list)] -> recall@1, recall@k, MRR@k."""
    n = len(pairs)
    r1 = rk = mrr = 0.0
    for expected, ranked in pairs:
        ranked = ranked[:k]
        if expected in ranked:
            rank = ranked.index(expected) + 1
            r1 += rank == 1
            rk += 1
            mrr += 1.0 / rank
    if n == 0:
        return {"recall@1": 0.0, f"recall@{k}": 0.0, f"MRR@{k}": 0.0}
    return {"recall@1": r1 / n, f"recall@{k}": rk / n, f"MRR@{k}": mrr / n}


def percentile(xs, p):
    """Nearest-rank percentile."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    i = max(0, min(len(xs) - 1, int(-(-p * len(xs) // 100)) - 1))
    return xs[i]


def score(args):
    qrels = {qid: rel for qid, rel, _ in read_qrels(args.corpus)}
    pairs, ms, errors = [], [], 0
    with open(args.run) as f:
        runs = {}
        for ln in f:
            o = json.loads(ln)
            runs[o["qid"]] = o
    for qid, rel in qrels.items():
        o = runs.get(qid)
        if o is None or o.get("error"):
            errors += 1
        pairs.append((rel, ranked_files(o["hits"]) if o else []))
        if o is not None:
            ms.append(o["ms"])
    row = {"system": args.system, "queries": len(qrels), "errors": errors, **metrics(pairs),
           "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
           "latency": args.latency}
    if args.meta and os.path.exists(args.meta):
        with open(args.meta) as f:
            meta = json.load(f)
        row["documents"] = meta["documents"]
        row["index_secs"] = meta["index_secs"]
        row["docs_per_s"] = meta["documents"] / meta["index_secs"] if meta["index_secs"] else 0
    with open(args.results, "a") as f:
        f.write(json.dumps(row) + "\n")


LATENCY_NOTE = {
    "process": "wall time of one `vikingfs find` process per query",
    "batch": "one `find --queries` process: its total time / number of queries (p50 = p99)",
    "inproc": "in-process SQLite query time (no process start)",
}


def table(args):
    rows = []
    with open(args.results) as f:
        rows = [json.loads(ln) for ln in f if ln.strip()]
    if args.title:
        print(args.title)
    hdr = ["system", "recall@1", f"recall@{K}", f"MRR@{K}", "find p50 ms", "find p99 ms",
           "index docs/s"]
    cells = []
    for r in rows:
        cells.append([
            r["system"] + (" (baseline)" if r["system"] == "bm25" else ""),
            f"{r['recall@1']:.3f}", f"{r[f'recall@{K}']:.3f}", f"{r[f'MRR@{K}']:.3f}",
            f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
            f"{r['docs_per_s']:.0f}" if "docs_per_s" in r else "-",
        ])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(hdr)]
    fmt = lambda c: "| " + " | ".join(  # noqa: E731
        x.ljust(widths[i]) if i == 0 else x.rjust(widths[i]) for i, x in enumerate(c)) + " |"
    print(fmt(hdr))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells:
        print(fmt(c))
    groups = {}  # systems measured on one workspace share its indexing time
    for r in rows:
        if "index_secs" in r:
            groups.setdefault((r["documents"], r["index_secs"]), []).append(r["system"])
    print(f"  {rows[0]['queries'] if rows else 0} queries; indexed: " + "; ".join(
        f"{', '.join(names)}: {n} documents in {secs:.1f} s" for (n, secs), names in groups.items()))
    for kd in sorted({r["latency"] for r in rows}):
        names = ", ".join(r["system"] for r in rows if r["latency"] == kd)
        print(f"  find ms of {names}: {LATENCY_NOTE[kd]}")
    errs = [f"{r['system']}: {r['errors']}" for r in rows if r["errors"]]
    if errs:
        print("  queries that failed (counted as misses): " + ", ".join(errs))
    by = {r["system"]: r for r in rows}
    mk = f"MRR@{K}"
    if "hybrid" in by and "bm25" in by and "semantic" in by:
        best = max(by["bm25"][mk], by["semantic"][mk])
        print(f"  hybrid MRR@{K} - max(bm25, semantic) = {by['hybrid'][mk] - best:+.3f} "
              f"(hybrid {by['hybrid'][mk]:.3f}; bm25 {by['bm25'][mk]:.3f}, "
              f"semantic {by['semantic'][mk]:.3f})")
    else:
        print(f"  hybrid MRR@{K} - max(bm25, semantic): n/a (new build not measured)")


# ---------------------------------------------------------------------------------------------
# Self-test of the metric code


def selftest(_args):
    fails = []

    def check(name, got, want):
        if abs(got - want) > 1e-9:
            fails.append(f"{name}: got {got}, want {want}")

    P = URI_PREFIX
    # Ranked outputs as a vikingfs run gives them: directory hits, duplicates, other trees.
    run = [
        # q0: answer first
        [{"uri": P + "s00/d00001.txt", "level": 2}, {"uri": P + "s00/d00002.txt", "level": 2}],
        # q1: a directory summary (level 1) and its content-level twin first: answer is rank 2
        [{"uri": P + "s00", "level": 1}, {"uri": P + "s00/d00009.txt", "level": 2},
         {"uri": P + "s00/d00009.txt#2", "level": 2}, {"uri": P + "s00/d00002.txt", "level": 2}],
        # q2: answer at rank 4 after a hit outside the corpus and a duplicate
        [{"uri": "viking://resources/other/x.txt", "level": 2},
         {"uri": P + "s00/d00005.txt", "level": 2}, {"uri": P + "s00/d00005.txt", "level": 2},
         {"uri": P + "s00/d00006.txt", "level": 2}, {"uri": P + "s00/d00007.txt", "level": 2},
         {"uri": P + "s01/d00503.txt", "level": 2}],
        # q3: answer at rank 11: outside the top 10
        [{"uri": P + f"s00/d{i:05d}.txt", "level": 2} for i in range(10, 20)]
        + [{"uri": P + "s00/d00003.txt", "level": 2}],
        # q4: no hits
        [],
    ]
    expected = ["s00/d00001.txt", "s00/d00002.txt", "s01/d00503.txt", "s00/d00003.txt",
                "s00/d00004.txt"]
    ranked = [ranked_files(h) for h in run]
    if ranked[1] != ["s00/d00009.txt", "s00/d00002.txt"]:
        fails.append(f"ranked_files dedup/level filter: {ranked[1]}")
    if ranked[2][:4] != ["s00/d00005.txt", "s00/d00006.txt", "s00/d00007.txt", "s01/d00503.txt"]:
        fails.append(f"ranked_files other tree: {ranked[2]}")
    m = metrics(list(zip(expected, ranked)))
    check("recall@1", m["recall@1"], 1 / 5)
    check("recall@10", m["recall@10"], 3 / 5)
    check("MRR@10", m["MRR@10"], (1 + 1 / 2 + 1 / 4) / 5)
    check("metrics of nothing", metrics([])["MRR@10"], 0.0)
    check("p50", percentile([5, 1, 3, 2, 4], 50), 3)
    check("p99", percentile(list(range(1, 101)), 99), 99)
    check("p99 small", percentile([1, 2, 3], 99), 3)
    fq = fts_query('Return "x-y" of_the x')
    if fq != '"return" OR "x" OR "y" OR "of" OR "the"':
        fails.append(f"fts_query: {fq}")
    # BM25 end to end on three tiny documents.
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(path UNINDEXED, body, "
               "tokenize='porter unicode61')")
    db.executemany("INSERT INTO docs VALUES (?, ?)", [
        ("a", "the cat sat on the mat"), ("b", "dogs are running in the park"),
        ("c", "a parked car")])
    top = db.execute("SELECT path FROM docs WHERE docs MATCH ? ORDER BY bm25(docs)",
                     (fts_query("dog runs"),)).fetchall()
    if [t[0] for t in top] != ["b"]:
        fails.append(f"bm25 porter stemming: {top}")
    # The troff stripper keeps the text of font macros and drops the rest.
    paras = troff_paragraphs([".\\\" comment", ".TH X 1", "Plain \\fBbold\\fR text\\-here.",
                              ".B word", ".BR ls (1)", ".PP", ".RS 4", "next para", ".de XX",
                              "hidden", ".."])
    if paras != ["Plain bold text-here. word ls(1)", "next para"]:
        fails.append(f"troff_paragraphs: {paras}")
    if man_query(["ls \\- list directory contents"]) != "list directory contents":
        fails.append("man_query")
    if man_query(["lz4 \\- lz4, unlz4, lz4cat \\- Compress files"]) != "Compress files":
        fails.append("man_query ronn")
    if man_query([".Nm ssh", ".Nd OpenSSH remote login client"]) != "OpenSSH remote login client":
        fails.append("man_query mdoc")
    if fails:
        print("selftest FAILED:\n  " + "\n  ".join(fails))
        sys.exit(1)
    print("selftest ok: recall@1, recall@10, MRR@10, percentiles, level/dedup filter, "
          "FTS5 query, troff stripping")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("build")
    p.add_argument("--corpus", choices=["pydoc", "man"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--queries", type=int, default=1200)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--max-docs", type=int, default=0)
    p.set_defaults(fn=build)

    p = sub.add_parser("bm25")
    p.add_argument("corpus")
    p.add_argument("--out", required=True)
    p.add_argument("--meta")
    p.set_defaults(fn=bm25)

    def vkargs(p):
        p.add_argument("--bin", required=True)
        p.add_argument("--workspace", required=True)
        p.add_argument("--config")
        p.add_argument("--timeout", type=float, default=60)

    p = sub.add_parser("index")
    vkargs(p)
    p.add_argument("--src", required=True)
    p.add_argument("--meta", required=True)
    p.set_defaults(fn=index)

    p = sub.add_parser("run-cli")
    vkargs(p)
    p.add_argument("--mode")
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=run_cli)

    p = sub.add_parser("run-batch")
    vkargs(p)
    p.add_argument("--mode", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=run_batch)

    p = sub.add_parser("status")
    vkargs(p)
    p.set_defaults(fn=status)

    p = sub.add_parser("score")
    p.add_argument("corpus")
    p.add_argument("run")
    p.add_argument("--system", required=True)
    p.add_argument("--meta")
    p.add_argument("--latency", choices=sorted(LATENCY_NOTE), default="process")
    p.add_argument("--results", required=True)
    p.set_defaults(fn=score)

    p = sub.add_parser("table")
    p.add_argument("results")
    p.add_argument("--title")
    p.set_defaults(fn=table)

    p = sub.add_parser("selftest")
    p.set_defaults(fn=selftest)

    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
