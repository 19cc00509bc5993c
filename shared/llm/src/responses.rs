//! The Responses wire (`POST <base>/v1/responses`), shared by OpenAI and OpenRouter.

use serde_json::{json, Value};

use crate::anthropic::str_field;
use crate::driver::Driver;
use crate::error::{LlmError, Setting};
use crate::prompt::join_system_parts;
use crate::tool_args::parse_tool_arguments;
use crate::transport::{
    generated_call_id, refused, run, Endpoint, EventStream, Translator, WireRequest,
};
use crate::types::{
    ChatRequest, ContentBlock, Message, Role, RoundEnd, StreamEvent, ToolCall, ToolChoice, Usage,
};
use atelier_sse::SseFrame;

/// OpenAI's production base URL (the driver appends `/v1/responses`).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com";

/// OpenRouter's production base URL (the driver appends `/v1/responses`).
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api";

/// Which Responses provider a driver speaks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponsesFlavor {
    /// OpenAI: sends `prompt_cache_key`.
    OpenAi,
    /// OpenRouter: no `prompt_cache_key`; reports a native per-round cost.
    OpenRouter,
}

/// A Responses driver (OpenAI or OpenRouter).
#[derive(Clone, Debug)]
pub struct ResponsesDriver {
    endpoint: Endpoint,
    flavor: ResponsesFlavor,
}

impl ResponsesDriver {
    /// An OpenAI driver for `endpoint` (its `api_key` is required).
    pub fn openai(endpoint: Endpoint) -> Self {
        ResponsesDriver {
            endpoint,
            flavor: ResponsesFlavor::OpenAi,
        }
    }

    /// An OpenRouter driver for `endpoint` (its `api_key` is required).
    pub fn openrouter(endpoint: Endpoint) -> Self {
        ResponsesDriver {
            endpoint,
            flavor: ResponsesFlavor::OpenRouter,
        }
    }
}

impl Driver for ResponsesDriver {
    fn label(&self) -> &'static str {
        match self.flavor {
            ResponsesFlavor::OpenAi => "OpenAI",
            ResponsesFlavor::OpenRouter => "OpenRouter",
        }
    }

    fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": request.model,
            "instructions": join_system_parts(&request.system),
            "input": map_input(&request.messages),
            "stream": true,
        });
        if let (ResponsesFlavor::OpenAi, Some(scope)) = (self.flavor, &request.scope) {
            let names: Vec<&str> = request
                .tools
                .iter()
                .map(|tool| tool.name.as_str())
                .collect();
            body["prompt_cache_key"] = json!(prompt_cache_key(scope, &names));
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({"type": "function", "name": tool.name, "description": tool.description, "parameters": tool.input_schema})
                })
                .collect();
        }
        if let Some(choice) = request.explicit_tool_choice() {
            body["tool_choice"] = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Function(name) => json!({"type": "function", "name": name}),
            };
        }
        body
    }

    fn stream(&self, request: &ChatRequest) -> EventStream {
        let label = self.label();
        if let Some(refusal) = request.tool_choice_refusal() {
            return refused(LlmError::Config { message: refusal });
        }
        let Some(key) = self.endpoint.api_key.clone().filter(|key| !key.is_empty()) else {
            return refused(LlmError::MissingSetting {
                label,
                setting: Setting::ApiKey,
            });
        };
        let wire = WireRequest {
            label,
            url: format!("{}/v1/responses", self.endpoint.trimmed_base()),
            bearer: Some(key),
            headers: Vec::new(),
            body: self.request_body(request),
        };
        run(
            self.endpoint.client.clone(),
            self.endpoint.idle_timeout,
            wire,
            Box::new(ResponsesTranslator {
                label,
                ..ResponsesTranslator::default()
            }),
        )
    }
}

/// `instatic:<scope>:<base36 FNV-1a32 of the sorted tool names joined with ",">`, hashed over
/// UTF-16 code units as the reference does, so cache keys survive the port.
pub fn prompt_cache_key(scope: &str, tool_names: &[&str]) -> String {
    let mut names = tool_names.to_vec();
    names.sort_unstable();
    let mut hash: u32 = 2_166_136_261;
    for unit in names.join(",").encode_utf16() {
        hash ^= u32::from(unit);
        hash = hash.wrapping_mul(16_777_619);
    }
    format!("instatic:{scope}:{}", base36(hash))
}

fn base36(mut value: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(value % 36) as usize]);
        value /= 36;
        if value == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

fn map_input(messages: &[Message]) -> Vec<Value> {
    let mut items = Vec::new();
    for message in messages {
        match message.role {
            Role::User => {
                let content: Vec<Value> = message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text { text } => {
                            Some(json!({"type": "input_text", "text": text}))
                        }
                        ContentBlock::Image(image) => {
                            Some(json!({"type": "input_image", "image_url": image.data_url()}))
                        }
                        _ => None,
                    })
                    .collect();
                items.push(json!({"type": "message", "role": "user", "content": content}));
            }
            Role::Assistant => {
                let text: String = message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                if !text.is_empty() {
                    items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}));
                }
                for block in &message.content {
                    if let ContentBlock::ToolCall(call) = block {
                        items.push(json!({
                            "type": "function_call", "call_id": call.id, "name": call.name,
                            "arguments": call.arguments.to_string(),
                        }));
                    }
                }
            }
            Role::Tool => {
                for block in &message.content {
                    if let ContentBlock::ToolResult(result) = block {
                        items.push(json!({
                            "type": "function_call_output", "call_id": result.call_id,
                            "output": result.output_text_only(),
                        }));
                    }
                }
            }
        }
    }
    items
}

