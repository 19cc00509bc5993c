//! OpenAI chat completions as the lab model speaks it, for agents that talk that wire: the
//! request fields the script reads, the answer as one JSON completion or as `data:` chunks
//! ending with `data: [DONE]`, the tool call in the `tool_calls` delta shape.
//!
//! On this wire the script has an opt-in first step ([`Step::Search`]): given a tool name
//! suffix, a request that offers a tool so named is answered with a call of it (arguments
//! [`search_arguments`]) before the write, so a test sees an MCP server's tool reach the
//! model and its result come back.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::anthropic::INPUT_TOKENS;
use crate::script::{pieces, tokens, Script, Turn};

/// The tool the model calls.
pub const WRITE_TOOL: &str = "write";

/// How many chunks carry the tool call's arguments.
const ARGUMENT_PIECES: usize = 3;

/// How many chunks carry the final text.
const TEXT_PIECES: usize = 2;

/// The end of a stream.
pub const DONE: &str = "data: [DONE]\n\n";

/// The part of a `POST /v1/chat/completions` body the script reads.
#[derive(Debug, Deserialize)]
pub struct Request {
    /// The model asked for, echoed in the answer.
    pub model: String,
    /// Whether the answer is a stream of chunks.
    #[serde(default)]
    pub stream: bool,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools offered, by the parts the script reads.
    #[serde(default)]
    pub tools: Vec<Tool>,
}

/// One offered tool: its name and the names of its parameters.
#[derive(Debug, Deserialize)]
pub struct Tool {
    /// The function.
    pub function: Function,
}

/// A tool's function.
#[derive(Debug, Deserialize)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// Its JSON schema; only the property names are read.
    #[serde(default)]
    pub parameters: Value,
}

/// One message, by its role and the tool calls it made.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// An assistant's tool calls, read leniently (only their names, when they are there):
    /// whatever a client sends here must not make the request unreadable.
    #[serde(default)]
    pub tool_calls: Value,
}

/// What the query of the opt-in search asks for.
pub const SEARCH_QUERY: &str = "amphora";

/// The next answer of the script, with the opt-in search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'r> {
    /// Call the offered tool of this name, before anything else.
    Search(&'r str),
    /// Call the write tool.
    Write,
    /// Say the final text and stop.
    Finish,
}

impl Request {
    /// [`Turn::Finish`] if and only if the last message is a tool result.
    pub fn turn(&self) -> Turn {
        match self.messages.last() {
            Some(message) if message.role == "tool" => Turn::Finish,
            _ => Turn::Write,
        }
    }

    /// The next step when the script searches first with the offered tool whose name ends
    /// with `search` (none: [`Request::turn`] alone). Before any tool result since the last
    /// user message, that tool is called if the request offers it; a tool result answering
    /// it is followed by the write; any other tool result by the final text.
    pub fn step(&self, search: Option<&str>) -> Step<'_> {
        let Some(suffix) = search else {
            return self.plain_step();
        };
        match self.turn() {
            Turn::Write => self
                .tools
                .iter()
                .map(|tool| tool.function.name.as_str())
                .find(|name| name.ends_with(suffix))
                .map_or(Step::Write, Step::Search),
            Turn::Finish if self.last_call_named(suffix) => Step::Write,
            Turn::Finish => Step::Finish,
        }
    }

    fn plain_step(&self) -> Step<'_> {
        match self.turn() {
            Turn::Write => Step::Write,
            Turn::Finish => Step::Finish,
        }
    }

    /// Whether the last assistant message called a tool whose name ends with `suffix`.
    fn last_call_named(&self, suffix: &str) -> bool {
        self.messages
            .iter()
            .rev()
            .find(|message| message.role == "assistant")
            .and_then(|message| message.tool_calls.as_array())
            .is_some_and(|calls| {
                calls.iter().any(|call| {
                    call["function"]["name"]
                        .as_str()
                        .is_some_and(|name| name.ends_with(suffix))
                })
            })
    }
}

