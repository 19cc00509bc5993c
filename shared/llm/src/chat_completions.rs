//! The chat/completions wire (`POST <base>/v1/chat/completions`), shared by Ollama and any
//! OpenAI-compatible endpoint.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::anthropic::str_field;
use crate::driver::Driver;
use crate::error::{extract_error_message, LlmError, Setting};
use crate::prompt::join_system_parts;
use crate::tool_args::parse_tool_arguments;
use crate::transport::{
    generated_call_id, refused, run, Endpoint, EventStream, Translator, WireRequest,
};
use crate::types::{
    ChatRequest, ContentBlock, Message, Role, RoundEnd, StreamEvent, ToolCall, ToolChoice, Usage,
};
use atelier_sse::SseFrame;

/// Ollama's usual local base URL.
pub const OLLAMA_DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434";

/// Which chat/completions provider a driver speaks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatCompletionsFlavor {
    /// A local or remote Ollama.
    Ollama,
    /// Any OpenAI-compatible endpoint ("Custom Provider").
    OpenAiCompatible,
}

/// A chat/completions driver. The API key is optional (sent as a bearer when present); the
/// base URL is required.
#[derive(Clone, Debug)]
pub struct ChatCompletionsDriver {
    endpoint: Endpoint,
    flavor: ChatCompletionsFlavor,
}

impl ChatCompletionsDriver {
    /// An Ollama driver for `endpoint`.
    pub fn ollama(endpoint: Endpoint) -> Self {
        ChatCompletionsDriver {
            endpoint,
            flavor: ChatCompletionsFlavor::Ollama,
        }
    }

    /// An OpenAI-compatible ("Custom Provider") driver for `endpoint`.
    pub fn openai_compatible(endpoint: Endpoint) -> Self {
        ChatCompletionsDriver {
            endpoint,
            flavor: ChatCompletionsFlavor::OpenAiCompatible,
        }
    }
}

/// `base_url` without trailing slashes and then without one trailing `/v1`.
pub fn normalize_openai_base_url(base_url: &str) -> &str {
    let trimmed = base_url.trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed)
}

impl Driver for ChatCompletionsDriver {
    fn label(&self) -> &'static str {
        match self.flavor {
            ChatCompletionsFlavor::Ollama => "Ollama",
            ChatCompletionsFlavor::OpenAiCompatible => "Custom Provider",
        }
    }

    fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": request.model,
            "messages": map_messages(&request.system, &request.messages),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if let Some(limit) = request.max_tokens {
            body["max_tokens"] = json!(limit);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}})
                })
                .collect();
        }
        if let Some(choice) = request.explicit_tool_choice() {
            body["tool_choice"] = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Function(name) => {
                    json!({"type": "function", "function": {"name": name}})
                }
            };
        }
        body
    }

    fn stream(&self, request: &ChatRequest) -> EventStream {
        let label = self.label();
        if let Some(refusal) = request.tool_choice_refusal() {
            return refused(LlmError::Config { message: refusal });
        }
        let base = normalize_openai_base_url(&self.endpoint.base_url);
        if base.is_empty() {
            return refused(LlmError::MissingSetting {
                label,
                setting: Setting::BaseUrl,
            });
        }
        let wire = WireRequest {
            label,
            url: format!("{base}/v1/chat/completions"),
            bearer: self.endpoint.api_key.clone().filter(|key| !key.is_empty()),
            headers: Vec::new(),
            body: self.request_body(request),
        };
        run(
            self.endpoint.client.clone(),
            self.endpoint.idle_timeout,
            wire,
            Box::new(ChatCompletionsTranslator {
                label,
                ..Default::default()
            }),
        )
    }
}

fn map_messages(system: &[String], messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::new();
    let system = join_system_parts(system);
    if !system.is_empty() {
        out.push(json!({"role": "system", "content": system}));
    }
    for message in messages {
        match message.role {
            Role::User => {
                let has_images = message
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Image(_)));
                let content = if has_images {
                    message
                        .content
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
                            ContentBlock::Image(image) => {
                                Some(json!({"type": "image_url", "image_url": {"url": image.data_url()}}))
                            }
                            _ => None,
                        })
                        .collect()
                } else {
                    let texts: Vec<&str> = message
                        .content
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    json!(texts.join(" "))
                };
                out.push(json!({"role": "user", "content": content}));
            }
            Role::Assistant => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for block in &message.content {
                    match block {
                        ContentBlock::Text { text: piece } => text.push_str(piece),
                        ContentBlock::ToolCall(call) => calls.push(json!({
                            "id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments.to_string()},
                        })),
                        _ => {}
                    }
                }
                let mut turn = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    turn["tool_calls"] = Value::Array(calls);
                }
                out.push(turn);
            }
            Role::Tool => {
                for block in &message.content {
                    if let ContentBlock::ToolResult(result) = block {
                        out.push(json!({"role": "tool", "tool_call_id": result.call_id, "content": result.output_text_only()}));
                    }
                }
            }
        }
    }
    out
}

