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
  strip   DIR --out DIR2                     DIR's queries with quotes and leading dashes removed.
  syntax  DIR RUN STRIPPED --system NAME     MRR@10 of the queries holding quotes or dashed
          words, as written (RUN) against stripped (STRIPPED, a run over `strip`'s copy).
  selftest                                   Check the metric code; exit 1 on a failure.

A run file is JSON Lines, one object a query in qid order:
  {"qid": N, "ms": float, "hits": [{uri, score, level, snippet, ...}], "error": str|null}
"""

import argparse
import ast
import collections
import gzip
import hashlib
import io
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import textwrap
import time
import tokenize

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
# Corpus C: code (Python stdlib files, Rust files of the crates in ~/.cargo/registry/src)
#
# query = the first sentence of one function's docstring (py) or `///` doc (rs);
# document = the whole file with every comment and docstring removed.

CODE_PER_LANG = 800
CODE_MIN_LINES = 20      # non-blank lines of the document (comments stripped)
CODE_MAX_LINES = 2000
CODE_MAX_BYTES = 256 * 1024
MIN_CODE_QUERY_WORDS = 4
MAX_CODE_QUERY_WORDS = 40
RS_SKIP_DIRS = {"tests", "benches", "target", ".git", "fuzz"}
# The crates cargo downloaded: $CARGO_HOME/registry/src/*/NAME-VERSION (bench-search.sh sets
# CARGO_HOME before it points HOME elsewhere).
CRATES_ROOT = os.path.join(os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo"),
                           "registry", "src")
# A line of a stripped document that held only a comment: dropped afterwards.
GONE = "\x00"


def _drop_gone_lines(text):
    """Lines emptied by the stripping go; runs of blank lines shrink to one."""
    out = []
    for ln in text.split("\n"):
        had_gone = GONE in ln
        ln = ln.replace(GONE, "").rstrip()
        if not ln.strip():
            if had_gone or (out and out[-1] == ""):
                continue
            ln = ""
        out.append(ln)
    while out and out[0] == "":
        out.pop(0)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def strip_py(src):
    """Python source without comments (tokenize) and docstrings: every statement that is a
    bare string (module/class/function docstrings, attribute docstrings, strings used as
    comments) goes; a block left empty gets `pass`. Raises SyntaxError (or ValueError,
    tokenize.TokenError) when the source does not parse, or the result would not."""
    tree = ast.parse(src)
    lines = src.split("\n")

    def char_col(row, col):  # ast columns are UTF-8 byte offsets
        return len(lines[row - 1].encode("utf-8")[:col].decode("utf-8", "ignore"))

    edits = []  # (row0, col0, row1, col1, replacement): 1-based rows, char columns
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.stmt):
                continue
            bare = [s for s in stmts if isinstance(s, ast.Expr)
                    and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)]
            for k, s in enumerate(bare):
                repl = "pass" if len(bare) == len(stmts) and k == 0 else GONE
                edits.append((s.lineno, char_col(s.lineno, s.col_offset), s.end_lineno,
                              char_col(s.end_lineno, s.end_col_offset), repl))
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            (r0, c0), (r1, c1) = tok.start, tok.end
            edits.append((r0, c0, r1, c1, GONE))
    for r0, c0, r1, c1, repl in sorted(edits, reverse=True):
        tail = lines[r1 - 1][c1:]
        if repl == GONE and tail.lstrip().startswith(";"):  # `"doc"; x = 1`
            tail = tail.lstrip()[1:]
        if r0 == r1:
            lines[r0 - 1] = lines[r0 - 1][:c0] + repl + tail
        else:  # the rows of a multi-line string are emptied, the line count stays
            lines[r0 - 1:r1] = ([lines[r0 - 1][:c0] + repl] + [GONE] * (r1 - r0 - 1)
                                + [GONE + tail])
    out = _drop_gone_lines("\n".join(lines))
    ast.parse(out)
    return out


RS_CHAR = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]{1,6}\}|.)|[^\\'\n])'")
RS_RAW = re.compile(r'[bc]?r(#*)"')


def strip_rs(src, docs=None):
    """Rust source without comments: `//`, `///`, `//!` and (nested) `/* */` go; string,
    raw string, byte and char literals are kept as they are (a `//` in a string stays), a
    lifetime is not a char. When `docs` is a list, the `///` (not `////`) lines are appended
    to it as (line number, text)."""
    out, i, n, line = [], 0, len(src), 1
    ident = re.compile(r"[A-Za-z0-9_]")
    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            if docs is not None and src.startswith("///", i) and not src.startswith("////", i):
                docs.append((line, src[i + 3:j]))
            out.append(GONE)
            i = j
        elif c == "/" and src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            nl = src.count("\n", i, j)
            out.append(GONE + (("\n" + GONE) * nl))
            line += nl
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(src[i:j])
            line += src.count("\n", i, j)
            i = j
        elif c in "bcr" and (i == 0 or not ident.match(src[i - 1])) and RS_RAW.match(src, i):
            m = RS_RAW.match(src, i)
            end = src.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(src[i:j])
            line += src.count("\n", i, j)
            i = j
        elif c == "'":
            m = RS_CHAR.match(src, i)
            j = m.end() if m else i + 1
            out.append(src[i:j])
            i = j
        elif ident.match(c):  # a whole identifier or number: `br"x"` inside one is no string
            j = i + 1
            while j < n and ident.match(src[j]):
                j += 1
            out.append(src[i:j])
            i = j
        else:
            if c == "\n":
                line += 1
            out.append(c)
            i += 1
    return "".join(out)


RS_FN = re.compile(
    r"\s*(?:pub(?:\s*\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
    r"(?:safe\s+)?(?:extern\s+(?:\"[^\"]*\"\s+)?)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def rs_fn_docs(src):
    """(line, fn name, doc text) of every `fn` item preceded by `///` lines (attributes may
    sit in between), and the source with its comments stripped (line structure kept)."""
    docs = []
    code = strip_rs(src, docs)
    code_lines = code.split("\n")
    out, k = [], 0
    while k < len(docs):
        start = k
        while k + 1 < len(docs) and docs[k + 1][0] == docs[k][0] + 1:
            k += 1
        text = "\n".join(t[1:] if t.startswith(" ") else t for _, t in docs[start:k + 1])
        row = docs[k][0]  # 1-based line of the last doc line; code_lines[row] is the next
        depth = 0
        while row < len(code_lines):
            ln = code_lines[row].replace(GONE, "")
            s = ln.strip()
            if depth > 0 or s.startswith("#["):  # an attribute, perhaps over several lines
                depth += s.count("[") - s.count("]")
                row += 1
                continue
            if not s:
                row += 1
                continue
            m = RS_FN.match(ln)
            if m:
                out.append((row + 1, m.group(1), text))
            break
        k += 1
    return out, _drop_gone_lines(code)


SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
ABBREV_END = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|cf|resp|approx|incl|viz|al|No|Fig)|\.\.)\.$",
                        re.I)
PARA_BREAK = re.compile(r"(?:#+\s|```|[-*+]\s|\.\.\s|>>>|:param|:return|Args:|Arguments:|"
                        r"Returns?:|Examples?:|Parameters|Raises:|Note:)")
BOILERPLATE = re.compile(
    r"(?:initiali[sz]e self|return repr\(self\)|implement(?:s|ation of)? |see |same as |"
    r"equivalent to |alias |deprecated|todo|xxx|fixme|internal |for internal use|"
    r"undocumented|overrid(?:e|es|den) |this (?:method|function) |stub|placeholder|"
    r"not implemented|docs? |helper |private |#|\(|\[|<)", re.I)
SIGNATURE = re.compile(r"[\w.]+\s*\(.*\)\s*(?:->|$)|.*->")


def doc_markup_free(s):
    """Doc markup a reader would not type: rst roles, markdown links, backticks."""
    s = re.sub(r":[\w.:-]+:`~?([^`<]*?)\s*(?:<[^>]*>)?`", r"\1", s)   # :func:`~x.y` -> x.y
    s = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", s)                     # [text](url)
    s = re.sub(r"\[([^\]]+)\]\[[^\]]*\]", r"\1", s)                    # [text][ref]
    s = re.sub(r"\[(`[^`\]]+`)\]", r"\1", s)                           # [`Type`]
    s = s.replace("`", "")
    return " ".join(s.split())


def first_sentence(doc):
    """The first sentence of a doc comment's first paragraph, markup removed (None if empty)."""
    para = []
    for ln in doc.strip().split("\n"):
        s = ln.strip()
        if not s or (para and PARA_BREAK.match(s)):
            break
        para.append(s)
    text = " ".join(para)
    for m in SENTENCE_END.finditer(text):
        if not ABBREV_END.search(text[: m.end()]):
            text = text[: m.end()]
            break
    text = doc_markup_free(text)
    return text or None


def code_query_ok(q):
    """A query usable as such: 4-40 words, no boilerplate, not a signature."""
    if q is None:
        return False
    nw = len(WORD_RE.findall(q))
    return (MIN_CODE_QUERY_WORDS <= nw and count_words(q) <= MAX_CODE_QUERY_WORDS
            and not BOILERPLATE.match(q) and not SIGNATURE.match(q) and "://" not in q)


def _code_doc(text, stats, lang):
    nonblank = sum(1 for ln in text.split("\n") if ln.strip())
    if nonblank < CODE_MIN_LINES:
        stats[f"{lang}_skipped_short"] += 1
        return False
    if nonblank > CODE_MAX_LINES or len(text.encode("utf-8")) > CODE_MAX_BYTES:
        stats[f"{lang}_skipped_long"] += 1
        return False
    return True


def py_code_items(stats):
    """{"src", "lang", "ext", "body", "cands": [(name, sentence)]} of each stdlib .py file."""
    root = sysconfig.get_paths()["stdlib"]
    for dp, dns, fns in os.walk(root):
        dns[:] = sorted(d for d in dns if d not in PY_SKIP_DIRS)
        for fn in sorted(fns):
            if not fn.endswith(".py") or fn.startswith("test_"):
                continue
            path = os.path.join(dp, fn)
            try:
                with tokenize.open(path) as f:  # the file's coding cookie or UTF-8
                    src = f.read()
                tree = ast.parse(src, filename=path)
                body = strip_py(src)
            except (SyntaxError, ValueError, tokenize.TokenError):
                stats["py_skipped_unparsable"] += 1
                continue
            stats["py_files_parsed"] += 1
            if not _code_doc(body, stats, "py"):
                continue
            cands = []
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=True)
                    if doc:
                        cands.append((f"{node.lineno}:{node.name}", first_sentence(doc)))
            yield {"src": "py/" + os.path.relpath(path, root), "lang": "py", "ext": ".py",
                   "body": body, "cands": cands}


