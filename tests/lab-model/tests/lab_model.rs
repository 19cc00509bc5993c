//! The lab model as the agent tests use it: its binary started on loopback, the CA it writes
//! trusted, the lab hostname resolved to it, the Anthropic and OpenAI conversations spoken
//! over TLS, the record file read back, and SIGTERM stopping it. Its npm registry as a build
//! uses it: the real `npm install` of a package it serves, and the real `node` running it.
//! With `--upstream`: chat completions forwarded to a stand-in upstream on loopback and
//! streamed back, and a dead upstream answered with a 502.

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The lab hostname: the certificate's name and the SNI the client sends.
const HOST: &str = "model.lab.test";

/// The registry's lab hostname, for the tests of the npm registry.
const REGISTRY_HOST: &str = "registry.lab.example";

/// The package the shipped site template depends on, as the registry tests ask for it.
const PACKAGE: &str = "escape-html@1.0.3";

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
        Lab::start_as(&[HOST], extra)
    }

    /// [`Lab::start`] with a certificate for `hosts` (names or addresses) instead of [`HOST`].
    fn start_as(hosts: &[&str], extra: &[&str]) -> Lab {
        let script = ["--write-path", WRITE_PATH, "--write-content", WRITE_CONTENT];
        Lab::launch(hosts, &[&script[..], extra].concat())
    }

    /// Starts the binary forwarding to `upstream`, with no script.
    fn start_forwarding(upstream: &str) -> Lab {
        Lab::launch(&[HOST], &["--upstream", upstream])
    }

    /// Starts the binary for `hosts` with `args` beyond the listener, CA and record.
    fn launch(hosts: &[&str], args: &[&str]) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_port();
        let ca_out = dir.path().join("ca.pem");
        let child = Command::new(env!("CARGO_BIN_EXE_atelier-lab-model"))
            .arg("--listen")
            .arg(addr.to_string())
            .args(hosts.iter().flat_map(|host| ["--host", host]))
            .arg("--ca-out")
            .arg(&ca_out)
            .arg("--record")
            .arg(dir.path().join("record.jsonl"))
            .args(args)
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
        self.client_for(HOST)
    }

    /// [`Lab::client`] resolving `host` instead.
    fn client_for(&self, host: &str) -> reqwest::Client {
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&self.ca_pem).unwrap())
            .resolve(host, self.addr)
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
    ], "tools": [{ "type": "function", "function": { "name": "write", "parameters": { "type": "object" } } }] });
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

/// The Publication API key a relay would add, which the record must hold as a fingerprint only.
const PUBLICATION_KEY: &str = "lab-publication-secret-93";

/// POSTs one MCP message to the lab's `/mcp`, with the key and, after `initialize`, the session.
async fn mcp_post(
    lab: &Lab,
    message: Value,
    session: Option<&str>,
) -> (reqwest::StatusCode, reqwest::header::HeaderMap, String) {
    let mut request = lab
        .client()
        .post(lab.url("/mcp"))
        .header("x-api-key", PUBLICATION_KEY)
        .header("accept", "application/json, text/event-stream")
        .json(&message);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

#[tokio::test]
async fn with_mcp_a_session_lists_and_calls_the_tool_and_each_key_is_a_fingerprint() {
    use sha2::Digest as _;

    let lab = Lab::start(&["--mcp"]);
    let (status, headers, body) = mcp_post(
        &lab,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let initialized: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(initialized["result"]["protocolVersion"], "2025-06-18");

    let (status, _, body) = mcp_post(
        &lab,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(&session),
    )
    .await;
    assert_eq!((status.as_u16(), body.as_str()), (202, ""));

    let (_, _, body) = mcp_post(
        &lab,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        Some(&session),
    )
    .await;
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["result"]["tools"][0]["name"], "publication_search");

    let (status, headers, body) = mcp_post(
        &lab,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "publication_search", "arguments": {"query": "amphora"}}}),
        Some(&session),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let answer = sse(&body)
        .into_iter()
        .map(|(_, data)| serde_json::from_str::<Value>(&data).unwrap())
        .find(|message| message["id"] == 3)
        .unwrap();
    assert_eq!(
        answer["result"]["structuredContent"],
        atelier_lab_model::mcp::record()
    );

    let records = lab.records();
    assert_eq!(records.len(), 4);
    let fingerprint = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(PUBLICATION_KEY.as_bytes()))
    );
    for entry in &records {
        assert_eq!(entry["path"], "/mcp");
        assert_eq!(entry["headers"]["x-api-key"], "[redacted]");
        assert_eq!(entry["keys"], json!({"x-api-key": fingerprint}));
    }
    let text = std::fs::read_to_string(lab.record_path()).unwrap();
    assert!(!text.contains("secret"), "a key reached the record");
}

