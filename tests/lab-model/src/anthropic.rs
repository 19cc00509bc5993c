//! The Anthropic Messages API as the lab model speaks it: the request fields the script reads,
//! the answer as a JSON message or as the real event sequence (`message_start`,
//! `content_block_start`, `content_block_delta`s, `content_block_stop`, `message_delta`,
//! `message_stop`), `count_tokens` and the error shape.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::script::{pieces, search_input, tokens, Script, Seen, Step, Turn, TOOL_SEARCH};

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
    /// The tools offered, by name.
    #[serde(default)]
    pub tools: Vec<Tool>,
}

/// One offered tool, by its name alone.
#[derive(Debug, Deserialize)]
pub struct Tool {
    /// Its name.
    pub name: String,
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

/// A content block, by its type (and a `tool_use` block's tool, a `text` block's text).
#[derive(Debug, Deserialize)]
pub struct Block {
    /// `text`, `tool_use`, `tool_result`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// The tool a `tool_use` block calls.
    #[serde(default)]
    pub name: Option<String>,
    /// A `text` block's text.
    #[serde(default)]
    pub text: Option<String>,
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

    /// The next step ([`Seen::step`]); the replace is not scripted on this wire.
    pub fn step(&self, search: Option<&str>) -> Step<'_> {
        let last_called = self
            .messages
            .iter()
            .rev()
            .find(|message| message.role == "assistant")
            .map(|message| match &message.content {
                Content::Blocks(blocks) => blocks
                    .iter()
                    .filter(|block| block.kind == "tool_use")
                    .filter_map(|block| block.name.as_deref())
                    .collect(),
                Content::Text(_) => Vec::new(),
            })
            .unwrap_or_default();
        let texts = self
            .messages
            .iter()
            .flat_map(|message| match &message.content {
                Content::Text(text) => vec![text.as_str()],
                Content::Blocks(blocks) => blocks
                    .iter()
                    .filter_map(|block| block.text.as_deref())
                    .collect(),
            })
            .collect();
        let seen = Seen {
            turn: self.turn(),
            offered: self.tools.iter().map(|tool| tool.name.as_str()).collect(),
            last_called,
            texts,
        };
        seen.step(search, WRITE_TOOL)
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

/// The tool call of `step` (`(tool name, input)`) or its words.
fn answer_of<'s>(step: Step<'s>, script: &'s Script) -> Result<(&'s str, Value), &'s str> {
    match step {
        Step::Search(name) => Ok((name, search_input())),
        Step::Load(name) => Ok((TOOL_SEARCH, json!({ "query": format!("select:{name}") }))),
        Step::Write => Ok((WRITE_TOOL, write_input(script))),
        Step::Replace | Step::Finish => Err(&script.final_text),
    }
}