#[derive(Default)]
struct PendingCall {
    id: String,
    /// Whether `id` came from the stream (else it was made up until one does).
    wire_id: bool,
    name: String,
    arguments: String,
    announced: bool,
}

#[derive(Default)]
struct ChatCompletionsTranslator {
    label: &'static str,
    text: String,
    /// The calls in the order they began.
    calls: Vec<PendingCall>,
    /// Which call a delta's `index` continues.
    slots: BTreeMap<u64, usize>,
    finish_reason: Option<String>,
    emitted: bool,
    usage: Option<Usage>,
    /// Whether any chunk arrived: a clean end before the first one is no answer at all.
    answered: bool,
}

impl ChatCompletionsTranslator {
    fn complete_calls(&mut self, out: &mut Vec<StreamEvent>) {
        if self.emitted || self.calls.is_empty() {
            return;
        }
        self.emitted = true;
        out.extend(
            self.tool_calls()
                .into_iter()
                .map(StreamEvent::ToolCallCompleted),
        );
    }

    fn tool_calls(&self) -> Vec<ToolCall> {
        self.calls
            .iter()
            .map(|call| ToolCall {
                id: call.id.clone(),
                name: if call.name.is_empty() {
                    "tool".to_owned()
                } else {
                    call.name.clone()
                },
                arguments: parse_tool_arguments(&call.arguments),
            })
            .collect()
    }
}

