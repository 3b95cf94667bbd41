//! The OpenAI-compatible chat client, ChatSummarizer and ChatExtractor against a stub HTTP server
//! on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};
use vikingfs::config::ChatConfig;
use vikingfs::semantic::chat::{ChatClient, ChatError, ChatExtractor, ChatMessage, ChatSummarizer};
use vikingfs::semantic::memory::{Date, ExtractContext, MemoryCategory, Message};
use vikingfs::semantic::summary::{Child, DirInput, ABSTRACT_MAX_CHARS, OVERVIEW_MAX_CHARS};
use vikingfs::semantic::{extractor_from_config, summarizer_from_config};

/// What the stub saw of one request.
#[derive(Debug)]
struct Seen {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A one-shot-per-response HTTP/1.1 server: answers the i-th connection with `responses[i]`.
struct Stub {
    addr: SocketAddr,
    seen: mpsc::Receiver<Seen>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Stub {
    fn start(responses: Vec<(u16, String)>) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, seen) = mpsc::channel();
        let thread = thread::spawn(move || {
            for (status, body) in responses {
                let (stream, _) = listener.accept().unwrap();
                let request = read_request(&stream);
                tx.send(request).unwrap();
                let mut stream = stream;
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(reply.as_bytes()).unwrap();
            }
        });
        Stub {
            addr,
            seen,
            thread: Some(thread),
        }
    }

    fn config(&self) -> ChatConfig {
        ChatConfig {
            provider: "openai".into(),
            api_base: Some(format!("http://{}/v1/", self.addr)),
            model: Some("stub-model".into()),
            api_key: Some("sk-test".into()),
        }
    }

    fn next_request(&self) -> Seen {
        self.seen.recv_timeout(Duration::from_secs(60)).unwrap()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            if !thread::panicking() {
                t.join().unwrap();
            }
        }
    }
}

fn read_request(stream: &TcpStream) -> Seen {
    let mut r = BufReader::new(stream);
    let mut request_line = String::new();
    r.read_line(&mut request_line).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .expect("the client sends a content-length");
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    Seen {
        request_line: request_line.trim_end().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap(),
    }
}

/// An OpenAI chat completion whose answer is `content`.
fn completion(content: &str) -> String {
    json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]
    })
    .to_string()
}

fn dir() -> DirInput {
    DirInput {
        uri: "viking://resources/docs".into(),
        children: vec![Child::file("a.md", "# Alpha\nText."), Child::dir("sub", "")],
        weights: None,
    }
}

#[test]
fn client_posts_openai_request_with_bearer_key() {
    let stub = Stub::start(vec![(200, completion("pong"))]);
    let client = ChatClient::new(&stub.config()).unwrap();
    let answer = client.complete(&[ChatMessage::user("ping")]).unwrap();
    assert_eq!(answer, "pong");
    let seen = stub.next_request();
    assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(seen.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(seen.body["model"], "stub-model");
    assert_eq!(seen.body["messages"][0]["role"], "user");
    assert_eq!(seen.body["messages"][0]["content"], "ping");
}

#[test]
fn chat_summarizer_returns_the_model_summary() {
    let answer = "```json\n{\"abstract\": \"Docs about alpha.\", \"overview\": \"# docs\\n- a.md: alpha\"}\n```";
    let stub = Stub::start(vec![(200, completion(answer))]);
    let s = ChatSummarizer::new(ChatClient::new(&stub.config()).unwrap())
        .summarize(&dir())
        .unwrap();
    assert_eq!(s.abstract_md, "Docs about alpha.");
    assert_eq!(s.overview_md, "# docs\n- a.md: alpha\n");
    let prompt = stub.next_request().body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("viking://resources/docs") && prompt.contains("# Alpha"));
}

#[test]
fn chat_summarizer_summarises_an_archive_through_the_trait() {
    let answer = r##"{"abstract": "Trip planning.", "overview": "# Trip\n- book hotel"}"##;
    let stub = Stub::start(vec![(200, completion(answer))]);
    let s = summarizer_from_config(Some(&stub.config())).unwrap();
    assert_eq!(s.name(), "chat");
    let mut m = Message::new("user", "Plan my trip to Lisbon.");
    m.time = Some("2026-11-29T10:00:00Z".into());
    let out = s
        .summarize_messages("viking://user/a/sessions/s/history/archive_001", &[m])
        .unwrap();
    assert_eq!(out.abstract_md, "Trip planning.");
    assert_eq!(out.overview_md, "# Trip\n- book hotel\n");
    let prompt = stub.next_request().body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("archive_001"), "{prompt}");
    assert!(
        prompt.contains("user (2026-11-29T10:00:00Z): Plan my trip to Lisbon."),
        "{prompt}"
    );
}

