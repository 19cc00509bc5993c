//! One conformance suite run over all five drivers against a scripted provider on loopback
//! that replays recorded SSE transcripts and JSON error answers from `tests/fixtures/`.

// The helpers below are test code too: a panic is how they report a broken expectation
// (clippy's allow-unwrap-in-tests only covers `#[test]` functions themselves).
use std::time::Duration;

use atelier_llm::{
    provider_client_builder, run_tool_loop, AnthropicDriver, ChatCompletionsDriver, ChatRequest,
    ContentBlock, Driver, Endpoint, Image, LlmError, LoopEnd, LoopError, LoopEvent, LoopOptions,
    Message, ResponsesDriver, Role, RoundEnd, StreamEvent, ToolCall, ToolDefinition, ToolExecutor,
    ToolResult, Usage, HISTORICAL_IMAGES_OMITTED,
};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;

use crate::scripted;

use scripted::{error_answer, start, start_sequence, transcript, Reply, Script, ScriptedProvider};

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
        tool_choice: Default::default(),
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
        provider_client_builder().build().unwrap(),
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
    assert_eq!(round.error().to_string(), provider.midstream_error);
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
    round.server.wait_client_gone().await;
}

// ---------------------------------------------------------------------------------------------
// The overflow retry, through the tool loop.

/// An executor for turns in which no tool may run.
struct NoTools;

impl ToolExecutor for NoTools {
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send + 'a>> {
        Box::pin(async move { panic!("no tool should run, but {} did", call.name) })
    }
}

const OLD_IMAGE: &str = "b2xkLWltYWdl";
const NEW_IMAGE: &str = "bmV3LWltYWdl";

fn jpeg(data: &str) -> ContentBlock {
    ContentBlock::Image(Image {
        mime_type: "image/jpeg".to_owned(),
        data: data.to_owned(),
    })
}

/// A history whose older user message carries an image, ending with a user message that
/// carries its own.
fn request_with_older_image() -> ChatRequest {
    let text = |text: &str| ContentBlock::Text {
        text: text.to_owned(),
    };
    ChatRequest {
        messages: vec![
            Message {
                role: Role::User,
                content: vec![text("Here is the hero"), jpeg(OLD_IMAGE)],
            },
            Message {
                role: Role::Assistant,
                content: vec![text("Nice.")],
            },
            Message {
                role: Role::User,
                content: vec![text("Find the hero"), jpeg(NEW_IMAGE)],
            },
        ],
        ..request()
    }
}

struct Turn {
    server: ScriptedProvider,
    events: Vec<LoopEvent>,
    end: LoopEnd,
}

async fn run_turn(provider: &Provider, replies: Vec<Reply>, request: ChatRequest) -> Turn {
    let scripts = replies
        .into_iter()
        .map(|reply| script(provider, reply))
        .collect();
    let server = start_sequence(scripts).await;
    let endpoint = Endpoint::new(
        reqwest::Client::new(),
        (provider.base)(&server.base_url),
        Some(KEY.to_owned()),
    );
    let driver = (provider.make)(endpoint);
    let (tx, mut rx) = mpsc::channel(256);
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        run_tool_loop(&*driver, &NoTools, request, LoopOptions::default(), &tx),
    )
    .await
    .expect("the turn should end");
    drop(tx);
    let mut events = Vec::new();
    while let Some(event) = rx.recv().await {
        events.push(event);
    }
    Turn {
        server,
        events,
        end: outcome.end,
    }
}

