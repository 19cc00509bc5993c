//! Anthropic Messages: `POST <base>/v1/messages` with `x-api-key`, streamed as SSE.

use serde_json::{json, Value};

use crate::driver::Driver;
use crate::error::{LlmError, Setting};
use crate::prompt::{join_system_parts, SYSTEM_PROMPT_DYNAMIC_BOUNDARY};
use crate::tool_args::parse_tool_arguments;
use crate::transport::{refused, run, Endpoint, EventStream, Translator, WireRequest};
use crate::types::{
    ChatRequest, ContentBlock, Message, Role, RoundEnd, StreamEvent, ToolCall, ToolChoice,
    ToolResult, Usage,
};
use atelier_sse::SseFrame;

/// Anthropic's production base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version header value the mapping is written against.
const API_VERSION: &str = "2023-06-01";

/// Output token limit when the request sets none.
const DEFAULT_MAX_TOKENS: u32 = 8192;

const LABEL: &str = "Anthropic";

/// The Anthropic Messages driver.
#[derive(Clone, Debug)]
pub struct AnthropicDriver {
    endpoint: Endpoint,
}

impl AnthropicDriver {
    /// A driver for `endpoint`; its `api_key` is required.
    pub fn new(endpoint: Endpoint) -> Self {
        AnthropicDriver { endpoint }
    }
}

impl Driver for AnthropicDriver {
    fn label(&self) -> &'static str {
        LABEL
    }

    /// Anthropic's `input_tokens` excludes the cache buckets, so they are added back.
    fn context_tokens(&self, usage: &Usage) -> u64 {
        usage.input_tokens
            + usage.cache_read_tokens.unwrap_or(0)
            + usage.cache_write_tokens.unwrap_or(0)
    }

    fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": request.model,
            "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "system": system_value(&request.system),
            "messages": map_history(&request.messages),
            "stream": true,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})
                })
                .collect();
        }
        if let Some(choice) = request.explicit_tool_choice() {
            body["tool_choice"] = match choice {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
            };
        }
        body
    }

    fn stream(&self, request: &ChatRequest) -> EventStream {
        if let Some(refusal) = request.tool_choice_refusal() {
            return refused(LlmError::Config { message: refusal });
        }
        let Some(key) = self.endpoint.api_key.clone().filter(|key| !key.is_empty()) else {
            return refused(LlmError::MissingSetting {
                label: LABEL,
                setting: Setting::ApiKey,
            });
        };
        let wire = WireRequest {
            label: LABEL,
            url: format!("{}/v1/messages", self.endpoint.trimmed_base()),
            bearer: None,
            headers: vec![
                ("x-api-key", key),
                ("anthropic-version", API_VERSION.to_owned()),
            ],
            body: self.request_body(request),
        };
        run(
            self.endpoint.client.clone(),
            self.endpoint.idle_timeout,
            wire,
            Box::new(AnthropicTranslator::default()),
        )
    }
}

fn system_value(parts: &[String]) -> Value {
    match parts {
        [prefix, marker, suffix] if marker == SYSTEM_PROMPT_DYNAMIC_BOUNDARY => json!([
            {"type": "text", "text": prefix, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": suffix},
        ]),
        [only] => json!(only),
        _ => json!(join_system_parts(parts)),
    }
}

fn tool_result_block(result: &ToolResult) -> Value {
    let mut block = json!({"type": "tool_result", "tool_use_id": result.call_id});
    if !result.ok {
        block["content"] = json!(result.output_text());
        block["is_error"] = json!(true);
    } else if result.images.is_empty() {
        block["content"] = json!(result.output_text());
    } else {
        let mut content = vec![json!({"type": "text", "text": result.output_text()})];
        content.extend(result.images.iter().map(|image| {
            json!({"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.data}})
        }));
        block["content"] = Value::Array(content);
    }
    block
}

/// Canonical history to Anthropic turns: same-role neighbours merge, tool messages become
/// user turns of `tool_result` blocks (merged with a neighbouring user turn).
fn map_history(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks): (&'static str, Vec<Value>) = match message.role {
            Role::User => (
                "user",
                message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
                        ContentBlock::Image(image) => Some(json!({
                            "type": "image",
                            "source": {"type": "base64", "media_type": image.mime_type, "data": image.data},
                        })),
                        _ => None,
                    })
                    .collect(),
            ),
            Role::Assistant => (
                "assistant",
                message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        // Anthropic refuses a text block of whitespace alone (400), which the
                        // model itself may have sent before a tool call.
                        ContentBlock::Text { text } if !text.trim().is_empty() => {
                            Some(json!({"type": "text", "text": text}))
                        }
                        ContentBlock::ToolCall(call) => Some(json!({
                            "type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments,
                        })),
                        _ => None,
                    })
                    .collect(),
            ),
            Role::Tool => (
                "user",
                message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::ToolResult(result) => Some(tool_result_block(result)),
                        _ => None,
                    })
                    .collect(),
            ),
        };
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
        done: bool,
    },
}

