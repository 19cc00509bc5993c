//! The lab model as the agent tests use it: its binary started on loopback, the CA it writes
//! trusted, the lab hostname resolved to it, the Anthropic and OpenAI conversations spoken
//! over TLS, the record file read back, and SIGTERM stopping it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The lab hostname: the certificate's name and the SNI the client sends.
const HOST: &str = "model.lab.test";

/// How long the lab model may take to get ready or to stop: a deadline, not a pace.
const WAIT: Duration = Duration::from_secs(60);

/// The scripted file: quotes, a newline and non-ASCII, so the joined JSON pieces are tested.
const WRITE_PATH: &str = "/srv/atelier/sites/demo/src/index.html";
const WRITE_CONTENT: &str = "<h1 class=\"hero\">Café du lab</h1>\n<p>Bonjour</p>\n";

/// The credentials the client sends, which the record must not hold.
const API_KEY: &str = "sk-ant-lab-secret-key";
const BEARER: &str = "Bearer lab-secret-token";

/// A running lab model, killed by its pid when dropped.
struct Lab {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    ca_pem: Vec<u8>,
}

impl Lab {
    /// Starts the binary on a free loopback port with `extra` arguments and waits for its CA.
    fn start(extra: &[&str]) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_port();
        let ca_out = dir.path().join("ca.pem");
        let child = Command::new(env!("CARGO_BIN_EXE_atelier-lab-model"))
            .arg("--listen")
            .arg(addr.to_string())
            .args(["--host", HOST])
            .arg("--ca-out")
            .arg(&ca_out)
            .arg("--record")
            .arg(dir.path().join("record.jsonl"))
            .args(["--write-path", WRITE_PATH, "--write-content", WRITE_CONTENT])
            .args(extra)
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut lab = Lab {
            child,
            addr,
            dir,
            ca_pem: Vec::new(),
        };
        let deadline = Instant::now() + WAIT;
        while !ca_out.exists() {
            if let Some(status) = lab.child.try_wait().unwrap() {
                panic!("the lab model exited ({status}): {}", lab.stderr());
            }
            assert!(Instant::now() < deadline, "no CA after {WAIT:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        lab.ca_pem = std::fs::read(&ca_out).unwrap();
        lab
    }

    /// A client that trusts the lab CA alone and resolves the lab hostname to the lab model.
    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&self.ca_pem).unwrap())
            .resolve(HOST, self.addr)
            .build()
            .unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.addr.port())
    }

    fn record_path(&self) -> PathBuf {
        self.dir.path().join("record.jsonl")
    }

    /// The record file's entries so far.
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.record_path())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit.
    fn terminate(&mut self) -> ExitStatus {
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "still running {WAIT:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The events of a server-sent event stream: `(event, data)`; `event` is empty if absent.
fn sse(body: &str) -> Vec<(String, String)> {
    body.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let mut event = String::new();
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = name.to_owned();
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = rest.to_owned();
                } else {
                    panic!("not an SSE line: {line:?}");
                }
            }
            (event, data)
        })
        .collect()
}

/// A Claude Code-like request body: the system prompt, the tools, the conversation.
fn messages_body(messages: Value, stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-lab",
        "max_tokens": 32000,
        "stream": stream,
        "system": [{ "type": "text", "text": "You are Claude Code." }],
        "tools": [{ "name": "Write", "description": "Writes a file", "input_schema": { "type": "object" } }],
        "messages": messages,
    })
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    reqwest::Version,
    String,
) {
    let response = client
        .post(url)
        .header("x-api-key", API_KEY)
        .header("authorization", BEARER)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let version = response.version();
    (status, headers, version, response.text().await.unwrap())
}