async fn retries_an_overflow_once_without_older_images(provider: Provider) {
    let replies = vec![
        error_answer(provider.dir, "overflow_413"),
        Reply::Sse(transcript(provider.dir, "text")),
    ];
    let turn = run_turn(&provider, replies, request_with_older_image()).await;
    assert_eq!(turn.end, LoopEnd::Completed, "{:?}", turn.events);
    // The refused attempt wrote nothing: the stream starts with the retry's text.
    assert_eq!(
        turn.events[..3],
        ["Hel", "lo, ", "world!"].map(|text| LoopEvent::Text {
            text: text.to_owned()
        })
    );
    assert!(matches!(
        turn.events[turn.events.len() - 2..],
        [LoopEvent::Usage { .. }, LoopEvent::Done]
    ));
    let bodies = turn.server.bodies();
    assert_eq!(bodies.len(), 2);
    let (first, retry) = (bodies[0].to_string(), bodies[1].to_string());
    assert!(first.contains(OLD_IMAGE) && first.contains(NEW_IMAGE));
    assert!(!first.contains(HISTORICAL_IMAGES_OMITTED));
    assert!(!retry.contains(OLD_IMAGE), "{retry}");
    assert!(retry.contains(NEW_IMAGE) && retry.contains(HISTORICAL_IMAGES_OMITTED));
    assert!(retry.contains("Here is the hero"));
}

async fn does_not_retry_a_second_overflow(provider: Provider) {
    let replies = vec![
        error_answer(provider.dir, "overflow_413"),
        error_answer(provider.dir, "overflow_400"),
        Reply::Sse(transcript(provider.dir, "text")),
    ];
    let turn = run_turn(&provider, replies, request_with_older_image()).await;
    assert_eq!(turn.server.bodies().len(), 2);
    let LoopEnd::Failed(LoopError::Provider(error)) = &turn.end else {
        panic!("the turn should fail: {:?}", turn.end);
    };
    assert!(
        matches!(error, LlmError::Overflow { status: 400, .. }),
        "{error:?}"
    );
    assert_eq!(
        turn.events,
        [LoopEvent::Error {
            message: error.to_string()
        }]
    );
}

async fn does_not_retry_an_overflow_without_older_images(provider: Provider) {
    let replies = vec![
        error_answer(provider.dir, "overflow_413"),
        Reply::Sse(transcript(provider.dir, "text")),
    ];
    let turn = run_turn(&provider, replies, request()).await;
    assert_eq!(turn.server.bodies().len(), 1);
    assert!(
        matches!(&turn.end, LoopEnd::Failed(LoopError::Provider(e)) if e.is_overflow()),
        "{:?}",
        turn.end
    );
    assert!(
        matches!(&turn.events[..], [LoopEvent::Error { message }] if message.contains("exceeds the provider's request or context limit")),
        "{:?}",
        turn.events
    );
}

/// Five rounds through one client reach the provider over one HTTP/1 connection: each
/// response is read to its end (past a `[DONE]` sentinel too), so its connection is back in
/// the pool when the next round asks, and no second connection is started beside it.
async fn every_round_reuses_one_connection(provider: Provider) {
    let server = start(script(
        &provider,
        Reply::Sse(transcript(provider.dir, "text")),
    ))
    .await;
    let front = scripted::CountingFront::before(&server).await;
    let client = reqwest::Client::new();
    for round in 0..5 {
        let endpoint = Endpoint::new(
            client.clone(),
            (provider.base)(&front.url),
            Some(KEY.to_owned()),
        );
        let mut stream = (provider.make)(endpoint).stream(&request());
        let mut finished = false;
        while let Some(item) = stream.next().await {
            finished |= matches!(item.unwrap(), StreamEvent::Finished(_));
        }
        assert!(finished, "round {round} finished");
    }
    assert_eq!(
        front.connections(),
        1,
        "{}: connections opened for five rounds",
        provider.label
    );
}

/// A provider that answers with a redirect is not followed: the round fails, and no request
/// (with the key) goes where the redirect points.
async fn follows_no_redirect(provider: Provider) {
    let elsewhere = start(script(
        &provider,
        Reply::Sse(transcript(provider.dir, "text")),
    ))
    .await;
    let location = format!("{}{}", elsewhere.base_url, provider.path);
    let round = run_script(
        &provider,
        script(&provider, Reply::Redirect(location)),
        Duration::from_secs(5),
    )
    .await;
    round.error();
    assert_eq!(round.server.received.lock().unwrap().len(), 1);
    assert!(
        elsewhere.received.lock().unwrap().is_empty(),
        "{}: the redirect was followed",
        provider.label
    );
}