#[test]
fn http_500_is_a_retryable_error_and_401_is_not() {
    let stub = Stub::start(vec![
        (500, r#"{"error":"overloaded"}"#.into()),
        (401, r#"{"error":"bad key"}"#.into()),
    ]);
    let s = ChatSummarizer::new(ChatClient::new(&stub.config()).unwrap());
    let e = s.summarize(&dir()).unwrap_err();
    assert!(matches!(e, ChatError::Status { status: 500, .. }), "{e:?}");
    assert!(e.is_retryable());
    assert!(e.to_string().contains("HTTP 500") && e.to_string().contains("overloaded"));
    let e = s.summarize(&dir()).unwrap_err();
    assert!(matches!(e, ChatError::Status { status: 401, .. }), "{e:?}");
    assert!(!e.is_retryable());
}

#[test]
fn malformed_answers_are_errors() {
    let stub = Stub::start(vec![
        (200, completion("Sure! Here is a summary of the directory.")),
        (200, completion(r#"{"abstract": "only half"}"#)),
        (200, "<html>proxy error</html>".into()),
        (200, json!({"choices": []}).to_string()),
    ]);
    let s = ChatSummarizer::new(ChatClient::new(&stub.config()).unwrap());
    for _ in 0..2 {
        let e = s.summarize(&dir()).unwrap_err();
        assert!(matches!(e, ChatError::BadAnswer(_)), "{e:?}");
        assert!(e.is_retryable(), "a model may answer well next time");
    }
    for _ in 0..2 {
        let e = s.summarize(&dir()).unwrap_err();
        assert!(matches!(e, ChatError::BadResponse { .. }), "{e:?}");
        assert!(
            !e.is_retryable(),
            "not an OpenAI server: retrying will not help"
        );
    }
}

#[test]
fn over_long_answers_are_cut_to_the_limits() {
    let answer = json!({
        "abstract": "摘要".repeat(500),
        "overview": format!("# docs\n{}", "- line of the overview\n".repeat(1000)),
    })
    .to_string();
    let stub = Stub::start(vec![(200, completion(&answer))]);
    let s = summarizer_from_config(Some(&stub.config()))
        .unwrap()
        .summarize(&dir())
        .unwrap();
    assert_eq!(s.abstract_md.chars().count(), ABSTRACT_MAX_CHARS);
    assert_eq!(s.overview_md.chars().count(), OVERVIEW_MAX_CHARS);
    assert!(s.abstract_md.starts_with("摘要摘要") && s.overview_md.starts_with("# docs\n"));
}

#[test]
fn refused_connection_and_timeout_are_retryable() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = ChatConfig {
        provider: "openai".into(),
        api_base: Some(format!("http://127.0.0.1:{port}")),
        model: Some("m".into()),
        api_key: None,
    };
    let e = ChatClient::new(&cfg)
        .unwrap()
        .complete(&[ChatMessage::user("x")])
        .unwrap_err();
    assert!(matches!(e, ChatError::Connect { .. }), "{e:?}");
    assert!(e.is_retryable());

    // A server that accepts and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = ChatConfig {
        api_base: Some(format!("http://{}", listener.local_addr().unwrap())),
        ..cfg
    };
    let silent = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // Hold the connection until the client gives up and closes it.
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
    });
    let e = ChatClient::with_timeout(&cfg, Duration::from_secs(1))
        .unwrap()
        .complete(&[ChatMessage::user("x")])
        .unwrap_err();
    assert!(matches!(e, ChatError::Timeout { .. }), "{e:?}");
    assert!(e.is_retryable());
    silent.join().unwrap();
}

