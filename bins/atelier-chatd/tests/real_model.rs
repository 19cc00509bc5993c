//! The chatd binary against a real model server: llama.cpp's server with SmolLM2-135M-Instruct
//! on loopback (`scripts/local-model install`), reached through a stored credential of kind
//! "Custom Provider", as an editor would configure a self-hosted model. A missing install
//! fails these tests; it never skips them.

use crate::support;

use std::path::Path;

use crate::support::{call, chat_turn, prepare_dir, start};
use atelier_local_model::LocalModel;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

async fn server() -> LocalModel {
    LocalModel::start().await.unwrap_or_else(|e| panic!("{e}"))
}

/// A Custom Provider credential for `server` and a conversation in `scope` on its model.
async fn conversation(socket: &Path, server: &LocalModel, scope: &str) -> String {
    let credential = support::custom_provider_credential(socket, &server.base_url).await;
    // The editor picks the model from the server's own list.
    let (status, body) = call(
        socket,
        Method::GET,
        &format!("/admin/api/ai/providers/openai-compatible/models?credentialId={credential}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["models"][0]["id"], server.model_id.as_str(), "{body}");
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": scope, "credentialId": credential, "modelId": server.model_id})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["conversation"]["id"].as_str().unwrap().to_owned()
}

/// The stored messages of conversation `id` as (role, content).
async fn stored(socket: &Path, id: &str) -> Vec<(String, Value)> {
    let (status, detail) = call(
        socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    detail["conversation"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].clone()))
        .collect()
}

fn streamed_text(lines: &[Value]) -> String {
    lines
        .iter()
        .filter(|l| l["type"] == "text")
        .map(|l| l["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_turn_streams_ndjson_to_the_end_and_the_conversation_is_kept() {
    let server = server().await;
    let dir = prepare_dir();
    let daemon = start(dir.path(), &[], 0).await;
    let id = conversation(&daemon.socket, &server, "data").await;

    let lines = chat_turn(&daemon.socket, "data", &id, "Say hello.")
        .await
        .lines()
        .await;
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types.last(), Some(&"done"), "{lines:?}");
    assert!(!types.contains(&"error"), "{lines:?}");
    assert!(
        types.iter().filter(|t| **t == "text").count() > 1,
        "{lines:?}"
    );
    // The server streams no counts (see shared/llm's llama_cpp fixtures), so the booked usage
    // is the contract's line with nothing counted rather than made-up numbers.
    let usage = lines.iter().find(|l| l["type"] == "usage").expect("usage");
    assert_eq!(
        usage,
        &json!({"type": "usage", "promptTokens": 0, "completionTokens": 0, "costUsd": 0})
    );
    let text = streamed_text(&lines);

    // What was streamed is what was kept, and survives a restart of chatd.
    let expected = vec![
        (
            "user".to_owned(),
            json!([{"kind": "text", "text": "Say hello."}]),
        ),
        (
            "assistant".to_owned(),
            json!([{"kind": "text", "text": text}]),
        ),
    ];
    assert_eq!(stored(&daemon.socket, &id).await, expected);
    drop(daemon);
    let daemon = start(dir.path(), &[], 1).await;
    assert_eq!(stored(&daemon.socket, &id).await, expected);
}

#[tokio::test]
async fn a_server_killed_mid_stream_is_one_terminal_error_and_the_history_heals() {
    let mut server = server().await;
    let dir = prepare_dir();
    let daemon = start(dir.path(), &[], 0).await;
    let id = conversation(&daemon.socket, &server, "data").await;
    let prompt = "Write a long story about a lighthouse keeper and the sea.";

    let mut reply = chat_turn(&daemon.socket, "data", &id, prompt).await;
    let mut lines = Vec::new();
    while lines.last().is_none_or(|l: &Value| l["type"] != "text") {
        lines.push(reply.line().await.expect("a text line before the end"));
    }
    server.kill_9();
    lines.extend(reply.lines().await);
    let errors: Vec<&Value> = lines.iter().filter(|l| l["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{lines:?}");
    assert_eq!(
        lines.last(),
        Some(errors[0]),
        "the error ends the stream: {lines:?}"
    );
    assert!(!lines.iter().any(|l| l["type"] == "done"), "{lines:?}");

    // The history holds the question and nothing half-made that a provider would refuse: the
    // next turn, on a server back where the old one was, replays it and ends cleanly.
    let history = stored(&daemon.socket, &id).await;
    assert_eq!(
        history[0],
        ("user".to_owned(), json!([{"kind": "text", "text": prompt}]))
    );
    assert!(
        history[1..].iter().all(|(role, _)| role == "assistant"),
        "{history:?}"
    );
    let _back = LocalModel::start_on_port(server.port())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let lines = chat_turn(&daemon.socket, "data", &id, "Say hello.")
        .await
        .lines()
        .await;
    assert_eq!(lines.last(), Some(&json!({"type": "done"})), "{lines:?}");
    let history = stored(&daemon.socket, &id).await;
    let last = history.last().unwrap();
    assert_eq!(last.0, "assistant");
    assert_eq!(
        last.1,
        json!([{"kind": "text", "text": streamed_text(&lines)}])
    );
}
