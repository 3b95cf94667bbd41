//! Directory summaries from an OpenAI-compatible chat model (OpenViking's `vlm` config),
//! end to end through `vikingfs add-resource --wait`, against a stub server on 127.0.0.1:
//! a model error is retried, and the model's answer is written, bounded and indexed.

use crate::support::ops;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ops::Env;
use serde_json::json;

/// Serves every connection: the first `fail` with HTTP 503, then a chat completion whose
/// abstract names the directory the prompt asked about. Returns the base URL and a counter.
fn stub(fail: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let prompt = body["messages"].to_string();
            let dir = prompt
                .split("viking://")
                .nth(1)
                .and_then(|s| {
                    s.split(|c: char| c.is_whitespace() || c == '\\' || c == '"')
                        .next()
                })
                .unwrap_or("?")
                .to_string();
            let n = count.fetch_add(1, Ordering::SeqCst);
            let (status, reply) = if n < fail {
                (503, json!({"error": {"message": "overloaded"}}).to_string())
            } else {
                let answer = json!({
                    "abstract": format!("Stubmodel summary of {dir}."),
                    "overview": format!("# {dir}\n\nWritten by the stub model."),
                })
                .to_string();
                let completion = json!({
                    "id": "x", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]
                });
                (200, completion.to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (format!("http://{addr}/v1"), served)
}

#[test]
fn summaries_come_from_the_configured_chat_model() {
    let env = Env::new();
    let (base, served) = stub(1);
    let cfg = env.dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({"vlm": {"provider": "openai", "api_base": base, "model": "stub", "api_key": "k"}})
            .to_string(),
    )
    .unwrap();
    let local = env.local(
        "docs",
        &[
            ("a.md", "# Alpha\n\nalpha text".into()),
            ("s/b.md", "bravo".into()),
        ],
    );
    let cfg = cfg.to_str().unwrap();
    env.ok(&[
        "--config",
        cfg,
        "add-resource",
        local.to_str().unwrap(),
        "--wait",
    ]);

    let abs = std::fs::read_to_string(env.data("resources/docs/.abstract.md")).unwrap();
    assert_eq!(abs, "Stubmodel summary of resources/docs.");
    let sub = std::fs::read_to_string(env.data("resources/docs/s/.abstract.md")).unwrap();
    assert_eq!(sub, "Stubmodel summary of resources/docs/s.");
    let ov = std::fs::read_to_string(env.data("resources/docs/.overview.md")).unwrap();
    assert!(ov.contains("Written by the stub model."), "{ov}");
    // One refused request was retried; docs, docs/s and resources were summarised.
    assert!(served.load(Ordering::SeqCst) >= 4);
    // Summaries are indexed: the directory is found by its abstract.
    let hits = env.find("Stubmodel summary", 10);
    assert!(
        hits.iter()
            .any(|(u, l)| u == "viking://resources/docs" && *l == 0),
        "{hits:?}"
    );
    env.check_no_lock_blocks();
}
