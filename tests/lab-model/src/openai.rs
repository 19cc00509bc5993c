//! OpenAI chat completions as the lab model speaks it, for agents that talk that wire: the
//! request fields the script reads, the answer as one JSON completion or as `data:` chunks
//! ending with `data: [DONE]`, the tool call in the `tool_calls` delta shape.

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

/// One message, by its role alone.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
}

impl Request {
    /// [`Turn::Finish`] if and only if the last message is a tool result.
    pub fn turn(&self) -> Turn {
        match self.messages.last() {
            Some(message) if message.role == "tool" => Turn::Finish,
            _ => Turn::Write,
        }
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
    let (first, deltas, finish_reason) = match request.turn() {
        Turn::Write => {
            let arguments = write_arguments(request, script);
            let first = json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "index": 0,
                    "id": format!("call_lab_{n}"),
                    "type": "function",
                    "function": { "name": WRITE_TOOL, "arguments": "" },
                }],
            });
            let deltas = pieces(&arguments, ARGUMENT_PIECES)
                .into_iter()
                .map(|piece| json!({ "tool_calls": [{ "index": 0, "function": { "arguments": piece } }] }))
                .collect::<Vec<_>>();
            (first, deltas, "tool_calls")
        }
        Turn::Finish => {
            let first = json!({ "role": "assistant", "content": "" });
            let deltas = pieces(&script.final_text, TEXT_PIECES)
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
    let (message, finish_reason, completion_tokens) = match request.turn() {
        Turn::Write => {
            let arguments = write_arguments(request, script);
            let completion_tokens = tokens(&arguments);
            let message = json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": format!("call_lab_{n}"),
                    "type": "function",
                    "function": { "name": WRITE_TOOL, "arguments": arguments },
                }],
            });
            (message, "tool_calls", completion_tokens)
        }
        Turn::Finish => (
            json!({ "role": "assistant", "content": script.final_text }),
            "stop",
            tokens(&script.final_text),
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
        let arguments: String = chunks
            .iter()
            .filter_map(|chunk| {
                chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&arguments).unwrap(),
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
