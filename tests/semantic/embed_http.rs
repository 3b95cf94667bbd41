//! The OpenAI-compatible HTTP embedder against a stub server on 127.0.0.1: success, wrong
//! dimension, HTTP 500, malformed bodies and a refused connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use vikingfs::config::EmbeddingConfig;
use vikingfs::embed::{self, EmbedError, Embedder, HttpEmbedder};

struct Seen {
    path: String,
    auth: Option<String>,
    body: Value,
}

type Handler = dyn Fn(&Value) -> (u16, String) + Send + Sync;

/// A one-thread HTTP/1.1 server answering every request with `handler(body)`.
struct Stub {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Stub {
    fn start(handler: impl Fn(&Value) -> (u16, String) + Send + Sync + 'static) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let handler: Arc<Handler> = Arc::new(handler);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                serve(conn, &*handler, &seen2);
            }
        });
        Stub { base, seen }
    }
}

fn serve(conn: TcpStream, handler: &Handler, seen: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut len, mut auth) = (0usize, None);
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':').unwrap();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => len = value.trim().parse().unwrap(),
            "authorization" => auth = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, reply) = handler(&body);
    seen.lock().unwrap().push(Seen { path, auth, body });
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

/// A well-formed answer with vectors of `dim`, listed in reverse order (servers may do that).
fn vectors(body: &Value, dim: usize) -> String {
    let n = body["input"].as_array().map_or(0, |a| a.len());
    let data: Vec<Value> = (0..n)
        .rev()
        .map(|i| json!({"object": "embedding", "index": i, "embedding": vec![i as f32 + 1.0; dim]}))
        .collect();
    json!({"object": "list", "data": data, "model": body["model"]}).to_string()
}

fn config(base: &str, dim: usize) -> EmbeddingConfig {
    EmbeddingConfig {
        provider: "openai".into(),
        api_base: Some(format!("{base}/")),
        model: Some("text-embedding-3-small".into()),
        api_key: Some("sk-test".into()),
        dimension: dim,
        ..Default::default()
    }
}

#[test]
fn success_sends_model_inputs_and_key_and_orders_by_index() {
    let stub = Stub::start(|b| (200, vectors(b, 8)));
    let e = embed::from_config(&config(&stub.base, 8)).unwrap().unwrap();
    assert_eq!(e.dim(), 8);
    let out = e.embed(&["alpha", "beta", "gamma"]).unwrap();
    assert_eq!(out, vec![vec![1.0; 8], vec![2.0; 8], vec![3.0; 8]]);
    let seen = stub.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/embeddings");
    assert_eq!(seen[0].auth.as_deref(), Some("Bearer sk-test"));
    assert_eq!(seen[0].body["model"], "text-embedding-3-small");
    assert_eq!(seen[0].body["input"], json!(["alpha", "beta", "gamma"]));
}

#[test]
fn large_inputs_are_sent_in_batches() {
    let stub = Stub::start(|b| (200, vectors(b, 4)));
    let e = HttpEmbedder::new(&stub.base, "m", None, 4);
    let texts: Vec<String> = (0..150).map(|i| format!("t{i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let out = e.embed(&refs).unwrap();
    assert_eq!(out.len(), 150);
    let seen = stub.seen.lock().unwrap();
    assert!(seen.len() >= 2, "{} requests", seen.len());
    assert!(seen.iter().all(|s| s.auth.is_none()));
    let sent: usize = seen
        .iter()
        .map(|s| s.body["input"].as_array().unwrap().len())
        .sum();
    assert_eq!(sent, 150);
    // Order survives batching: the first of the second batch is vector 1.0 again.
    let first_batch = seen[0].body["input"].as_array().unwrap().len();
    assert_eq!(out[first_batch], vec![1.0; 4]);
}

#[test]
fn wrong_dimension_is_an_error() {
    let stub = Stub::start(|b| (200, vectors(b, 7)));
    let e = embed::from_config(&config(&stub.base, 8)).unwrap().unwrap();
    match e.embed(&["x"]) {
        Err(
            e @ EmbedError::Dimension {
                expected: 8,
                got: 7,
                ..
            },
        ) => assert!(!e.is_transient()),
        other => panic!("expected a dimension error, got {other:?}"),
    }
}

#[test]
fn http_500_is_an_error_carrying_the_body() {
    let stub = Stub::start(|_| (500, r#"{"error":{"message":"model overloaded"}}"#.into()));
    let e = embed::from_config(&config(&stub.base, 8)).unwrap().unwrap();
    let err = e.embed(&["x"]).unwrap_err();
    assert!(
        matches!(err, EmbedError::Status { status: 500, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("500") && msg.contains("model overloaded"),
        "{msg}"
    );
    assert!(err.is_transient());
    let stub = Stub::start(|_| (401, r#"{"error":"bad key"}"#.into()));
    let err = HttpEmbedder::new(&stub.base, "m", None, 8)
        .embed(&["x"])
        .unwrap_err();
    assert!(
        matches!(err, EmbedError::Status { status: 401, .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
}

#[test]
fn malformed_answers_are_errors() {
    for reply in [
        "not json".to_string(),
        json!({"data": []}).to_string(),
        json!({"data": [{"index": 5, "embedding": [1.0, 2.0]}]}).to_string(),
    ] {
        let stub = Stub::start(move |_| (200, reply.clone()));
        let e = HttpEmbedder::new(&stub.base, "m", None, 2);
        let err = e.embed(&["x"]).unwrap_err();
        assert!(matches!(err, EmbedError::BadResponse { .. }), "{err:?}");
    }
}

#[test]
fn connection_refused_is_an_error() {
    // A port nothing listens on: bind one, then close it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = HttpEmbedder::new(&format!("http://127.0.0.1:{port}/v1"), "m", None, 4);
    let err = e.embed(&["x"]).unwrap_err();
    assert!(matches!(err, EmbedError::Transport { .. }), "{err:?}");
    assert!(err.is_transient());
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

#[test]
fn a_server_that_never_answers_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    // Accept and hold the connections open without answering.
    std::thread::spawn(move || {
        let held: Vec<TcpStream> = listener.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    let e =
        HttpEmbedder::new(&base, "m", None, 4).with_timeout(std::time::Duration::from_millis(300));
    let err = e.embed(&["x"]).unwrap_err();
    assert!(matches!(err, EmbedError::Transport { .. }), "{err:?}");
    let line = vikingfs::error::Chain(&err).to_string();
    assert!(line.to_lowercase().contains("timeout"), "{line}");
}
