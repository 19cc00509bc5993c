//! The AI settings journey against the real binary and scripted Anthropic and pricing
//! servers on loopback: a credential whose key never appears in clear (database file, WAL,
//! answers, logs), defaults seeded from the live catalogue, models with prices and context
//! windows, a priced chat, and the audit binned into days of two time zones across midnight.
//! Then what an editor meets around it: a chat send's refusals in the original's order, a
//! credential marked used only by a turn that ran, and a credential test that asks its provider
//! every time.

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{
    anthropic_frames, call, chat_frames, prepare_dir, scripted, send, start, Answer, ALL_CAPS,
};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const CANARY_KEY: &str = "sk-ant-CANARY-7f3a9c1e5b2d4086";
const OPUS: &str = "claude-opus-4-8-20260514";

fn anthropic_turn() -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [], "usage": {"input_tokens": 1000, "output_tokens": 1,
            "cache_read_input_tokens": 500, "cache_creation_input_tokens": 100}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Done."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 200}}),
        json!({"type": "message_stop"}),
    ]
}

/// The expected cost of one scripted turn at the scripted prices (per million: input 15,
/// output 75, cache read 1.5, cache write 18.75; Anthropic's prompt excludes the caches).
const TURN_COST: f64 =
    1000.0 / 1e6 * 15.0 + 500.0 / 1e6 * 1.5 + 100.0 / 1e6 * 18.75 + 200.0 / 1e6 * 75.0;

