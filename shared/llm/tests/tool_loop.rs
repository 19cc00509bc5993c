//! The tool loop over real drivers against the scripted provider: the exact event lines of a
//! turn, summed usage, tool failures, heavy-evidence elision, round limits and abort.

// The helpers below are test code too: a panic is how they report a broken expectation.
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use atelier_llm::{
    run_tool_loop, AnthropicDriver, ChatRequest, ContentBlock, Driver, Endpoint, EventSink,
    LlmError, LoopEnd, LoopError, LoopEvent, LoopOptions, LoopOutcome, Message, ResponsesDriver,
    Role, SinkClosed, ToolCall, ToolChoice, ToolDefinition, ToolExecutor, ToolRejection,
    ToolResult, Usage, INTERRUPTED_TOOL_RESULT_ERROR,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::scripted;

use scripted::{error_answer, start_sequence, transcript, Reply, Script, ScriptedProvider};

type ToolFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

// ---------------------------------------------------------------------------------------------
// Executors.

/// Server-side tools that succeed, answering with what they were called with; records calls.
#[derive(Default)]
struct ServerTools {
    calls: Mutex<Vec<ToolCall>>,
}

impl ToolExecutor for ServerTools {
    fn execute<'a>(&'a self, call: &'a ToolCall) -> ToolFuture<'a, ToolResult> {
        self.calls.lock().unwrap().push(call.clone());
        Box::pin(async move {
            ToolResult {
                // The loop must put the call's id back whatever the executor says.
                call_id: "wrong".to_owned(),
                ok: true,
                data: Some(json!({"answer": format!("{} for {}", call.name, call.id)})),
                error: None,
                images: Vec::new(),
            }
        })
    }
}

impl ServerTools {
    fn call_count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

const TIMED_OUT: &str = "Browser tool \"site_find_nodes\" result timed out.";

/// A bridge that posts a `toolRequest` through its own sender, then rejects the call.
struct RejectingBridge {
    events: mpsc::UnboundedSender<LoopEvent>,
    browser: bool,
}

impl ToolExecutor for RejectingBridge {
    fn execute<'a>(&'a self, call: &'a ToolCall) -> ToolFuture<'a, ToolResult> {
        Box::pin(async move { panic!("the loop must use execute_or_reject for {}", call.name) })
    }

    fn is_browser_tool(&self, name: &str) -> bool {
        self.browser && name == "site_find_nodes"
    }

    fn execute_or_reject<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> ToolFuture<'a, Result<ToolResult, ToolRejection>> {
        Box::pin(async move {
            self.events
                .send(LoopEvent::ToolRequest {
                    request_id: "req_1".to_owned(),
                    tool_name: call.name.clone(),
                    input: call.arguments.clone(),
                })
                .unwrap();
            Err(ToolRejection::new(TIMED_OUT))
        })
    }
}

/// A tool that never finishes, like a browser that never answers.
#[derive(Default)]
struct Hanging {
    started: AtomicUsize,
}

impl ToolExecutor for Hanging {
    fn execute<'a>(&'a self, _call: &'a ToolCall) -> ToolFuture<'a, ToolResult> {
        self.started.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    }
}

// ---------------------------------------------------------------------------------------------
// Running turns.

fn anthropic_scripts(fixtures: &[&str]) -> Vec<Script> {
    fixtures
        .iter()
        .map(|name| Script::new(Reply::Sse(transcript("anthropic", name)), true, false))
        .collect()
}

fn anthropic(server: &ScriptedProvider) -> AnthropicDriver {
    AnthropicDriver::new(Endpoint::new(
        reqwest::Client::new(),
        server.base_url.clone(),
        Some("sk-test".to_owned()),
    ))
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "test-model".to_owned(),
        system: vec!["You edit sites.".to_owned()],
        messages: vec![Message::user_text("Find the hero")],
        tools: vec![ToolDefinition {
            name: "site_find_nodes".to_owned(),
            description: "Finds nodes.".to_owned(),
            input_schema: json!({"type": "object"}),
        }],
        max_tokens: None,
        scope: Some("site".to_owned()),
        tool_choice: Default::default(),
    }
}