#[tokio::test]
async fn without_mcp_there_is_no_mcp_endpoint() {
    let lab = Lab::start(&[]);
    let (status, _, _) = mcp_post(
        &lab,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
        None,
    )
    .await;
    assert_eq!(status, 404);
    // Every request's keys are fingerprinted, at the MCP path or not (a model request's key
    // is the gate's to add, and the tests check which came).
    let fingerprint = atelier_lab_model::mcp::fingerprint(PUBLICATION_KEY.as_bytes());
    assert_eq!(lab.records()[0]["keys"], json!({"x-api-key": fingerprint}));
    assert_eq!(lab.records()[0]["headers"]["x-api-key"], "[redacted]");
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

#[tokio::test]
async fn the_registry_serves_a_package_at_the_host_asked() {
    let lab = Lab::start_as(&[REGISTRY_HOST], &["--package", PACKAGE]);
    let client = lab.client_for(REGISTRY_HOST);
    let base = format!("https://{REGISTRY_HOST}:{}", lab.addr.port());
    let response = client
        .get(format!("{base}/escape-html"))
        .header(
            "accept",
            "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let document: Value = response.json().await.unwrap();
    let tarball_url = format!("{base}/escape-html/-/escape-html-1.0.3.tgz");
    assert_eq!(document["dist-tags"]["latest"], "1.0.3");
    assert_eq!(
        document["versions"]["1.0.3"]["dist"]["tarball"],
        tarball_url
    );
    let response = client.get(&tarball_url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/octet-stream"
    );
    assert!(
        response.bytes().await.unwrap().starts_with(&[0x1f, 0x8b]),
        "not gzip"
    );
    let missing = client.get(format!("{base}/left-pad")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap(),
        json!({ "error": "not found" })
    );
    let seen: Vec<Value> = lab
        .records()
        .iter()
        .map(|entry| entry["path"].clone())
        .collect();
    assert_eq!(
        seen,
        [
            "/escape-html",
            "/escape-html/-/escape-html-1.0.3.tgz",
            "/left-pad",
        ]
    );
}

/// Runs `program` with `args` in `dir`, panicking with its output unless it succeeds; a
/// program not on PATH fails the test, saying so (the CI machines have Node.js and npm).
fn run(program: &str, args: &[&str], dir: &Path, env: &[(&str, &OsStr)]) -> String {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir).stdin(Stdio::null());
    // Straight to the lab: no proxy of the machine's.
    for variable in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(variable);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
            "{program} is not on PATH: this test runs the real {program} against the lab \
             registry; install Node.js and npm"
        ),
        Err(error) => panic!("cannot run {program}: {error}"),
    };
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn npm_installs_a_package_from_the_lab_registry() {
    // npm dials the registry's address, so the certificate carries it as an IP address too.
    let mut lab = Lab::start_as(&[REGISTRY_HOST, "127.0.0.1"], &["--package", PACKAGE]);
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("site");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("package.json"),
        r#"{"private":true,"dependencies":{"escape-html":"^1.0.3"}}"#,
    )
    .unwrap();
    let registry = format!("https://127.0.0.1:{}/", lab.addr.port());
    std::fs::write(project.join(".npmrc"), format!("registry={registry}\n")).unwrap();
    // No npm configuration but the project's: a machine's global npmrc may set `cafile`,
    // which replaces Node's trust store and so hides NODE_EXTRA_CA_CERTS from npm.
    let user_config = work.path().join("user.npmrc");
    let global_config = work.path().join("global.npmrc");
    for config in [&user_config, &global_config] {
        std::fs::write(config, "").unwrap();
    }
    let cache = work.path().join("npm-cache");
    let ca = lab.dir.path().join("ca.pem");
    let env: [(&str, &OsStr); 5] = [
        ("NODE_EXTRA_CA_CERTS", ca.as_os_str()),
        ("npm_config_userconfig", user_config.as_os_str()),
        ("npm_config_globalconfig", global_config.as_os_str()),
        ("npm_config_update_notifier", OsStr::new("false")),
        // Loopback does not fail now and then: a failure is the answer, not worth a retry.
        ("npm_config_fetch_retries", OsStr::new("0")),
    ];
    run(
        "npm",
        &[
            "install",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--cache",
            cache.to_str().unwrap(),
        ],
        &project,
        &env,
    );

    let printed = run(
        "node",
        &[
            "-e",
            r#"const e=require("escape-html"); console.log(e("<a>"), e.LAB_MARKER)"#,
        ],
        &project,
        &[],
    );
    assert_eq!(
        printed,
        "&lt;a&gt; escape-html@1.0.3 from the lab registry\n"
    );
    let printed = run(
        "node",
        &["-e", r#"console.log(require("escape-html")(`&<>"'x`))"#],
        &project,
        &[],
    );
    assert_eq!(printed, "&amp;&lt;&gt;&quot;&#39;x\n");

    // The lock names the lab's tarball and its integrity; the lab saw npm fetch both.
    let lock: Value =
        serde_json::from_str(&std::fs::read_to_string(project.join("package-lock.json")).unwrap())
            .unwrap();
    let locked = &lock["packages"]["node_modules/escape-html"];
    assert_eq!(
        locked["resolved"],
        format!("{registry}escape-html/-/escape-html-1.0.3.tgz")
    );
    assert!(locked["integrity"].as_str().unwrap().starts_with("sha512-"));
    let records = lab.records();
    let paths: Vec<&str> = records
        .iter()
        .map(|entry| entry["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"/escape-html"), "{paths:?}");
    assert!(
        paths.contains(&"/escape-html/-/escape-html-1.0.3.tgz"),
        "{paths:?}"
    );
    let status = lab.terminate();
    assert!(status.success(), "{status}: {}", lab.stderr());
}

/// What the stand-in upstream received: its header lines as `(lowercase name, value)`, and the
/// body.
struct Received {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(have, _)| have == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The two SSE chunks the stand-in upstream answers with, as llama.cpp's server frames them.
const UPSTREAM_FIRST: &str = "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"model\":\"SmolLM2-135M-Instruct\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Bon\"},\"finish_reason\":null}]}\n\n";
const UPSTREAM_SECOND: &str = "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"model\":\"SmolLM2-135M-Instruct\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"jour\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// A stand-in for llama.cpp's server on a free loopback port: it answers one HTTP/1.1 request
/// with [`UPSTREAM_FIRST`], then, once `release` fires (the client has the first chunk) and a
/// short pause after, [`UPSTREAM_SECOND`], each as its own chunk. Returns its URL and what it
/// will have received.
async fn stand_in_upstream(
    release: tokio::sync::oneshot::Receiver<()>,
) -> (String, tokio::task::JoinHandle<Received>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut read = Vec::new();
        let head_end = loop {
            if let Some(at) = read.windows(4).position(|window| window == b"\r\n\r\n") {
                break at;
            }
            let mut buffer = [0; 4096];
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the lab closed before the request's head");
            read.extend_from_slice(&buffer[..n]);
        };
        let head = String::from_utf8(read[..head_end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap().to_owned();
        let headers: Vec<(String, String)> = lines
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap();
                (name.trim().to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        let length: usize = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .map_or(0, |(_, value)| value.parse().unwrap());
        let mut body = read[head_end + 4..].to_vec();
        while body.len() < length {
            let mut buffer = [0; 4096];
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the lab closed before the request's body");
            body.extend_from_slice(&buffer[..n]);
        }
        let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
        stream
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                     transfer-encoding: chunked\r\nconnection: close\r\n\r\n{}",
                    chunk(UPSTREAM_FIRST)
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        stream.flush().await.unwrap();
        // A dropped sender means the test gave up; the test says why.
        let _ = release.await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream
            .write_all(format!("{}0\r\n\r\n", chunk(UPSTREAM_SECOND)).as_bytes())
            .await
            .unwrap();
        stream.shutdown().await.unwrap();
        Received {
            request_line,
            headers,
            body,
        }
    });
    (url, served)
}

#[tokio::test]
async fn upstream_chat_completions_are_forwarded_and_streamed_back() {
    let (release, released) = tokio::sync::oneshot::channel();
    let (upstream, served) = stand_in_upstream(released).await;
    let lab = Lab::start_forwarding(&upstream);
    // The exact bytes, in an order and spacing serde would not produce, so a re-encoding shows.
    let sent = r#"{"stream": true, "model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "Say bonjour."}]}"#;
    // The answer's head and first event reach the client while the upstream holds the second
    // back: streamed, not buffered (a buffering lab would wait forever, hence the deadline).
    let mut body = Vec::new();
    let mut response = tokio::time::timeout(WAIT, async {
        let mut response = lab
            .client()
            .post(lab.url("/v1/chat/completions"))
            .header("authorization", BEARER)
            .header("x-api-key", API_KEY)
            .header("content-type", "application/json")
            .body(sent)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        while body.len() < UPSTREAM_FIRST.len() {
            let chunk = response.chunk().await.unwrap();
            body.extend_from_slice(&chunk.expect("the stream ended after the first event"));
        }
        response
    })
    .await
    .expect("the first event did not arrive before the upstream sent the second");
    assert_eq!(body, UPSTREAM_FIRST.as_bytes());
    release.send(()).unwrap();
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    assert_eq!(
        String::from_utf8(body).unwrap(),
        format!("{UPSTREAM_FIRST}{UPSTREAM_SECOND}")
    );

    let received = served.await.unwrap();
    assert_eq!(received.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(received.body, sent.as_bytes(), "the body went unchanged");
    assert_eq!(received.header("content-type"), Some("application/json"));
    assert_eq!(received.header("authorization"), None);
    assert_eq!(received.header("x-api-key"), None);
    let wire = received
        .headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !wire.contains("secret"),
        "a credential went upstream:\n{wire}"
    );

    let records = lab.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["method"], "POST");
    assert_eq!(records[0]["path"], "/v1/chat/completions");
    assert_eq!(
        records[0]["body"],
        serde_json::from_str::<Value>(sent).unwrap()
    );
    assert_eq!(records[0]["headers"]["authorization"], "[redacted]");
}

#[tokio::test]
async fn a_dead_upstream_is_a_bad_gateway_in_openai_s_shape() {
    // A port just freed: nothing listens there, so the connection is refused.
    let dead = free_port();
    let lab = Lab::start_forwarding(&format!("http://{dead}"));
    let client = lab.client();
    let request = json!({ "model": "SmolLM2-135M-Instruct", "stream": true, "messages": [
        { "role": "user", "content": "Say bonjour." },
    ] });
    let (status, headers, _, body) =
        post(&client, &lab.url("/v1/chat/completions"), &request).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(headers["content-type"], "application/json");
    let error: Value = serde_json::from_str(&body).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("http://{dead}")), "{message}");
    assert!(error["error"]["type"].is_string(), "{error}");
    assert!(error["error"]["code"].is_null(), "{error}");

    // The model list is forwarded too; the Anthropic route has no script to follow.
    let models = client.get(lab.url("/v1/models")).send().await.unwrap();
    assert_eq!(models.status(), 502);
    let (status, _, _, body) = post(
        &client,
        &lab.url("/v1/messages"),
        &messages_body(json!([{ "role": "user", "content": "go" }]), true),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--upstream"), "{body}");

    let paths: Vec<Value> = lab
        .records()
        .iter()
        .map(|entry| entry["path"].clone())
        .collect();
    assert_eq!(
        paths,
        ["/v1/chat/completions", "/v1/models", "/v1/messages"]
    );
}

#[test]
fn an_upstream_off_loopback_is_refused_at_parse() {
    for (name, url, reason) in [
        ("not http", "https://127.0.0.1:1", "is not http://"),
        ("a name", "http://example.com:80", "is not an IP address"),
        (
            "off loopback",
            "http://10.0.0.1:80",
            "is not a loopback address",
        ),
        ("no port", "http://127.0.0.1", "names no port"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ca_out = dir.path().join("ca.pem");
        let output = Command::new(env!("CARGO_BIN_EXE_atelier-lab-model"))
            .arg("--listen")
            .arg(free_port().to_string())
            .args(["--host", HOST, "--upstream", url, "--ca-out"])
            .arg(&ca_out)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{name}: a usage error");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(reason), "{name}: {stderr}");
        assert!(!ca_out.exists(), "{name}: it started");
    }
}

/// The CMS stand-in, in this binary rather than one of its own (one test binary per crate).
#[path = "lab_model/cms.rs"]
mod cms;
