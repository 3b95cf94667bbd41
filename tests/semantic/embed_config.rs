//! Which embedder a configuration names, and the one-line errors of a bad one.

use std::path::Path;

use vikingfs::config::{Config, EmbeddingConfig};
use vikingfs::embed;

#[test]
fn out_of_the_box_there_is_no_model_and_search_is_lexical() {
    assert!(embed::from_config(&EmbeddingConfig::default())
        .unwrap()
        .is_none());
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
    // A local model directory that is not one names the file it lacks.
    let cfg = EmbeddingConfig {
        provider: "local".into(),
        model: Some("/nonexistent/model".into()),
        ..EmbeddingConfig::default()
    };
    let msg = embed::from_config(&cfg).err().unwrap().to_string();
    assert!(msg.contains("/nonexistent/model"), "{msg}");
}

#[test]
fn the_retired_hashing_embedder_is_refused_with_the_way_forward() {
    let err = Config::from_json(
        r#"{"embedding": {"dense": {"provider": "hash"}}}"#,
        Path::new("/etc/vikingfs.json"),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("embedding.dense.provider")
            && err.contains("retired")
            && err.contains("local"),
        "{err}"
    );
}