/// The opt-in search's arguments, as the JSON string the wire carries.
pub fn search_arguments() -> String {
    json!({ "query": SEARCH_QUERY }).to_string()
}

/// The tool call or the text of `step`: `(tool name, arguments)` or the words.
fn answer_of<'s>(
    step: Step<'s>,
    request: &Request,
    script: &'s Script,
) -> Result<(&'s str, String), &'s str> {
    match step {
        Step::Search(name) => Ok((name, search_arguments())),
        Step::Write => Ok((WRITE_TOOL, write_arguments(request, script))),
        Step::Finish => Err(&script.final_text),
    }
}

/// The write tool's arguments, as the JSON string the wire carries. The path goes under the
/// name the offered write tool's schema uses (opencode's `filePath`, Claude Code's
/// `file_path`); `path` when the request offers no such tool (pi's name).
pub fn write_arguments(request: &Request, script: &Script) -> String {
    let path_key = request
        .tools
        .iter()
        .find(|tool| tool.function.name == WRITE_TOOL)
        .and_then(|tool| tool.function.parameters.get("properties"))
        .and_then(|properties| {
            ["filePath", "file_path", "path"]
                .into_iter()
                .find(|key| properties.get(key).is_some())
        })
        .unwrap_or("path");
    let mut arguments = serde_json::Map::new();
    arguments.insert(path_key.to_owned(), json!(script.write_path));
    arguments.insert("content".to_owned(), json!(script.write_content));
    Value::Object(arguments).to_string()
}

/// The answer as stream chunks, each framed `data: <json>\n\n`, without the final [`DONE`].
pub fn chunks(request: &Request, script: &Script, n: u64) -> Vec<String> {
    chunks_searching(request, script, None, n)
}

/// [`chunks`] with the opt-in search first (see [`Request::step`]).
pub fn chunks_searching(
    request: &Request,
    script: &Script,
    search: Option<&str>,
    n: u64,
) -> Vec<String> {
    let (first, deltas, finish_reason) = match answer_of(request.step(search), request, script) {
        Ok((name, arguments)) => {
            let first = json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "index": 0,
                    "id": format!("call_lab_{n}"),
                    "type": "function",
                    "function": { "name": name, "arguments": "" },
                }],
            });
            let deltas = pieces(&arguments, ARGUMENT_PIECES)
                .into_iter()
                .map(|piece| json!({ "tool_calls": [{ "index": 0, "function": { "arguments": piece } }] }))
                .collect::<Vec<_>>();
            (first, deltas, "tool_calls")
        }
        Err(text) => {
            let first = json!({ "role": "assistant", "content": "" });
            let deltas = pieces(text, TEXT_PIECES)
                .into_iter()
                .map(|piece| json!({ "content": piece }))
                .collect::<Vec<_>>();
            (first, deltas, "stop")
        }
    };
    let chunk = |delta: Value, finish_reason: Value| {
        let chunk = json!({
            "id": format!("chatcmpl-lab-{n}"),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": request.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
        });
        format!("data: {chunk}\n\n")
    };
    let mut out = vec![chunk(first, Value::Null)];
    out.extend(deltas.into_iter().map(|delta| chunk(delta, Value::Null)));
    out.push(chunk(json!({}), Value::from(finish_reason)));
    out
}

/// The answer as one JSON completion (a request without `"stream": true`).
pub fn completion(request: &Request, script: &Script, n: u64) -> Value {
    completion_searching(request, script, None, n)
}

/// [`completion`] with the opt-in search first (see [`Request::step`]).
pub fn completion_searching(
    request: &Request,
    script: &Script,
    search: Option<&str>,
    n: u64,
) -> Value {
    let (message, finish_reason, completion_tokens) =
        match answer_of(request.step(search), request, script) {
            Ok((name, arguments)) => {
                let completion_tokens = tokens(&arguments);
                let message = json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": format!("call_lab_{n}"),
                        "type": "function",
                        "function": { "name": name, "arguments": arguments },
                    }],
                });
                (message, "tool_calls", completion_tokens)
            }
            Err(text) => (
                json!({ "role": "assistant", "content": text }),
                "stop",
                tokens(text),
            ),
        };
    json!({
        "id": format!("chatcmpl-lab-{n}"),
        "object": "chat.completion",
        "created": 0,
        "model": request.model,
        "choices": [{ "index": 0, "message": message, "finish_reason": finish_reason }],
        "usage": {
            "prompt_tokens": INPUT_TOKENS,
            "completion_tokens": completion_tokens,
            "total_tokens": INPUT_TOKENS + completion_tokens,
        },
    })
}

