//! A scripted model provider on loopback speaking OpenAI chat completions over SSE, for the
//! tests that run the real atelier-agent: each request is recorded and answered as the test's
//! script says (frames, a refusal, or nothing at all until the client goes).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};

/// One request the scripted provider received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request target as sent: a path, or an absolute URL when sent to a proxy.
    pub target: String,
    /// Header names (lowercase) and values.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

impl Seen {
    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body's messages without the system message.
    pub fn conversation(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .expect("a chat-completions body has messages")
            .iter()
            .filter(|m| m["role"] != "system")
            .cloned()
            .collect()
    }
}

/// A running scripted provider.
pub struct Scripted {
    /// `http://<addr>`.
    pub base_url: String,
    /// Where it listens, `127.0.0.1:<port>`.
    pub addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A status line and a JSON body.
pub type Refusal = (&'static str, &'static str);

/// What a scripted provider answers once its answers are used up: a refusal that no client
/// asks again.
pub const NO_MORE: Refusal = (
    "400 Bad Request",
    r#"{"error":{"message":"the script has no more answers"}}"#,
);

/// One answer of a scripted provider.
pub enum Answer {
    /// These SSE frames, then the end of the response.
    Frames(Vec<String>),
    /// This status and body.
    Refuse(Refusal),
    /// Nothing, ever: the request is held open until the client goes.
    Hold,
}

/// Each request gets the next frames, and [`NO_MORE`] once they are used up.
pub fn scripted(answers: Vec<Vec<String>>) -> Scripted {
    answering(answers.into_iter().map(Answer::Frames).collect())
}

/// Each request gets the next answer, and [`NO_MORE`] once they are used up.
pub fn answering(answers: Vec<Answer>) -> Scripted {
    let mut answers = answers.into_iter();
    provider(move |_| answers.next().unwrap_or(Answer::Refuse(NO_MORE)))
}

/// Every request is refused with `refusal`.
pub fn refusing(refusal: Refusal) -> Scripted {
    provider(move |_| Answer::Refuse(refusal))
}

/// Answers each request as `answer` says, on a thread of its own.
pub fn provider(mut answer: impl FnMut(&Seen) -> Answer + Send + 'static) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("its address").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Some(request) = read_request(&mut stream) else {
                continue;
            };
            let answer = answer(&request);
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request);
            let response = match answer {
                Answer::Frames(frames) => format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{}",
                    frames.concat()
                ),
                Answer::Refuse((status, body)) => format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                ),
                Answer::Hold => {
                    held.push(stream);
                    continue;
                }
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
    Scripted {
        base_url: format!("http://{addr}"),
        addr,
        seen,
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let target = line.split_whitespace().nth(1)?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        target,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn frames(chunks: &[Value]) -> Vec<String> {
    let mut frames: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

fn usage() -> Value {
    json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10}})
}

/// A round in which the model calls each `(id, tool, arguments)`, the arguments streamed in
/// two pieces.
pub fn tool_round(calls: &[(&str, &str, Value)]) -> Vec<String> {
    let announced: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (id, name, _))| {
            json!({"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}})
        })
        .collect();
    let mut chunks = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": announced}}]}),
    ];
    for (i, (_, _, arguments)) in calls.iter().enumerate() {
        let text = arguments.to_string();
        let (head, tail) = text.split_at(text.len() / 2);
        for piece in [head, tail] {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}}]}));
        }
    }
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
    chunks.push(usage());
    frames(&chunks)
}

/// A round in which the model says `text` (in two pieces) and stops.
pub fn text_round(text: &str) -> Vec<String> {
    text_ending(text, "stop")
}

/// A round in which the model says `text` (in two pieces) and is cut at its output limit.
pub fn cut_round(text: &str) -> Vec<String> {
    text_ending(text, "length")
}

fn text_ending(text: &str, finish_reason: &str) -> Vec<String> {
    let (head, tail) = text.split_at(text.len() / 2);
    frames(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": head}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": tail}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]}),
        usage(),
    ])
}