struct Turn {
    outcome: LoopOutcome,
    /// Every event as its NDJSON line.
    lines: Vec<String>,
}

/// Runs a whole turn into `sink`, whose buffer holds every event, then takes them with
/// `drain`.
async fn run_turn(
    driver: &dyn Driver,
    executor: &dyn ToolExecutor,
    options: LoopOptions,
    sink: &dyn EventSink,
    mut drain: impl FnMut() -> Option<LoopEvent>,
) -> Turn {
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        run_tool_loop(driver, executor, request(), options, sink),
    )
    .await
    .expect("the turn should end");
    let mut lines = Vec::new();
    while let Some(event) = drain() {
        lines.push(serde_json::to_string(&event).unwrap());
    }
    Turn { outcome, lines }
}

async fn run_anthropic(fixtures: &[&str], executor: &dyn ToolExecutor) -> (ScriptedProvider, Turn) {
    let server = start_sequence(anthropic_scripts(fixtures)).await;
    let (tx, mut rx) = mpsc::channel(256);
    let drain = || rx.try_recv().ok();
    let turn = run_turn(
        &anthropic(&server),
        executor,
        LoopOptions::default(),
        &tx,
        drain,
    )
    .await;
    (server, turn)
}

/// The `tool_result` block answering `id` in a request body (Anthropic wire).
fn tool_result_block(body: &Value, id: &str) -> Value {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .find(|block| block["type"] == "tool_result" && block["tool_use_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no result for {id} in {body}"))
}

const TEXT_LOOK: &str = r#"{"type":"text","text":"Let me look."}"#;
const CALL_1: &str = r#"{"type":"toolCall","toolCallId":"call_1","toolName":"site_find_nodes","input":{"limit":5,"query":"hero"},"status":"pending"}"#;
const CONTEXT_12: &str = r#"{"type":"context","promptTokens":12,"cacheReadTokens":0,"cacheCreationTokens":0,"contextTokens":12}"#;
const RESULT_1_OK: &str =
    r#"{"type":"toolResult","toolCallId":"call_1","toolName":"site_find_nodes","ok":true}"#;

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn two_rounds_write_the_reference_event_sequence() {
    let tools = ServerTools::default();
    let (server, turn) = run_anthropic(&["tool_call_deltas", "usage_cache"], &tools).await;
    assert_eq!(
        turn.lines,
        [
            TEXT_LOOK,
            CALL_1,
            CONTEXT_12,
            RESULT_1_OK,
            r#"{"type":"text","text":"ok"}"#,
            // Anthropic's context adds the cache buckets back: 100 + 80 + 15.
            r#"{"type":"context","promptTokens":100,"cacheReadTokens":80,"cacheCreationTokens":15,"contextTokens":195}"#,
            r#"{"type":"usage","promptTokens":112,"completionTokens":25,"costUsd":0,"cacheReadTokens":80,"cacheCreationTokens":15}"#,
            r#"{"type":"done"}"#,
        ]
    );
    assert_eq!(turn.outcome.end, LoopEnd::Completed);
    assert_eq!(turn.outcome.rounds, 2);
    assert_eq!(
        turn.outcome.usage,
        Usage {
            input_tokens: 112,
            output_tokens: 25,
            cache_read_tokens: Some(80),
            cache_write_tokens: Some(15),
            cost_usd: None,
        }
    );
    let calls = tools.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [ToolCall {
            id: "call_1".to_owned(),
            name: "site_find_nodes".to_owned(),
            arguments: json!({"query": "hero", "limit": 5}),
        }]
    );
    // The second round carries the assistant's call and its answer.
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2);
    let answer = tool_result_block(&bodies[1], "call_1");
    assert_eq!(
        answer["content"],
        r#"{"answer":"site_find_nodes for call_1"}"#
    );
    let announced = bodies[1]["messages"][1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .any(|block| block["type"] == "tool_use" && block["id"] == "call_1");
    assert!(announced, "{}", bodies[1]);
    // The user's message, the call, its result, and the last round's answer, which the next
    // turn must see.
    let history = &turn.outcome.history;
    assert_eq!(history.len(), 4, "{history:?}");
    let answer = &history[3];
    assert_eq!(answer.role, Role::Assistant);
    assert!(
        !answer.content.is_empty()
            && answer
                .content
                .iter()
                .all(|block| matches!(block, ContentBlock::Text { text } if !text.is_empty())),
        "{answer:?}"
    );
}

