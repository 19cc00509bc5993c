//! The Anthropic Messages API as the lab model speaks it: the request fields the script reads,
//! the answer as a JSON message or as the real event sequence (`message_start`,
//! `content_block_start`, `content_block_delta`s, `content_block_stop`, `message_delta`,
//! `message_stop`), `count_tokens` and the error shape.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::script::{pieces, tokens, Script, Turn};

/// The tool the model calls: Claude Code's file writer.
pub const WRITE_TOOL: &str = "Write";

/// The input tokens every answer reports, and `count_tokens` too.
pub const INPUT_TOKENS: u64 = 10;

/// How many `input_json_delta` pieces carry the tool input: more than one, as the real API
/// sends, so a client must join them.
const INPUT_PIECES: usize = 3;

/// How many `text_delta` pieces carry the final text.
const TEXT_PIECES: usize = 2;

/// The part of a `POST /v1/messages` body the script reads; the rest is ignored.
#[derive(Debug, Deserialize)]
pub struct Request {
    /// The model asked for, echoed in the answer.
    pub model: String,
    /// Whether the answer is a stream of events.
    #[serde(default)]
    pub stream: bool,
    /// The conversation so far.
    pub messages: Vec<Message>,
}

/// One message of the conversation.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: String,
    /// Plain text or content blocks.
    pub content: Content,
}

/// A message's content.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A bare string.
    Text(String),
    /// Content blocks (text, image, tool_use, tool_result, …).
    Blocks(Vec<Block>),
}

/// A content block, by its type alone.
#[derive(Debug, Deserialize)]
pub struct Block {
    /// `text`, `tool_use`, `tool_result`, …
    #[serde(rename = "type")]
    pub kind: String,
}

impl Request {
    /// [`Turn::Finish`] if and only if the last message is the user's and carries a
    /// `tool_result` block.
    pub fn turn(&self) -> Turn {
        match self.messages.last() {
            Some(Message {
                role,
                content: Content::Blocks(blocks),
            }) if role == "user" && blocks.iter().any(|block| block.kind == "tool_result") => {
                Turn::Finish
            }
            _ => Turn::Write,
        }
    }
}

/// One server-sent event: its name (the data's `type`) and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The `event:` line.
    pub name: &'static str,
    /// The `data:` line, one JSON object.
    pub data: Value,
}

impl Event {
    fn new(name: &'static str, mut data: Value) -> Event {
        if let Value::Object(fields) = &mut data {
            fields.insert("type".to_owned(), Value::from(name));
        }
        Event { name, data }
    }

    /// The event framed for the wire: `event: <name>\ndata: <json>\n\n`.
    pub fn frame(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.name, self.data)
    }
}

/// The write tool's input: Claude Code's `Write` takes `file_path` and `content`.
pub fn write_input(script: &Script) -> Value {
    json!({ "file_path": script.write_path, "content": script.write_content })
}

/// The answer as the event sequence of a streamed message; `n` numbers its ids.
pub fn events(request: &Request, script: &Script, n: u64) -> Vec<Event> {
    let (block, deltas, stop_reason, output_tokens) = match request.turn() {
        Turn::Write => {
            let input = write_input(script).to_string();
            let deltas = pieces(&input, INPUT_PIECES)
                .into_iter()
                .map(|piece| json!({ "type": "input_json_delta", "partial_json": piece }))
                .collect::<Vec<_>>();
            let block = json!({
                "type": "tool_use",
                "id": format!("toolu_lab_{n}"),
                "name": WRITE_TOOL,
                "input": {},
            });
            (block, deltas, "tool_use", tokens(&input))
        }
        Turn::Finish => {
            let deltas = pieces(&script.final_text, TEXT_PIECES)
                .into_iter()
                .map(|piece| json!({ "type": "text_delta", "text": piece }))
                .collect::<Vec<_>>();
            let block = json!({ "type": "text", "text": "" });
            (block, deltas, "end_turn", tokens(&script.final_text))
        }
    };
    let mut message = skeleton(request, n, 1);
    message["content"] = json!([]);
    message["stop_reason"] = Value::Null;
    let mut events = vec![
        Event::new("message_start", json!({ "message": message })),
        Event::new(
            "content_block_start",
            json!({ "index": 0, "content_block": block }),
        ),
    ];
    events.extend(
        deltas
            .into_iter()
            .map(|delta| Event::new("content_block_delta", json!({ "index": 0, "delta": delta }))),
    );
    events.push(Event::new("content_block_stop", json!({ "index": 0 })));
    events.push(Event::new(
        "message_delta",
        json!({
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": output_tokens },
        }),
    ));
    events.push(Event::new("message_stop", json!({})));
    events
}

/// The answer as one JSON message (a request without `"stream": true`).
pub fn message(request: &Request, script: &Script, n: u64) -> Value {
    let (content, stop_reason, output_tokens) = match request.turn() {
        Turn::Write => {
            let input = write_input(script);
            let output_tokens = tokens(&input.to_string());
            let block = json!({
                "type": "tool_use",
                "id": format!("toolu_lab_{n}"),
                "name": WRITE_TOOL,
                "input": input,
            });
            (block, "tool_use", output_tokens)
        }
        Turn::Finish => (
            json!({ "type": "text", "text": script.final_text }),
            "end_turn",
            tokens(&script.final_text),
        ),
    };
    let mut message = skeleton(request, n, output_tokens);
    message["content"] = json!([content]);
    message["stop_reason"] = Value::from(stop_reason);
    message
}

