//! One conformance suite run over all five drivers against a scripted provider on loopback
//! that replays recorded SSE transcripts and JSON error answers from `tests/fixtures/`.

// The helpers below are test code too: a panic is how they report a broken expectation
// (clippy's allow-unwrap-in-tests only covers `#[test]` functions themselves).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_http::{json_response, serve, BoxError, Listener, Request, Response};
use atelier_llm::{
    AnthropicDriver, ChatCompletionsDriver, ChatRequest, ContentBlock, Driver, Endpoint, LlmError,
    Message, ResponsesDriver, RoundEnd, StreamEvent, ToolCall, ToolDefinition, Usage,
};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderMap;
use hyper::StatusCode;
use serde_json::{json, Value};
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------------------
// The scripted provider.

/// What the scripted provider answers.
#[derive(Clone)]
enum Reply {
    /// An SSE transcript, one event per fixture line.
    Sse(Vec<String>),
    /// A non-OK answer.
    Error { status: u16, body: Value },
}

#[derive(Clone)]
struct Script {
    reply: Reply,
    /// Send `event:` lines named after each event's `type` (Anthropic, Responses).
    named_events: bool,
    /// End lines with CRLF instead of LF.
    crlf: bool,
    /// Cut the body (no terminating chunk) after this many events.
    cut_after: Option<usize>,
    /// Pause this long after that many events.
    pause_after: Option<(usize, Duration)>,
}

/// One request the scripted provider received.
struct Received {
    path: String,
    headers: HeaderMap,
    body: Value,
}

