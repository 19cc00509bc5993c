//! OpenAI chat completions as the lab model speaks it, for agents that talk that wire: the
//! request fields the script reads, the answer as one JSON completion or as `data:` chunks
//! ending with `data: [DONE]`, the tool call in the `tool_calls` delta shape.
//!
//! On this wire the script has two opt-in steps. [`Step::Search`] (as on the Anthropic wire):
//! given a tool name suffix, a request that offers a tool so named is answered with a call of
//! it (arguments [`search_arguments`]) before the write, so a test sees an MCP server's tool
//! reach the model and its result come back. [`Step::Replace`] (this wire only): given a
//! [`Replace`], the write's result is answered with a call of the offered `edit` tool, so a
//! test sees an exact replace.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::anthropic::INPUT_TOKENS;
use crate::script::{pieces, search_input, tokens, Replace, Script, Seen, Step, Turn};

/// The tool the model writes with.
pub const WRITE_TOOL: &str = "write";

/// The tool the opt-in replace calls.
pub const EDIT_TOOL: &str = "edit";

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

impl Request {
    /// [`Turn::Finish`] if and only if the last message is a tool result.
    pub fn turn(&self) -> Turn {
        match self.messages.last() {
            Some(message) if message.role == "tool" => Turn::Finish,
            _ => Turn::Write,
        }
    }

    /// The next step: [`Seen::step`], and with `replacing`, the write's result is followed
    /// by a call of the offered `edit` tool (skipped when it is not offered).
    pub fn step(&self, search: Option<&str>, replacing: bool) -> Step<'_> {
        let seen = self.seen();
        match seen.step(search, WRITE_TOOL) {
            Step::Finish
                if replacing
                    && seen.turn == Turn::Finish
                    && seen.last_called.contains(&WRITE_TOOL)
                    && seen.offered.contains(&EDIT_TOOL) =>
            {
                Step::Replace
            }
            step => step,
        }
    }

    /// What the request shows the script.
    fn seen(&self) -> Seen<'_> {
        let last_called = self
            .messages
            .iter()
            .rev()
            .find(|message| message.role == "assistant")
            .and_then(|message| message.tool_calls.as_array())
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|call| call["function"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        Seen {
            turn: self.turn(),
            offered: self
                .tools
                .iter()
                .map(|tool| tool.function.name.as_str())
                .collect(),
            last_called,
            // No agent on this wire defers its tools.
            texts: Vec::new(),
        }
    }

    /// The name among `candidates` that the offered tool `tool`'s schema uses for a
    /// parameter, `fallback` when the tool is not offered or uses none of them.
    fn parameter_name(
        &self,
        tool: &str,
        candidates: [&'static str; 3],
        fallback: &'static str,
    ) -> &'static str {
        self.tools
            .iter()
            .find(|offered| offered.function.name == tool)
            .and_then(|offered| offered.function.parameters.get("properties"))
            .and_then(|properties| {
                candidates
                    .into_iter()
                    .find(|key| properties.get(key).is_some())
            })
            .unwrap_or(fallback)
    }
}

/// The opt-in search's arguments, as the JSON string the wire carries.
pub fn search_arguments() -> String {
    search_input().to_string()
}