def _version_key(v):
    return [int(x) if x.isdigit() else -1 for x in re.split(r"[.+-]", v)]


def rs_crate_dirs(root=CRATES_ROOT):
    """The newest version of each crate downloaded into ~/.cargo/registry/src/*/."""
    newest = {}
    for reg in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        for d in sorted(os.listdir(os.path.join(root, reg))):
            m = re.match(r"(.+?)-(\d+\.\d+\.\d+.*)$", d)
            if not m or m.group(1) == "vikingfs":
                continue
            name, ver = m.groups()
            if name not in newest or _version_key(ver) > _version_key(newest[name][0]):
                newest[name] = (ver, os.path.join(root, reg, d))
    return [(f"{n}-{v}", p) for n, (v, p) in sorted(newest.items())]


def rs_code_items(stats):
    crates = rs_crate_dirs()
    stats["rs_crates"] = len(crates)
    for crate, cdir in crates:
        for dp, dns, fns in os.walk(cdir):
            dns[:] = sorted(d for d in dns if d not in RS_SKIP_DIRS)
            for fn in sorted(fns):
                if not fn.endswith(".rs"):
                    continue
                path = os.path.join(dp, fn)
                try:
                    with open(path, encoding="utf-8") as f:
                        src = f.read()
                except (OSError, UnicodeDecodeError):
                    stats["rs_skipped_unreadable"] += 1
                    continue
                stats["rs_files_parsed"] += 1
                fns_doc, body = rs_fn_docs(src)
                if not _code_doc(body, stats, "rs"):
                    continue
                cands = [(f"{ln}:{name}", first_sentence(doc)) for ln, name, doc in fns_doc]
                yield {"src": f"rs/{crate}/{os.path.relpath(path, cdir)}", "lang": "rs",
                       "ext": ".rs", "body": body, "cands": cands}