struct ScriptedProvider {
    base_url: String,
    received: Arc<Mutex<Vec<Received>>>,
    /// Set when the provider noticed the client went away before the transcript ended.
    client_gone: Arc<AtomicBool>,
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The events of a `.sse` fixture: every line that is neither blank nor a `#` comment.
fn transcript(dir: &str, name: &str) -> Vec<String> {
    let path = fixtures().join(dir).join(format!("{name}.sse"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// A `.json` error fixture: `{"status": u16, "body": <JSON, or a string sent as-is>}`.
fn error_answer(dir: &str, name: &str) -> Reply {
    let path = fixtures().join(dir).join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fixture: Value = serde_json::from_str(&text).unwrap();
    Reply::Error {
        status: fixture["status"].as_u64().unwrap() as u16,
        body: fixture["body"].clone(),
    }
}

/// One SSE event on the wire, as the provider would write it.
fn wire_event(line: &str, named_events: bool, crlf: bool) -> Vec<u8> {
    let mut event = String::new();
    if named_events && line != "[DONE]" {
        let value: Value = serde_json::from_str(line).unwrap();
        if let Some(kind) = value["type"].as_str() {
            event.push_str(&format!("event: {kind}\n"));
        }
    }
    event.push_str(&format!("data: {line}\n\n"));
    if crlf {
        event = event.replace('\n', "\r\n");
    }
    event.into_bytes()
}

struct Frames(mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl futures_util::Stream for Frames {
    type Item = Result<Frame<Bytes>, BoxError>;
    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.get_mut().0.poll_recv(cx)
    }
}

/// Writes the transcript: each event split in two body chunks at its middle, a keep-alive
/// comment every third event, with the script's pause and cut.
async fn write_transcript(
    script: Script,
    lines: Vec<String>,
    tx: mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
    client_gone: Arc<AtomicBool>,
) {
    for (index, line) in lines.iter().enumerate() {
        if script.cut_after == Some(index) {
            let _ = tx.send(Err("scripted cut".into())).await;
            return;
        }
        if let Some((after, pause)) = script.pause_after {
            if after == index {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = tx.closed() => {
                        client_gone.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        }
        let mut bytes = wire_event(line, script.named_events, script.crlf);
        if index % 3 == 2 {
            bytes.splice(0..0, b": keep-alive\n\n".iter().copied());
        }
        let tail = bytes.split_off(bytes.len() / 2);
        for chunk in [bytes, tail] {
            if tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.is_err() {
                client_gone.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

async fn answer(
    script: Script,
    request: Request,
    received: Arc<Mutex<Vec<Received>>>,
    client_gone: Arc<AtomicBool>,
) -> Response {
    let path = request.uri().path().to_owned();
    let headers = request.headers().clone();
    let body = atelier_http::read_body(request.into_body(), 1 << 20)
        .await
        .unwrap();
    received.lock().unwrap().push(Received {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap(),
    });
    match script.reply.clone() {
        Reply::Error { status, body } => {
            let status = StatusCode::from_u16(status).unwrap();
            match body {
                Value::String(text) => {
                    let mut response = Response::new(atelier_http::full_body(text));
                    *response.status_mut() = status;
                    response
                }
                body => json_response(status, &body),
            }
        }
        Reply::Sse(lines) => {
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(write_transcript(script, lines, tx, client_gone));
            let mut response = Response::new(BodyExt::boxed(StreamBody::new(Frames(rx))));
            response
                .headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            response
        }
    }
}

async fn start(script: Script) -> ScriptedProvider {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let client_gone = Arc::new(AtomicBool::new(false));
    let handler = {
        let received = received.clone();
        let client_gone = client_gone.clone();
        move |request: Request| {
            answer(
                script.clone(),
                request,
                received.clone(),
                client_gone.clone(),
            )
        }
    };
    tokio::spawn(serve(
        Listener::Tcp(listener),
        handler,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    ScriptedProvider {
        base_url,
        received,
        client_gone,
    }
}

// ---------------------------------------------------------------------------------------------
// Provider descriptors.

struct Provider {
    dir: &'static str,
    label: &'static str,
    named_events: bool,
    crlf: bool,
    /// The path the driver must post to.
    path: &'static str,
    /// The base URL the driver is configured with, from the server's root URL.
    base: fn(&str) -> String,
    make: fn(Endpoint) -> Box<dyn Driver>,
    /// The credential header the driver must send for key `sk-test`.
    auth_header: (&'static str, &'static str),
    usage: Usage,
    midstream_error: &'static str,
}

const KEY: &str = "sk-test";

fn anthropic() -> Provider {
    Provider {
        dir: "anthropic",
        label: "Anthropic",
        named_events: true,
        crlf: false,
        path: "/v1/messages",
        base: |root| root.to_owned(),
        make: |endpoint| Box::new(AnthropicDriver::new(endpoint)),
        auth_header: ("x-api-key", KEY),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: Some(80),
            cache_write_tokens: Some(15),
            cost_usd: None,
        },
        midstream_error: "Anthropic error: Overloaded",
    }
}

fn openai() -> Provider {
    Provider {
        dir: "openai",
        label: "OpenAI",
        named_events: true,
        crlf: false,
        path: "/v1/responses",
        base: |root| root.to_owned(),
        make: |endpoint| Box::new(ResponsesDriver::openai(endpoint)),
        auth_header: ("authorization", "Bearer sk-test"),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: Some(80),
            cache_write_tokens: None,
            cost_usd: None,
        },
        midstream_error: "Provider error: The server had an error while processing your request.",
    }
}

fn openrouter() -> Provider {
    Provider {
        dir: "openrouter",
        label: "OpenRouter",
        named_events: true,
        crlf: true,
        path: "/api/v1/responses",
        base: |root| format!("{root}/api"),
        make: |endpoint| Box::new(ResponsesDriver::openrouter(endpoint)),
        auth_header: ("authorization", "Bearer sk-test"),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: Some(80),
            cache_write_tokens: None,
            cost_usd: Some(0.0012),
        },
        midstream_error:
            "Provider response failed. Check your credentials and model in /admin/ai/providers.",
    }
}

fn ollama() -> Provider {
    Provider {
        dir: "ollama",
        label: "Ollama",
        named_events: false,
        crlf: false,
        path: "/v1/chat/completions",
        base: |root| root.to_owned(),
        make: |endpoint| Box::new(ChatCompletionsDriver::ollama(endpoint)),
        auth_header: ("authorization", "Bearer sk-test"),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Usage::default()
        },
        midstream_error: "Ollama error: model runner crashed",
    }
}

fn custom() -> Provider {
    Provider {
        dir: "custom",
        label: "Custom Provider",
        named_events: false,
        crlf: true,
        path: "/v1/chat/completions",
        // A base URL given with `/v1/` must not end up as `/v1/v1/...`.
        base: |root| format!("{root}/v1/"),
        make: |endpoint| Box::new(ChatCompletionsDriver::openai_compatible(endpoint)),
        auth_header: ("authorization", "Bearer sk-test"),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Usage::default()
        },
        midstream_error: "Custom Provider error: upstream timeout",
    }
}

// ---------------------------------------------------------------------------------------------
// Running a round.

fn request() -> ChatRequest {
    ChatRequest {
        model: "test-model".to_owned(),
        system: vec!["You edit sites.".to_owned()],
        messages: vec![Message::user_text("Find the hero")],
        tools: vec![ToolDefinition {
            name: "site_find_nodes".to_owned(),
            description: "Finds nodes.".to_owned(),
            input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        }],
        max_tokens: None,
        scope: Some("site".to_owned()),
    }
}

struct Round {
    server: ScriptedProvider,
    events: Vec<StreamEvent>,
    error: Option<LlmError>,
}

impl Round {
    fn finished(&self) -> &RoundEnd {
        match self.events.last() {
            Some(StreamEvent::Finished(end)) => end,
            other => panic!("round did not finish cleanly: {other:?} / {:?}", self.error),
        }
    }

    fn texts(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::TextDelta(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn completed(&self) -> Vec<&ToolCall> {
        self.events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::ToolCallCompleted(call) => Some(call),
                _ => None,
            })
            .collect()
    }

    fn error(&self) -> &LlmError {
        assert!(
            !self
                .events
                .iter()
                .any(|e| matches!(e, StreamEvent::Finished(_))),
            "a failed round must not finish: {:?}",
            self.events
        );
        self.error.as_ref().expect("the round should have failed")
    }
}

async fn run_script(provider: &Provider, script: Script, idle: Duration) -> Round {
    let server = start(script).await;
    let endpoint = Endpoint::new(
        reqwest::Client::new(),
        (provider.base)(&server.base_url),
        Some(KEY.to_owned()),
    )
    .with_idle_timeout(idle);
    let driver = (provider.make)(endpoint);
    assert_eq!(driver.label(), provider.label);
    let mut stream = driver.stream(&request());
    let mut events = Vec::new();
    let mut error = None;
    let collect = async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    assert!(error.is_none(), "an event followed an error: {event:?}");
                    events.push(event);
                }
                Err(e) => {
                    assert!(error.is_none(), "two errors");
                    error = Some(e);
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), collect)
        .await
        .expect("the round should end");
    Round {
        server,
        events,
        error,
    }
}

fn script(provider: &Provider, reply: Reply) -> Script {
    Script {
        reply,
        named_events: provider.named_events,
        crlf: provider.crlf,
        cut_after: None,
        pause_after: None,
    }
}

async fn replay(provider: &Provider, fixture: &str) -> Round {
    let reply = Reply::Sse(transcript(provider.dir, fixture));
    run_script(provider, script(provider, reply), Duration::from_secs(5)).await
}

async fn refuse(provider: &Provider, fixture: &str) -> LlmError {
    let reply = error_answer(provider.dir, fixture);
    let round = run_script(provider, script(provider, reply), Duration::from_secs(5)).await;
    assert!(round.events.is_empty(), "{:?}", round.events);
    round.error().clone()
}

// ---------------------------------------------------------------------------------------------
// The suite.

async fn streams_text(provider: Provider) {
    let round = replay(&provider, "text").await;
    assert_eq!(round.texts(), ["Hel", "lo, ", "world!"]);
    let end = round.finished();
    assert!(end.stop);
    assert!(end.tool_calls.is_empty());
    assert_eq!(
        end.assistant.as_ref().map(|m| m.content.clone()),
        Some(vec![ContentBlock::Text {
            text: "Hello, world!".to_owned()
        }])
    );
    let received = round.server.received.lock().unwrap();
    assert_eq!(received.len(), 1);
    let sent = &received[0];
    assert_eq!(sent.path, provider.path);
    let (name, value) = provider.auth_header;
    assert_eq!(
        sent.headers.get(name).and_then(|v| v.to_str().ok()),
        Some(value)
    );
    assert_eq!(sent.body["model"], "test-model");
    assert_eq!(sent.body["stream"], true);
    assert!(sent.body.to_string().contains("Find the hero"));
    assert!(sent.body.to_string().contains("site_find_nodes"));
}

async fn assembles_a_tool_call_from_many_deltas(provider: Provider) {
    let round = replay(&provider, "tool_call_deltas").await;
    assert_eq!(round.texts(), ["Let me look."]);
    let started = round
        .events
        .iter()
        .position(|e| matches!(e, StreamEvent::ToolCallStarted { id, name } if id == "call_1" && name == "site_find_nodes"))
        .expect("a started event");
    let deltas: Vec<(usize, &str)> = round
        .events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            StreamEvent::ToolCallArgumentsDelta { id, delta }
                if id == "call_1" && !delta.is_empty() =>
            {
                Some((i, delta.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(deltas.len(), 4);
    assert_eq!(
        deltas.iter().map(|(_, d)| *d).collect::<String>(),
        r#"{"query":"hero","limit":5}"#
    );
    let expected = ToolCall {
        id: "call_1".to_owned(),
        name: "site_find_nodes".to_owned(),
        arguments: json!({"query": "hero", "limit": 5}),
    };
    let completed = round
        .events
        .iter()
        .position(|e| *e == StreamEvent::ToolCallCompleted(expected.clone()))
        .expect("a completed event");
    assert!(started < deltas[0].0 && deltas[3].0 < completed);
    let end = round.finished();
    assert!(!end.stop);
    assert_eq!(end.tool_calls, std::slice::from_ref(&expected));
    assert_eq!(
        end.assistant.as_ref().map(|m| m.content.clone()),
        Some(vec![
            ContentBlock::Text {
                text: "Let me look.".to_owned()
            },
            ContentBlock::ToolCall(expected),
        ])
    );
}

async fn returns_two_tool_calls_in_order(provider: Provider) {
    let round = replay(&provider, "two_tool_calls").await;
    let expected = [
        ToolCall {
            id: "call_a".to_owned(),
            name: "site_get_node".to_owned(),
            arguments: json!({"id": "n1"}),
        },
        ToolCall {
            id: "call_b".to_owned(),
            name: "content_list_entries".to_owned(),
            arguments: json!({"collection": "posts"}),
        },
    ];
    assert_eq!(round.completed(), expected.iter().collect::<Vec<_>>());
    let end = round.finished();
    assert!(!end.stop);
    assert_eq!(end.tool_calls, expected);
}

async fn reports_usage_and_cache_buckets(provider: Provider) {
    let round = replay(&provider, "usage_cache").await;
    assert_eq!(round.texts(), ["ok"]);
    assert_eq!(round.finished().usage, Some(provider.usage));
}

async fn ends_on_a_mid_stream_provider_error(provider: Provider) {
    let round = replay(&provider, "midstream_error").await;
    assert_eq!(round.texts(), ["Partial"]);
    assert_eq!(
        round.error(),
        &LlmError::Provider {
            message: provider.midstream_error.to_owned()
        }
    );
}

async fn parses_malformed_tool_arguments_as_an_empty_object(provider: Provider) {
    let round = replay(&provider, "malformed_args").await;
    let expected = ToolCall {
        id: "call_bad".to_owned(),
        name: "site_find_nodes".to_owned(),
        arguments: json!({}),
    };
    assert_eq!(round.completed(), [&expected]);
    assert_eq!(round.finished().tool_calls, [expected]);
}

async fn classifies_overflow_answers(provider: Provider) {
    for (fixture, status) in [("overflow_413", 413), ("overflow_400", 400)] {
        let error = refuse(&provider, fixture).await;
        assert!(
            matches!(&error, LlmError::Overflow { status: s, .. } if *s == status),
            "{fixture}: {error:?}"
        );
        assert!(error.is_overflow());
        let prefix = format!(
            "{} could not accept this conversation because it exceeds the provider's request or context limit",
            provider.label
        );
        assert!(error.to_string().starts_with(&prefix), "{error}");
    }
}

async fn classifies_other_refusals(provider: Provider) {
    let rate = refuse(&provider, "rate_limit_429").await;
    assert!(matches!(rate, LlmError::RateLimited { .. }), "{rate:?}");
    assert!(rate
        .to_string()
        .starts_with(&format!("{} quota or rate limit reached", provider.label)));
    let auth = refuse(&provider, "auth_401").await;
    assert!(matches!(auth, LlmError::Auth { .. }), "{auth:?}");
    let bad = refuse(&provider, "bad_request_400").await;
    assert!(matches!(bad, LlmError::Http { status: 400, .. }), "{bad:?}");
    assert!(bad
        .to_string()
        .starts_with(&format!("{} error (400): ", provider.label)));
}

async fn fails_when_the_connection_is_cut(provider: Provider) {
    let mut script = script(&provider, Reply::Sse(transcript(provider.dir, "text")));
    script.cut_after = Some(3);
    let round = run_script(&provider, script, Duration::from_secs(5)).await;
    let error = round.error();
    assert!(
        matches!(error, LlmError::Stream { label, .. } if *label == provider.label),
        "{error:?}"
    );
}

async fn fails_when_the_stream_goes_idle(provider: Provider) {
    let mut script = script(&provider, Reply::Sse(transcript(provider.dir, "text")));
    script.pause_after = Some((2, Duration::from_secs(30)));
    let round = run_script(&provider, script, Duration::from_millis(300)).await;
    assert!(
        matches!(round.error(), LlmError::IdleTimeout { .. }),
        "{:?}",
        round.error
    );
    // The dropped stream closes the connection, and the provider notices.
    tokio::time::timeout(Duration::from_secs(5), async {
        while !round.server.client_gone.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the provider should see the client go away");
}

macro_rules! conformance {
    ($($module:ident => $provider:ident),* $(,)?) => {$(
        mod $module {
            #[tokio::test]
            async fn streams_text() {
                super::streams_text(super::$provider()).await;
            }
            #[tokio::test]
            async fn assembles_a_tool_call_from_many_deltas() {
                super::assembles_a_tool_call_from_many_deltas(super::$provider()).await;
            }
            #[tokio::test]
            async fn returns_two_tool_calls_in_order() {
                super::returns_two_tool_calls_in_order(super::$provider()).await;
            }
            #[tokio::test]
            async fn reports_usage_and_cache_buckets() {
                super::reports_usage_and_cache_buckets(super::$provider()).await;
            }
            #[tokio::test]
            async fn ends_on_a_mid_stream_provider_error() {
                super::ends_on_a_mid_stream_provider_error(super::$provider()).await;
            }
            #[tokio::test]
            async fn parses_malformed_tool_arguments_as_an_empty_object() {
                super::parses_malformed_tool_arguments_as_an_empty_object(super::$provider()).await;
            }
            #[tokio::test]
            async fn classifies_overflow_answers() {
                super::classifies_overflow_answers(super::$provider()).await;
            }
            #[tokio::test]
            async fn classifies_other_refusals() {
                super::classifies_other_refusals(super::$provider()).await;
            }
            #[tokio::test]
            async fn fails_when_the_connection_is_cut() {
                super::fails_when_the_connection_is_cut(super::$provider()).await;
            }
            #[tokio::test]
            async fn fails_when_the_stream_goes_idle() {
                super::fails_when_the_stream_goes_idle(super::$provider()).await;
            }
        }
    )*};
}

conformance! {
    anthropic_messages => anthropic,
    openai_responses => openai,
    openrouter_responses => openrouter,
    ollama_chat_completions => ollama,
    openai_compatible_chat_completions => custom,
}
