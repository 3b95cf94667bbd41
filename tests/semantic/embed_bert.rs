//! The in-process BERT embedder against all-MiniLM-L6-v2: the vectors an independent numpy
//! forward pass computes (scripts/bert-reference.py), sentence similarity that makes sense,
//! batching and truncation that do not change a text's vector, and one-line errors for a bad
//! model directory.
//!
//! The model comes from `VIKINGFS_TEST_MODEL`, else target/models/all-MiniLM-L6-v2 (run
//! scripts/fetch-model.sh).

use std::sync::OnceLock;
use std::time::Instant;

use vikingfs::embed::{BertEmbedder, EmbedError, Embedder};

use crate::support::model_dir;

/// One model per test binary: loading takes a while and the tests only read it.
fn model() -> &'static BertEmbedder {
    static MODEL: OnceLock<BertEmbedder> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = model_dir();
        BertEmbedder::load(&dir).unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()))
    })
}

fn embed1(text: &str) -> Vec<f32> {
    model().embed(&[text]).unwrap().remove(0)
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The words of the long reference text (scripts/bert-reference.py's WORDS): each is one
/// word piece, so N of them make N + 2 tokens with [CLS] and [SEP].
const WORDS: [&str; 19] = [
    "the", "river", "runs", "past", "old", "stone", "houses", "and", "green", "fields", "under",
    "a", "grey", "sky", "while", "children", "play", "near", "water",
];

fn words(n: usize) -> String {
    (0..n)
        .map(|i| WORDS[i % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

struct Reference {
    text: String,
    first8: [f32; 8],
    sum: f32,
    weighted_sum: f32,
}

/// Printed by `scripts/bert-reference.py` (numpy, float64, no candle or torch).
fn references() -> Vec<Reference> {
    let r = |text: String, first8, sum, weighted_sum| Reference {
        text,
        first8,
        sum,
        weighted_sum,
    };
    vec![
        r(
            "A man is eating food.".into(),
            [
                0.0332416, 0.0044061, -0.0062769, 0.0483787, -0.1387022, -0.0336174, 0.1011283,
                -0.054385,
            ],
            0.2264899,
            1.8167414,
        ),
        // sentence-transformers' documentation prints the same first components for it.
        r(
            "This is an example sentence".into(),
            [
                0.0676569, 0.0634959, 0.0487131, 0.079305, 0.0374481, 0.0026528, 0.039375,
                -0.0070985,
            ],
            0.2717507,
            -4.9051904,
        ),
        r(
            "Vikingfs keeps a derived vector index of every file in the namespace.".into(),
            [
                -0.0472129, 0.0265803, -0.0546287, -0.0094325, 0.1493049, -0.0247361, -0.0637249,
                -0.0517514,
            ],
            0.3661261,
            1.2036233,
        ),
        r(
            words(5000),
            [
                0.0277199, 0.0465077, 0.0759495, -0.0379252, -0.0258552, 0.005538, -0.0401312,
                -0.0663167,
            ],
            -0.2174962,
            -0.6943138,
        ),
    ]
}

#[test]
fn vectors_match_the_numpy_reference() {
    let m = model();
    assert_eq!(m.dim(), 384);
    assert_eq!(m.max_tokens(), 256);
    let refs = references();
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    let got = m.embed(&texts).unwrap();
    for (r, v) in refs.iter().zip(&got) {
        let label = &r.text[..r.text.len().min(40)];
        assert_eq!(v.len(), 384);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{label}: norm {norm}");
        assert!(
            max_diff(&v[..8], &r.first8) < 1e-4,
            "{label}: {:?} vs reference {:?}",
            &v[..8],
            r.first8
        );
        let sum: f32 = v.iter().sum();
        let weighted: f32 = v
            .iter()
            .enumerate()
            .map(|(i, x)| x * ((i % 7) as f32 - 3.0))
            .sum();
        assert!(
            (sum - r.sum).abs() < 1e-3,
            "{label}: sum {sum} vs {}",
            r.sum
        );
        assert!(
            (weighted - r.weighted_sum).abs() < 1e-3,
            "{label}: weighted sum {weighted} vs {}",
            r.weighted_sum
        );
    }
}

#[test]
fn similar_sentences_are_closer() {
    let v = model()
        .embed(&[
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The new movie is awesome.",
        ])
        .unwrap();
    let near = cos(&v[0], &v[1]);
    let far = cos(&v[0], &v[2]);
    assert!(near > far + 0.5, "bread {near} vs movie {far}");
}

#[test]
fn a_vector_does_not_depend_on_its_batch_mates() {
    let a = "A man is eating food.";
    let long_b = words(200);
    let alone = embed1(a);
    let batched = model().embed(&[a, &long_b]).unwrap();
    assert!(max_diff(&alone, &batched[0]) < 1e-5);
    assert!(max_diff(&embed1(&long_b), &batched[1]) < 1e-5);
    // More texts than one batch, in an order the embedder reorders by length: each result
    // still belongs to its own input.
    let many: Vec<String> = (0..40).map(|i| words(1 + (i * 7) % 30)).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let got = model().embed(&refs).unwrap();
    for (t, v) in refs.iter().zip(&got) {
        assert!(max_diff(&embed1(t), v) < 1e-5, "{t:?}");
    }
    assert!(model().embed(&[]).unwrap().is_empty());
}

#[test]
fn long_texts_are_truncated_to_max_tokens() {
    let m = model();
    let long = words(5000);
    // [CLS] and [SEP] take two of the positions.
    let head = words(m.max_tokens() - 2);
    let v = embed1(&long);
    assert!(max_diff(&v, &embed1(&head)) < 1e-5);
    // One word fewer is a different input: truncation happens at max_tokens, not before.
    assert!(max_diff(&v, &embed1(&words(m.max_tokens() - 3))) > 1e-4);
}

#[test]
fn empty_text_gets_a_unit_vector() {
    let v = embed1("");
    assert_eq!(v.len(), 384);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
}

#[test]
fn model_id_is_stable_and_names_the_model() {
    let id = model().model_id();
    assert!(id.starts_with("bert:all-MiniLM-L6-v2:"), "{id}");
    assert_eq!(id.len(), "bert:all-MiniLM-L6-v2:".len() + 12, "{id}");
    // The same files give the same id from a second load.
    let again = BertEmbedder::load(&model_dir()).unwrap();
    assert_eq!(again.model_id(), id);
}

/// A copy of the model directory, with `edit` applied to it.
fn edited_copy(edit: impl FnOnce(&std::path::Path)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "sentence_bert_config.json"] {
        std::fs::copy(model_dir().join(f), tmp.path().join(f)).unwrap();
    }
    // The weights are large and read-only here: a link is enough.
    std::os::unix::fs::symlink(
        model_dir()
            .join("model.safetensors")
            .canonicalize()
            .unwrap(),
        tmp.path().join("model.safetensors"),
    )
    .unwrap();
    edit(tmp.path());
    tmp
}

fn config_error(dir: &std::path::Path) -> String {
    match BertEmbedder::load(dir) {
        Err(e @ EmbedError::Config(_)) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "one line: {msg}");
            assert!(
                msg.contains("scripts/fetch-model.sh"),
                "says the remedy: {msg}"
            );
            msg
        }
        Err(e) => panic!("expected a configuration error, got {e:?}"),
        Ok(_) => panic!("loaded a bad model directory"),
    }
}

#[test]
fn bad_model_directories_are_config_errors_naming_the_file() {
    let empty = tempfile::tempdir().unwrap();
    assert!(config_error(empty.path()).contains("config.json"));

    for missing in ["tokenizer.json", "model.safetensors"] {
        let dir = edited_copy(|d| std::fs::remove_file(d.join(missing)).unwrap());
        let msg = config_error(dir.path());
        assert!(msg.contains(missing), "{msg}");
    }

    let dir = edited_copy(|d| std::fs::write(d.join("config.json"), "{\"hidden_size\": ").unwrap());
    assert!(config_error(dir.path()).contains("config.json"));

    let dir = edited_copy(|d| {
        let config = std::fs::read_to_string(d.join("config.json")).unwrap();
        let config = config.replace(r#""model_type": "bert""#, r#""model_type": "roberta""#);
        std::fs::write(d.join("config.json"), config).unwrap();
    });
    let msg = config_error(dir.path());
    assert!(
        msg.contains("config.json") && msg.contains("roberta"),
        "{msg}"
    );

    // Shapes and activations the encoder cannot run are refused at load, naming the file.
    for (from, to, named) in [
        (
            r#""hidden_act": "gelu""#,
            r#""hidden_act": "swish""#,
            "swish",
        ),
        (
            r#""num_attention_heads": 12"#,
            r#""num_attention_heads": 5"#,
            "num_attention_heads",
        ),
    ] {
        let dir = edited_copy(|d| {
            let config = std::fs::read_to_string(d.join("config.json")).unwrap();
            assert!(config.contains(from), "config.json has {from}");
            std::fs::write(d.join("config.json"), config.replace(from, to)).unwrap();
        });
        let msg = config_error(dir.path());
        assert!(msg.contains("config.json") && msg.contains(named), "{msg}");
    }

    let dir = edited_copy(|d| std::fs::write(d.join("tokenizer.json"), "{}").unwrap());
    assert!(config_error(dir.path()).contains("tokenizer.json"));

    let dir = edited_copy(|d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(d.join("model.safetensors"), b"not safetensors").unwrap();
    });
    assert!(config_error(dir.path()).contains("model.safetensors"));
}

#[test]
fn changed_files_change_the_model_id() {
    // Temp dirs have different names, so compare the hash part of the ids only.
    let hash = |m: &BertEmbedder| {
        m.model_id()
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let base = edited_copy(|_| {});
    let id = hash(&BertEmbedder::load(base.path()).unwrap());

    let edited = edited_copy(|d| {
        std::fs::write(
            d.join("sentence_bert_config.json"),
            r#"{"max_seq_length": 128}"#,
        )
        .unwrap()
    });
    let m = BertEmbedder::load(edited.path()).unwrap();
    assert_eq!(m.max_tokens(), 128);
    assert_ne!(hash(&m), id);

    // Without sentence_bert_config.json: min(256, max_position_embeddings).
    let plain = edited_copy(|d| std::fs::remove_file(d.join("sentence_bert_config.json")).unwrap());
    assert_eq!(BertEmbedder::load(plain.path()).unwrap().max_tokens(), 256);

    // Other weights of the same size (one byte of the first tensor changed).
    let reweighted = edited_copy(|d| {
        let path = d.join("model.safetensors");
        let mut bytes = std::fs::read(&path).unwrap();
        let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        bytes[8 + header + 4096] ^= 0x01;
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, bytes).unwrap();
    });
    assert_ne!(hash(&BertEmbedder::load(reweighted.path()).unwrap()), id);
}

/// This process's resident memory and its peak, in MiB (Linux /proc).
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Throughput of full 256-token windows, 16 per `embed` call (the embedder runs them as two
/// batches of 2048 tokens), one calling thread (the encoder still spreads its work over rayon's
/// pool: RAYON_NUM_THREADS=1 for one core); `cargo bench --bench embed` compares it with the
/// candle encoder it replaced. Run alone,
/// in release: `cargo nextest run --release --test embed_bert --run-ignored only --no-capture`
#[test]
#[ignore = "benchmark"]
fn throughput_of_256_token_windows() {
    let (rss0, _) = rss_mib();
    let t = Instant::now();
    let m = BertEmbedder::load(&model_dir()).unwrap();
    let load = t.elapsed().as_secs_f64();
    let (rss1, _) = rss_mib();
    println!("load: {load:.3} s, resident +{:.0} MiB", rss1 - rss0);
    let window = words(m.max_tokens() - 2);
    let batch: Vec<&str> = vec![window.as_str(); 16];
    m.embed(&batch).unwrap(); // warm-up
    let rounds = 8;
    let t = Instant::now();
    for _ in 0..rounds {
        m.embed(&batch).unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    let (rss2, peak) = rss_mib();
    println!(
        "{:.1} windows/s ({} windows of {} tokens in {secs:.2} s); resident {rss2:.0} MiB, peak {peak:.0} MiB",
        (rounds * batch.len()) as f64 / secs,
        rounds * batch.len(),
        m.max_tokens()
    );
}

/// The linear layers in 8-bit integers (`vikingfs.index.model_precision`, "auto" by default):
/// on a CPU with AVX-512 VNNI every vector stays within a few thousandths of cosine of the f32
/// one, on real prose and code cut into windows of the model's full length, so both share one
/// vector space (and one model id); elsewhere "auto" is f32 and "int8" a one-line error.
#[test]
fn int8_vectors_stay_in_the_f32_vector_space() {
    use vikingfs::config::Precision;
    let dir = model_dir();
    let auto = BertEmbedder::load_with(&dir, Precision::Auto).unwrap();
    let int8 = match BertEmbedder::load_with(&dir, Precision::Int8) {
        Ok(m) => m,
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("vikingfs.index.model_precision")
                    && msg.contains("AVX-512 VNNI")
                    && !msg.contains('\n'),
                "{msg}"
            );
            assert!(!auto.int8(), "auto without VNNI is f32");
            eprintln!("this CPU has no AVX-512 VNNI: the int8 path is not measured here");
            return;
        }
    };
    assert!(int8.int8() && auto.int8() && !model().int8());
    assert_eq!(int8.model_id(), model().model_id(), "one vector space");
    // Texts nobody here wrote: the licences' prose and Python's own code, in windows.
    let mut texts: Vec<String> = Vec::new();
    for f in [
        "/usr/share/common-licenses/GPL-3",
        "/usr/share/common-licenses/Apache-2.0",
    ] {
        if let Ok(t) = std::fs::read_to_string(f) {
            let words: Vec<&str> = t.split_whitespace().collect();
            texts.extend(words.chunks(150).take(8).map(|w| w.join(" ")));
        }
    }
    let py = std::fs::read_dir("/usr/lib")
        .unwrap()
        .flatten()
        .map(|e| e.path().join("json/decoder.py"))
        .find(|p| p.is_file());
    if let Some(p) = py {
        let code = std::fs::read_to_string(p).unwrap();
        let lines: Vec<&str> = code.lines().collect();
        texts.extend(lines.chunks(25).take(8).map(|l| l.join("\n")));
    }
    texts.extend(references().into_iter().map(|r| r.text));
    assert!(texts.len() >= 16, "too few texts found: {}", texts.len());
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (f, q) = (model().embed(&refs).unwrap(), int8.embed(&refs).unwrap());
    let cosines: Vec<f32> = f.iter().zip(&q).map(|(a, b)| cos(a, b)).collect();
    let lowest = cosines.iter().copied().fold(1.0, f32::min);
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    assert!(
        lowest > 0.995 && mean > 0.998,
        "lowest {lowest}, mean {mean}"
    );
    // What a search sees: each text's nearest other text is the same in both.
    let nearest = |v: &[Vec<f32>], i: usize| {
        (0..v.len())
            .filter(|&j| j != i)
            .max_by(|&a, &b| cos(&v[i], &v[a]).total_cmp(&cos(&v[i], &v[b])))
            .unwrap()
    };
    let same = (0..f.len())
        .filter(|&i| nearest(&f, i) == nearest(&q, i))
        .count();
    assert!(
        same * 10 >= f.len() * 9,
        "{same} of {} nearest texts kept",
        f.len()
    );
}