def code_docs(args, stats):
    """(documents, queryable) of the code corpus: CODE_PER_LANG files a language, each with
    one query (the first sentence of one of its functions' docs, seeded choice)."""
    items = list(py_code_items(stats)) + list(rs_code_items(stats))
    # A sentence is a query only when no other function anywhere (any file, either language)
    # has the same one.
    qcount = collections.Counter(norm(q) for it in items for _, q in it["cands"] if q)
    stats["functions_with_doc"] = sum(len(it["cands"]) for it in items)
    by_full, by_head, kept = {}, {}, []
    for it in items:
        full = norm(it["body"])
        head = " ".join(full.split()[:NEAR_DUP_WORDS])
        if full in by_full or head in by_head:
            first = by_full.get(full, by_head.get(head))
            first["ambiguous"] = True
            stats[f"{it['lang']}_dropped_duplicate_document" if full in by_full else
                  f"{it['lang']}_dropped_near_duplicate_document"] += 1
            continue
        it["ambiguous"] = False
        by_full[full] = by_head[head] = it
        kept.append(it)
    docs = []
    for lang in ("py", "rs"):
        pool = []
        for it in kept:
            if it["lang"] != lang:
                continue
            ok = [(name, q) for name, q in it["cands"] if code_query_ok(q)
                  and qcount[norm(q)] == 1]
            if not ok or it["ambiguous"]:
                stats[f"{lang}_files_without_query"] += 1
                continue
            name, q = random.Random(f"{args.seed}:{it['src']}").choice(sorted(ok))
            it["src"] = f"{it['src']}:{name}"
            it["query"], it["cut"] = q, False
            pool.append(it)
        stats[f"{lang}_files_with_query"] = len(pool)
        if not pool:
            sys.exit(f"build --corpus code: no .{lang} file with a query (Python stdlib "
                     f"{sysconfig.get_paths()['stdlib']}, crates {CRATES_ROOT})")
        per = args.per_lang or CODE_PER_LANG
        if len(pool) > per:
            pool = sorted(random.Random(f"{args.seed}:{lang}").sample(pool, per),
                          key=lambda d: d["src"])
        docs += pool
    return docs, list(docs)