/// The tool call or the text of `step`: `(tool name, arguments)` or the words.
fn answer_of<'s>(
    step: Step<'s>,
    request: &Request,
    script: &'s Script,
) -> Result<(&'s str, String), &'s str> {
    match (step, &script.replace) {
        (Step::Search(name), _) => Ok((name, search_arguments())),
        (Step::Write, _) => Ok((WRITE_TOOL, write_arguments(request, script))),
        (Step::Replace, Some(replace)) => Ok((EDIT_TOOL, replace_arguments(request, replace))),
        (Step::Replace, None) | (Step::Load(_), _) | (Step::Finish, _) => Err(&script.final_text),
    }
}

/// The names a tool's schema may give the file's path: opencode's `filePath`, Claude Code's
/// `file_path`, pi's and atelier-agent's `path` (also the fallback).
const PATH_NAMES: [&str; 3] = ["filePath", "file_path", "path"];

/// The write tool's arguments, as the JSON string the wire carries, the path under the name
/// the offered write tool's schema uses.
pub fn write_arguments(request: &Request, script: &Script) -> String {
    let path_key = request.parameter_name(WRITE_TOOL, PATH_NAMES, "path");
    let mut arguments = serde_json::Map::new();
    arguments.insert(path_key.to_owned(), json!(script.write_path));
    arguments.insert("content".to_owned(), json!(script.write_content));
    Value::Object(arguments).to_string()
}

/// The edit tool's arguments for `replace`, under the names the offered edit tool's schema
/// uses (opencode's `oldString`, pi's `oldText`, `old_string` otherwise).
pub fn replace_arguments(request: &Request, replace: &Replace) -> String {
    let path_key = request.parameter_name(EDIT_TOOL, PATH_NAMES, "path");
    let old_key = request.parameter_name(
        EDIT_TOOL,
        ["oldString", "oldText", "old_string"],
        "old_string",
    );
    let new_key = request.parameter_name(
        EDIT_TOOL,
        ["newString", "newText", "new_string"],
        "new_string",
    );
    let mut arguments = serde_json::Map::new();
    arguments.insert(path_key.to_owned(), json!(replace.path));
    arguments.insert(old_key.to_owned(), json!(replace.old));
    arguments.insert(new_key.to_owned(), json!(replace.new));
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
    let (first, deltas, finish_reason) = match answer_of(
        request.step(search, script.replace.is_some()),
        request,
        script,
    ) {
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
    let (message, finish_reason, completion_tokens) = match answer_of(
        request.step(search, script.replace.is_some()),
        request,
        script,
    ) {
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
    use crate::script::SEARCH_QUERY;

    fn script() -> Script {
        Script {
            write_path: "/srv/a.html".to_owned(),
            write_content: "<p>é</p>".to_owned(),
            final_text: "Finished.".to_owned(),
            replace: None,
        }
    }

    /// A streamed request offering the write tool, with `messages`.
    fn request(messages: Value) -> Request {
        serde_json::from_value(json!({
            "model": "m",
            "stream": true,
            "messages": messages,
            "tools": [{ "type": "function", "function": { "name": WRITE_TOOL, "parameters": {} } }],
        }))
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
            // A chat runtime's tools, without the coding agent's writer: words only.
            (
                "no write offered",
                &["site_read_document"][..],
                json!([user]),
                None,
                Step::Finish,
            ),
            (
                "not opted in, after a tool",
                &tools[..],
                json!([user, search_call, search_result]),
                None,
                Step::Finish,
            ),
        ] {
            assert_eq!(
                offering(offered, messages).step(search, false),
                step,
                "{name}"
            );
        }
    }

    #[test]
    fn the_opt_in_replace_follows_the_write_when_edit_is_offered() {
        let user = json!({ "role": "user", "content": "go" });
        let [write_call, write_result] = called(WRITE_TOOL, "ok");
        let [edit_call, edit_result] = called(EDIT_TOOL, "ok");
        let [search_call, search_result] = called(SEARCH, "{}");
        let tools = [WRITE_TOOL, EDIT_TOOL];
        for (name, offered, messages, replacing, step) in [
            (
                "first request",
                &tools[..],
                json!([user]),
                true,
                Step::Write,
            ),
            (
                "after the write",
                &tools[..],
                json!([user, write_call, write_result]),
                true,
                Step::Replace,
            ),
            (
                "after the replace",
                &tools[..],
                json!([user, write_call, write_result, edit_call, edit_result]),
                true,
                Step::Finish,
            ),
            (
                "edit not offered",
                &tools[..1],
                json!([user, write_call, write_result]),
                true,
                Step::Finish,
            ),
            (
                "not opted in",
                &tools[..],
                json!([user, write_call, write_result]),
                false,
                Step::Finish,
            ),
            (
                "after another tool",
                &tools[..],
                json!([user, search_call, search_result]),
                true,
                Step::Finish,
            ),
        ] {
            assert_eq!(
                offering(offered, messages).step(None, replacing),
                step,
                "{name}"
            );
        }
    }

    #[test]
    fn the_replace_call_takes_the_edit_tools_parameter_names() {
        let replace = Replace {
            path: "/srv/a.css".to_owned(),
            old: "48rem".to_owned(),
            new: "60rem".to_owned(),
        };
        let scripted = Script {
            replace: Some(replace.clone()),
            ..script()
        };
        let after_write = |properties: Value| -> Request {
            let [write_call, write_result] = called(WRITE_TOOL, "ok");
            serde_json::from_value(json!({
                "model": "m",
                "messages": [{ "role": "user", "content": "go" }, write_call, write_result],
                "tools": [
                    { "type": "function", "function": { "name": WRITE_TOOL, "parameters": { "properties": { "path": {} } } } },
                    { "type": "function", "function": { "name": EDIT_TOOL, "parameters": { "properties": properties } } },
                ],
            }))
            .unwrap()
        };
        for (name, properties, keys) in [
            (
                "atelier-agent",
                json!({ "path": {}, "old_string": {}, "new_string": {} }),
                ["path", "old_string", "new_string"],
            ),
            (
                "opencode",
                json!({ "filePath": {}, "oldString": {}, "newString": {} }),
                ["filePath", "oldString", "newString"],
            ),
            (
                "pi",
                json!({ "path": {}, "oldText": {}, "newText": {} }),
                ["path", "oldText", "newText"],
            ),
        ] {
            let request = after_write(properties);
            let arguments: Value =
                serde_json::from_str(&replace_arguments(&request, &replace)).unwrap();
            assert_eq!(
                arguments,
                json!({ keys[0]: "/srv/a.css", keys[1]: "48rem", keys[2]: "60rem" }),
                "{name}"
            );
            let whole = completion(&request, &scripted, 3);
            let call = &whole["choices"][0]["message"]["tool_calls"][0];
            assert_eq!(call["function"]["name"], EDIT_TOOL, "{name}");
            let streamed: Vec<Value> = chunks(&request, &scripted, 3)
                .iter()
                .map(|chunk| data(chunk))
                .collect();
            assert_eq!(joined_arguments(&streamed), arguments, "{name}");
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