#[tokio::test]
async fn the_settings_journey_from_credential_to_audit() {
    let provider = scripted(|seen| match seen.path.as_str() {
        "/v1/models?limit=1000" => Answer::Json(
            StatusCode::OK,
            json!({"data": [
                {"id": "claude-sonnet-4-5-20250929", "display_name": "Claude Sonnet 4.5"},
                {"id": OPUS, "display_name": "Claude Opus 4.8"},
                {"id": "claude-haiku-4-5", "display_name": "Claude Haiku 4.5"},
            ]}),
        ),
        "/v1/messages" => Answer::Sse {
            frames: anthropic_frames(&anthropic_turn()),
            hang: false,
        },
        "/openrouter/v1/models" => Answer::Json(
            StatusCode::OK,
            json!({"data": [
                {"id": "anthropic/claude-opus-4.8", "context_length": 200000,
                 "pricing": {"prompt": "0.000015", "completion": "0.000075",
                             "input_cache_read": "0.0000015", "input_cache_write": "0.00001875"}},
                {"id": "anthropic/claude-sonnet-4.5", "context_length": 1000000,
                 "pricing": {"prompt": "0.000003", "completion": "0.000015"}},
                {"id": "meta/llama-4", "pricing": {"prompt": "0.0000001", "completion": "0.0000001"}},
            ]}),
        ),
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await;
    let dir = prepare_dir();
    let env = [
        ("CHATD_ANTHROPIC_URL", provider.base_url.clone()),
        (
            "CHATD_OPENROUTER_URL",
            format!("{}/openrouter", provider.base_url),
        ),
    ];
    let daemon = start(dir.path(), &env, 0).await;
    let socket = &daemon.socket;
    let mut answers: Vec<Value> = Vec::new();

    // 1. A credential: the auth shape follows from the provider; the key is never answered.
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/credentials",
        Some(
            json!({"providerId": "anthropic", "authMode": "baseUrl", "displayLabel": "Work",
                    "baseUrl": "http://127.0.0.1:1"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body,
        json!({"error": "Anthropic credentials use apiKey authentication."})
    );
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/credentials",
        Some(
            json!({"providerId": "anthropic", "authMode": "apiKey", "displayLabel": "Work",
                    "apiKey": CANARY_KEY}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    answers.push(body.clone());
    let credential = body["credential"].clone();
    let credential_id = credential["id"].as_str().unwrap().to_owned();
    assert_eq!(credential["providerId"], "anthropic");
    assert_eq!(credential["authMode"], "apiKey");
    assert_eq!(credential["baseUrl"], Value::Null);
    assert_eq!(credential["keyFingerprintCurrent"], true);
    assert_eq!(credential["lastUsedAt"], Value::Null);
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/credentials",
        Some(
            json!({"providerId": "anthropic", "authMode": "apiKey", "displayLabel": "Work",
                    "apiKey": "sk-other"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({"error": "A credential named \"Work\" already exists for this provider."})
    );
    // The listing of the catalogue used the stored key.
    let listings = provider.requests_to("/v1/models?limit=1000");
    assert_eq!(listings[0].headers["x-api-key"], CANARY_KEY);

    // 2. Every scope's default was seeded with the catalogue's smartest model.
    let (status, body) = call(socket, Method::GET, "/admin/api/ai/defaults", None).await;
    assert_eq!(status, StatusCode::OK);
    let seeded = json!({"credentialId": credential_id, "modelId": OPUS});
    assert_eq!(
        body,
        json!({"defaults": {"site": seeded, "content": seeded, "data": seeded, "plugin": seeded}})
    );

    // 3. The models, enriched with list prices and context windows.
    let (status, body) = call(
        socket,
        Method::GET,
        &format!("/admin/api/ai/providers/anthropic/models?credentialId={credential_id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    answers.push(body.clone());
    let models = body["models"].as_array().unwrap();
    let opus = models.iter().find(|m| m["id"] == OPUS).unwrap();
    assert_eq!(opus["tier"], "smartest");
    assert_eq!(
        opus["pricing"],
        json!({"inputPerMTok": 15.0, "outputPerMTok": 75.0})
    );
    assert_eq!(opus["contextWindow"], 200000);
    let sonnet = models
        .iter()
        .find(|m| m["label"] == "Claude Sonnet 4.5")
        .unwrap();
    assert_eq!(sonnet["contextWindow"], 1000000);
    let haiku = models
        .iter()
        .find(|m| m["id"] == "claude-haiku-4-5")
        .unwrap();
    assert!(haiku.get("pricing").is_none() && haiku.get("contextWindow").is_none());
    let (status, body) = call(
        socket,
        Method::GET,
        "/admin/api/ai/providers/gemini/models",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"error": "Unknown provider \"gemini\". Must be one of: anthropic, openai, ollama, openrouter, openai-compatible"})
    );

    // 4. Two chats on the default; usage and cost are booked.
    let mut conversations = Vec::new();
    for text in ["first", "second"] {
        let id = create_conversation(socket, &credential_id, OPUS).await;
        let reply = support::send(
            socket,
            "alice",
            support::ALL_CAPS,
            Method::POST,
            "/admin/api/ai/chat/site",
            Some(&json!({"conversationId": id, "content": [{"kind": "text", "text": text}]})),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK);
        let lines = reply.lines().await;
        let usage = lines.iter().find(|l| l["type"] == "usage").unwrap();
        assert_eq!(usage["promptTokens"], 1000);
        assert_eq!(usage["completionTokens"], 200);
        assert_eq!(usage["cacheReadTokens"], 500);
        assert_eq!(usage["cacheCreationTokens"], 100);
        assert!(
            (usage["costUsd"].as_f64().unwrap() - TURN_COST).abs() < 1e-9,
            "{usage}"
        );
        let context = lines.iter().find(|l| l["type"] == "context").unwrap();
        assert_eq!(context["contextTokens"], 1600);
        assert_eq!(lines.last().unwrap(), &json!({"type": "done"}));
        let (_, detail) = call(
            socket,
            Method::GET,
            &format!("/admin/api/ai/conversations/{id}"),
            None,
        )
        .await;
        let conversation = &detail["conversation"];
        assert!((conversation["costUsdTotal"].as_f64().unwrap() - TURN_COST).abs() < 1e-9);
        assert_eq!(conversation["contextTokens"], 1600);
        assert_eq!(conversation["cacheReadTokensTotal"], 500);
        answers.push(detail.clone());
        conversations.push(id);
    }
    let turns = provider.requests_to("/v1/messages");
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].headers["x-api-key"], CANARY_KEY);
    assert_eq!(turns[0].body["model"], OPUS);
    let (_, body) = call(socket, Method::GET, "/admin/api/ai/credentials", None).await;
    assert_ne!(body["credentials"][0]["lastUsedAt"], Value::Null);
    answers.push(body);

    // 5. The audit, with the two turns placed either side of a UTC midnight.
    let database = dir.path().join("chat.sqlite3");
    {
        let connection = rusqlite::Connection::open(&database).unwrap();
        connection
            .busy_timeout(std::time::Duration::from_secs(5))
            .unwrap();
        for (id, at) in [
            (&conversations[0], "2026-03-01T23:30:00.000Z"),
            (&conversations[1], "2026-03-02T00:30:00.000Z"),
        ] {
            connection
                .execute(
                    "UPDATE ai_messages SET created_at = ?2 WHERE conversation_id = ?1",
                    rusqlite::params![id, at],
                )
                .unwrap();
        }
    }
    // The usage slots follow the messages' (rewritten) times.
    atelier_chatd::store::Store::open(&database)
        .unwrap()
        .rebuild_usage_slots()
        .unwrap();
    let audit = |tz: &str| format!("/admin/api/ai/audit?since=2026-03-01T00:00:00Z&tz={tz}");
    let day = |day: &str, chats: i64, turns: f64| {
        json!({"day": day, "promptTokens": (1000.0 * turns) as i64, "completionTokens": (200.0 * turns) as i64,
               "costUsd": ((TURN_COST * turns) * 1e6).round() / 1e6, "chatCount": chats,
               "cacheReadTokens": (500.0 * turns) as i64, "cacheCreationTokens": (100.0 * turns) as i64})
    };
    let (status, utc) = call(socket, Method::GET, &audit("UTC"), None).await;
    assert_eq!(status, StatusCode::OK, "{utc}");
    assert_eq!(utc["since"], "2026-03-01T00:00:00.000Z");
    assert_eq!(
        utc["byDay"],
        json!([day("2026-03-01", 1, 1.0), day("2026-03-02", 1, 1.0)])
    );
    let (_, new_york) = call(socket, Method::GET, &audit("America%2FNew_York"), None).await;
    assert_eq!(new_york["byDay"], json!([day("2026-03-01", 2, 2.0)]));
    let (_, tokyo) = call(socket, Method::GET, &audit("Asia/Tokyo"), None).await;
    assert_eq!(tokyo["byDay"], json!([day("2026-03-02", 2, 2.0)]));
    let totals = &utc["totals"];
    assert_eq!(totals["promptTokens"], 2000);
    assert_eq!(totals["chatCount"], 2);
    assert!((totals["costUsd"].as_f64().unwrap() - 2.0 * TURN_COST).abs() < 1e-9);
    assert_eq!(utc["byUser"][0]["userId"], "alice");
    assert_eq!(utc["byUser"][0]["chatCount"], 2);
    assert_eq!(
        utc["byScope"],
        json!([{"scope": "site", "promptTokens": 2000, "completionTokens": 400,
        "costUsd": totals["costUsd"], "chatCount": 2, "cacheReadTokens": 1000, "cacheCreationTokens": 200}])
    );
    assert_eq!(utc["byModel"][0]["providerId"], "anthropic");
    assert_eq!(utc["byModel"][0]["modelId"], OPUS);
    // After both turns, nothing.
    let (_, later) = call(
        socket,
        Method::GET,
        "/admin/api/ai/audit?since=2026-03-03&tz=UTC",
        None,
    )
    .await;
    assert_eq!(later["byDay"], json!([]));
    assert_eq!(later["totals"]["chatCount"], 0);
    // A zone the host does not know bins the days in UTC, as the original.
    let (status, unknown) = call(socket, Method::GET, &audit("Mars/Olympus_Mons"), None).await;
    assert_eq!(status, StatusCode::OK, "{unknown}");
    assert_eq!(unknown["byDay"], utc["byDay"]);
    answers.push(utc);

    assert_no_secrets(dir.path(), &answers);

    // 6. A credential that is a default cannot be deleted until the defaults are cleared;
    // then its conversations lose it.
    let credential_path = format!("/admin/api/ai/credentials/{credential_id}");
    let (status, body) = call(socket, Method::DELETE, &credential_path, None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({"error": "This credential is currently set as a default — change the default in /admin/ai/defaults before deleting."})
    );
    for scope in ["site", "content", "data", "plugin"] {
        let (status, body) = call(
            socket,
            Method::DELETE,
            &format!("/admin/api/ai/defaults/{scope}"),
            None,
        )
        .await;
        assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    }
    let (status, _) = call(socket, Method::DELETE, &credential_path, None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, detail) = call(
        socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{}", conversations[0]),
        None,
    )
    .await;
    assert_eq!(detail["conversation"]["credentialId"], Value::Null);

    // 7. The canary key and the master key never appear in clear, now either.
    assert_no_secrets(dir.path(), &answers);
}

/// Neither the canary API key nor the master key (base64 or raw) is in the database files, the
/// captured logs or the collected answers.
fn assert_no_secrets(dir: &std::path::Path, answers: &[Value]) {
    let master_raw = [0x5A_u8; 32];
    let needles: Vec<Vec<u8>> = vec![
        CANARY_KEY.as_bytes().to_vec(),
        b"CANARY-7f3a".to_vec(),
        support::MASTER_KEY_B64.as_bytes().to_vec(),
        master_raw.to_vec(),
    ];
    let mut haystacks: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("chat.sqlite3") || name.ends_with(".log") {
            haystacks.push((name, std::fs::read(&path).unwrap()));
        }
    }
    assert!(haystacks.iter().any(|(n, _)| n == "chat.sqlite3"));
    assert!(haystacks.iter().any(|(n, _)| n.ends_with(".log")));
    let log = &haystacks
        .iter()
        .find(|(n, _)| n.ends_with(".log"))
        .unwrap()
        .1;
    assert!(
        String::from_utf8_lossy(log).contains("ai.credential.created"),
        "the log is captured"
    );
    haystacks.push(("answers".into(), serde_json::to_vec(answers).unwrap()));
    for (name, bytes) in &haystacks {
        for needle in &needles {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                "{name} contains a secret"
            );
        }
    }
}

/// The audit's by-user table names each user as the CMS does: the display name, else the
/// email, else the id, remembered from their own requests.
#[tokio::test]
async fn the_audit_names_each_user_as_the_cms_does() {
    let provider = scripted(|seen| match seen.path.as_str() {
        "/v1/messages" => Answer::Sse {
            frames: anthropic_frames(&anthropic_turn()),
            hang: false,
        },
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await;
    let (_dir, daemon) = start_on_anthropic(&provider).await;
    let socket = &daemon.socket;
    let users = [
        (
            "carol",
            "  Carol Danvers ",
            "carol@lab.example",
            "Carol Danvers",
        ),
        ("dave", " ", "dave@lab.example", "dave@lab.example"),
        ("erin", "", "", "erin"),
    ];
    for (user, display_name, email, _) in users {
        support::name_user(user, ALL_CAPS, display_name, email);
        let credential = create_credential(
            socket,
            user,
            json!({"providerId": "anthropic", "authMode": "apiKey", "displayLabel": user,
                   "apiKey": "sk-ant-audit"}),
        )
        .await;
        let as_user = |method, path: &'static str, body: Value| async move {
            send(socket, user, ALL_CAPS, method, path, Some(&body)).await
        };
        let created = as_user(
            Method::POST,
            "/admin/api/ai/conversations",
            json!({"scope": "site", "credentialId": credential, "modelId": OPUS}),
        )
        .await;
        assert_eq!(created.status, StatusCode::CREATED);
        let conversation = created.json().await["conversation"]["id"].clone();
        let content = json!([{"kind": "text", "text": "hi"}]);
        let turn = as_user(
            Method::POST,
            "/admin/api/ai/chat/site",
            json!({"conversationId": conversation, "content": content}),
        )
        .await;
        assert_eq!(turn.status, StatusCode::OK);
        assert_eq!(turn.lines().await.last().unwrap(), &json!({"type": "done"}));
    }
    let audit = "/admin/api/ai/audit?since=2000-01-01T00:00:00Z&tz=UTC";
    let (status, report) = call(socket, Method::GET, audit, None).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let named: Vec<(&str, &str)> = report["byUser"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["userId"].as_str().unwrap(),
                u["userLabel"].as_str().unwrap(),
            )
        })
        .collect();
    let want: Vec<(&str, &str)> = users.iter().map(|u| (u.0, u.3)).collect();
    assert_eq!(named, want);
}

/// A chatd of its own whose Anthropic provider is `provider`; its folder lives as long as it.
async fn start_on_anthropic(provider: &support::Scripted) -> (tempfile::TempDir, support::Daemon) {
    let dir = prepare_dir();
    let env = [("CHATD_ANTHROPIC_URL", provider.base_url.clone())];
    let daemon = start(dir.path(), &env, 0).await;
    (dir, daemon)
}

/// Not canonical base64 (unused bits set): the image preflight refuses it.
const BAD_IMAGE: &str = "/9j/4B==";
/// The first bytes of a JPEG: past the image preflight, refused only by the full decode that
/// runs after the capability gates.
const JPEG_START: &str = "/9j/AAAA";
const NOT_CANONICAL: &str = "Image data must be canonical base64.";
const NO_VISION: &str =
    "The selected model does not support image input. Choose a vision-capable model.";

/// A chat message asking about one image whose base64 is `data`.
fn image_message(conversation: &str, data: &str) -> Value {
    json!({"conversationId": conversation, "content": [
        {"kind": "text", "text": "What is this?"},
        {"kind": "image", "mimeType": "image/jpeg", "data": data}
    ]})
}

/// `user`'s new credential; its id.
async fn create_credential(socket: &Path, user: &str, body: Value) -> String {
    let reply = send(
        socket,
        user,
        ALL_CAPS,
        Method::POST,
        "/admin/api/ai/credentials",
        Some(&body),
    )
    .await;
    let status = reply.status;
    let body = reply.json().await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["credential"]["id"].as_str().unwrap().to_owned()
}

/// Alice's new site conversation on `credential_id` and `model`; its id.
async fn create_conversation(socket: &Path, credential_id: &str, model: &str) -> String {
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": "site", "credentialId": credential_id, "modelId": model})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["conversation"]["id"].as_str().unwrap().to_owned()
}

/// Alice's chat send on the site scope; the status and the JSON body of a refusal.
async fn chat(socket: &Path, message: &Value) -> (StatusCode, Value) {
    let reply = send_chat(socket, message).await;
    let status = reply.status;
    (status, reply.json().await)
}

/// Alice's chat send on the site scope, its answer unread.
async fn send_chat(socket: &Path, message: &Value) -> support::Reply {
    let path = "/admin/api/ai/chat/site";
    send(socket, "alice", ALL_CAPS, Method::POST, path, Some(message)).await
}

/// The `lastUsedAt` of alice's credential `id`.
async fn last_used(socket: &Path, id: &str) -> Value {
    let (status, body) = call(socket, Method::GET, "/admin/api/ai/credentials", None).await;
    assert_eq!(status, StatusCode::OK);
    body["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()["lastUsedAt"]
        .clone()
}

/// An Ollama model that calls tools and sees no images, on `base_url`.
fn ollama_credential(label: &str, base_url: &str) -> Value {
    json!({"providerId": "ollama", "authMode": "baseUrl", "displayLabel": label,
           "baseUrl": base_url})
}

#[tokio::test]
async fn a_chat_send_meets_its_refusals_in_the_original_order() {
    let provider = scripted(|seen| match seen.path.as_str() {
        "/api/show" => Answer::Json(
            StatusCode::OK,
            json!({"capabilities": ["completion", "tools"]}),
        ),
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await;
    let (dir, daemon) = start_on_anthropic(&provider).await;
    let socket = &daemon.socket;
    // Bob's credential, which a conversation of alice's names: not hers.
    let bobs = create_credential(
        socket,
        "bob",
        ollama_credential("Bob's", &provider.base_url),
    )
    .await;
    // Alice's hosted credential, then marked as sealed under another master key.
    let sealed = create_credential(
        socket,
        "alice",
        json!({"providerId": "anthropic", "authMode": "apiKey", "displayLabel": "Work",
               "apiKey": "sk-ant-order"}),
    )
    .await;
    rusqlite::Connection::open(dir.path().join("chat.sqlite3"))
        .unwrap()
        .execute(
            "UPDATE ai_provider_credentials SET key_fingerprint = 'another key' WHERE id = ?1",
            [&sealed],
        )
        .unwrap();
    let blind = create_credential(
        socket,
        "alice",
        ollama_credential("Local", &provider.base_url),
    )
    .await;
    let not_hers = create_conversation(socket, &bobs, "qwen3").await;
    let unopenable = create_conversation(socket, &sealed, OPUS).await;
    let on_blind = create_conversation(socket, &blind, "qwen3").await;

    let cases = [
        (
            "a credential not the caller's, before the image checks",
            &not_hers,
            BAD_IMAGE,
            StatusCode::NOT_FOUND,
            "Credential not found or no longer accessible.".to_owned(),
        ),
        (
            "a credential that does not open, before the image checks",
            &unopenable,
            BAD_IMAGE,
            StatusCode::CONFLICT,
            format!(
                "Credential {sealed} was encrypted with a different master key. \
                 Re-enter the API key in /admin/ai/providers."
            ),
        ),
        (
            "the image checks, before the model's capabilities",
            &on_blind,
            BAD_IMAGE,
            StatusCode::BAD_REQUEST,
            NOT_CANONICAL.to_owned(),
        ),
        (
            "the capability gate, once the image passed its checks",
            &on_blind,
            JPEG_START,
            StatusCode::UNPROCESSABLE_ENTITY,
            NO_VISION.to_owned(),
        ),
    ];
    for (name, conversation, image, status, error) in cases {
        let answer = chat(socket, &image_message(conversation, image)).await;
        assert_eq!(answer, (status, json!({"error": error})), "{name}");
    }
    for id in [&not_hers, &unopenable, &on_blind] {
        let (_, detail) = call(
            socket,
            Method::GET,
            &format!("/admin/api/ai/conversations/{id}"),
            None,
        )
        .await;
        assert_eq!(
            detail["conversation"]["messages"],
            json!([]),
            "nothing stored"
        );
    }
}

fn text_chunks(text: &str) -> Vec<Value> {
    vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}),
    ]
}

#[tokio::test]
async fn a_credential_is_marked_used_once_a_turn_ran_never_by_a_refused_send() {
    let provider = scripted(|seen| match seen.path.as_str() {
        "/api/show" | "/held/api/show" | "/failing/api/show" => Answer::Json(
            StatusCode::OK,
            json!({"capabilities": ["completion", "tools"]}),
        ),
        "/v1/chat/completions" => Answer::Sse {
            frames: chat_frames(&text_chunks("Hello."), true),
            hang: false,
        },
        // A turn that stays in flight until its client goes away.
        "/held/v1/chat/completions" => Answer::Sse {
            frames: chat_frames(&text_chunks("Hel")[..1], false),
            hang: true,
        },
        "/failing/v1/chat/completions" => Answer::Json(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": {"message": "the model crashed"}}),
        ),
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await;
    let dir = prepare_dir();
    let daemon = start(dir.path(), &[], 0).await;
    let socket = &daemon.socket;
    let credential_on = |label: &'static str, path: &'static str| {
        let body = ollama_credential(label, &format!("{}{path}", provider.base_url));
        async move { create_credential(socket, "alice", body).await }
    };
    let credential = credential_on("Local", "").await;
    let id = create_conversation(socket, &credential, "qwen3").await;
    assert_eq!(last_used(socket, &credential).await, Value::Null);
    let text = |conversation: &str| {
        let content = json!([{"kind": "text", "text": "hi"}]);
        json!({"conversationId": conversation, "content": content})
    };
    let start_turn = |message: Value| async move { send_chat(socket, &message).await };

    // Refused sends: the image preflight (400) and the capability gate (422).
    let (status, _) = chat(socket, &image_message(&id, BAD_IMAGE)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(last_used(socket, &credential).await, Value::Null, "400");
    let (status, _) = chat(socket, &image_message(&id, JPEG_START)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(last_used(socket, &credential).await, Value::Null, "422");

    // A turn in flight has not returned yet; a second send is refused as busy (409).
    let held_credential = credential_on("Held", "/held").await;
    let held = create_conversation(socket, &held_credential, "qwen3").await;
    let turn = start_turn(text(&held)).await;
    assert_eq!(turn.status, StatusCode::OK);
    let (status, _) = chat(socket, &text(&held)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let in_flight = last_used(socket, &held_credential).await;
    assert_eq!(in_flight, Value::Null, "in flight");
    // Its client goes away: the turn returns, aborted, and it ran.
    drop(turn);
    let mut marked = Value::Null;
    for _ in 0..200 {
        marked = last_used(socket, &held_credential).await;
        if marked.is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(marked.is_string(), "an aborted turn ran: {marked}");
    // The audit records it as the CMS does: completed, not failed, though it was cut short.
    let mut ends = Vec::new();
    for _ in 0..200 {
        let path = "/admin/api/ai/audit/events?action=ai.chat.&limit=50";
        let (status, log) = call(socket, Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{log}");
        ends = log["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["targetId"] == json!(held) && e["action"] != "ai.chat.started")
            .map(|e| (e["action"].clone(), e["metadata"]["error"].clone()))
            .collect();
        if !ends.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        ends,
        [(json!("ai.chat.completed"), Value::Null)],
        "a stopped turn"
    );

    // A turn that returned is marked by the time its client has read the last line.
    let turn = start_turn(text(&id)).await;
    assert_eq!(turn.status, StatusCode::OK);
    let lines = turn.lines().await;
    assert_eq!(lines.last().unwrap(), &json!({"type": "done"}));
    assert!(last_used(socket, &credential).await.is_string());

    // A turn that ended with an error ran too.
    let failing_credential = credential_on("Failing", "/failing").await;
    let failing = create_conversation(socket, &failing_credential, "qwen3").await;
    let turn = start_turn(text(&failing)).await;
    assert_eq!(turn.status, StatusCode::OK);
    let lines = turn.lines().await;
    assert_eq!(lines.last().unwrap()["type"], "error", "{lines:?}");
    assert!(last_used(socket, &failing_credential).await.is_string());
}

#[tokio::test]
async fn testing_a_credential_asks_its_provider_every_time() {
    let ollama_up = Arc::new(AtomicBool::new(false));
    let key_revoked = Arc::new(AtomicBool::new(false));
    let (up, revoked) = (Arc::clone(&ollama_up), Arc::clone(&key_revoked));
    let provider = scripted(move |seen| {
        let (up, revoked) = (up.load(Ordering::SeqCst), revoked.load(Ordering::SeqCst));
        match seen.path.as_str() {
            "/api/tags" if up => {
                Answer::Json(StatusCode::OK, json!({"models": [{"name": "qwen3"}]}))
            }
            "/api/tags" => Answer::Json(StatusCode::SERVICE_UNAVAILABLE, json!({})),
            "/api/show" => Answer::Json(
                StatusCode::OK,
                json!({"capabilities": ["completion", "tools"]}),
            ),
            "/v1/models?limit=1000" if revoked => Answer::Json(
                StatusCode::UNAUTHORIZED,
                json!({"error": {"message": "invalid x-api-key"}}),
            ),
            "/v1/models?limit=1000" => {
                Answer::Json(StatusCode::OK, json!({"data": [{"id": OPUS}]}))
            }
            _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
        }
    })
    .await;
    let (_dir, daemon) = start_on_anthropic(&provider).await;
    let socket = &daemon.socket;
    let test = |id: &str| format!("/admin/api/ai/credentials/{id}/test");

    // Ollama is not running: its built-in suggestions are no live model.
    let ollama = create_credential(
        socket,
        "alice",
        ollama_credential("Local", &provider.base_url),
    )
    .await;
    let (status, body) = call(socket, Method::POST, &test(&ollama), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"ok": false, "error": "No live models were returned for Ollama. \
            Check the credential and provider endpoint."})
    );
    // Started, it tests ok at once, and its models are the live ones.
    ollama_up.store(true, Ordering::SeqCst);
    let (_, body) = call(socket, Method::POST, &test(&ollama), None).await;
    assert_eq!(body, json!({"ok": true, "modelCount": 1}));
    let (status, body) = call(
        socket,
        Method::GET,
        &format!("/admin/api/ai/providers/ollama/models?credentialId={ollama}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["models"][0]["id"], "qwen3");
    assert_eq!(body["models"][0]["catalogueSource"], "live");

    // A key that lists, then is revoked: the next test says so.
    let hosted = create_credential(
        socket,
        "alice",
        json!({"providerId": "anthropic", "authMode": "apiKey", "displayLabel": "Work",
               "apiKey": "sk-ant-revocable"}),
    )
    .await;
    let (_, body) = call(socket, Method::POST, &test(&hosted), None).await;
    assert_eq!(body, json!({"ok": true, "modelCount": 1}));
    key_revoked.store(true, Ordering::SeqCst);
    let (_, body) = call(socket, Method::POST, &test(&hosted), None).await;
    assert_eq!(
        body,
        json!({"ok": false, "error": "Anthropic model list answered 401"})
    );
}

#[tokio::test]
async fn a_silent_provider_fails_the_turn_after_the_operators_idle_timeout() {
    let provider = scripted(|seen| match seen.path.as_str() {
        "/api/show" | "/quiet/api/show" => Answer::Json(
            StatusCode::OK,
            json!({"capabilities": ["completion", "tools"]}),
        ),
        // Never answers within the test: the turn must not wait for it.
        "/quiet/v1/chat/completions" => Answer::Delayed(
            Duration::from_secs(600),
            Box::new(Answer::Json(StatusCode::OK, json!({}))),
        ),
        // Answers its head and a first word, then goes silent.
        "/v1/chat/completions" => Answer::Sse {
            frames: chat_frames(&text_chunks("Hel")[..1], false),
            hang: true,
        },
        _ => Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await;
    let dir = prepare_dir();
    // Long enough that a loaded machine still brings the mid-stream provider's head and first
    // word in time (else its turn would end with the other message); a fraction of a second
    // shows the limit is reported exactly.
    let env = [("CHATD_PROVIDER_IDLE_TIMEOUT_MS", "2500".to_owned())];
    let daemon = start(dir.path(), &env, 0).await;
    let socket = &daemon.socket;
    for (label, path, expected) in [
        ("no answer at all", "/quiet", "no response for 2.5s"),
        ("silent mid-stream", "", "no data for 2.5s"),
    ] {
        let body = ollama_credential(label, &format!("{}{path}", provider.base_url));
        let credential = create_credential(socket, "alice", body).await;
        let conversation = create_conversation(socket, &credential, "qwen3").await;
        let content = json!([{"kind": "text", "text": "hi"}]);
        let message = json!({"conversationId": conversation, "content": content});
        let turn = send_chat(socket, &message).await;
        assert_eq!(turn.status, StatusCode::OK, "{label}");
        let lines = tokio::time::timeout(Duration::from_secs(60), turn.lines())
            .await
            .unwrap_or_else(|_| panic!("{label}: the turn outlived its idle timeout"));
        let last = lines.last().unwrap();
        assert_eq!(last["type"], "error", "{label}: {lines:?}");
        let said = last["message"].as_str().unwrap_or_default();
        assert!(said.contains(expected), "{label}: {said}");
    }
}