# ---------------------------------------------------------------------------------------------
# Corpus D (documents): real PDF and HTML files, stored byte for byte


# Where documents are looked for: Debian's documentation, and BENCH_DOC_DIRS (colon-separated;
# e.g. an unpacked texlive-latex-recommended-doc, whose PDFs are pdfTeX's).
DOC_ROOTS = ["/usr/share/doc"]
DOC_MAX_BYTES = 1 << 20  # vikingfs.index.max_file_bytes' default: a document is read whole
DOC_QUERY_WORDS = (8, 30)


class _HTMLText(__import__("html.parser").parser.HTMLParser):
    """The text of an HTML page as Python's own parser sees it (scripts and styles dropped)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        elif tag in ("p", "br", "div", "li", "tr", "h1", "h2", "h3", "h4", "pre", "title"):
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag in ("p", "div", "li", "h1", "h2", "h3", "h4", "pre", "title"):
            self.out.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.out.append(data)


def doc_text(path):
    """A document's text by a reader that is not vikingfs's: poppler's pdftotext for a PDF,
    Python's html.parser for a page; None when it cannot be read."""
    if path.endswith(".pdf"):
        try:
            r = subprocess.run(["pdftotext", "-enc", "UTF-8", path, "-"], capture_output=True,
                               timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.decode("utf-8", "replace") if r.returncode == 0 else None
    with open(path, "rb") as f:
        raw = f.read()
    h = _HTMLText()
    try:
        h.feed(raw.decode("utf-8", "replace"))
    except Exception:
        return None
    return "".join(h.out)


def doc_sentences(text):
    """Sentences of a document's text: a line-wrapped paragraph joined, cut at `. ` / `? `,
    DOC_QUERY_WORDS long, mostly words (not a table or code)."""
    for para in re.split(r"\n\s*\n", text):
        flat = " ".join(para.split())
        for s in re.split(r"(?<=[.?!])\s+(?=[A-Z])", flat):
            words = s.split()
            if not DOC_QUERY_WORDS[0] <= len(words) <= DOC_QUERY_WORDS[1]:
                continue
            if len(WORD_RE.findall(s)) < 0.7 * len(words) or "\ufffd" in s:
                continue
            yield s


def docs_items(stats):
    """(src, query, None, path) of the document corpus: each PDF or HTML file under DOC_ROOTS
    of at most DOC_MAX_BYTES, its query one seeded sentence of its text."""
    roots = DOC_ROOTS + [d for d in os.environ.get("BENCH_DOC_DIRS", "").split(":") if d]
    seen = set()
    for root in roots:
        for dp, dns, fns in os.walk(root):
            dns.sort()
            for fn in sorted(fns):
                if not fn.endswith((".pdf", ".html", ".htm")):
                    continue
                p = os.path.join(dp, fn)
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                size = os.path.getsize(p)
                if size > DOC_MAX_BYTES or size < 512:
                    stats["skipped_size"] += 1
                    continue
                with open(p, "rb") as f:
                    h = hashlib.sha1(f.read()).hexdigest()
                if h in seen:
                    stats["dropped_duplicate_document"] += 1
                    continue
                seen.add(h)
                text = doc_text(p)
                if not text or count_words(text) < MIN_DOC_WORDS:
                    stats["skipped_no_text"] += 1
                    continue
                stats["pdf" if fn.endswith(".pdf") else "html"] += 1
                yield p, list(doc_sentences(text)), text


def docs_corpus(args, stats):
    items = list(docs_items(stats))
    # A sentence is a query only when no other document holds it too.
    count = collections.Counter(norm(q) for _, qs, _ in items for q in set(qs))
    docs, queryable = [], []
    for src, qs, text in items:
        ok = sorted(q for q in set(qs) if count[norm(q)] == 1)
        d = {"src": src, "body": text, "raw": src, "cut": False,
             "ext": os.path.splitext(src)[1], "ambiguous": False}
        docs.append(d)
        if ok:
            d["query"] = random.Random(f"{args.seed}:{src}").choice(ok)
            queryable.append(d)
        else:
            stats["unqueried_no_unique_sentence"] += 1
    return docs, queryable


# ---------------------------------------------------------------------------------------------
# Building a corpus


def build(args):
    stats = collections.Counter()
    if args.corpus == "docs":
        docs, queryable = docs_corpus(args, stats)
        return write_corpus(args, docs, queryable, stats)
    if args.corpus == "code":
        docs, queryable = code_docs(args, stats)
        return write_corpus(args, docs, queryable, stats)
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
    return write_corpus(args, docs, queryable, stats)


def write_corpus(args, docs, queryable, stats):
    rng = random.Random(args.seed)
    # Opaque names: documents shuffled, numbered, spread into directories of <= 500 files.
    rng.shuffle(docs)
    docdir = os.path.join(args.out, "docs")
    os.makedirs(docdir, exist_ok=True)
    for i, d in enumerate(docs):
        sub = f"s{i // FILES_PER_DIR:02d}"
        d["rel"] = f"{sub}/d{i + 1:05d}{d.get('ext', '.txt')}"
        os.makedirs(os.path.join(docdir, sub), exist_ok=True)
        if "raw" in d:
            # A document as it is (its text for BM25 beside it, in text/).
            shutil.copyfile(d["raw"], os.path.join(docdir, d["rel"]))
            tp = os.path.join(args.out, "text", d["rel"] + ".txt")
            os.makedirs(os.path.dirname(tp), exist_ok=True)
            with open(tp, "w", encoding="utf-8") as f:
                f.write(d["body"])
            continue
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
            fq.write(f"{qid}\t{d['rel']}\t{' '.join(d['query'].split())}\n")
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
        **({"documents_cut_at_words": sum(1 for d in docs if d["cut"]),
            "max_doc_words": MAX_DOC_WORDS} if args.corpus != "code" else {}),
        **dict(sorted(stats.items())),
    }
    if args.corpus == "code":
        asked_rels = {d["rel"] for d in asked}
        for lang in ("py", "rs"):
            ld = [d for d in docs if d["lang"] == lang]
            info[f"{lang}_documents"] = len(ld)
            info[f"{lang}_words"] = sum(count_words(d["body"]) for d in ld)
            info[f"{lang}_lines"] = sum(d["body"].count("\n") for d in ld)
            info[f"{lang}_queries"] = sum(1 for d in ld if d["rel"] in asked_rels)
            info[f"{lang}_queries_verbatim_in_document"] = sum(
                1 for d in ld if d["rel"] in asked_rels and norm(d["query"]) in norm(d["body"]))
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
            # A document corpus: BM25 over the text another reader got out of each file.
            tp = os.path.join(args.corpus, "text", rel + ".txt")
            with open(tp if os.path.exists(tp) else p, encoding="utf-8") as f:
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
    name = args.system
    if args.build:  # "hybrid (base 1b609a3)", "lexical (no model, base 1b609a3)"
        name = (name[:-1] + f", {args.build})" if name.endswith(")") else
                f"{name} ({args.build})")
    row = {"system": name, "mode": args.system, "build": args.build, "queries": len(qrels),
           "errors": errors, **metrics(pairs),
           "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
           "latency": args.latency}
    exts = sorted({os.path.splitext(rel)[1] for rel, _ in pairs})
    if len(exts) > 1:  # the code corpus: the figures of each language apart
        row["by_ext"] = {
            x: {"queries": sum(1 for rel, _ in pairs if rel.endswith(x)),
                **metrics([p for p in pairs if p[0].endswith(x)])} for x in exts}
    if args.meta and os.path.exists(args.meta):
        with open(args.meta) as f:
            meta = json.load(f)
        row["documents"] = meta["documents"]
        row["index_secs"] = meta["index_secs"]
        row["docs_per_s"] = meta["documents"] / meta["index_secs"] if meta["index_secs"] else 0
    with open(args.results, "a") as f:
        f.write(json.dumps(row) + "\n")