#[derive(Default)]
struct ResponsesTranslator {
    /// The provider's label, for the errors it reports.
    label: &'static str,
    text: String,
    /// Calls in progress: (item id, call id), to route argument deltas.
    open_calls: Vec<(String, String)>,
    tool_calls: Vec<ToolCall>,
    usage: Option<Usage>,
    status: Option<String>,
}

impl Translator for ResponsesTranslator {
    fn frame(&mut self, frame: &SseFrame, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let Ok(data) = serde_json::from_str::<Value>(&frame.data) else {
            return Ok(());
        };
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(frame.event.as_deref());
        match kind {
            Some("response.output_text.delta") => {
                if let Some(delta) = data
                    .get("delta")
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                {
                    self.text.push_str(delta);
                    out.push(StreamEvent::TextDelta(delta.to_owned()));
                }
            }
            Some("response.output_item.added") => {
                let Some(item) = data.get("item").filter(|item| is_function_call(item)) else {
                    return Ok(());
                };
                let call_id = call_id(item);
                if let Some(item_id) = str_field(item, "id") {
                    self.open_calls.push((item_id, call_id.clone()));
                }
                let name = str_field(item, "name").unwrap_or_default();
                out.push(StreamEvent::ToolCallStarted { id: call_id, name });
            }
            Some("response.function_call_arguments.delta") => {
                let item_id = data.get("item_id").and_then(Value::as_str);
                let delta = data.get("delta").and_then(Value::as_str);
                if let (Some(item_id), Some(delta)) = (item_id, delta) {
                    if let Some((_, id)) = self.open_calls.iter().find(|(item, _)| item == item_id)
                    {
                        out.push(StreamEvent::ToolCallArgumentsDelta {
                            id: id.clone(),
                            delta: delta.to_owned(),
                        });
                    }
                }
            }
            Some("response.output_item.done") => {
                let Some(item) = data.get("item").filter(|item| is_function_call(item)) else {
                    return Ok(());
                };
                // The id announced at `output_item.added` wins, so a generated id stays stable.
                let announced = str_field(item, "id")
                    .and_then(|item_id| self.open_calls.iter().find(|(i, _)| *i == item_id))
                    .map(|(_, id)| id.clone());
                let id = announced.unwrap_or_else(|| call_id(item));
                let call = ToolCall {
                    id,
                    name: str_field(item, "name").unwrap_or_else(|| "tool".to_owned()),
                    arguments: parse_tool_arguments(
                        item.get("arguments").and_then(Value::as_str).unwrap_or(""),
                    ),
                };
                out.push(StreamEvent::ToolCallCompleted(call.clone()));
                self.tool_calls.push(call);
            }
            // An answer cut at its output limit ends `incomplete`, with its usage all the same.
            Some("response.completed" | "response.incomplete") => {
                self.status = data
                    .pointer("/response/status")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(usage) = data.pointer("/response/usage") {
                    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
                    self.usage = Some(Usage {
                        input_tokens: count("input_tokens"),
                        output_tokens: count("output_tokens"),
                        cache_read_tokens: usage
                            .pointer("/input_tokens_details/cached_tokens")
                            .and_then(Value::as_u64),
                        cache_write_tokens: None,
                        cost_usd: usage.get("cost").and_then(Value::as_f64),
                    });
                }
            }
            Some("response.failed") => {
                return Err(LlmError::ResponseFailed { label: self.label });
            }
            Some("error") => {
                let message = data
                    .get("message")
                    .or_else(|| data.pointer("/error/message"))
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error");
                return Err(LlmError::Provider {
                    message: format!("Provider error: {message}"),
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<StreamEvent>) -> Result<RoundEnd, LlmError> {
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(ContentBlock::Text {
                text: self.text.clone(),
            });
        }
        content.extend(self.tool_calls.iter().cloned().map(ContentBlock::ToolCall));
        Ok(RoundEnd {
            stop: self.tool_calls.is_empty(),
            stop_reason: self.status.clone(),
            tool_calls: self.tool_calls.clone(),
            assistant: (!content.is_empty()).then_some(Message {
                role: Role::Assistant,
                content,
            }),
            usage: self.usage,
        })
    }
}

fn is_function_call(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("function_call")
}

fn call_id(item: &Value) -> String {
    str_field(item, "call_id")
        .or_else(|| str_field(item, "id"))
        .unwrap_or_else(generated_call_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_cache_key_hashes_sorted_names_with_fnv1a32_in_base36() {
        // FNV-1a32 of the empty string is the offset basis, 2166136261 = "ztntfp" in base 36.
        assert_eq!(prompt_cache_key("site", &[]), "instatic:site:ztntfp");
        assert_eq!(
            prompt_cache_key("site", &["b", "a"]),
            prompt_cache_key("site", &["a", "b"])
        );
        // "a": (2166136261 ^ 97) * 16777619 mod 2^32 = 0xe40c292c = 3826002220.
        assert_eq!(
            prompt_cache_key("x", &["a"]),
            format!("instatic:x:{}", base36(0xe40c_292c))
        );
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
    }
}