macro_rules! conformance {
    ($($module:ident => $provider:ident),* $(,)?) => {$(
        mod $module {
            #[tokio::test]
            async fn follows_no_redirect() {
                super::follows_no_redirect(super::$provider()).await;
            }
            #[tokio::test]
            async fn streams_text() {
                super::streams_text(super::$provider()).await;
            }
            #[tokio::test]
            async fn every_round_reuses_one_connection() {
                super::every_round_reuses_one_connection(super::$provider()).await;
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
            #[tokio::test]
            async fn retries_an_overflow_once_without_older_images() {
                super::retries_an_overflow_once_without_older_images(super::$provider()).await;
            }
            #[tokio::test]
            async fn does_not_retry_a_second_overflow() {
                super::does_not_retry_a_second_overflow(super::$provider()).await;
            }
            #[tokio::test]
            async fn does_not_retry_an_overflow_without_older_images() {
                super::does_not_retry_an_overflow_without_older_images(super::$provider()).await;
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

#[tokio::test]
async fn an_anthropic_stream_that_closes_before_its_message_ends_fails_the_round() {
    // Half a write's arguments, then a clean close: a finished answer would run it with what
    // parsed of them.
    let round = replay(&anthropic(), "ended_early").await;
    let error = round.error();
    assert!(
        matches!(
            error,
            LlmError::Stream { label: "Anthropic", detail }
                if detail == "the stream ended before the message did"
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_responses_answer_cut_at_its_output_limit_ends_incomplete_with_its_usage() {
    let round = replay(&openai(), "incomplete").await;
    assert_eq!(round.texts().concat(), "<h1>Half a pa");
    let end = round.finished();
    assert!(end.stop && end.tool_calls.is_empty());
    assert_eq!(end.stop_reason.as_deref(), Some("incomplete"));
    assert_eq!(
        end.usage
            .map(|usage| (usage.input_tokens, usage.output_tokens)),
        Some((12, 500))
    );
}

// ---------------------------------------------------------------------------------------------
// The wire of a real OpenAI-compatible server (llama-cpp-python 0.3.36, recorded by
// tests/real_model.rs's server), where it differs from the transcripts above.

#[tokio::test]
async fn llama_cpp_text_without_a_usage_chunk_reports_no_usage() {
    let round = replay(&custom(), "llama_cpp_text").await;
    assert_eq!(
        round.texts().concat(),
        "The hero of the story is a character from the novel \""
    );
    let end = round.finished();
    assert!(end.stop && end.tool_calls.is_empty());
    assert_eq!(end.stop_reason.as_deref(), Some("length"));
    // The server counted nothing on the stream; no count is invented.
    assert_eq!(end.usage, None);
}

#[tokio::test]
async fn llama_cpp_forced_call_repeating_its_id_and_name_in_every_delta_is_one_call() {
    let round = replay(&custom(), "llama_cpp_forced_tool_call").await;
    let id = "call__0_site_find_nodes_cmpl-3f836790-9e2d-4967-a63d-8d7664184a21";
    let started: Vec<&StreamEvent> = round
        .events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallStarted { .. }))
        .collect();
    assert_eq!(
        started,
        [&StreamEvent::ToolCallStarted {
            id: id.to_owned(),
            name: "site_find_nodes".to_owned()
        }]
    );
    let deltas: String = round
        .events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallArgumentsDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    // Each piece once, though the legacy function_call beside tool_calls repeats it.
    assert_eq!(deltas, r#"{ "query" : "heroes" }"#);
    let call = ToolCall {
        id: id.to_owned(),
        name: "site_find_nodes".to_owned(),
        arguments: json!({"query": "heroes"}),
    };
    assert_eq!(round.completed(), [&call]);
    let end = round.finished();
    assert!(!end.stop);
    assert_eq!(end.stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(end.tool_calls, [call]);
    assert_eq!(end.usage, None);
}

#[tokio::test]
async fn an_ok_answer_whose_stream_ends_before_any_event_is_a_failed_round() {
    let round = replay(&custom(), "llama_cpp_empty_200").await;
    match round.error() {
        LlmError::Provider { message } => assert!(
            message.starts_with("Custom Provider ended its answer before sending anything."),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}
