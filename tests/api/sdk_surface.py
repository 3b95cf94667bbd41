"""OpenViking's own Python client (openviking_sdk) and its `ov` command against `vikingfs
serve`, over the routes of issue 45's first part: documents that are zip containers stored
as they are, skills, fs/cp, attrs and tags, content batch-write and reindex.

    python sdk_surface.py URL OV --key API_KEY --user USER --root-key ROOT_KEY

USER's key does everything but the reindex, which OpenViking lets a user run on its own
namespace only: that is the root key's.

Exits non-zero naming the first check that failed.
"""

import argparse
import atexit
import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile

from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import ConflictError, NotFoundError, OpenVikingError
from checks import check, raises

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("ov")
ap.add_argument("--key")
ap.add_argument("--user")
ap.add_argument("--root-key")
a = ap.parse_args()
c = SyncHTTPClient(url=a.url, api_key=a.key)
c.initialize()
user = a.user

src = tempfile.mkdtemp(prefix="sdk-surface-")
atexit.register(shutil.rmtree, src, True)


def write_zip(path, entries, first_stored=None):
    """A zip container as the format's tools write it (`first_stored`: an entry that must be
    first and uncompressed, as EPUB's `mimetype`)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        if first_stored:
            z.writestr(zipfile.ZipInfo(first_stored[0]), first_stored[1], zipfile.ZIP_STORED)
        for name, data in entries:
            z.writestr(name, data)
    with open(path, "rb") as f:
        return f.read()


# ---- documents are stored as they are ----------------------------------------------------
docx = write_zip(
    os.path.join(src, "report.docx"),
    [
        ("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'),
        ("_rels/.rels", '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>'),
        ("word/document.xml", '<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>Quarterly report</w:t></w:r></w:p></w:body></w:document>'),
    ],
)
epub = write_zip(
    os.path.join(src, "book.epub"),
    [
        ("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>'),
        ("OEBPS/content.opf", '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata/><manifest/><spine/></package>'),
        ("OEBPS/ch1.xhtml", "<html><body><p>Chapter one.</p></body></html>"),
    ],
    first_stored=("mimetype", "application/epub+zip"),
)
jar = write_zip(
    os.path.join(src, "lib.jar"),
    [
        ("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: test\r\n\r\n"),
        ("com/example/Main.class", b"\xca\xfe\xba\xbe\x00\x00\x00\x34" + bytes(range(64))),
    ],
)
archive = write_zip(os.path.join(src, "archive.zip"), [("inside.txt", "a user's own zip")])
for name, data in [
    ("report.docx", docx),
    ("book.epub", epub),
    ("lib.jar", jar),
    ("archive.zip", archive),
]:
    r = c.add_resource(os.path.join(src, name), parent="viking://resources", wait=False)
    uri = f"viking://resources/{name}"
    check(f"{name}: added as itself", r.get("root_uri") == uri, r)
    st = c.stat(uri)
    check(f"{name}: a file, not an unpacked directory", st.get("isDir") is False, st)
    got = c.download_bytes(uri)
    check(
        f"{name}: downloaded back byte for byte",
        got == data,
        (len(got), len(data), hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest()),
    )
# A directory is still zipped by the SDK and unpacked: with the document inside it, whole.
folder = os.path.join(src, "folder")
os.makedirs(folder)
shutil.copy(os.path.join(src, "report.docx"), folder)
with open(os.path.join(folder, "notes.md"), "w") as f:
    f.write("notes\n")
r = c.add_resource(folder, to="viking://resources/folder")
check("a directory: unpacked", c.stat("viking://resources/folder")["isDir"] is True, r)
check(
    "a document inside a directory: whole",
    c.download_bytes("viking://resources/folder/report.docx") == docx,
)
c.wait_processed()

# ---- skills ------------------------------------------------------------------------------
SKILL = "---\nname: {name}\ndescription: {desc}\ntags:\n  - {tag}\n---\n\n# {name}\n\nDo the thing.\n"
inline = SKILL.format(name="greeter", desc="Greets people politely", tag="social")
r = c.add_skill(inline, wait=True)
mine = f"viking://user/{user}/skills/greeter"
check("add_skill inline: the caller's own skills", r.get("root_uri") == mine, r)
check("add_skill inline: SKILL.md as given", c.read(f"{mine}/SKILL.md") == inline)

pkg = os.path.join(src, "pdf-tools")
os.makedirs(os.path.join(pkg, "scripts"))
pkg_md = SKILL.format(name="pdf-tools", desc="Split and merge PDF files", tag="docs")
with open(os.path.join(pkg, "SKILL.md"), "w") as f:
    f.write(pkg_md)
with open(os.path.join(pkg, "scripts", "split.sh"), "w") as f:
    f.write("#!/bin/sh\necho split\n")
blob = bytes(range(256)) * 4
with open(os.path.join(pkg, "scripts", "helper.bin"), "wb") as f:
    f.write(blob)
r = c.add_skill(pkg, wait=True, options={"target_uri": "viking://agent/skills"})
shared = "viking://agent/skills/pdf-tools"
check("add_skill directory: shared under the agent", r.get("root_uri") == shared, r)
check("add_skill directory: its other files", r.get("auxiliary_files") == 2, r)
check(
    "a skill's binary file: byte for byte",
    c.download_bytes(f"{shared}/scripts/helper.bin") == blob,
)
listed = c.list_skills()
names = sorted((s["name"], s["root_uri"]) for s in listed.get("skills", []))
check("list_skills: both scopes", names == [("greeter", mine), ("pdf-tools", shared)], listed)
pdf = next(s for s in listed["skills"] if s["name"] == "pdf-tools")
check(
    "list_skills: description and tags from the frontmatter",
    pdf["description"] == "Split and merge PDF files" and pdf["tags"] == ["docs"],
    pdf,
)
g = c.get_skill("pdf-tools")
check("get_skill: SKILL.md content", g.get("content") == pkg_md, g)
check(
    "get_skill: content_sha256",
    g.get("content_sha256") == hashlib.sha256(pkg_md.encode()).hexdigest(),
    g,
)
paths = sorted(f["path"] for f in g.get("files", []))
check("get_skill: its files", {"SKILL.md", "scripts", "scripts/split.sh", "scripts/helper.bin"} <= set(paths), paths)
g = c.get_skill("pdf-tools", include_integrity=True, include_content=False)
helper = next(f for f in g["files"] if f["path"] == "scripts/helper.bin")
check("get_skill integrity: sha256", helper.get("sha256") == hashlib.sha256(blob).hexdigest(), helper)
check("get_skill integrity: revision", len(g.get("revision", "")) == 64, g)
check("get_skill include_content=false", "content" not in g, sorted(g))
# Installed again, without scripts/split.sh: replaced what it has, kept the rest.
os.remove(os.path.join(pkg, "scripts", "split.sh"))
pkg_md2 = pkg_md.replace("Do the thing.", "Do the thing twice.")
with open(os.path.join(pkg, "SKILL.md"), "w") as f:
    f.write(pkg_md2)
c.add_skill(pkg, wait=True, options={"target_uri": "viking://agent/skills"})
check("installed again: SKILL.md replaced", c.read(f"{shared}/SKILL.md") == pkg_md2)
check("installed again: a file it no longer has kept", c.stat(f"{shared}/scripts/split.sh")["isDir"] is False)
found = c.find("merge PDF files", target_uri="viking://agent/skills")
check(
    "a skill is indexed like any resource",
    any(x.get("uri", "").startswith(shared) for x in getattr(found, "skills", []) + getattr(found, "resources", []))
    if not isinstance(found, dict)
    else any(
        x.get("uri", "").startswith(shared)
        for k in ("skills", "resources", "memories")
        for x in found.get(k, [])
    ),
    found,
)
e = raises("add_skill: a bad name", OpenVikingError, lambda: c.add_skill(SKILL.format(name="bad name", desc="d", tag="t")))
check("a bad name: INVALID_ARGUMENT", e.code == "INVALID_ARGUMENT", e.code)
e = raises("add_skill: no frontmatter", OpenVikingError, lambda: c.add_skill("just text\nno frontmatter"))
check("no frontmatter: INVALID_ARGUMENT", e.code == "INVALID_ARGUMENT", e.code)
v = c.validate_skill(pkg_md, strict=True, skill_dir_name="pdf-tools")
check("validate_skill: valid", v.get("valid") is True and v.get("name") == "pdf-tools", v)
v = c.validate_skill("---\nname: Bad Name\n---\n", skill_dir_name="x")
check(
    "validate_skill: each rule broken, named",
    [i["rule"] for i in v["errors"]] == ["description_required"]
    and [i["rule"] for i in v["warnings"]] == ["name_matches_directory", "name_allowed_characters"],
    v,
)
r = c.delete_skill("greeter")
check("delete_skill: the skill's root", r.get("uri") == mine, r)
raises("get_skill of a removed skill", NotFoundError, lambda: c.get_skill("greeter"))
raises("delete_skill of a missing skill", NotFoundError, lambda: c.delete_skill("greeter"))

# ---- attrs and tags ----------------------------------------------------------------------
doc = "viking://resources/report.docx"
r = c.set_tags(doc, ["Team=Search", "not-a-tag", "env=prod"])
check("set_tags: normalised, the malformed dropped", r.get("tags") == ["team=search", "env=prod"], r)
check("set_tags: updated", r.get("updated_uris") == [doc] and r.get("tags_updated") is True, r)
check("attrs: the tags", c.attrs(doc)["attrs"]["tags"] == ["team=search", "env=prod"])
c.set_tags(doc, ["env=staging", "tier=1"], mode="append")
check("append: merged by key", c.attrs(doc)["attrs"]["tags"] == ["team=search", "env=staging", "tier=1"])
c.set_tags("viking://resources/folder", ["scope=all"], recursive=True)
check("recursive: a file below", c.attrs("viking://resources/folder/notes.md")["attrs"]["tags"] == ["scope=all"])
c.set_tags(doc, None, mode="clear")
check("clear: no tags", c.attrs(doc)["attrs"]["tags"] == [])
check("the document untouched by its tags", c.download_bytes(doc) == docx)

# ---- batch-write ------------------------------------------------------------------------
c.mkdir("viking://resources/bw")
raw = bytes([0, 1, 2, 255, 254])
r = c.batch_write(
    "viking://resources/bw",
    [
        {"uri": "viking://resources/bw/a.md", "content": "alpha batch text\n", "tags": ["kind=note"]},
        {"uri": "viking://resources/bw/sub/b.bin", "content_base64": base64.b64encode(raw).decode()},
    ],
)
check(
    "batch_write: created",
    sorted(r.get("created", [])) == ["viking://resources/bw/a.md", "viking://resources/bw/sub/b.bin"],
    r,
)
check("batch_write: base64 bytes", c.download_bytes("viking://resources/bw/sub/b.bin") == raw)
check("batch_write: tags", c.attrs("viking://resources/bw/a.md")["attrs"]["tags"] == ["kind=note"])
sha = hashlib.sha256(b"alpha batch text\n").hexdigest()
r = c.batch_write(
    "viking://resources/bw",
    [{"uri": "viking://resources/bw/a.md", "content": "more\n", "mode": "append", "expected_sha256": sha}],
)
check("batch_write append, revision checked: updated", r.get("updated") == ["viking://resources/bw/a.md"], r)
check("append: the old text and the new", c.read("viking://resources/bw/a.md") == "alpha batch text\nmore\n")
e = raises(
    "batch_write with a stale revision",
    ConflictError,
    lambda: c.batch_write(
        "viking://resources/bw",
        [{"uri": "viking://resources/bw/a.md", "content": "x", "expected_sha256": sha}],
    ),
)
check("a stale revision: nothing written", c.read("viking://resources/bw/a.md") == "alpha batch text\nmore\n")
r = c.batch_write(
    "viking://resources/bw",
    [
        {"uri": "viking://resources/bw/a.md", "content": "x", "expected_sha256": sha},
        {"uri": "viking://resources/bw/c.md", "content": "gamma\n"},
    ],
    options={"skip_conflicts": True},
)
check(
    "skip_conflicts: the conflict reported, the rest written",
    [x["uri"] for x in r.get("conflicts", [])] == ["viking://resources/bw/a.md"]
    and r.get("created") == ["viking://resources/bw/c.md"],
    r,
)
e = raises(
    "batch_write outside its root",
    OpenVikingError,
    lambda: c.batch_write("viking://resources/bw", [{"uri": "viking://resources/x.md", "content": "x"}]),
)
check("outside its root: INVALID_ARGUMENT", e.code == "INVALID_ARGUMENT", e.code)

# ---- reindex ----------------------------------------------------------------------------
root = SyncHTTPClient(url=a.url, api_key=a.root_key)
root.initialize()
e = raises("reindex of the shared resources by a user", OpenVikingError, lambda: c.reindex("viking://resources/bw"))
check("a user's reindex outside its namespace: PERMISSION_DENIED", e.code == "PERMISSION_DENIED", e.code)
r = root.reindex("viking://resources/bw", mode="vectors_only", wait=True)
check("reindex: completed", r.get("status") == "completed" and r.get("object_type") == "resource", r)
check("reindex: the files scanned", r.get("scanned_records", 0) >= 2, r)
e = raises("reindex with an unknown mode", OpenVikingError, lambda: root.reindex("viking://resources/bw", mode="everything"))
check("unknown mode: UNSUPPORTED_MODE", e.code == "UNSUPPORTED_MODE", e.code)

# ---- cp, through ov -----------------------------------------------------------------------
home = tempfile.mkdtemp(prefix="ov-surface-home-")
atexit.register(shutil.rmtree, home, True)
os.makedirs(os.path.join(home, ".openviking"))
with open(os.path.join(home, ".openviking", "ovcli.settings.conf"), "w") as f:
    json.dump({"language": "en"}, f)
conf = os.path.join(home, "ovcli.conf")
with open(conf, "w") as f:
    json.dump({"url": a.url, **({"api_key": a.key} if a.key else {})}, f)
env = dict(os.environ, HOME=home, OPENVIKING_CLI_CONFIG_FILE=conf, NO_COLOR="1")


def ov(*args):
    p = subprocess.run([a.ov, *args], env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


rc, out = ov("cp", "viking://resources/lib.jar", "viking://resources/bw/lib-copy.jar")
check("ov cp of a file", rc == 0, out)
check("the copy: byte for byte", c.download_bytes("viking://resources/bw/lib-copy.jar") == jar)
rc, out = ov("cp", "-r", "viking://resources/folder", "viking://resources/folder-copy")
check("ov cp -r of a directory", rc == 0, out)
check(
    "the directory's copy: its document whole",
    c.download_bytes("viking://resources/folder-copy/report.docx") == docx,
)
check("the source: untouched", c.download_bytes("viking://resources/folder/report.docx") == docx)
rc, out = ov("cp", "viking://resources/folder", "viking://resources/folder-2")
check("ov cp of a directory without -r: refused", rc != 0 and "INVALID_ARGUMENT" in out, out)
rc, out = ov("cp", "viking://resources/nope.md", "viking://resources/nope-2.md")
check("ov cp of a missing file: NOT_FOUND", rc != 0 and "NOT_FOUND" in out, out)
rc, out = ov("-o", "json", "attrs", "get", "viking://resources/folder-copy/notes.md")
check("ov attrs get: the copy's tags came with it", rc == 0 and "scope=all" in out, out)

print("all checks passed")