# A query "with syntax" holds a quote or a word starting with a dash: what `find` may read as
# a phrase or an exclusion (src/index/query.rs). Stripped, it holds neither.
SYNTAX_RE = re.compile(r'"|(?:^|\s)-+(?=\S)')


def strip_syntax(q):
    """`q` without its quotes and without the dashes that start its words."""
    return " ".join(re.sub(r"^-+", "", t) for t in q.replace('"', " ").split())


def strip(args):
    """A copy of a corpus's queries (qrels.tsv, queries.txt; the documents stay where they are)
    with every query's syntax characters removed."""
    os.makedirs(args.out, exist_ok=True)
    rows = read_qrels(args.corpus)
    with open(os.path.join(args.out, "qrels.tsv"), "w", encoding="utf-8") as f:
        for qid, rel, q in rows:
            f.write(f"{qid}\t{rel}\t{strip_syntax(q)}\n")
    with open(os.path.join(args.out, "queries.txt"), "w", encoding="utf-8") as f:
        for _, _, q in rows:
            f.write(strip_syntax(q) + "\n")
    n = sum(1 for _, _, q in rows if SYNTAX_RE.search(q))
    print(f"{n} of {len(rows)} queries hold quotes or dashed words")


def syntax(args):
    """MRR@10 and recall@10 of the queries with syntax characters: as written (RUN) against
    the same queries stripped (STRIPPED, a run over `strip`'s copy)."""
    rows = read_qrels(args.corpus)
    want = {qid for qid, _, q in rows if SYNTAX_RE.search(q)}
    rel = {qid: r for qid, r, _ in rows}

    def pairs(path):
        out = []
        with open(path) as f:
            for ln in f:
                o = json.loads(ln)
                if o["qid"] in want:
                    out.append((rel[o["qid"]], ranked_files(o["hits"])))
        return out

    a, b = metrics(pairs(args.run)), metrics(pairs(args.stripped))
    print(f"  {args.system}: {len(want)} queries with quotes or dashed words: MRR@10 "
          f"{a['MRR@10']:.3f} as written, {b['MRR@10']:.3f} stripped "
          f"({a['MRR@10'] - b['MRR@10']:+.3f}); recall@10 {a['recall@10']:.3f}, "
          f"{b['recall@10']:.3f}")