#[tokio::test]
async fn usage_omits_zero_cache_buckets_and_sums_provider_cost() {
    let (_, turn) = run_anthropic(&["tool_call_deltas", "text"], &ServerTools::default()).await;
    assert_eq!(
        turn.lines[turn.lines.len() - 2..],
        [
            r#"{"type":"usage","promptTokens":24,"completionTokens":10,"costUsd":0}"#,
            r#"{"type":"done"}"#,
        ]
    );

    // OpenRouter reports its own price on the second round only.
    let server = start_sequence(
        ["tool_call_deltas", "usage_cache"]
            .iter()
            .map(|name| Script::new(Reply::Sse(transcript("openrouter", name)), true, true))
            .collect(),
    )
    .await;
    let driver = ResponsesDriver::openrouter(Endpoint::new(
        reqwest::Client::new(),
        format!("{}/api", server.base_url),
        Some("sk-test".to_owned()),
    ));
    let (tx, mut rx) = mpsc::channel(256);
    let outcome = run_tool_loop(
        &driver,
        &ServerTools::default(),
        request(),
        LoopOptions::default(),
        &tx,
    )
    .await;
    assert_eq!(outcome.end, LoopEnd::Completed);
    assert_eq!(outcome.usage.input_tokens, 112);
    assert_eq!(outcome.usage.output_tokens, 25);
    assert_eq!(outcome.usage.cache_read_tokens, Some(80));
    assert_eq!(outcome.usage.cost_usd, Some(0.0012));
    let mut usage = None;
    while let Ok(event) = rx.try_recv() {
        if let LoopEvent::Usage { .. } = event {
            usage = Some(event);
        }
    }
    let usage = usage.expect("a usage event");
    assert_eq!(
        serde_json::to_string(&usage).unwrap(),
        r#"{"type":"usage","promptTokens":112,"completionTokens":25,"costUsd":0.0012,"cacheReadTokens":80}"#
    );
    assert!(matches!(
        usage,
        LoopEvent::Usage {
            provider_cost_usd: Some(cost),
            ..
        } if cost == 0.0012
    ));
}

#[tokio::test]
async fn a_rejected_browser_call_ends_the_turn_with_one_failed_result_and_one_error() {
    let server = start_sequence(anthropic_scripts(&["tool_call_deltas", "text"])).await;
    // Like chatd's bridge: an unbounded channel shared by the loop and the bridge.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let bridge = RejectingBridge {
        events: tx.clone(),
        browser: true,
    };
    let drain = || rx.try_recv().ok();
    let turn = run_turn(
        &anthropic(&server),
        &bridge,
        LoopOptions::default(),
        &tx,
        drain,
    )
    .await;
    assert_eq!(
        turn.lines,
        [
            TEXT_LOOK,
            CALL_1,
            CONTEXT_12,
            r#"{"type":"toolRequest","requestId":"req_1","toolName":"site_find_nodes","input":{"limit":5,"query":"hero"}}"#,
            r#"{"type":"toolResult","toolCallId":"call_1","toolName":"site_find_nodes","ok":false,"error":"Browser tool \"site_find_nodes\" result timed out."}"#,
            r#"{"type":"usage","promptTokens":12,"completionTokens":5,"costUsd":0}"#,
            r#"{"type":"error","message":"Browser tool transport failed: Browser tool \"site_find_nodes\" result timed out."}"#,
        ]
    );
    assert_eq!(
        turn.outcome.end,
        LoopEnd::Failed(LoopError::BrowserTransport {
            tool: "site_find_nodes".to_owned(),
            reason: TIMED_OUT.to_owned(),
        })
    );
    assert_eq!(server.bodies().len(), 1);
}

