//! Canonical, provider-neutral messages, tools, requests and stream events.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message in the conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human (or the editor acting for them).
    User,
    /// The model.
    Assistant,
    /// Results of tool calls, answering the assistant's calls.
    Tool,
}

/// One message of the conversation history. The system prompt is not a message: it is
/// [`ChatRequest::system`], because providers place it outside the message list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content blocks, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message with a single text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }
}

/// A base64 image attached to a user message or a tool result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Its media type, e.g. `image/jpeg`.
    pub mime_type: String,
    /// The image bytes, base64-encoded (no data-URL prefix).
    pub data: String,
}

impl Image {
    /// The image as a `data:` URL, the form the OpenAI-style wires take.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime_type, self.data)
    }
}

/// A call of a tool by the model, with its arguments already parsed (see
/// [`crate::parse_tool_arguments`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; results refer to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The parsed arguments; `{}` when the model sent nothing or malformed JSON.
    pub arguments: Value,
}

/// The outcome of one tool call, sent back to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the [`ToolCall`] this answers.
    pub call_id: String,
    /// Whether the tool succeeded.
    pub ok: bool,
    /// The tool's output on success; `None` is rendered as `{"ok":true}`.
    pub data: Option<Value>,
    /// The failure text when `ok` is false; `None` is rendered as `Tool call failed.`.
    pub error: Option<String>,
    /// Images the tool produced (screenshots); only some wires can carry them.
    pub images: Vec<Image>,
}

/// Text a failed tool result carries when it has no error of its own.
pub const TOOL_CALL_FAILED: &str = "Tool call failed.";

impl ToolResult {
    /// A failed result answering call `call_id`, with the text the model reads.
    pub fn failed(call_id: impl Into<String>, error: impl Into<String>) -> ToolResult {
        ToolResult {
            call_id: call_id.into(),
            ok: false,
            data: None,
            error: Some(error.into()),
            images: Vec::new(),
        }
    }

    /// The result as the text the model reads: the error on failure, else the data as JSON.
    pub fn output_text(&self) -> String {
        if self.ok {
            match &self.data {
                Some(data) => data.to_string(),
                None => serde_json::json!({ "ok": true }).to_string(),
            }
        } else {
            self.error
                .clone()
                .unwrap_or_else(|| TOOL_CALL_FAILED.to_owned())
        }
    }

    /// [`Self::output_text`] for a text-only wire: images are replaced by a note saying so.
    pub fn output_text_only(&self) -> String {
        let mut text = self.output_text();
        if !self.images.is_empty() {
            text.push_str(&format!(
                "\n\n[{} screenshot(s) omitted: this provider delivers tool results as text only.]",
                self.images.len()
            ));
        }
        text
    }
}

/// One block of a message's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (user messages).
    Image(Image),
    /// A tool call (assistant messages).
    ToolCall(ToolCall),
    /// A tool result (tool messages).
    ToolResult(ToolResult),
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Its name, as the model calls it.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
}

/// Whether the model may, must or must not call a tool this round. Every provider's API has
/// the same four choices under its own spelling; each driver maps them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (every provider's default, so nothing is sent).
    #[default]
    Auto,
    /// The model must answer in text, though tools are declared.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call the named tool.
    Function(String),
}

/// One provider round: what to send.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    /// The provider's model id.
    pub model: String,
    /// The system prompt parts: one part, or `[prefix, SYSTEM_PROMPT_DYNAMIC_BOUNDARY, suffix]`
    /// where the prefix is stable enough to cache (see [`crate::SYSTEM_PROMPT_DYNAMIC_BOUNDARY`]).
    pub system: Vec<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools the model may call; none sends no `tools` field.
    pub tools: Vec<ToolDefinition>,
    /// The output token limit: Anthropic's wire requires one (8192 when `None`);
    /// chat/completions sends it only when set; the Responses wire does not send it.
    pub max_tokens: Option<u32>,
    /// The chat scope (e.g. `site`), used to build OpenAI's `prompt_cache_key`.
    pub scope: Option<String>,
    /// Whether the model may, must or must not call a tool.
    pub tool_choice: ToolChoice,
}

impl ChatRequest {
    /// Why this request's tool choice cannot be sent, if it cannot: a choice that forces a
    /// call needs tools to call, and a named one must name a declared tool. Drivers refuse
    /// such a request before anything reaches the provider.
    pub fn tool_choice_refusal(&self) -> Option<String> {
        match &self.tool_choice {
            ToolChoice::Auto | ToolChoice::None => None,
            ToolChoice::Required if self.tools.is_empty() => {
                Some("A required tool call needs at least one tool.".to_owned())
            }
            ToolChoice::Required => None,
            ToolChoice::Function(name) if !self.tools.iter().any(|tool| &tool.name == name) => {
                Some(format!(
                    "The forced tool \"{name}\" is not among the request's tools."
                ))
            }
            ToolChoice::Function(_) => None,
        }
    }

    /// The tool choice to send, if any: `Auto` is every provider's default and `None` without
    /// tools has nothing to refuse, so neither is sent and bodies stay as they were.
    pub(crate) fn explicit_tool_choice(&self) -> Option<&ToolChoice> {
        match self.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None if self.tools.is_empty() => None,
            _ => Some(&self.tool_choice),
        }
    }
}

/// Token counts a provider reported for one round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub input_tokens: u64,
    /// Completion (output) tokens.
    pub output_tokens: u64,
    /// Input tokens served from the provider's prompt cache, when reported.
    pub cache_read_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache, when reported.
    pub cache_write_tokens: Option<u64>,
    /// The provider's own price for the round in USD, when it reports one (OpenRouter).
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Adds `other`'s counts to these: a bucket or price stays unreported only while neither
    /// side reported it.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        let add = |sum: Option<u64>, part: Option<u64>| match (sum, part) {
            (None, None) => None,
            (sum, part) => Some(sum.unwrap_or(0) + part.unwrap_or(0)),
        };
        self.cache_read_tokens = add(self.cache_read_tokens, other.cache_read_tokens);
        self.cache_write_tokens = add(self.cache_write_tokens, other.cache_write_tokens);
        if let Some(cost) = other.cost_usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + cost);
        }
    }
}

/// How a round ended, reported once as the last event of a successful stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundEnd {
    /// True when the tool loop must stop after this round, even if calls were issued (an
    /// Anthropic `max_tokens` stop); false when `tool_calls` are to be run and answered.
    pub stop: bool,
    /// The provider's raw stop/finish reason, when it sent one.
    pub stop_reason: Option<String>,
    /// The calls issued this round, in the order issued.
    pub tool_calls: Vec<ToolCall>,
    /// The assistant turn to append to the history before the tool results (text and calls in
    /// stream order); `None` when the model produced nothing.
    pub assistant: Option<Message>,
    /// The round's usage, when the provider reported it.
    pub usage: Option<Usage>,
}

/// One event of a provider round's stream.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// A piece of assistant text.
    TextDelta(String),
    /// A tool call began; its arguments follow as deltas.
    ToolCallStarted {
        /// The call's id.
        id: String,
        /// The tool's name (may be empty if the wire sends it later).
        name: String,
    },
    /// A piece of a tool call's JSON arguments.
    ToolCallArgumentsDelta {
        /// The call's id.
        id: String,
        /// The raw JSON fragment.
        delta: String,
    },
    /// A tool call is complete, with its parsed arguments.
    ToolCallCompleted(ToolCall),
    /// The round ended cleanly; always the last event.
    Finished(RoundEnd),
}
