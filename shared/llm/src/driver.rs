//! The one trait every provider driver implements.

use crate::transport::EventStream;
use crate::types::{ChatRequest, Usage};

/// A provider: maps canonical requests to its wire and its stream back to canonical events.
pub trait Driver: Send + Sync {
    /// The provider's label in user-facing messages (`Anthropic`, `OpenAI`, …).
    fn label(&self) -> &'static str;

    /// The JSON body this driver sends for `request` (exposed for inspection and tests).
    fn request_body(&self, request: &ChatRequest) -> serde_json::Value;

    /// Starts one provider round. The request is sent when the stream is first polled;
    /// dropping the stream aborts it. A non-OK answer is the stream's only item, as a
    /// classified [`crate::LlmError`].
    fn stream(&self, request: &ChatRequest) -> EventStream;

    /// How much of the model's context a round with `usage` filled: the prompt tokens, plus
    /// the cache buckets on wires whose prompt count excludes them (Anthropic). The tool loop
    /// puts it on each `context` event.
    fn context_tokens(&self, usage: &Usage) -> u64 {
        usage.input_tokens
    }
}