#[tokio::test]
async fn a_rejected_server_tool_is_a_failed_result_the_model_sees() {
    let server = start_sequence(anthropic_scripts(&["tool_call_deltas", "text"])).await;
    // Like chatd's bridge: an unbounded channel shared by the loop and the bridge.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let bridge = RejectingBridge {
        events: tx.clone(),
        browser: false,
    };
    let drain = || rx.try_recv().ok();
    let turn = run_turn(
        &anthropic(&server),
        &bridge,
        LoopOptions::default(),
        &tx,
        drain,
    )
    .await;
    assert_eq!(turn.outcome.end, LoopEnd::Completed);
    assert_eq!(
        turn.lines[4],
        r#"{"type":"toolResult","toolCallId":"call_1","toolName":"site_find_nodes","ok":false,"error":"Browser tool \"site_find_nodes\" result timed out."}"#
    );
    assert_eq!(turn.lines.last().unwrap(), r#"{"type":"done"}"#);
    let answer = tool_result_block(&server.bodies()[1], "call_1");
    assert_eq!(answer["is_error"], true);
    assert_eq!(answer["content"], TIMED_OUT);
}

#[tokio::test]
async fn a_provider_error_answers_announced_calls_as_interrupted_then_errors() {
    let tools = ServerTools::default();
    let (_, turn) = run_anthropic(&["loop_tool_call_then_error"], &tools).await;
    let interrupted = serde_json::to_string(&LoopEvent::ToolResult {
        tool_call_id: "call_1".to_owned(),
        tool_name: "site_find_nodes".to_owned(),
        ok: false,
        error: Some(INTERRUPTED_TOOL_RESULT_ERROR.to_owned()),
    })
    .unwrap();
    assert_eq!(
        turn.lines,
        [
            r#"{"type":"toolCall","toolCallId":"call_1","toolName":"site_find_nodes","input":{"query":"hero"},"status":"pending"}"#,
            interrupted.as_str(),
            r#"{"type":"error","message":"Anthropic error: Overloaded"}"#,
        ]
    );
    assert_eq!(
        turn.outcome.end,
        LoopEnd::Failed(LoopError::Provider(LlmError::Provider {
            message: "Anthropic error: Overloaded".to_owned()
        }))
    );
    assert_eq!(tools.call_count(), 0);
}

#[tokio::test]
async fn a_stop_with_calls_ends_cleanly_with_the_calls_interrupted() {
    let tools = ServerTools::default();
    let (server, turn) = run_anthropic(&["loop_max_tokens_tool_call"], &tools).await;
    assert_eq!(turn.outcome.end, LoopEnd::Completed);
    assert_eq!(
        turn.lines[1..],
        [
            CONTEXT_12,
            r#"{"type":"usage","promptTokens":12,"completionTokens":5,"costUsd":0}"#,
            &format!(
                r#"{{"type":"toolResult","toolCallId":"call_1","toolName":"site_find_nodes","ok":false,"error":"{INTERRUPTED_TOOL_RESULT_ERROR}"}}"#
            ),
            r#"{"type":"done"}"#,
        ]
    );
    assert_eq!(tools.call_count(), 0);
    assert_eq!(server.bodies().len(), 1);
    assert_eq!(turn.outcome.stop_reason.as_deref(), Some("max_tokens"));
    // The history keeps the call and answers it as its toolResult line did, so a provider
    // accepts it as the next turn's.
    assert_call_1_answered_as_interrupted(&turn.outcome.history);
}