impl Translator for ChatCompletionsTranslator {
    fn frame(&mut self, frame: &SseFrame, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let Ok(chunk) = serde_json::from_str::<Value>(&frame.data) else {
            return Ok(());
        };
        self.answered = true;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let detail =
                extract_error_message(&json!({ "error": error }).to_string()).unwrap_or_default();
            return Err(LlmError::Provider {
                message: format!("{} error: {detail}", self.label),
            });
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: count("prompt_tokens"),
                output_tokens: count("completion_tokens"),
                ..Usage::default()
            });
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(());
        };
        if let Some(text) = choice
            .pointer("/delta/content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.text.push_str(text);
            out.push(StreamEvent::TextDelta(text.to_owned()));
        }
        if let Some(Value::Array(deltas)) = choice.pointer("/delta/tool_calls") {
            for delta in deltas {
                let index = delta.get("index").and_then(Value::as_u64).unwrap_or(0);
                let id = str_field(delta, "id");
                // A new id at an index already in use starts another call: Ollama gives every
                // call index 0, and some servers give no index at all.
                let continues = self.slots.get(&index).copied().filter(|&slot| {
                    let call = &self.calls[slot];
                    !(call.wire_id && id.as_ref().is_some_and(|id| *id != call.id))
                });
                let slot = match continues {
                    Some(slot) => slot,
                    None => {
                        self.calls.push(PendingCall::default());
                        self.slots.insert(index, self.calls.len() - 1);
                        self.calls.len() - 1
                    }
                };
                let call = &mut self.calls[slot];
                match id {
                    Some(id) => {
                        call.id = id;
                        call.wire_id = true;
                    }
                    None if call.id.is_empty() => call.id = generated_call_id(),
                    None => {}
                }
                if let Some(name) = delta
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .filter(|name| !name.is_empty())
                {
                    call.name = name.to_owned();
                }
                if !call.announced && !call.name.is_empty() {
                    call.announced = true;
                    out.push(StreamEvent::ToolCallStarted {
                        id: call.id.clone(),
                        name: call.name.clone(),
                    });
                }
                if let Some(piece) = delta.pointer("/function/arguments").and_then(Value::as_str) {
                    call.arguments.push_str(piece);
                    if !piece.is_empty() {
                        out.push(StreamEvent::ToolCallArgumentsDelta {
                            id: call.id.clone(),
                            delta: piece.to_owned(),
                        });
                    }
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            if self.finish_reason.is_none() {
                self.finish_reason = Some(reason.to_owned());
                self.complete_calls(out);
            }
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<RoundEnd, LlmError> {
        if !self.answered {
            // llama.cpp's Python server answers 200 and then ends the body at once when the
            // request fails after it was accepted (a prompt beyond its context window does
            // this); an empty "answer" would otherwise end the turn as if the model said
            // nothing.
            return Err(LlmError::Provider {
                message: format!(
                    "{} ended its answer before sending anything. The server may have failed \
                     after accepting the request (a prompt longer than its context window \
                     does this); check its log.",
                    self.label
                ),
            });
        }
        // Unlike the reference, calls of a stream that ended without a finish_reason are
        // still declared before they are returned, so no call runs undeclared.
        self.complete_calls(out);
        let tool_calls = self.tool_calls();
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(ContentBlock::Text {
                text: self.text.clone(),
            });
        }
        content.extend(tool_calls.iter().cloned().map(ContentBlock::ToolCall));
        Ok(RoundEnd {
            stop: tool_calls.is_empty(),
            stop_reason: self.finish_reason.clone(),
            tool_calls,
            assistant: (!content.is_empty()).then_some(Message {
                role: Role::Assistant,
                content,
            }),
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calls a stream of chunks (each a `delta.tool_calls` array, then a finish) ends with,
    /// as (id, name, arguments).
    fn calls_of(chunks: &[Value]) -> Vec<(String, String, Value)> {
        let mut translator = ChatCompletionsTranslator::default();
        let mut out = Vec::new();
        for chunk in chunks {
            let frame = SseFrame {
                id: None,
                event: None,
                data: chunk.to_string(),
            };
            translator.frame(&frame, &mut out).unwrap();
        }
        let end = translator.finish(&mut out).unwrap();
        end.tool_calls
            .into_iter()
            .map(|c| (c.id, c.name, c.arguments))
            .collect()
    }

    fn delta(calls: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})
    }

    #[test]
    fn each_call_is_its_own_whatever_index_the_server_gives() {
        let finish = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
        let call = |id: &str, index: Option<u64>, name: &str, args: &str| {
            let mut c = json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": args}});
            if let Some(index) = index {
                c["index"] = index.into();
            }
            c
        };
        let want = |pairs: &[(&str, &str, Value)]| -> Vec<(String, String, Value)> {
            pairs
                .iter()
                .map(|(id, name, args)| ((*id).to_owned(), (*name).to_owned(), args.clone()))
                .collect()
        };
        let both = want(&[
            ("a", "write", json!({"path": "a.html"})),
            ("b", "write", json!({"path": "b.html"})),
        ]);
        let cases = [
            (
                "indexed, as OpenAI",
                vec![
                    delta(json!([call("a", Some(0), "write", "{\"path\":")])),
                    delta(json!([{"index": 0, "function": {"arguments": "\"a.html\"}"}}])),
                    delta(json!([call(
                        "b",
                        Some(1),
                        "write",
                        "{\"path\":\"b.html\"}"
                    )])),
                    finish.clone(),
                ],
                both.clone(),
            ),
            (
                "every call index 0, as Ollama",
                vec![
                    delta(json!([call(
                        "a",
                        Some(0),
                        "write",
                        "{\"path\":\"a.html\"}"
                    )])),
                    delta(json!([call(
                        "b",
                        Some(0),
                        "write",
                        "{\"path\":\"b.html\"}"
                    )])),
                    finish.clone(),
                ],
                both.clone(),
            ),
            (
                "no index at all",
                vec![
                    delta(json!([
                        call("a", None, "write", "{\"path\":\"a.html\"}"),
                        call("b", None, "write", "{\"path\":\"b.html\"}")
                    ])),
                    finish.clone(),
                ],
                both,
            ),
            (
                "the id repeated in every fragment",
                vec![
                    delta(json!([call("a", Some(0), "write", "{\"path\":")])),
                    delta(json!([call("a", Some(0), "", "\"a.html\"}")])),
                    finish,
                ],
                want(&[("a", "write", json!({"path": "a.html"}))]),
            ),
        ];
        for (name, chunks, expected) in cases {
            assert_eq!(calls_of(&chunks), expected, "{name}");
        }
    }

    #[test]
    fn base_url_normalisation_strips_slashes_then_one_v1() {
        assert_eq!(normalize_openai_base_url("http://h:1/v1/"), "http://h:1");
        assert_eq!(normalize_openai_base_url("http://h:1//"), "http://h:1");
        assert_eq!(
            normalize_openai_base_url("http://h:1/v1/v1"),
            "http://h:1/v1"
        );
    }
}