#[test]
fn bad_config_is_refused_up_front() {
    let base = ChatConfig {
        provider: "openai".into(),
        api_base: Some("http://127.0.0.1:1".into()),
        model: Some("m".into()),
        api_key: None,
    };
    // https endpoints are accepted (ureq is built with rustls).
    assert!(ChatClient::new(&ChatConfig {
        api_base: Some("https://api.example.com/v1".into()),
        ..base.clone()
    })
    .is_ok());
    for (cfg, word) in [
        (
            ChatConfig {
                provider: "anthropic".into(),
                ..base.clone()
            },
            "provider",
        ),
        (
            ChatConfig {
                api_base: Some("127.0.0.1:1".into()),
                ..base.clone()
            },
            "api_base",
        ),
        (
            ChatConfig {
                model: None,
                ..base.clone()
            },
            "model",
        ),
    ] {
        let e = ChatClient::new(&cfg).unwrap_err();
        assert!(!e.is_retryable());
        assert!(e.to_string().contains(word), "{e}");
    }
}

fn ctx() -> ExtractContext {
    ExtractContext {
        user: "alice".into(),
        archive_date: Date::parse_iso("2026-11-29"),
    }
}

#[test]
fn chat_extractor_builds_the_layout_itself() {
    let answer = json!({"memories": [
        {"category": "preferences", "topic": "Theme", "fact": "Prefers dark mode"},
        {"category": "entities", "entity_type": "people", "name": "../Bob", "fact": "Bob is a colleague"},
        {"category": "events", "date": "2026-12-03", "name": "Dentist", "fact": "Dentist appointment"},
        {"category": "profile", "fact": "Name: Alice", "confidence": 0.9},
        {"category": "preferences", "topic": "theme", "fact": "Prefers  dark mode"},
    ]})
    .to_string();
    let stub = Stub::start(vec![(200, completion(&answer))]);
    let e = extractor_from_config(Some(&stub.config())).unwrap();
    assert_eq!(e.name(), "chat");
    let msgs = [Message::new("user", "I prefer dark mode.")];
    let ms = e.extract(&ctx(), &msgs).unwrap();
    let got: Vec<(MemoryCategory, &str)> = ms
        .iter()
        .map(|m| (m.category, m.rel_path.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (MemoryCategory::Entities, "entities/people/bob.md"),
            (MemoryCategory::Events, "events/2026/12/03/dentist.md"),
            (MemoryCategory::Preferences, "preferences/alice/theme.md"),
            (MemoryCategory::Profile, "profile.md"),
        ]
    );
    let theme = &ms[2];
    assert_eq!(
        theme.facts().collect::<Vec<_>>(),
        vec!["- Prefers dark mode"]
    );
    let prompt = stub.next_request().body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("user: I prefer dark mode."), "{prompt}");
}

#[test]
fn chat_extractor_rejects_invalid_items() {
    let answers = [
        json!({"memories": [{"category": "events", "date": "next week", "name": "x", "fact": "y"}]}),
        json!({"memories": [{"category": "secrets", "fact": "y"}]}),
        json!({"memories": [{"category": "preferences", "fact": "no topic"}]}),
        json!({"facts": []}),
    ];
    let stub = Stub::start(
        answers
            .iter()
            .map(|a| (200, completion(&a.to_string())))
            .collect(),
    );
    let x = ChatExtractor::new(ChatClient::new(&stub.config()).unwrap());
    let msgs = [Message::new("user", "hello")];
    for want in ["not YYYY-MM-DD", "unknown category", "topic", "memories"] {
        let e = x.extract(&ctx(), &msgs).unwrap_err();
        assert!(matches!(e, ChatError::BadAnswer(_)), "{e:?}");
        assert!(e.to_string().contains(want), "{e} lacks {want}");
    }
}

#[test]
fn chat_extractor_cuts_over_long_facts_and_skips_empty_archives() {
    let answer = json!({"memories": [
        {"category": "profile", "fact": format!("Bio: {}", "很长".repeat(2000))},
    ]})
    .to_string();
    let stub = Stub::start(vec![(200, completion(&answer))]);
    let x = ChatExtractor::new(ChatClient::new(&stub.config()).unwrap());
    assert!(
        x.extract(&ctx(), &[]).unwrap().is_empty(),
        "no request for no messages"
    );
    let ms = x
        .extract(&ctx(), &[Message::new("user", "about me")])
        .unwrap();
    let fact = ms[0].facts().next().unwrap();
    // "- " plus at most 500 characters of fact.
    assert_eq!(fact.chars().count(), 502, "{fact}");
    assert!(fact.ends_with('…'));
}