/// The answer as the event sequence of a streamed message, with the opt-in `search` first
/// (see [`Request::step`]); `n` numbers its ids.
pub fn events(request: &Request, script: &Script, search: Option<&str>, n: u64) -> Vec<Event> {
    let (block, deltas, stop_reason, output_tokens) = match answer_of(request.step(search), script)
    {
        Ok((name, input)) => {
            let input = input.to_string();
            let deltas = pieces(&input, INPUT_PIECES)
                .into_iter()
                .map(|piece| json!({ "type": "input_json_delta", "partial_json": piece }))
                .collect::<Vec<_>>();
            let block = json!({
                "type": "tool_use",
                "id": format!("toolu_lab_{n}"),
                "name": name,
                "input": {},
            });
            (block, deltas, "tool_use", tokens(&input))
        }
        Err(text) => {
            let deltas = pieces(text, TEXT_PIECES)
                .into_iter()
                .map(|piece| json!({ "type": "text_delta", "text": piece }))
                .collect::<Vec<_>>();
            let block = json!({ "type": "text", "text": "" });
            (block, deltas, "end_turn", tokens(text))
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

/// The answer as one JSON message (a request without `"stream": true`), with the opt-in
/// `search` first.
pub fn message(request: &Request, script: &Script, search: Option<&str>, n: u64) -> Value {
    let (content, stop_reason, output_tokens) = match answer_of(request.step(search), script) {
        Ok((name, input)) => {
            let output_tokens = tokens(&input.to_string());
            let block = json!({
                "type": "tool_use",
                "id": format!("toolu_lab_{n}"),
                "name": name,
                "input": input,
            });
            (block, "tool_use", output_tokens)
        }
        Err(text) => (
            json!({ "type": "text", "text": text }),
            "end_turn",
            tokens(text),
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
    use crate::script::SEARCH_QUERY;

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
            "tools": [{ "name": "Read" }, { "name": WRITE_TOOL }],
        }));
        let events = events(&request, &script(), None, 7);
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
        let events = events(&request, &script(), None, 1);
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
        let first = request(json!({
            "model": "m",
            "messages": [{ "role": "user", "content": "go" }],
            "tools": [{ "name": WRITE_TOOL }],
        }));
        let answer = message(&first, &script(), None, 2);
        assert_eq!(answer["stop_reason"], "tool_use");
        assert_eq!(answer["content"][0]["name"], "Write");
        assert_eq!(answer["content"][0]["input"], write_input(&script()));
        let last = request(json!({
            "model": "m",
            "messages": [{ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t" }] }],
        }));
        let answer = message(&last, &script(), None, 3);
        assert_eq!(answer["stop_reason"], "end_turn");
        assert_eq!(
            answer["content"],
            json!([{ "type": "text", "text": "All done." }])
        );
    }

    const SEARCH: &str = "mcp__dedalo_publication__publication_search";

    /// A request offering `tools` (by name) with `messages`.
    fn offering(tools: &[&str], messages: Value) -> Request {
        let tools: Vec<Value> = tools.iter().map(|name| json!({ "name": name })).collect();
        request(json!({ "model": "m", "messages": messages, "tools": tools }))
    }

    /// The assistant's call of `name`, then the user's message with its result.
    fn called(name: &str) -> [Value; 2] {
        [
            json!({ "role": "assistant", "content": [
                { "type": "text", "text": "Looking." },
                { "type": "tool_use", "id": "t", "name": name, "input": {} },
            ] }),
            json!({ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t", "content": "ok" }] }),
        ]
    }

    #[test]
    fn the_opt_in_search_comes_first_then_the_write_then_the_text() {
        let user = json!({ "role": "user", "content": "go" });
        let [search_call, search_result] = called(SEARCH);
        let [write_call, write_result] = called(WRITE_TOOL);
        let tools = ["Read", WRITE_TOOL, SEARCH];
        let search = Some("publication_search");
        for (name, offered, messages, search, step) in [
            (
                "first request",
                &tools[..],
                json!([user]),
                search,
                Step::Search(SEARCH),
            ),
            (
                "after the search",
                &tools[..],
                json!([user, search_call, search_result]),
                search,
                Step::Write,
            ),
            (
                "after the write",
                &tools[..],
                json!([user, search_call, search_result, write_call, write_result]),
                search,
                Step::Finish,
            ),
            (
                "the tool not offered",
                &tools[..2],
                json!([user]),
                search,
                Step::Write,
            ),
            ("not opted in", &tools[..], json!([user]), None, Step::Write),
            (
                "no tool offered at all",
                &[][..],
                json!([user]),
                None,
                Step::Finish,
            ),
            // A chat runtime's tools, without the coding agent's writer: words only.
            (
                "no write offered",
                &["site_read_document"][..],
                json!([user]),
                None,
                Step::Finish,
            ),
        ] {
            assert_eq!(offering(offered, messages).step(search), step, "{name}");
        }
    }

    #[test]
    fn a_deferred_search_is_loaded_with_tool_search_then_called() {
        // Claude Code names its MCP tools in a message and offers ToolSearch to load them.
        let deferred = json!({ "role": "system", "content": [{ "type": "text", "text": format!(
            "The following deferred tools are now available via ToolSearch:\nCronCreate\n{SEARCH}\n"
        ) }] });
        let user = json!({ "role": "user", "content": "go" });
        let [load_call, load_result] = called(TOOL_SEARCH);
        let [search_call, search_result] = called(SEARCH);
        let before = [WRITE_TOOL, TOOL_SEARCH];
        let loaded = [WRITE_TOOL, TOOL_SEARCH, SEARCH];
        let search = Some("publication_search");
        for (name, offered, messages, search, step) in [
            (
                "named, not offered",
                &before[..],
                json!([deferred, user]),
                search,
                Step::Load(SEARCH),
            ),
            (
                "loaded",
                &loaded[..],
                json!([deferred, user, load_call, load_result]),
                search,
                Step::Search(SEARCH),
            ),
            (
                "after the search",
                &loaded[..],
                json!([
                    deferred,
                    user,
                    load_call,
                    load_result,
                    search_call,
                    search_result
                ]),
                search,
                Step::Write,
            ),
            (
                "loading found nothing",
                &before[..],
                json!([deferred, user, load_call, load_result]),
                search,
                Step::Finish,
            ),
            (
                "no ToolSearch to load it",
                &[WRITE_TOOL][..],
                json!([deferred, user]),
                search,
                Step::Write,
            ),
            (
                "not opted in",
                &before[..],
                json!([deferred, user]),
                None,
                Step::Write,
            ),
        ] {
            assert_eq!(offering(offered, messages).step(search), step, "{name}");
        }
    }

    #[test]
    fn the_load_is_a_tool_search_selecting_the_tool() {
        let deferred = json!({ "role": "system", "content": [{ "type": "text", "text": SEARCH }] });
        let first = offering(
            &[WRITE_TOOL, TOOL_SEARCH],
            json!([deferred, { "role": "user", "content": "go" }]),
        );
        let answer = message(&first, &script(), Some("publication_search"), 6);
        assert_eq!(answer["content"][0]["name"], TOOL_SEARCH);
        assert_eq!(
            answer["content"][0]["input"],
            json!({ "query": format!("select:{SEARCH}") })
        );
    }

    #[test]
    fn the_search_is_the_offered_tool_called_with_the_query() {
        let first = offering(
            &[WRITE_TOOL, SEARCH],
            json!([{ "role": "user", "content": "go" }]),
        );
        let answer = message(&first, &script(), Some("publication_search"), 4);
        assert_eq!(answer["stop_reason"], "tool_use");
        assert_eq!(answer["content"][0]["name"], SEARCH);
        assert_eq!(
            answer["content"][0]["input"],
            json!({ "query": SEARCH_QUERY })
        );
        let streamed = events(&first, &script(), Some("publication_search"), 5);
        assert_eq!(streamed[1].data["content_block"]["name"], SEARCH);
        let joined: String = streamed
            .iter()
            .filter_map(|event| event.data["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&joined).unwrap(),
            json!({ "query": SEARCH_QUERY })
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