/// `history` is the user's message, the assistant's call `call_1`, and that call answered as
/// interrupted.
fn assert_call_1_answered_as_interrupted(history: &[Message]) {
    assert_eq!(history.len(), 3, "{history:?}");
    assert_eq!(history[1].role, Role::Assistant);
    assert!(
        history[1]
            .content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolCall(call) if call.id == "call_1")),
        "{history:?}"
    );
    assert_eq!(
        history[2],
        Message {
            role: Role::Tool,
            content: vec![ContentBlock::ToolResult(ToolResult {
                call_id: "call_1".into(),
                ok: false,
                data: None,
                error: Some(INTERRUPTED_TOOL_RESULT_ERROR.into()),
                images: Vec::new(),
            })],
        }
    );
}

#[tokio::test]
async fn a_blank_last_answer_is_left_out_of_the_history() {
    let tools = ServerTools::default();
    let (_, turn) = run_anthropic(&["tool_call_deltas", "loop_blank_answer"], &tools).await;
    assert_eq!(turn.outcome.end, LoopEnd::Completed);
    // The user's message, the call, its result; no whitespace-only answer for the next turn to
    // send.
    let history = &turn.outcome.history;
    assert_eq!(history.len(), 3, "{history:?}");
    assert_eq!(history[2].role, Role::Tool);
}

