//! The built-in hashing embedder: deterministic, unit length, and good enough that a query of
//! a few words ranks the document containing them first.

use vikingfs::config::EmbeddingConfig;
use vikingfs::embed::{self, Embedder, LocalEmbedder};

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

const DOCS: [&str; 6] = [
    "The path lock engine writes a token file and refreshes it while the holder works.",
    "Durable queue in SQLite: jobs are claimed with a lease that the worker renews.",
    "Vector index with cosine top-k search over int8 codes and an exact re-rank.",
    "Session memories are extracted from the archived conversation by a chat model.",
    "FUSE mount of the namespace; every mutating syscall becomes a locked operation.",
    "向量索引支持余弦相似度搜索，文件删除后不会返回。",
];

#[test]
fn is_deterministic_and_unit_length() {
    let a = LocalEmbedder::new(256);
    // Out of the box there is no dense model (lexical search only); `hash` names this one.
    assert!(embed::from_config(&EmbeddingConfig::default())
        .unwrap()
        .is_none());
    let b = embed::from_config(&EmbeddingConfig {
        provider: "hash".into(),
        ..EmbeddingConfig::default()
    })
    .unwrap()
    .unwrap();
    assert_eq!(b.dim(), 256);
    assert_eq!(a.model_id(), b.model_id());
    let va = a.embed(&DOCS).unwrap();
    let vb = b.embed(&DOCS).unwrap();
    assert_eq!(va, vb, "two embedders must give bit-identical vectors");
    for v in &va {
        assert_eq!(v.len(), 256);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }
    // Distinct texts get distinct vectors.
    assert!(cos(&va[0], &va[1]) < 0.5);
}

#[test]
fn a_few_words_rank_their_document_first() {
    let e = LocalEmbedder::new(256);
    let docs = e.embed(&DOCS).unwrap();
    for (query, want) in [
        ("lease worker renews", 1),
        ("cosine re-rank", 2),
        ("Token REFRESH holder", 0),
        ("chat model memories", 3),
        ("mutating syscall", 4),
        ("余弦搜索", 5),
    ] {
        let q = e.embed_one(query);
        let best = (0..docs.len())
            .max_by(|&i, &j| cos(&q, &docs[i]).total_cmp(&cos(&q, &docs[j])))
            .unwrap();
        assert_eq!(best, want, "query {query:?} ranked {:?} first", DOCS[best]);
    }
}

#[test]
fn case_and_punctuation_do_not_matter_and_no_words_is_zero() {
    let e = LocalEmbedder::new(64);
    assert_eq!(e.embed_one("Über Straße!"), e.embed_one("über, straße"));
    assert!(e.embed_one(" ... !!").iter().all(|&x| x == 0.0));
    assert_eq!(e.embed(&[]).unwrap().len(), 0);
}

#[test]
fn from_config_refuses_bad_settings() {
    let mut cfg = EmbeddingConfig {
        provider: "nope".into(),
        ..EmbeddingConfig::default()
    };
    assert!(embed::from_config(&cfg).is_err());
    cfg.provider = "openai".into();
    let msg = embed::from_config(&cfg).err().unwrap().to_string();
    assert!(msg.contains("api_base"), "{msg}");
    cfg.api_base = Some("http://127.0.0.1:1/v1".into());
    let msg = embed::from_config(&cfg).err().unwrap().to_string();
    assert!(msg.contains("model"), "{msg}");
    cfg.model = Some("m".into());
    let e = embed::from_config(&cfg).unwrap().unwrap();
    assert_eq!(e.model_id(), "openai:m");
}