fn skeleton(request: &Request, n: u64, output_tokens: u64) -> Value {
    json!({
        "id": format!("msg_lab_{n}"),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": {
            "input_tokens": INPUT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        },
    })
}

/// The answer of `POST /v1/messages/count_tokens`.
pub fn count_tokens() -> Value {
    json!({ "input_tokens": INPUT_TOKENS })
}

/// An error body: `kind` is the API's error type (`not_found_error`,
/// `invalid_request_error`, `api_error`, …).
pub fn error(kind: &str, message: &str) -> Value {
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn script() -> Script {
        Script {
            write_path: "/srv/site/src/index.html".to_owned(),
            write_content: "<h1>Hello \"lab\"</h1>\n".to_owned(),
            final_text: "All done.".to_owned(),
            replace: None,
        }
    }

    fn request(body: Value) -> Request {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn the_turn_follows_the_last_message_alone() {
        let tool_result = json!({ "type": "tool_result", "tool_use_id": "t", "content": "ok" });
        for (messages, turn) in [
            (
                json!([{ "role": "user", "content": "make a page" }]),
                Turn::Write,
            ),
            (
                json!([{ "role": "user", "content": [{ "type": "text", "text": "hi" }] }]),
                Turn::Write,
            ),
            (
                json!([{ "role": "user", "content": [tool_result, { "type": "text", "text": "x" }] }]),
                Turn::Finish,
            ),
            // An earlier tool result does not count: the last message is a new question.
            (
                json!([
                    { "role": "user", "content": [tool_result] },
                    { "role": "assistant", "content": "done" },
                    { "role": "user", "content": "again" },
                ]),
                Turn::Write,
            ),
            (json!([]), Turn::Write),
        ] {
            let request = request(json!({ "model": "m", "messages": messages }));
            assert_eq!(request.turn(), turn, "{messages}");
        }
    }

    #[test]
    fn a_streamed_tool_call_is_the_real_event_sequence() {
        let request = request(json!({
            "model": "claude-test",
            "stream": true,
            "messages": [{ "role": "user", "content": "go" }],
        }));
        let events = events(&request, &script(), 7);
        let names: Vec<_> = events.iter().map(|event| event.name).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        for event in &events {
            assert_eq!(event.data["type"], event.name);
        }
        let start = &events[0].data["message"];
        assert_eq!(start["id"], "msg_lab_7");
        assert_eq!(start["model"], "claude-test");
        assert_eq!(start["content"], json!([]));
        assert_eq!(start["stop_reason"], Value::Null);
        assert_eq!(
            events[1].data["content_block"],
            json!({ "type": "tool_use", "id": "toolu_lab_7", "name": "Write", "input": {} })
        );
        let joined: String = events[2..5]
            .iter()
            .map(|event| {
                assert_eq!(event.data["delta"]["type"], "input_json_delta");
                event.data["delta"]["partial_json"].as_str().unwrap()
            })
            .collect();
        let input: Value = serde_json::from_str(&joined).unwrap();
        assert_eq!(
            input,
            json!({ "file_path": "/srv/site/src/index.html", "content": "<h1>Hello \"lab\"</h1>\n" })
        );
        assert_eq!(events[6].data["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[6].data["delta"]["stop_sequence"], Value::Null);
        assert!(events[6].data["usage"]["output_tokens"].is_u64());
    }

    #[test]
    fn a_streamed_final_text_ends_the_turn() {
        let request = request(json!({
            "model": "m",
            "stream": true,
            "messages": [{ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t" }] }],
        }));
        let events = events(&request, &script(), 1);
        assert_eq!(
            events[1].data["content_block"],
            json!({ "type": "text", "text": "" })
        );
        let text: String = events
            .iter()
            .filter(|event| event.name == "content_block_delta")
            .map(|event| event.data["delta"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, "All done.");
        let delta = events.iter().find(|event| event.name == "message_delta");
        assert_eq!(delta.unwrap().data["delta"]["stop_reason"], "end_turn");
    }

    #[test]
    fn a_json_message_holds_the_whole_answer() {
        let first =
            request(json!({ "model": "m", "messages": [{ "role": "user", "content": "go" }] }));
        let answer = message(&first, &script(), 2);
        assert_eq!(answer["stop_reason"], "tool_use");
        assert_eq!(answer["content"][0]["name"], "Write");
        assert_eq!(answer["content"][0]["input"], write_input(&script()));
        let last = request(json!({
            "model": "m",
            "messages": [{ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t" }] }],
        }));
        let answer = message(&last, &script(), 3);
        assert_eq!(answer["stop_reason"], "end_turn");
        assert_eq!(
            answer["content"],
            json!([{ "type": "text", "text": "All done." }])
        );
    }

    #[test]
    fn events_are_framed_as_server_sent_events() {
        let event = Event::new("message_stop", json!({}));
        assert_eq!(
            event.frame(),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
    }
}