#[tokio::test]
async fn stale_heavy_results_are_elided_from_later_rounds() {
    let tools = ServerTools::default();
    let (server, turn) = run_anthropic(
        &["loop_read_document_1", "loop_read_document_2", "text"],
        &tools,
    )
    .await;
    assert_eq!(turn.outcome.end, LoopEnd::Completed);
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 3);
    let whole = |id: &str| format!(r#"{{"answer":"site_read_document for {id}"}}"#);
    // Round 2 still sees the first document whole.
    assert_eq!(
        tool_result_block(&bodies[1], "doc_1")["content"],
        whole("doc_1")
    );
    // Round 3 sees only the newest document; the older one is a note.
    let stub: Value = serde_json::from_str(
        tool_result_block(&bodies[2], "doc_1")["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        stub,
        json!({
            "elided": true,
            "note": "Earlier site_read_document output removed to conserve context. Call site_read_document again if you need the current state."
        })
    );
    assert_eq!(
        tool_result_block(&bodies[2], "doc_2")["content"],
        whole("doc_2")
    );
}

#[tokio::test]
async fn the_round_limit_stops_a_model_that_keeps_calling_tools() {
    // The last script repeats: the model calls the tool every round.
    let server = start_sequence(anthropic_scripts(&["tool_call_deltas"])).await;
    let tools = ServerTools::default();
    let (tx, mut rx) = mpsc::channel(256);
    let options = LoopOptions {
        max_rounds: 2,
        ..LoopOptions::default()
    };
    let turn = run_turn(&anthropic(&server), &tools, options, &tx, || {
        rx.try_recv().ok()
    })
    .await;
    assert_eq!(
        turn.lines,
        [
            TEXT_LOOK,
            CALL_1,
            CONTEXT_12,
            RESULT_1_OK,
            TEXT_LOOK,
            CALL_1,
            CONTEXT_12,
            r#"{"type":"toolResult","toolCallId":"call_1","toolName":"site_find_nodes","ok":false,"error":"Tool call was not run: the turn reached its limit of 2 rounds."}"#,
            r#"{"type":"usage","promptTokens":24,"completionTokens":10,"costUsd":0}"#,
            r#"{"type":"error","message":"The assistant was still calling tools after 2 rounds, so this turn was stopped. Send a message to let it continue."}"#,
        ]
    );
    assert_eq!(
        turn.outcome.end,
        LoopEnd::Failed(LoopError::RoundLimit { rounds: 2 })
    );
    assert_eq!(tools.call_count(), 1);
    assert_eq!(server.bodies().len(), 2);
}

/// A script that sends the first text delta, then holds the stream open.
fn stalled_text() -> Vec<Script> {
    let mut script = Script::new(Reply::Sse(transcript("anthropic", "text")), true, false);
    script.pause_after = Some((4, Duration::from_secs(30)));
    vec![script]
}

#[tokio::test]
async fn a_gone_consumer_aborts_the_loop_and_the_provider_request() {
    let server = start_sequence(stalled_text()).await;
    let driver = anthropic(&server);
    let tools = ServerTools::default();
    let (tx, mut rx) = mpsc::channel(256);
    let consumer = async move {
        let first = rx.recv().await;
        drop(rx);
        first
    };
    let (outcome, first) = tokio::time::timeout(
        Duration::from_secs(5),
        futures_util::future::join(
            run_tool_loop(&driver, &tools, request(), LoopOptions::default(), &tx),
            consumer,
        ),
    )
    .await
    .expect("the loop should notice the consumer left");
    assert_eq!(
        first,
        Some(LoopEvent::Text {
            text: "Hel".to_owned()
        })
    );
    assert_eq!(outcome.end, LoopEnd::Aborted);
    server.wait_client_gone().await;
}

#[tokio::test]
async fn a_gone_unbounded_consumer_aborts_the_loop_and_the_provider_request() {
    let server = start_sequence(stalled_text()).await;
    let driver = anthropic(&server);
    let tools = ServerTools::default();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = async move {
        let first = rx.recv().await;
        drop(rx);
        first
    };
    let (outcome, first) = tokio::time::timeout(
        Duration::from_secs(5),
        futures_util::future::join(
            run_tool_loop(&driver, &tools, request(), LoopOptions::default(), &tx),
            consumer,
        ),
    )
    .await
    .expect("the loop should notice the consumer left");
    assert_eq!(
        first,
        Some(LoopEvent::Text {
            text: "Hel".to_owned()
        })
    );
    assert_eq!(outcome.end, LoopEnd::Aborted);
    server.wait_client_gone().await;
}

#[tokio::test]
async fn dropping_the_loop_cancels_the_provider_request() {
    let server = start_sequence(stalled_text()).await;
    let driver = anthropic(&server);
    let tools = ServerTools::default();
    let (tx, mut rx) = mpsc::channel(256);
    let turn = run_tool_loop(&driver, &tools, request(), LoopOptions::default(), &tx);
    fn assert_send<T: Send>(value: T) -> T {
        value
    }
    let turn = assert_send(turn);
    assert!(tokio::time::timeout(Duration::from_millis(500), turn)
        .await
        .is_err());
    assert_eq!(
        rx.recv().await,
        Some(LoopEvent::Text {
            text: "Hel".to_owned()
        })
    );
    server.wait_client_gone().await;
}

#[tokio::test]
async fn a_gone_consumer_aborts_a_tool_that_never_answers() {
    let server = start_sequence(anthropic_scripts(&["tool_call_deltas"])).await;
    let driver = anthropic(&server);
    let tools = Hanging::default();
    let (tx, mut rx) = mpsc::channel(256);
    let started = &tools.started;
    let consumer = async move {
        while let Some(event) = rx.recv().await {
            if matches!(event, LoopEvent::Context { .. }) {
                // Leave only once the tool is running, so the loop is waiting on it.
                while started.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                break;
            }
        }
    };
    let (outcome, ()) = tokio::time::timeout(
        Duration::from_secs(5),
        futures_util::future::join(
            run_tool_loop(&driver, &tools, request(), LoopOptions::default(), &tx),
            consumer,
        ),
    )
    .await
    .expect("the loop should notice the consumer left while the tool hangs");
    assert_eq!(outcome.end, LoopEnd::Aborted);
    assert_eq!(tools.started.load(Ordering::SeqCst), 1);
    // The call that never finished is answered as interrupted in the history, so a later turn
    // can continue it.
    assert_call_1_answered_as_interrupted(&outcome.history);
}

/// A sink that keeps every event and every retry it was told of.
#[derive(Default)]
struct Recording {
    events: Mutex<Vec<LoopEvent>>,
    retries: Mutex<Vec<(String, Duration)>>,
}

impl EventSink for Recording {
    fn send<'a>(&'a self, event: LoopEvent) -> ToolFuture<'a, Result<(), SinkClosed>> {
        self.events.lock().unwrap().push(event);
        Box::pin(std::future::ready(Ok(())))
    }

    fn closed<'a>(&'a self) -> ToolFuture<'a, ()> {
        Box::pin(std::future::pending())
    }

    fn retrying(&self, error: &LlmError, delay: Duration) {
        self.retries
            .lock()
            .unwrap()
            .push((error.to_string(), delay));
    }
}

