//! The events of one chat turn, shaped exactly as the lines of the browser's NDJSON stream.
//!
//! Every [`LoopEvent`] serializes (with `serde_json::to_string`) to the JSON object of one
//! stream line as the browser's editor reads it, field for field and in the order the original
//! server wrote them, with absent optional fields omitted:
//!
//! | variant | wire line |
//! |---|---|
//! | [`LoopEvent::BridgeReady`] | `{type:"bridgeReady", bridgeId}` (the runner's, never the loop's) |
//! | [`LoopEvent::Text`] | `{type:"text", text}` |
//! | [`LoopEvent::ToolCall`] | `{type:"toolCall", toolCallId, toolName, input, status:"pending"}` |
//! | [`LoopEvent::ToolRequest`] | `{type:"toolRequest", requestId, toolName, input}` (the bridge's) |
//! | [`LoopEvent::ToolResult`] | `{type:"toolResult", toolCallId, toolName, ok, error?}` |
//! | [`LoopEvent::Context`] | `{type:"context", promptTokens, cacheReadTokens?, cacheCreationTokens?, contextTokens}` |
//! | [`LoopEvent::Usage`] | `{type:"usage", promptTokens, completionTokens, costUsd, cacheReadTokens?, cacheCreationTokens?}` |
//! | [`LoopEvent::Done`] | `{type:"done"}` |
//! | [`LoopEvent::Error`] | `{type:"error", message}` |
//!
//! Numbers are written as JavaScript's `JSON.stringify` writes them: a whole `costUsd` is
//! `0`, not `0.0`.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::types::{ToolCall, ToolResult, TOOL_CALL_FAILED};

/// The only status a `toolCall` line carries: the call is announced, its result follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallStatus {
    /// Announced, not yet answered.
    #[default]
    Pending,
}

/// One line of the chat turn's NDJSON stream (see the module docs for the exact wire shapes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum LoopEvent {
    /// The browser bridge is open; always the first line. Written by the runner that owns the
    /// bridge: [`crate::run_tool_loop`] never sends it.
    BridgeReady {
        /// The bridge's id, which the browser names when it posts tool results.
        bridge_id: String,
    },
    /// A piece of assistant text.
    Text {
        /// The delta.
        text: String,
    },
    /// The model called a tool; sent as soon as the call is complete in the provider stream.
    ToolCall {
        /// The provider's id for the call.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The model's arguments, parsed but not validated.
        input: Value,
        /// Always [`ToolCallStatus::Pending`].
        status: ToolCallStatus,
    },
    /// A browser tool is to be run by the editor, which posts the result back. Sent by the
    /// bridge executor (through its own clone of the loop's event sender, while the loop
    /// awaits it), never by the loop itself.
    ToolRequest {
        /// The bridge's id for this request.
        request_id: String,
        /// The tool's name.
        tool_name: String,
        /// The validated input.
        input: Value,
    },
    /// A tool call's outcome.
    ToolResult {
        /// The call it answers.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// Whether the tool succeeded.
        ok: bool,
        /// The failure text; present exactly when `ok` is false.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// What one provider round sent as input, once per round that reported usage, before the
    /// round's tools run.
    Context {
        /// The round's prompt tokens.
        prompt_tokens: u64,
        /// The round's cache reads, when the provider reported the bucket (a reported zero is
        /// kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_read_tokens: Option<u64>,
        /// The round's cache writes, when the provider reported the bucket.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_creation_tokens: Option<u64>,
        /// How full the model's context was ([`crate::Driver::context_tokens`]).
        context_tokens: u64,
    },
    /// The turn's usage summed over its rounds; sent once, after the last round.
    Usage {
        /// Prompt tokens over all rounds.
        prompt_tokens: u64,
        /// Completion tokens over all rounds.
        completion_tokens: u64,
        /// The turn's cost in USD. The loop puts the provider's own reported cost here (or 0);
        /// the runner replaces it with the authoritative persisted cost before writing the line.
        #[serde(serialize_with = "js_number")]
        cost_usd: f64,
        /// Cache reads over all rounds; omitted when zero.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_read_tokens: Option<u64>,
        /// Cache writes over all rounds; omitted when zero.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_creation_tokens: Option<u64>,
        /// The provider's own cost summed over the rounds that reported one; `None` when no
        /// round did, and the runner must price the tokens itself. Never on the wire.
        #[serde(skip)]
        provider_cost_usd: Option<f64>,
    },
    /// The turn ended normally; the last line.
    Done,
    /// The turn failed; the last line.
    Error {
        /// The user-facing message.
        message: String,
    },
}

impl LoopEvent {
    /// The `toolCall` line announcing `call`.
    pub fn tool_call(call: &ToolCall) -> Self {
        LoopEvent::ToolCall {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            input: call.arguments.clone(),
            status: ToolCallStatus::Pending,
        }
    }