#[derive(Default)]
struct AnthropicTranslator {
    /// Blocks by their stream index, in order of appearance.
    blocks: Vec<(u64, Block)>,
    stop_reason: Option<String>,
    /// A `message_stop` arrived.
    stopped: bool,
    usage: serde_json::Map<String, Value>,
}

impl AnthropicTranslator {
    fn block(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, block)| block)
    }

    fn merge_usage(&mut self, usage: Option<&Value>) {
        if let Some(Value::Object(usage)) = usage {
            for (key, value) in usage {
                self.usage.insert(key.clone(), value.clone());
            }
        }
    }

    fn usage_count(&self, key: &str) -> u64 {
        self.usage.get(key).and_then(Value::as_u64).unwrap_or(0)
    }
}

impl Translator for AnthropicTranslator {
    fn frame(&mut self, frame: &SseFrame, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let Ok(data) = serde_json::from_str::<Value>(&frame.data) else {
            return Ok(());
        };
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(frame.event.as_deref());
        let index = data.get("index").and_then(Value::as_u64);
        match kind {
            Some("message_start") => self.merge_usage(data.pointer("/message/usage")),
            Some("content_block_start") => {
                let (Some(index), Some(block)) = (index, data.get("content_block")) else {
                    return Ok(());
                };
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let id = str_field(block, "id").unwrap_or_else(|| format!("tool-{index}"));
                        let name = str_field(block, "name").unwrap_or_else(|| "tool".to_owned());
                        out.push(StreamEvent::ToolCallStarted {
                            id: id.clone(),
                            name: name.clone(),
                        });
                        self.blocks.push((
                            index,
                            Block::Tool {
                                id,
                                name,
                                json: String::new(),
                                done: false,
                            },
                        ));
                    }
                    Some("text") => self.blocks.push((index, Block::Text(String::new()))),
                    _ => {}
                }
            }
            Some("content_block_delta") => {
                let (Some(index), Some(delta)) = (index, data.get("delta")) else {
                    return Ok(());
                };
                match (delta.get("type").and_then(Value::as_str), self.block(index)) {
                    (Some("text_delta"), Some(Block::Text(text))) => {
                        if let Some(piece) = delta.get("text").and_then(Value::as_str) {
                            text.push_str(piece);
                            out.push(StreamEvent::TextDelta(piece.to_owned()));
                        }
                    }
                    (Some("input_json_delta"), Some(Block::Tool { id, json, .. })) => {
                        if let Some(piece) = delta.get("partial_json").and_then(Value::as_str) {
                            json.push_str(piece);
                            out.push(StreamEvent::ToolCallArgumentsDelta {
                                id: id.clone(),
                                delta: piece.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                if let Some(Block::Tool {
                    id,
                    name,
                    json,
                    done,
                }) = index.and_then(|i| self.block(i))
                {
                    if !*done {
                        *done = true;
                        out.push(StreamEvent::ToolCallCompleted(ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: parse_tool_arguments(json),
                        }));
                    }
                }
            }
            Some("message_stop") => self.stopped = true,
            Some("message_delta") => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                self.merge_usage(data.get("usage"));
            }
            Some("error") => {
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(|message| format!("Anthropic error: {message}"))
                    .unwrap_or_else(|| "Anthropic returned an error while streaming.".to_owned());
                return Err(LlmError::Provider { message });
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<StreamEvent>) -> Result<RoundEnd, LlmError> {
        // A message ends with its stop reason and `message_stop`; a stream that closed before
        // either was cut (a proxy, a dropped upstream), and what it holds may be half a call,
        // which must not pass for a finished answer.
        if self.stop_reason.is_none() && !self.stopped {
            return Err(LlmError::Stream {
                label: LABEL,
                detail: "the stream ended before the message did".to_owned(),
            });
        }
        let mut content = Vec::new();
        let mut tool_calls = Vec::new();
        for (_, block) in &self.blocks {
            match block {
                Block::Text(text) if !text.is_empty() => {
                    content.push(ContentBlock::Text { text: text.clone() })
                }
                Block::Text(_) => {}
                Block::Tool {
                    id,
                    name,
                    json,
                    done,
                } => {
                    let call = ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: parse_tool_arguments(json),
                    };
                    content.push(ContentBlock::ToolCall(call.clone()));
                    // Only calls whose block closed were declared to the consumer.
                    if *done {
                        tool_calls.push(call);
                    }
                }
            }
        }
        Ok(RoundEnd {
            stop: self.stop_reason.as_deref() != Some("tool_use"),
            stop_reason: self.stop_reason.clone(),
            tool_calls,
            assistant: (!content.is_empty()).then_some(Message {
                role: Role::Assistant,
                content,
            }),
            usage: Some(Usage {
                input_tokens: self.usage_count("input_tokens"),
                output_tokens: self.usage_count("output_tokens"),
                cache_read_tokens: Some(self.usage_count("cache_read_input_tokens")),
                cache_write_tokens: Some(self.usage_count("cache_creation_input_tokens")),
                cost_usd: None,
            }),
        })
    }
}

/// A string field of a JSON object.
pub(crate) fn str_field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}