/// `reply` as Anthropic writes it.
fn answer(reply: Reply) -> Script {
    Script::new(reply, true, false)
}

fn busy() -> Script {
    answer(Reply::Error {
        status: 503,
        body: json!({"error": {"message": "busy"}}),
    })
}

/// Runs a turn against `scripts` in order with `retry_delays`.
async fn run_retrying(
    scripts: Vec<Script>,
    retry_delays: Vec<Duration>,
) -> (ScriptedProvider, LoopOutcome, Recording) {
    let server = start_sequence(scripts).await;
    let sink = Recording::default();
    let outcome = run_pausing(&server, retry_delays, &sink).await;
    (server, outcome, sink)
}

/// Runs a turn against `server` into `sink` with `retry_delays`; it must end within 10 s.
async fn run_pausing(
    server: &ScriptedProvider,
    retry_delays: Vec<Duration>,
    sink: &dyn EventSink,
) -> LoopOutcome {
    let options = LoopOptions {
        retry_delays,
        ..LoopOptions::default()
    };
    tokio::time::timeout(
        Duration::from_secs(10),
        run_tool_loop(
            &anthropic(server),
            &ServerTools::default(),
            request(),
            options,
            sink,
        ),
    )
    .await
    .expect("the turn should end")
}

const PAUSE: Duration = Duration::from_millis(20);

#[tokio::test]
async fn a_transient_failure_is_asked_again_after_each_pause() {
    let (server, outcome, sink) = run_retrying(
        vec![
            answer(error_answer("anthropic", "rate_limit_429")),
            answer(Reply::Error {
                status: 529,
                body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            }),
            answer(Reply::Sse(transcript("anthropic", "text"))),
        ],
        vec![PAUSE, PAUSE * 2],
    )
    .await;
    assert_eq!(outcome.end, LoopEnd::Completed);
    assert_eq!(outcome.rounds, 1);
    assert_eq!(server.bodies().len(), 3);
    let retries = sink.retries.lock().unwrap().clone();
    assert_eq!(
        retries,
        [
            (
                "Anthropic quota or rate limit reached: Number of request tokens has exceeded \
                 your per-minute rate limit. Check your account balance."
                    .to_owned(),
                PAUSE
            ),
            (
                "Anthropic service error (529): Overloaded. Please try again.".to_owned(),
                PAUSE * 2
            ),
        ]
    );
    // The failed attempts said nothing to the consumer.
    let events = sink.events.lock().unwrap();
    assert!(
        !events.iter().any(|e| matches!(e, LoopEvent::Error { .. })),
        "{events:?}"
    );
    assert_eq!(events.last(), Some(&LoopEvent::Done));
}