/// An error body in OpenAI's shape.
pub fn error(kind: &str, message: &str) -> Value {
    json!({ "error": { "message": message, "type": kind, "code": null } })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn script() -> Script {
        Script {
            write_path: "/srv/a.html".to_owned(),
            write_content: "<p>é</p>".to_owned(),
            final_text: "Finished.".to_owned(),
        }
    }

    fn request(messages: Value) -> Request {
        serde_json::from_value(json!({ "model": "m", "stream": true, "messages": messages }))
            .unwrap()
    }

    fn data(chunk: &str) -> Value {
        let json = chunk
            .strip_prefix("data: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap();
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_path_goes_under_the_name_the_write_tool_takes() {
        let with_tool = |properties: Value| -> Request {
            serde_json::from_value(json!({
                "model": "m",
                "messages": [{ "role": "user", "content": "go" }],
                "tools": [
                    { "type": "function", "function": { "name": "read", "parameters": { "properties": { "filePath": {} } } } },
                    { "type": "function", "function": { "name": "write", "parameters": { "properties": properties } } },
                ],
            }))
            .unwrap()
        };
        for (name, request, key) in [
            (
                "opencode",
                with_tool(json!({ "filePath": {}, "content": {} })),
                "filePath",
            ),
            (
                "claude-style",
                with_tool(json!({ "file_path": {}, "content": {} })),
                "file_path",
            ),
            (
                "pi",
                with_tool(json!({ "path": {}, "content": {} })),
                "path",
            ),
            (
                "no tools",
                request(json!([{ "role": "user", "content": "go" }])),
                "path",
            ),
        ] {
            let arguments: Value =
                serde_json::from_str(&write_arguments(&request, &script())).unwrap();
            assert_eq!(arguments[key], "/srv/a.html", "{name}");
            assert_eq!(arguments["content"], "<p>é</p>", "{name}");
            assert_eq!(arguments.as_object().unwrap().len(), 2, "{name}");
        }
    }

    #[test]
    fn a_tool_message_last_finishes() {
        let first = request(json!([{ "role": "user", "content": "go" }]));
        assert_eq!(first.turn(), Turn::Write);
        let last = request(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "content": null, "tool_calls": [] },
            { "role": "tool", "tool_call_id": "call_lab_1", "content": "ok" },
        ]));
        assert_eq!(last.turn(), Turn::Finish);
    }

    /// The tool call's arguments the streamed `chunks` carry, joined and parsed.
    fn joined_arguments(chunks: &[Value]) -> Value {
        let arguments: String = chunks
            .iter()
            .filter_map(|chunk| {
                chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
            })
            .collect();
        serde_json::from_str(&arguments).unwrap()
    }

    const SEARCH: &str = "mcp__dedalo_publication__publication_search";

    /// A request offering `tools` (by name) with `messages`.
    fn offering(tools: &[&str], messages: Value) -> Request {
        let tools: Vec<Value> = tools
            .iter()
            .map(|name| json!({ "type": "function", "function": { "name": name, "parameters": { "properties": { "path": {} } } } }))
            .collect();
        serde_json::from_value(
            json!({ "model": "m", "stream": true, "messages": messages, "tools": tools }),
        )
        .unwrap()
    }

    /// An assistant message calling `name`, then its result.
    fn called(name: &str, result: &str) -> [Value; 2] {
        [
            json!({ "role": "assistant", "content": null, "tool_calls": [{ "id": "c", "type": "function", "function": { "name": name, "arguments": "{}" } }] }),
            json!({ "role": "tool", "tool_call_id": "c", "content": result }),
        ]
    }

    #[test]
    fn the_opt_in_search_comes_first_then_the_write_then_the_text() {
        let user = json!({ "role": "user", "content": "go" });
        let [search_call, search_result] = called(SEARCH, "{\"total\":1}");
        let [write_call, write_result] = called(WRITE_TOOL, "ok");
        let done = json!({ "role": "assistant", "content": "Finished." });
        let again = json!({ "role": "user", "content": "again" });
        let tools = ["read", WRITE_TOOL, SEARCH];
        for (name, offered, messages, search, step) in [
            (
                "first request",
                &tools[..],
                json!([user]),
                Some("publication_search"),
                Step::Search(SEARCH),
            ),
            (
                "after the search",
                &tools[..],
                json!([user, search_call, search_result]),
                Some("publication_search"),
                Step::Write,
            ),
            (
                "after the write",
                &tools[..],
                json!([user, search_call, search_result, write_call, write_result]),
                Some("publication_search"),
                Step::Finish,
            ),
            (
                "a resumed turn searches again",
                &tools[..],
                json!([
                    user,
                    search_call,
                    search_result,
                    write_call,
                    write_result,
                    done,
                    again
                ]),
                Some("publication_search"),
                Step::Search(SEARCH),
            ),
            (
                "the tool not offered",
                &tools[..2],
                json!([user]),
                Some("publication_search"),
                Step::Write,
            ),
            ("not opted in", &tools[..], json!([user]), None, Step::Write),
            (
                "not opted in, after a tool",
                &tools[..],
                json!([user, search_call, search_result]),
                None,
                Step::Finish,
            ),
        ] {
            assert_eq!(offering(offered, messages).step(search), step, "{name}");
        }
    }

    #[test]
    fn the_search_call_names_the_offered_tool_with_a_query() {
        let request = offering(
            &[WRITE_TOOL, SEARCH],
            json!([{ "role": "user", "content": "go" }]),
        );
        let chunks: Vec<Value> =
            chunks_searching(&request, &script(), Some("publication_search"), 2)
                .iter()
                .map(|chunk| data(chunk))
                .collect();
        assert_eq!(
            chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
            SEARCH
        );
        assert_eq!(joined_arguments(&chunks), json!({ "query": SEARCH_QUERY }));
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "tool_calls"
        );
        let whole = completion_searching(&request, &script(), Some("publication_search"), 2);
        let call = &whole["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], SEARCH);
        assert_eq!(call["function"]["arguments"], search_arguments());
        // Without the opt-in the same request is answered with the write.
        let plain = completion(&request, &script(), 2);
        assert_eq!(
            plain["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            WRITE_TOOL
        );
    }

    #[test]
    fn a_streamed_tool_call_joins_to_the_arguments() {
        let chunks = chunks(
            &request(json!([{ "role": "user", "content": "go" }])),
            &script(),
            4,
        );
        let chunks: Vec<Value> = chunks.iter().map(|chunk| data(chunk)).collect();
        let call = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["id"], "call_lab_4");
        assert_eq!(call["function"]["name"], "write");
        assert_eq!(
            joined_arguments(&chunks),
            json!({ "path": "/srv/a.html", "content": "<p>é</p>" })
        );
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
        assert!(chunks[..chunks.len() - 1]
            .iter()
            .all(|chunk| chunk["choices"][0]["finish_reason"].is_null()));
    }

    #[test]
    fn after_the_tool_the_text_stops() {
        let request = request(json!([{ "role": "tool", "tool_call_id": "c", "content": "ok" }]));
        let chunks: Vec<Value> = chunks(&request, &script(), 1)
            .iter()
            .map(|chunk| data(chunk))
            .collect();
        let text: String = chunks
            .iter()
            .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "Finished.");
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
        let whole = completion(&request, &script(), 1);
        assert_eq!(whole["choices"][0]["message"]["content"], "Finished.");
        assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    }
}