LATENCY_NOTE = {
    "process": "wall time of one `vikingfs find` process per query",
    "batch": "one `find --queries` process: its total time / number of queries (p50 = p99)",
    "inproc": "in-process SQLite query time (no process start)",
}


MODE_ORDER = ["bm25", "old", "lexical (no model)", "lexical", "semantic", "hybrid"]


def table(args):
    rows = []
    with open(args.results) as f:
        rows = [json.loads(ln) for ln in f if ln.strip()]
    # A base build's row beside the new build's row of the same system (base first).
    rows.sort(key=lambda r: (
        MODE_ORDER.index(r.get("mode", r["system"])) if r.get("mode", r["system"]) in MODE_ORDER
        else len(MODE_ORDER), r.get("mode", r["system"]), not r.get("build")))
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
            (f"{r['docs_per_s']:.1f}" if r["docs_per_s"] < 10 else f"{r['docs_per_s']:.0f}")
            if "docs_per_s" in r else "-",
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
    mk = f"MRR@{K}"
    bm = next((r for r in rows if r["system"] == "bm25"), None)
    builds = sorted({r.get("build", "") for r in rows if r.get("mode") == "hybrid"},
                    key=lambda b: not b)
    for b in builds:
        by = {r["mode"]: r for r in rows if r.get("build", "") == b}
        if not ("lexical" in by and "semantic" in by):
            continue
        h, lx, se = by["hybrid"][mk], by["lexical"][mk], by["semantic"][mk]
        tag = f" ({b})" if b else ""
        print(f"  hybrid{tag} MRR@{K} - max(lexical, semantic) = {h - max(lx, se):+.3f} "
              f"(hybrid {h:.3f}; lexical {lx:.3f}, semantic {se:.3f})"
              + (f"; - bm25 = {h - bm[mk]:+.3f}" if bm else ""))
    if not builds:
        print(f"  hybrid MRR@{K} - max(lexical, semantic): n/a (no build with a model measured)")
    split = [r for r in rows if "by_ext" in r]
    if split:
        exts = sorted({x for r in split for x in r["by_ext"]})
        n = {x: split[0]["by_ext"][x]["queries"] for x in exts}
        print("  by language (" + ", ".join(f"{x}: {n[x]} queries" for x in exts) + "):")
        hdr2 = ["system"] + [f"{m} {x}" for m in (f"MRR@{K}", f"recall@{K}") for x in exts]
        cells2 = [[r["system"]] + [f"{r['by_ext'].get(x, {}).get(m, float('nan')):.3f}"
                                   for m in (f"MRR@{K}", f"recall@{K}") for x in exts]
                  for r in split]
        w2 = [max(len(h), *(len(c[i]) for c in cells2)) for i, h in enumerate(hdr2)]
        fmt2 = lambda c: "  | " + " | ".join(  # noqa: E731
            x.ljust(w2[i]) if i == 0 else x.rjust(w2[i]) for i, x in enumerate(c)) + " |"
        print(fmt2(hdr2))
        print("  |" + "|".join("-" * (w + 2) for w in w2) + "|")
        for c in cells2:
            print(fmt2(c))


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
    # The code corpus: comments and docstrings go, strings holding `#` or `//` stay.
    py_src = "\n".join([
        "#!/usr/bin/env python3",
        '"""Module docstring: gone."""',
        "import re  # a trailing comment",
        'URL = "http://example.org/#anchor"  # comment after a string with #',
        'X = 1; "bare string"',
        "",
        "def f(a):",
        '    """Return the frobnicated value of a.',
        "",
        "    More text.",
        '    """',
        "    # a comment line",
        "    return a + 1",
        "",
        "def g():",
        "    '''Only a docstring.'''",
        "",
        "class C:",
        '    """Class doc."""',
        "    y = 2",
        '    """Attribute docstring."""',
        "    def h(self):  # why",
        "        return \"# not a comment\", '// neither'",
        ""])
    py_want = "\n".join([
        "import re",
        'URL = "http://example.org/#anchor"',
        "X = 1;",
        "",
        "def f(a):",
        "    return a + 1",
        "",
        "def g():",
        "    pass",
        "",
        "class C:",
        "    y = 2",
        "    def h(self):",
        "        return \"# not a comment\", '// neither'",
        ""])
    try:
        got = strip_py(py_src)
    except SyntaxError as e:
        got = f"SyntaxError {e}"
    if got != py_want:
        fails.append(f"strip_py:\n{got}")
    rs_src = "\n".join([
        "//! Crate doc: gone.",
        "use std::fmt; // trailing",
        "",
        "/// Returns the answer, see `f`.",
        "///",
        "/// More.",
        "#[inline]",
        "#[cfg_attr(",
        '    feature = "x",',
        "    must_use",
        ")]",
        "pub(crate) const fn answer<'a>(s: &'a str) -> usize {",
        '    /* block /* nested */ still comment */ let url = "http://x//y"; // c',
        "    let c = '\"'; let d = '\\''; let q = b'/';",
        '    let r = r#"raw // "not" /* comment */"#;',
        "    /* a comment",
        "       over two lines */",
        "    42 /* tail */",
        "}",
        "",
        "//// four slashes: a plain comment, no doc",
        "fn plain() {}",
        ""])
    rs_want = "\n".join([
        "use std::fmt;",
        "",
        "#[inline]",
        "#[cfg_attr(",
        '    feature = "x",',
        "    must_use",
        ")]",
        "pub(crate) const fn answer<'a>(s: &'a str) -> usize {",
        '     let url = "http://x//y";',
        "    let c = '\"'; let d = '\\''; let q = b'/';",
        '    let r = r#"raw // "not" /* comment */"#;',
        "    42",
        "}",
        "",
        "fn plain() {}",
        ""])
    fdocs, got = rs_fn_docs(rs_src)
    if got != rs_want:
        fails.append(f"strip_rs:\n{got}")
    if [(n, first_sentence(d)) for _, n, d in fdocs] != [
            ("answer", "Returns the answer, see f.")]:
        fails.append(f"rs_fn_docs: {fdocs}")
    if first_sentence("Return the value, e.g. 3 or 4. Then more.") != \
            "Return the value, e.g. 3 or 4.":
        fails.append("first_sentence abbreviation")
    if first_sentence("Open a :class:`~io.Stream` for [`Path`](x) reading\nof data.\n\nMore.") \
            != "Open a io.Stream for Path reading of data.":
        fails.append(f"first_sentence markup: {first_sentence('Open a :class:`~io.Stream` x.')}")
    for q, ok in [("Return the value.", False), ("Return the frobnicated value.", True),
                  ("Initialize self.  See help(type(self)) for it.", False),
                  ("foo(a, b) -> int -- add two things", False),
                  ("<https://doc.rust-lang.org/std/io/struct.IoSlice.html#method.advance>", False),
                  ("See https://example.org/a/b for the rules of it", False)]:
        if code_query_ok(q) != ok:
            fails.append(f"code_query_ok({q!r}) != {ok}")
    if fails:
        print("selftest FAILED:\n  " + "\n  ".join(fails))
        sys.exit(1)
    print("selftest ok: recall@1, recall@10, MRR@10, percentiles, level/dedup filter, "
          "FTS5 query, troff stripping, code comment stripping and doc sentences")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("build")
    p.add_argument("--corpus", choices=["pydoc", "man", "code", "docs"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--queries", type=int, default=1200)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--max-docs", type=int, default=0)
    p.add_argument("--per-lang", type=int, default=0,
                   help=f"code corpus: files a language (default {CODE_PER_LANG})")
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
    p.add_argument("--build", default="",
                   help='the build measured when not the new one, e.g. "base 1b609a3"')
    p.add_argument("--results", required=True)
    p.set_defaults(fn=score)

    p = sub.add_parser("table")
    p.add_argument("results")
    p.add_argument("--title")
    p.set_defaults(fn=table)

    p = sub.add_parser("strip")
    p.add_argument("corpus")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=strip)

    p = sub.add_parser("syntax")
    p.add_argument("corpus")
    p.add_argument("run")
    p.add_argument("stripped")
    p.add_argument("--system", required=True)
    p.set_defaults(fn=syntax)

    p = sub.add_parser("selftest")
    p.set_defaults(fn=selftest)

    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
