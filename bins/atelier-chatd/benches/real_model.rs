//! chatd's added time to first byte over a real model server: 50 turns through the chatd
//! binary (a Custom Provider credential on llama.cpp's server with SmolLM2-135M-Instruct) and
//! 50 of the very same provider request sent directly with reqwest, interleaved, each read to
//! its end; the time to the first streamed text is compared.
//!
//! Needs `bash scripts/local-model install`. Run: `cargo bench -p atelier-chatd --bench
//! real_model`. The model server, chatd and the client share the machine's cores.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use atelier_chatd::prompts::system_prompt;
use atelier_chatd::store::Scope;
use atelier_llm::{ChatCompletionsDriver, ChatRequest, Driver, Endpoint, Message};
use atelier_local_model::LocalModel;
use futures_util::StreamExt;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const TURNS: usize = 50;
const WARMUP: usize = 3;
const PROMPT: &str = "Say hello.";

/// Time to the first text delta of one direct request, read to its end.
async fn direct_turn(client: &reqwest::Client, url: &str, body: &Value) -> Duration {
    let started = Instant::now();
    let response = client.post(url).json(body).send().await.unwrap();
    assert!(response.status().is_success());
    let mut stream = response.bytes_stream();
    let mut first = None;
    let mut pending = Vec::new();
    while let Some(chunk) = stream.next().await {
        pending.extend_from_slice(&chunk.unwrap());
        if first.is_none() && has_text_delta(&pending) {
            first = Some(started.elapsed());
        }
    }
    first.expect("the direct answer had text")
}

/// Whether the SSE bytes so far hold a chunk with non-empty `delta.content`.
fn has_text_delta(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .any(|chunk| {
            chunk
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .is_some_and(|text| !text.is_empty())
        })
}

/// Time to the first NDJSON `text` line of one chatd turn on a fresh conversation, read to
/// its end.
async fn chatd_turn(socket: &std::path::Path, credential: &str, model: &str) -> Duration {
    let (status, body) = support::call(
        socket,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": "data", "credentialId": credential, "modelId": model})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["conversation"]["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let mut reply = support::send(
        socket,
        "alice",
        support::ALL_CAPS,
        Method::POST,
        "/admin/api/ai/chat/data",
        Some(&json!({"conversationId": id, "content": [{"kind": "text", "text": PROMPT}]})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let mut first = None;
    while let Some(line) = reply.line().await {
        if first.is_none() && line["type"] == "text" {
            first = Some(started.elapsed());
        }
        assert_ne!(line["type"], "error", "{line}");
    }
    first.expect("the chatd turn had text")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let server = LocalModel::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = support::prepare_dir();
    let daemon = support::start(dir.path(), &[], 0).await;
    let credential = support::custom_provider_credential(&daemon.socket, &server.base_url).await;

    // The direct request is the body chatd's driver builds for the same turn.
    let request = ChatRequest {
        model: server.model_id.clone(),
        system: system_prompt(Scope::Data, None),
        messages: vec![Message::user_text(PROMPT)],
        ..ChatRequest::default()
    };
    let url = format!("{}/v1/chat/completions", server.base_url);
    let endpoint = Endpoint::new(reqwest::Client::new(), url.clone(), None);
    let body = ChatCompletionsDriver::openai_compatible(endpoint).request_body(&request);
    let client = reqwest::Client::new();

    let (mut direct, mut via_chatd) = (Vec::new(), Vec::new());
    for turn in 0..WARMUP + TURNS {
        let d = direct_turn(&client, &url, &body).await;
        let c = chatd_turn(&daemon.socket, &credential, &server.model_id).await;
        if turn >= WARMUP {
            direct.push(d);
            via_chatd.push(c);
        }
    }
    let mut added: Vec<Duration> = direct
        .iter()
        .zip(&via_chatd)
        .map(|(d, c)| c.saturating_sub(*d))
        .collect();
    direct.sort();
    via_chatd.sort();
    added.sort();
    println!(
        "real model ({}), {TURNS} turns each, interleaved",
        server.model_id
    );
    for (name, sorted) in [
        ("direct", &direct),
        ("via chatd", &via_chatd),
        ("added", &added),
    ] {
        println!(
            "  {name:<10} first text p50 {:8.2} ms  p99 {:8.2} ms",
            ms(percentile(sorted, 0.50)),
            ms(percentile(sorted, 0.99))
        );
    }
    println!(
        "  ratio chatd/direct at p50: {:.3}",
        ms(percentile(&via_chatd, 0.50)) / ms(percentile(&direct, 0.50))
    );
}