    /// The `toolResult` line for `result` of tool `tool_name`: a failure without error text
    /// says [`TOOL_CALL_FAILED`].
    pub fn tool_result(tool_name: &str, result: &ToolResult) -> Self {
        LoopEvent::ToolResult {
            tool_call_id: result.call_id.clone(),
            tool_name: tool_name.to_owned(),
            ok: result.ok,
            error: (!result.ok).then(|| {
                result
                    .error
                    .clone()
                    .unwrap_or_else(|| TOOL_CALL_FAILED.to_owned())
            }),
        }
    }

    /// Whether this line ends the stream (`done` or `error`).
    pub fn is_terminal(&self) -> bool {
        matches!(self, LoopEvent::Done | LoopEvent::Error { .. })
    }
}

/// Writes a number as `JSON.stringify` does: whole values without a fraction.
fn js_number<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    // Below 2^53 every whole f64 is an exact i64.
    if value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0 {
        serializer.serialize_i64(*value as i64)
    } else {
        serializer.serialize_f64(*value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(event: &LoopEvent) -> String {
        serde_json::to_string(event).unwrap()
    }

    #[test]
    fn serializes_each_variant_as_its_wire_line() {
        let cases = [
            (
                LoopEvent::BridgeReady {
                    bridge_id: "b1".to_owned(),
                },
                r#"{"type":"bridgeReady","bridgeId":"b1"}"#,
            ),
            (
                LoopEvent::Text {
                    text: "Hi \"you\"".to_owned(),
                },
                r#"{"type":"text","text":"Hi \"you\""}"#,
            ),
            (
                LoopEvent::tool_call(&ToolCall {
                    id: "c1".to_owned(),
                    name: "site_find_nodes".to_owned(),
                    arguments: json!({"query": "hero"}),
                }),
                r#"{"type":"toolCall","toolCallId":"c1","toolName":"site_find_nodes","input":{"query":"hero"},"status":"pending"}"#,
            ),
            (
                LoopEvent::ToolRequest {
                    request_id: "r1".to_owned(),
                    tool_name: "site_add_node".to_owned(),
                    input: json!({}),
                },
                r#"{"type":"toolRequest","requestId":"r1","toolName":"site_add_node","input":{}}"#,
            ),
            (
                LoopEvent::Context {
                    prompt_tokens: 12,
                    cache_read_tokens: Some(0),
                    cache_creation_tokens: None,
                    context_tokens: 12,
                },
                r#"{"type":"context","promptTokens":12,"cacheReadTokens":0,"contextTokens":12}"#,
            ),
            (
                LoopEvent::Usage {
                    prompt_tokens: 1,
                    completion_tokens: 2,
                    cost_usd: 0.0,
                    cache_read_tokens: None,
                    cache_creation_tokens: Some(3),
                    provider_cost_usd: Some(0.5),
                },
                r#"{"type":"usage","promptTokens":1,"completionTokens":2,"costUsd":0,"cacheCreationTokens":3}"#,
            ),
            (LoopEvent::Done, r#"{"type":"done"}"#),
            (
                LoopEvent::Error {
                    message: "boom".to_owned(),
                },
                r#"{"type":"error","message":"boom"}"#,
            ),
        ];
        for (event, expected) in cases {
            assert_eq!(line(&event), expected);
        }
    }

    #[test]
    fn tool_results_carry_error_text_only_on_failure() {
        let mut result = ToolResult {
            call_id: "c1".to_owned(),
            ok: true,
            data: None,
            error: Some("ignored".to_owned()),
            images: Vec::new(),
        };
        assert_eq!(
            line(&LoopEvent::tool_result("t", &result)),
            r#"{"type":"toolResult","toolCallId":"c1","toolName":"t","ok":true}"#
        );
        result.ok = false;
        result.error = None;
        assert_eq!(
            line(&LoopEvent::tool_result("t", &result)),
            r#"{"type":"toolResult","toolCallId":"c1","toolName":"t","ok":false,"error":"Tool call failed."}"#
        );
    }

    #[test]
    fn writes_cost_like_javascript() {
        let usage = |cost_usd| LoopEvent::Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd,
            cache_read_tokens: None,
            cache_creation_tokens: None,
            provider_cost_usd: None,
        };
        let cost = |event: &LoopEvent| {
            let text = line(event);
            let start = text.find("\"costUsd\":").unwrap() + "\"costUsd\":".len();
            text[start..text.len() - 1].to_owned()
        };
        assert_eq!(cost(&usage(0.0)), "0");
        assert_eq!(cost(&usage(3.0)), "3");
        assert_eq!(cost(&usage(0.0012)), "0.0012");
        assert_eq!(cost(&usage(1.25)), "1.25");
    }

    #[test]
    fn wire_lines_read_back() {
        let event: LoopEvent = serde_json::from_str(
            r#"{"type":"toolResult","toolCallId":"c","toolName":"t","ok":false,"error":"e"}"#,
        )
        .unwrap();
        assert_eq!(
            event,
            LoopEvent::ToolResult {
                tool_call_id: "c".to_owned(),
                tool_name: "t".to_owned(),
                ok: false,
                error: Some("e".to_owned()),
            }
        );
        assert!(serde_json::from_str::<LoopEvent>(r#"{"type":"done"}"#)
            .unwrap()
            .is_terminal());
    }
}