#[tokio::test]
async fn a_claude_code_turn_writes_then_ends() {
    let lab = Lab::start(&[]);
    let client = lab.client();
    let url = lab.url("/v1/messages?beta=true");

    // The first round: the model calls Write with the scripted path and content.
    let first = vec![
        json!({ "role": "user", "content": [{ "type": "text", "text": "Make the home page." }] }),
    ];
    let (status, headers, version, body) = post(
        &client,
        &url,
        &messages_body(Value::from(first.clone()), true),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(version, reqwest::Version::HTTP_11);
    assert_eq!(headers["content-type"], "text/event-stream");
    let events = sse(&body);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names[1], "content_block_start");
    assert!(names[2..names.len() - 3]
        .iter()
        .all(|name| *name == "content_block_delta"));
    assert!(names.len() - 5 >= 2, "the input comes in pieces: {names:?}");
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let data: Vec<Value> = events
        .iter()
        .map(|(name, data)| {
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name.as_str());
            data
        })
        .collect();
    let message = &data[0]["message"];
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "claude-sonnet-lab");
    assert_eq!(message["content"], json!([]));
    assert!(message["id"].as_str().unwrap().starts_with("msg_lab_"));
    assert!(message["usage"]["input_tokens"].is_u64());
    let block = &data[1]["content_block"];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "Write");
    assert_eq!(block["input"], json!({}));
    let tool_use_id = block["id"].as_str().unwrap().to_owned();
    assert!(tool_use_id.starts_with("toolu_lab_"));
    let input: String = data[2..data.len() - 3]
        .iter()
        .map(|event| {
            assert_eq!(event["index"], 0);
            assert_eq!(event["delta"]["type"], "input_json_delta");
            event["delta"]["partial_json"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({ "file_path": WRITE_PATH, "content": WRITE_CONTENT })
    );
    let delta = &data[data.len() - 2];
    assert_eq!(
        delta["delta"],
        json!({ "stop_reason": "tool_use", "stop_sequence": null })
    );
    assert!(delta["usage"]["output_tokens"].is_u64());

    // The second round carries the tool result: the model says its final text and stops.
    let mut second = first;
    second.push(json!({ "role": "assistant", "content": [{
        "type": "tool_use", "id": tool_use_id, "name": "Write",
        "input": { "file_path": WRITE_PATH, "content": WRITE_CONTENT },
    }] }));
    second.push(json!({ "role": "user", "content": [{
        "type": "tool_result", "tool_use_id": tool_use_id, "content": "File created successfully",
    }] }));
    let (status, _, _, body) = post(&client, &url, &messages_body(Value::from(second), true)).await;
    assert_eq!(status, 200, "{body}");
    let data: Vec<Value> = sse(&body)
        .iter()
        .map(|(_, data)| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(
        data[1]["content_block"],
        json!({ "type": "text", "text": "" })
    );
    let text: String = data
        .iter()
        .filter(|event| event["type"] == "content_block_delta")
        .map(|event| {
            assert_eq!(event["delta"]["type"], "text_delta");
            event["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, "Done: the home page is written.");
    let delta = data.iter().find(|event| event["type"] == "message_delta");
    assert_eq!(delta.unwrap()["delta"]["stop_reason"], "end_turn");
    assert_eq!(data.last().unwrap()["type"], "message_stop");

    // Counting tokens, and a path the lab model does not serve.
    let count_url = lab.url("/v1/messages/count_tokens?beta=true");
    let (status, _, _, body) = post(
        &client,
        &count_url,
        &json!({ "model": "m", "messages": [] }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({ "input_tokens": 10 })
    );
    let missing = client.get(lab.url("/v1/models")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");

    // Every request is in the record, in order, credentials redacted.
    let records = lab.records();
    let seen: Vec<(&str, &str)> = records
        .iter()
        .map(|entry| {
            (
                entry["method"].as_str().unwrap(),
                entry["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("POST", "/v1/messages"),
            ("POST", "/v1/messages"),
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/v1/models"),
        ]
    );
    for entry in &records[..3] {
        assert_eq!(entry["query"], "beta=true");
        assert_eq!(entry["headers"]["x-api-key"], "[redacted]");
        assert_eq!(entry["headers"]["authorization"], "[redacted]");
        assert_eq!(entry["headers"]["anthropic-version"], "2023-06-01");
        assert_eq!(
            entry["headers"]["host"],
            format!("{HOST}:{}", lab.addr.port())
        );
    }
    assert_eq!(records[0]["body"]["model"], "claude-sonnet-lab");
    assert_eq!(records[0]["body"]["stream"], true);
    assert_eq!(
        records[1]["body"]["messages"][2]["content"][0]["type"],
        "tool_result"
    );
    assert_eq!(records[3]["body"], Value::Null);
    let text = std::fs::read_to_string(lab.record_path()).unwrap();
    assert!(!text.contains("secret"), "a credential reached the record");
}

#[tokio::test]
async fn a_request_without_stream_gets_one_message() {
    let lab = Lab::start(&["--final-text", "Fini."]);
    let client = lab.client();
    let url = lab.url("/v1/messages");
    let first = json!([{ "role": "user", "content": "Make the home page." }]);
    let (status, headers, _, body) = post(&client, &url, &messages_body(first, false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "application/json");
    let message: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(message["model"], "claude-sonnet-lab");
    assert_eq!(
        message["content"][0]["input"],
        json!({ "file_path": WRITE_PATH, "content": WRITE_CONTENT })
    );
    let last = json!([{ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t", "content": "ok" }] }]);
    let (_, _, _, body) = post(&client, &url, &messages_body(last, false)).await;
    let message: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(
        message["content"],
        json!([{ "type": "text", "text": "Fini." }])
    );
}

#[tokio::test]
async fn openai_chat_completions_follow_the_same_script() {
    let lab = Lab::start(&["--final-text", "Fini."]);
    let client = lab.client();
    let url = lab.url("/v1/chat/completions");
    let first = json!({ "model": "gpt-lab", "stream": true, "messages": [
        { "role": "system", "content": "You build sites." },
        { "role": "user", "content": "Make the home page." },
    ] });
    let (status, headers, _, body) = post(&client, &url, &first).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let events = sse(&body);
    assert_eq!(
        events.last().unwrap(),
        &(String::new(), "[DONE]".to_owned())
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, data)| serde_json::from_str(data).unwrap())
        .collect();
    let call = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "write");
    let arguments: String = chunks
        .iter()
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({ "path": WRITE_PATH, "content": WRITE_CONTENT })
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );

    let last = json!({ "model": "gpt-lab", "stream": true, "messages": [
        { "role": "user", "content": "Make the home page." },
        { "role": "assistant", "content": null, "tool_calls": [call] },
        { "role": "tool", "tool_call_id": call["id"], "content": "written" },
    ] });
    let (_, _, _, body) = post(&client, &url, &last).await;
    let chunks: Vec<Value> = sse(&body)
        .iter()
        .filter(|(_, data)| data != "[DONE]")
        .map(|(_, data)| serde_json::from_str(data).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Fini.");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    assert_eq!(lab.records().len(), 2);
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_lab_ca_is_refused() {
    let lab = Lab::start(&[]);
    let stranger = reqwest::Client::builder()
        .use_rustls_tls()
        .resolve(HOST, lab.addr)
        .build()
        .unwrap();
    let refused = stranger.get(lab.url("/v1/messages")).send().await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(lab.records().is_empty());
}

#[test]
fn sigterm_stops_it() {
    let mut lab = Lab::start(&[]);
    let status = lab.terminate();
    assert!(status.success(), "{status}: {}", lab.stderr());
}

#[test]
fn a_taken_address_fails_with_its_reason() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_out = dir.path().join("ca.pem");
    let output = Command::new(env!("CARGO_BIN_EXE_atelier-lab-model"))
        .arg("--listen")
        .arg(taken.local_addr().unwrap().to_string())
        .args([
            "--host",
            HOST,
            "--write-path",
            WRITE_PATH,
            "--write-content",
            "x",
        ])
        .arg("--ca-out")
        .arg(&ca_out)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot listen on"), "{stderr}");
    assert!(!ca_out.exists(), "the ready signal came without a listener");
}