#[tokio::test]
async fn retries_are_counted_per_round_and_then_the_turn_fails() {
    let (server, outcome, sink) = run_retrying(
        vec![
            busy(),
            answer(Reply::Sse(transcript("anthropic", "tool_call_deltas"))),
            busy(),
            busy(),
        ],
        vec![PAUSE],
    )
    .await;
    // One retry for the first round, which then finished; one for the second, spent.
    assert_eq!(server.bodies().len(), 4);
    assert_eq!(sink.retries.lock().unwrap().len(), 2);
    assert_eq!(outcome.rounds, 1);
    assert!(
        matches!(
            &outcome.end,
            LoopEnd::Failed(LoopError::Provider(LlmError::Http { status: 503, .. }))
        ),
        "{:?}",
        outcome.end
    );
}

#[tokio::test]
async fn only_a_quiet_transient_failure_is_asked_again() {
    let mut cut = answer(Reply::Sse(transcript("anthropic", "text")));
    cut.cut_after = Some(4);
    for (name, first, delays) in [
        (
            "a refused request",
            answer(error_answer("anthropic", "bad_request_400")),
            vec![PAUSE],
        ),
        (
            "a refused key",
            answer(error_answer("anthropic", "auth_401")),
            vec![PAUSE],
        ),
        (
            "an overflow",
            answer(error_answer("anthropic", "overflow_413")),
            vec![PAUSE],
        ),
        (
            "a spent quota",
            answer(Reply::Error {
                status: 402,
                body: json!({"error": {"message": "pay"}}),
            }),
            vec![PAUSE],
        ),
        ("a stream cut after text was sent", cut, vec![PAUSE]),
        (
            "a transient failure when no pause is given",
            busy(),
            Vec::new(),
        ),
    ] {
        let then = answer(Reply::Sse(transcript("anthropic", "text")));
        let (server, outcome, sink) = run_retrying(vec![first, then], delays).await;
        assert_eq!(server.bodies().len(), 1, "{name}");
        assert!(sink.retries.lock().unwrap().is_empty(), "{name}");
        assert!(matches!(outcome.end, LoopEnd::Failed(_)), "{name}");
    }
}

/// A consumer that goes away as soon as it is told of a retry.
struct LeavesOnRetry(tokio::sync::watch::Sender<bool>);

impl EventSink for LeavesOnRetry {
    fn send<'a>(&'a self, _event: LoopEvent) -> ToolFuture<'a, Result<(), SinkClosed>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn closed<'a>(&'a self) -> ToolFuture<'a, ()> {
        let mut gone = self.0.subscribe();
        Box::pin(async move {
            let _ = gone.wait_for(|gone| *gone).await;
        })
    }

    fn retrying(&self, _error: &LlmError, _delay: Duration) {
        self.0.send_replace(true);
    }
}

#[tokio::test]
async fn a_gone_consumer_ends_a_pause() {
    let server = start_sequence(vec![busy()]).await;
    let sink = LeavesOnRetry(tokio::sync::watch::channel(false).0);
    // The pause outlasts the run's deadline: only the consumer's going can end it.
    let outcome = run_pausing(&server, vec![Duration::from_secs(600)], &sink).await;
    assert_eq!(outcome.end, LoopEnd::Aborted);
}

#[tokio::test]
async fn a_forced_call_is_forced_once_then_the_model_chooses() {
    let tools = ServerTools::default();
    let server = start_sequence(anthropic_scripts(&["tool_call_deltas", "usage_cache"])).await;
    let mut forced = request();
    forced.tool_choice = ToolChoice::Function("site_find_nodes".to_owned());
    let (tx, _rx) = mpsc::channel(256);
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        run_tool_loop(
            &anthropic(&server),
            &tools,
            forced,
            LoopOptions::default(),
            &tx,
        ),
    )
    .await
    .expect("the turn should end");
    assert_eq!(outcome.end, LoopEnd::Completed);
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        bodies[0]["tool_choice"],
        json!({"type": "tool", "name": "site_find_nodes"})
    );
    assert!(bodies[1].get("tool_choice").is_none(), "{}", bodies[1]);
}
