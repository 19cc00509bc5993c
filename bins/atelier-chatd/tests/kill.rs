//! `kill -9` of the chatd binary at its worst moments — mid-turn with a tool call announced
//! and unanswered, during a pricing refresh, during an image decode, amid a burst of
//! concurrent turns whose writes share group commits — then a restart: SQLite's integrity
//! check passes, nothing half-written is visible, every acknowledged message is there, the
//! killed turn's start gets its end in the audit log, and the conversation goes on. And a stop
//! (SIGTERM) while a turn waits on the browser, which ends that turn at once.

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{
    call, chat_frames, chat_turn, kill_9, prepare_dir, scripted, send, start, terminate, Answer,
    ALL_CAPS,
};
use base64::Engine as _;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const INTERRUPTED: &str =
    "Tool call did not complete — the previous turn was interrupted before a result was produced.";

fn integrity_ok(dir: &Path) -> bool {
    let connection = rusqlite::Connection::open(dir.join("chat.sqlite3")).unwrap();
    let result: String = connection
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    result == "ok"
}

fn text_chunks(text: &str) -> Vec<Value> {
    vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}),
    ]
}

/// An Ollama on loopback: `/api/show` says what the model can do; chat turns follow `turns`
/// (the first request gets the first script, and so on; the last one repeats).
async fn ollama(capabilities: Value, turns: Vec<(Vec<Value>, bool)>) -> support::Scripted {
    let count = Arc::new(AtomicUsize::new(0));
    scripted(move |seen| match seen.path.as_str() {
        "/api/show" => Answer::Json(StatusCode::OK, json!({"capabilities": capabilities})),
        "/v1/chat/completions" => {
            let n = count.fetch_add(1, Ordering::SeqCst).min(turns.len() - 1);
            let (chunks, hang) = &turns[n];
            Answer::Sse {
                frames: chat_frames(chunks, !hang),
                hang: *hang,
            }
        }
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await
}

async fn ollama_conversation(socket: &Path, base_url: &str, scope: &str) -> String {
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/credentials",
        Some(
            json!({"providerId": "ollama", "authMode": "baseUrl", "displayLabel": "Local",
                    "baseUrl": base_url}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let credential = body["credential"]["id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": scope, "credentialId": credential, "modelId": "qwen3"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    body["conversation"]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn kill_9_mid_turn_heals_the_conversation_and_the_next_turn_replays_it() {
    let tool_call = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Checking."}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_9",
            "type": "function", "function": {"name": "content_get_document", "arguments": "{\"documentId\":"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": "\"d1\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ];
    let provider = ollama(
        json!(["completion", "tools"]),
        vec![(tool_call, true), (text_chunks("Back again."), false)],
    )
    .await;
    let dir = prepare_dir();
    let mut daemon = start(dir.path(), &[], 0).await;
    let id = ollama_conversation(&daemon.socket, &provider.base_url, "content").await;

    let mut reply = chat_turn(&daemon.socket, "content", &id, "Open d1").await;
    // Once the browser has seen the call, its row is durable; the provider then goes silent.
    loop {
        let line = reply.line().await.unwrap();
        if line["type"] == "toolCall" {
            assert_eq!(line["toolCallId"], "call_9");
            break;
        }
    }
    kill_9(&mut daemon);
    drop(reply);
    assert!(integrity_ok(dir.path()));

    let daemon = start(dir.path(), &[], 1).await;
    let (status, detail) = call(
        &daemon.socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let rows: Vec<(Value, Value, Value)> = detail["conversation"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].clone(),
                m["content"].clone(),
                m["toolCallId"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                json!("user"),
                json!([{"kind": "text", "text": "Open d1"}]),
                Value::Null
            ),
            (
                json!("assistant"),
                json!([{"kind": "text", "text": "Checking."}]),
                Value::Null
            ),
            (
                json!("assistant"),
                json!([{"kind": "toolCall", "toolCallId": "call_9", "toolName": "content_get_document",
                        "input": {"documentId": "d1"}}]),
                json!("call_9")
            ),
            (
                json!("tool"),
                json!([{"kind": "toolResult", "ok": false, "error": INTERRUPTED}]),
                json!("call_9")
            ),
        ]
    );

    // The next turn replays the healed history: the call, its interrupted result, the new text.
    let reply = send(
        &daemon.socket,
        "alice",
        ALL_CAPS,
        Method::POST,
        "/admin/api/ai/chat/content",
        Some(&json!({"conversationId": id, "content": [{"kind": "text", "text": "Try again"}]})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let lines = reply.lines().await;
    assert_eq!(lines.last().unwrap(), &json!({"type": "done"}), "{lines:?}");
    let turns = provider.requests_to("/v1/chat/completions");
    assert_eq!(turns.len(), 2);
    let messages = turns[1].body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_9");
    assert_eq!(messages[3]["tool_call_id"], "call_9");
    assert_eq!(messages[3]["content"], INTERRUPTED);
    assert_eq!(messages[4]["content"], "Try again");

    // The killed turn's start got its end when chatd came back; the next turn has both.
    let (status, log) = call(
        &daemon.socket,
        Method::GET,
        "/admin/api/ai/audit/events?action=ai.chat.",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{log}");
    let events = log["events"].as_array().unwrap();
    let actions: Vec<&str> = events
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "ai.chat.completed",
            "ai.chat.started",
            "ai.chat.failed",
            "ai.chat.started"
        ]
    );
    assert!(events.iter().all(|e| e["targetId"] == json!(id)));
    assert_eq!(
        events[2]["metadata"]["error"],
        atelier_chatd::store::events::TURN_INTERRUPTED_ERROR
    );
    assert_eq!(events[2]["metadata"]["providerId"], "ollama");
}

/// A stop while a turn waits on the browser: the result would come on a connection the
/// stopping chatd no longer accepts, so the turn ends at once (not after the drain's deadline)
/// with a line saying why, its call closed as interrupted and its end recorded; the provider
/// is not asked again.
#[tokio::test]
async fn a_stop_ends_a_turn_waiting_on_the_browser_at_once_and_records_it() {
    let tool_call = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Looking."}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_b",
            "type": "function", "function": {"name": "site_get_node_html",
            "arguments": "{\"nodeId\":\"n7\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ];
    let provider = ollama(
        json!(["completion", "tools"]),
        vec![(tool_call, false), (text_chunks("Never asked."), false)],
    )
    .await;
    let dir = prepare_dir();
    let mut daemon = start(dir.path(), &[], 0).await;
    let id = ollama_conversation(&daemon.socket, &provider.base_url, "site").await;
    let mut reply = chat_turn(&daemon.socket, "site", &id, "Show n7").await;
    while reply.line().await.unwrap()["type"] != "toolRequest" {}

    assert!(terminate(&mut daemon).await.success());
    let stopped = "The AI runtime is restarting and could not wait for the editor's tool result. \
                   Send your message again.";
    assert_eq!(
        reply.lines().await,
        [
            json!({"type": "toolResult", "toolCallId": "call_b", "toolName": "site_get_node_html",
                   "ok": false, "error": INTERRUPTED}),
            json!({"type": "error", "message": stopped}),
        ]
    );
    assert_eq!(provider.requests_to("/v1/chat/completions").len(), 1);

    let (last, ended) = after_a_restart(dir.path(), &id).await;
    assert_eq!(last["role"], "tool");
    assert_eq!(
        last["content"],
        json!([{"kind": "toolResult", "ok": false, "error": INTERRUPTED}])
    );
    assert_eq!(ended["action"], "ai.chat.failed", "{ended}");
    assert_eq!(ended["metadata"]["error"], stopped);
}

/// What a chatd started again in `dir` has of conversation `id`: its last message and the
/// newest chat turn record.
async fn after_a_restart(dir: &Path, id: &str) -> (Value, Value) {
    let daemon = start(dir, &[], 1).await;
    let (status, detail) = call(
        &daemon.socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let last = detail["conversation"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let (status, log) = call(
        &daemon.socket,
        Method::GET,
        "/admin/api/ai/audit/events?action=ai.chat.",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{log}");
    (last, log["events"][0].clone())
}

/// A stop while a turn streams from a model that does not finish: shortly before the drain's
/// deadline the turn ends with a line saying why, and what it streamed is stored and its end
/// recorded before the process goes (they were lost with the runtime, the stream cut).
#[tokio::test]
async fn a_stop_ends_a_streaming_turn_before_the_deadline_and_keeps_what_it_said() {
    let half = json!({"choices": [{"index": 0, "delta": {"role": "assistant",
        "content": "Half an answer"}}]});
    let provider = ollama(json!(["completion", "tools"]), vec![(vec![half], true)]).await;
    let dir = prepare_dir();
    let mut daemon = start(dir.path(), &[], 0).await;
    let id = ollama_conversation(&daemon.socket, &provider.base_url, "site").await;
    let mut reply = chat_turn(&daemon.socket, "site", &id, "Write").await;
    let mut said = String::new();
    while said != "Half an answer" {
        let line = reply.line().await.unwrap();
        if line["type"] == "text" {
            said.push_str(line["text"].as_str().unwrap());
        }
    }

    assert!(terminate(&mut daemon).await.success());
    let stopped = "The AI runtime is restarting and ended this turn before its answer was \
                   complete. Send your message again.";
    assert_eq!(
        reply.lines().await,
        [json!({"type": "error", "message": stopped})]
    );

    let (last, ended) = after_a_restart(dir.path(), &id).await;
    assert_eq!(last["role"], "assistant", "{last}");
    assert_eq!(
        last["content"],
        json!([{"kind": "text", "text": "Half an answer"}])
    );
    assert_eq!(ended["action"], "ai.chat.failed", "{ended}");
    assert_eq!(ended["metadata"]["error"], stopped);
}

/// A pricing catalogue big enough that storing it takes a while.
fn big_catalogue(models: usize) -> Value {
    json!({"data": (0..models).map(|n| json!({
        "id": format!("anthropic/model-{n}"), "context_length": 100000 + n,
        "pricing": {"prompt": "0.000003", "completion": "0.000015"}})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn kill_9_during_a_pricing_refresh_leaves_all_or_nothing() {
    const MODELS: usize = 20_000;
    let catalogue = Arc::new(big_catalogue(MODELS));
    let pricing = scripted(move |seen| match seen.path.as_str() {
        "/v1/models" => Answer::Json(StatusCode::OK, catalogue.as_ref().clone()),
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({})),
    })
    .await;
    let dir = prepare_dir();
    let env = [("CHATD_OPENROUTER_URL", pricing.base_url.clone())];
    let daemon = start(dir.path(), &env, 0).await;
    let (status, body) = call(
        &daemon.socket,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": "site", "credentialId": "none", "modelId": "m"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let id = body["conversation"]["id"].as_str().unwrap().to_owned();
    drop(daemon);

    let stored = |dir: &Path| -> i64 {
        rusqlite::Connection::open(dir.join("chat.sqlite3"))
            .unwrap()
            .query_row("SELECT count(*) FROM ai_model_pricing", [], |row| {
                row.get(0)
            })
            .unwrap()
    };
    // The models route prices Anthropic models: a cold chatd refreshes the catalogue first.
    for (run, delay_ms) in [5_u64, 40, 120, 300, 600, 1200].into_iter().enumerate() {
        let mut daemon = start(dir.path(), &env, run + 1).await;
        let socket = daemon.socket.clone();
        let request = tokio::spawn(async move {
            call(
                &socket,
                Method::GET,
                "/admin/api/ai/providers/anthropic/models",
                None,
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        kill_9(&mut daemon);
        request.abort();
        assert!(integrity_ok(dir.path()), "run {run}");
        let count = stored(dir.path());
        assert!(
            count == 0 || count == MODELS as i64,
            "run {run}: {count} rows"
        );
    }
    let daemon = start(dir.path(), &env, 99).await;
    let (status, body) = call(
        &daemon.socket,
        Method::GET,
        "/admin/api/ai/providers/anthropic/models",
        None,
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"models": []})));
    let (status, detail) = call(
        &daemon.socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["conversation"]["id"], id.as_str());
    // The refresh that finished stored the whole catalogue.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while stored(dir.path()) != MODELS as i64 {
        assert!(tokio::time::Instant::now() < deadline, "never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A noisy 1568×956 JPEG (about 1.5 million pixels), slow to decode and encode.
fn large_jpeg() -> String {
    let mut seed = 0x2545_f491_u32;
    let image = image::RgbImage::from_fn(1568, 956, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let noise = (seed & 0x3f) as u8;
        image::Rgb([
            (x % 256) as u8 ^ noise,
            (y % 256) as u8,
            noise.wrapping_mul(3),
        ])
    });
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 80)
        .encode_image(&image)
        .unwrap();
    assert!(jpeg.len() <= 1_500_000, "{}", jpeg.len());
    base64::engine::general_purpose::STANDARD.encode(jpeg)
}

#[tokio::test]
async fn kill_9_during_an_image_decode_stores_nothing_and_the_conversation_goes_on() {
    let provider = ollama(
        json!(["completion", "tools", "vision"]),
        vec![(text_chunks("Seen."), false)],
    )
    .await;
    let dir = prepare_dir();
    let mut daemon = start(dir.path(), &[], 0).await;
    let id = ollama_conversation(&daemon.socket, &provider.base_url, "content").await;
    let image = large_jpeg();
    let content: Vec<Value> = (0..8)
        .map(|_| json!({"kind": "image", "mimeType": "image/jpeg", "data": image}))
        .collect();
    let body = json!({"conversationId": id, "content": content});
    let socket = daemon.socket.clone();
    let request = tokio::spawn(async move {
        send(
            &socket,
            "alice",
            ALL_CAPS,
            Method::POST,
            "/admin/api/ai/chat/content",
            Some(&body),
        )
        .await
        .status
    });
    // The capability lookup precedes the decodes: once the model was asked about, the images
    // are being decoded (eight of them take seconds).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while provider.requests_to("/api/show").is_empty() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill_9(&mut daemon);
    request.abort();
    assert!(integrity_ok(dir.path()));

    let daemon = start(dir.path(), &[], 1).await;
    let (_, detail) = call(
        &daemon.socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(detail["conversation"]["messages"], json!([]));
    assert_eq!(detail["conversation"]["title"], "New conversation");
    let reply = send(
        &daemon.socket,
        "alice",
        ALL_CAPS,
        Method::POST,
        "/admin/api/ai/chat/content",
        Some(&json!({"conversationId": id, "content": [{"kind": "text", "text": "Still there?"}]})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.lines().await.last().unwrap(),
        &json!({"type": "done"})
    );
    assert!(provider.requests_to("/v1/chat/completions").len() == 1);
}

/// Conversations taking turns at once in the burst: each a client sending turn after turn.
const BURST: usize = 48;

/// Acknowledged turns to wait for before each kill: the burst is in full swing by then.
const ACKED_BEFORE_KILL: usize = 3 * BURST;

/// How many times the burst is killed and chatd restarted.
const BURST_ROUNDS: usize = 4;

/// How one turn of the burst went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnOutcome {
    /// The stream's last line, `done`, arrived: chatd acknowledged the turn's messages.
    Done,
    /// Another turn of the conversation still held its lease (it ends just after its `done`).
    Busy,
    /// Anything else: chatd went away, or answered something else.
    Lost,
}

/// Sends one chat turn without panicking when chatd vanishes (a `kill -9` mid-burst), and
/// reads its stream up to `done`.
async fn burst_turn(socket: &Path, body: &Value) -> TurnOutcome {
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::rt::TokioIo;

    let Ok(stream) = tokio::net::UnixStream::connect(socket).await else {
        return TurnOutcome::Lost;
    };
    let Ok((mut sender, connection)) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return TurnOutcome::Lost;
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = hyper::Request::builder()
        .method(Method::POST)
        .uri("/admin/api/ai/chat/content")
        .header("host", "chatd")
        .header("authorization", format!("Bearer {}", support::TOKEN))
        .header("cookie", support::cookie_for("alice", ALL_CAPS))
        .header("origin", support::ORIGIN)
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let Ok(response) = sender.send_request(request).await else {
        return TurnOutcome::Lost;
    };
    match response.status() {
        StatusCode::OK => {}
        StatusCode::CONFLICT => return TurnOutcome::Busy,
        _ => return TurnOutcome::Lost,
    }
    let mut body = response.into_body();
    let mut buffer = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            buffer.extend_from_slice(&data);
        }
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let Ok(line) = serde_json::from_slice::<Value>(&line) else {
                return TurnOutcome::Lost;
            };
            match line["type"].as_str() {
                Some("done") => return TurnOutcome::Done,
                Some("error") => return TurnOutcome::Lost,
                _ => {}
            }
        }
    }
    TurnOutcome::Lost
}

fn burst_text(conversation: usize, turn: usize) -> String {
    format!("burst {conversation} turn {turn}")
}

/// Checks, on a chatd restarted after a kill, that every turn of `acked` (per conversation)
/// is stored with its reply and its end record, that nothing but the turns sent is, and
/// returns how many turns each conversation holds (the next turn's number).
async fn check_burst(
    socket: &Path,
    database: &Path,
    conversations: &[String],
    acked: &[Vec<usize>],
    sent: &[usize],
) -> Vec<usize> {
    let connection = rusqlite::Connection::open(database).unwrap();
    let mut stored = Vec::new();
    for (n, id) in conversations.iter().enumerate() {
        let (status, detail) = call(
            socket,
            Method::GET,
            &format!("/admin/api/ai/conversations/{id}"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let rows: Vec<(String, Value)> = detail["conversation"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].clone()))
            .collect();
        // Where each turn's user message is: turns are numbered in the order they were sent.
        let users: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].0 == "user").collect();
        for (turn, &at) in users.iter().enumerate() {
            assert_eq!(
                rows[at].1,
                json!([{"kind": "text", "text": burst_text(n, turn)}]),
                "conversation {n}, turn {turn}"
            );
        }
        let last_acked = acked[n].last().map_or(0, |turn| turn + 1);
        // Every acknowledged turn is there, and at most the turns sent besides.
        assert!(
            (last_acked..=sent[n]).contains(&users.len()),
            "conversation {n}: turns up to {last_acked} acknowledged, {} sent, {} stored",
            sent[n],
            users.len()
        );
        // An acknowledged turn is its user message, then the reply it streamed.
        for &turn in &acked[n] {
            assert_eq!(
                rows.get(users[turn] + 1),
                Some(&(
                    "assistant".to_owned(),
                    json!([{"kind": "text", "text": format!("echo: {}", burst_text(n, turn))}])
                )),
                "conversation {n}, turn {turn}"
            );
        }
        // Its end is recorded too: chatd writes it before the stream's `done`.
        let completed: usize = connection
            .query_row(
                "SELECT count(*) FROM audit_events
                 WHERE target_id = ?1 AND action = 'ai.chat.completed'",
                [id],
                |row| row.get(0),
            )
            .unwrap();
        assert!(
            completed >= acked[n].len(),
            "conversation {n}: {} turns acknowledged, {completed} completions recorded",
            acked[n].len()
        );
        stored.push(users.len());
    }
    stored
}

#[tokio::test]
async fn kill_9_during_a_burst_of_concurrent_turns_loses_no_acknowledged_message() {
    // The provider echoes the turn's text, so every stored reply names its turn. (After a
    // killed turn, its user message and the next one reach the provider as one.)
    let provider = scripted(|seen| match seen.path.as_str() {
        "/api/show" => Answer::Json(
            StatusCode::OK,
            json!({"capabilities": ["completion", "tools"]}),
        ),
        "/v1/chat/completions" => {
            let last = seen.body["messages"]
                .as_array()
                .and_then(|messages| messages.last())
                .and_then(|message| message["content"].as_str())
                .unwrap_or_default();
            let asked = last.rfind("burst ").map_or(last, |at| &last[at..]);
            Answer::Sse {
                frames: chat_frames(&text_chunks(&format!("echo: {asked}")), true),
                hang: false,
            }
        }
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await;
    let dir = prepare_dir();
    let database = dir.path().join("chat.sqlite3");
    let mut daemon = start(dir.path(), &[], 0).await;
    let first = ollama_conversation(&daemon.socket, &provider.base_url, "content").await;
    let (_, detail) = call(
        &daemon.socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{first}"),
        None,
    )
    .await;
    let credential = detail["conversation"]["credentialId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut conversations = vec![first];
    while conversations.len() < BURST {
        let (status, body) = call(
            &daemon.socket,
            Method::POST,
            "/admin/api/ai/conversations",
            Some(json!({"scope": "content", "credentialId": credential, "modelId": "qwen3"})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        conversations.push(body["conversation"]["id"].as_str().unwrap().to_owned());
    }

    // Each round kills chatd amid the burst and checks the restarted one; a kill can fall
    // anywhere in a commit's course, so a few rounds try a few places.
    let mut next = vec![0; BURST];
    let mut acked: Vec<Vec<usize>> = vec![Vec::new(); BURST];
    for round in 0..BURST_ROUNDS {
        // Each client sends its conversation's turns one after another, and counts a turn as
        // acknowledged only once its `done` line arrived; it stops at the first turn it lost.
        let acked_now = Arc::new(AtomicUsize::new(0));
        let enough = Arc::new(tokio::sync::Notify::new());
        let clients: Vec<_> = conversations
            .iter()
            .enumerate()
            .map(|(n, id)| {
                let (socket, id, acked_now, enough) = (
                    daemon.socket.clone(),
                    id.clone(),
                    Arc::clone(&acked_now),
                    Arc::clone(&enough),
                );
                let mut turn = next[n];
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    loop {
                        let body = json!({"conversationId": id,
                            "content": [{"kind": "text", "text": burst_text(n, turn)}]});
                        match burst_turn(&socket, &body).await {
                            TurnOutcome::Done => {
                                done.push(turn);
                                turn += 1;
                                if acked_now.fetch_add(1, Ordering::SeqCst) + 1 == ACKED_BEFORE_KILL
                                {
                                    enough.notify_one();
                                }
                            }
                            TurnOutcome::Busy => {
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                            // The lost turn was sent: it may be stored or not.
                            TurnOutcome::Lost => return (done, turn + 1),
                        }
                    }
                })
            })
            .collect();
        // The kill follows an acknowledgement at once, while the writes of the turns around
        // it are being committed.
        let waited = tokio::time::timeout(Duration::from_secs(60), enough.notified()).await;
        assert!(
            waited.is_ok(),
            "round {round}: the burst acknowledged only {} turns",
            acked_now.load(Ordering::SeqCst)
        );
        kill_9(&mut daemon);
        let mut sent = Vec::new();
        for (n, client) in clients.into_iter().enumerate() {
            let (done, sent_up_to) = client.await.unwrap();
            acked[n].extend(done);
            sent.push(sent_up_to);
        }
        assert!(integrity_ok(dir.path()), "round {round}");

        daemon = start(dir.path(), &[], round + 1).await;
        next = check_burst(&daemon.socket, &database, &conversations, &acked, &sent).await;
    }
    let acked_turns: usize = acked.iter().map(Vec::len).sum();
    assert!(
        acked_turns >= BURST_ROUNDS * ACKED_BEFORE_KILL,
        "{acked_turns}"
    );
}
