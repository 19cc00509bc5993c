//! Provider-agnostic LLM drivers over raw HTTP/SSE, and their canonical types.
//!
//! One [`Driver`] trait; five drivers that only map canonical [`ChatRequest`]s to a wire and
//! the wire's SSE back to [`StreamEvent`]s: [`AnthropicDriver`], [`ResponsesDriver::openai`],
//! [`ResponsesDriver::openrouter`], [`ChatCompletionsDriver::ollama`] and
//! [`ChatCompletionsDriver::openai_compatible`]. They share one SSE reader (`atelier-sse`, shared with every other stream Atelier reads),
//! one tool-argument parser ([`parse_tool_arguments`]), one prompt-boundary constant
//! ([`SYSTEM_PROMPT_DYNAMIC_BOUNDARY`]), one transport with a per-read idle timeout, and one
//! error classification ([`classify_http_failure`] into [`LlmError`]).
//!
//! [`list_models`] and [`ModelCatalogue`] read each provider's live model list (bounded,
//! concurrent listings shared, none kept); [`pricing_key`], [`parse_openrouter_catalogue`] and
//! [`compute_cost_usd`] price a round's tokens from OpenRouter's public catalogue.
//!
//! [`CapabilityResolver`] answers what a model can do (vision, tools, context window), cached
//! and de-duplicated per endpoint and model, fail-closed for vision.
//!
//! On top of them, [`run_tool_loop`] runs a whole chat turn: rounds, tool calls through a
//! [`ToolExecutor`], heavy-evidence elision and the one overflow retry, writing the turn as
//! [`LoopEvent`]s that serialize to the browser's NDJSON lines.

mod anthropic;
mod capabilities;
mod chat_completions;
mod driver;
mod error;
mod models;
mod pricing;
mod prompt;
mod responses;
mod tool_args;
mod tool_loop;
mod transport;
mod types;

pub use anthropic::AnthropicDriver;
pub use capabilities::{
    ollama_capabilities, openrouter_capabilities, CapabilityLookupError, CapabilityResolver,
    ModelCapabilities, ProviderKind, CAPABILITY_CACHE_ENTRIES, CAPABILITY_CACHE_TTL,
    CAPABILITY_LOOKUP_TIMEOUT,
};
pub use chat_completions::{
    normalize_openai_base_url, ChatCompletionsDriver, ChatCompletionsFlavor,
    OLLAMA_DEFAULT_BASE_URL,
};
pub use driver::Driver;
pub use error::{
    classify_http_failure, extract_error_message, is_overflow_text, LlmError, Setting,
};
pub use models::{
    anthropic_models, list_models, ollama_fallback_models, openai_models, openrouter_models,
    provider_label, CatalogueSource, ListedCapabilities, ListedPrice, ModelCatalogue,
    ModelListError, ModelTier, ProviderModel, MODEL_LIST_TIMEOUT, OLLAMA_SHOW_BATCH,
};
pub use pricing::{
    compute_cost_usd, fetch_openrouter_catalogue, parse_openrouter_catalogue, pricing_key,
    BilledTokens, CatalogueEntry, ModelPrice, PricingCatalogue, PricingFetchError,
    PRICING_FETCH_TIMEOUT,
};
pub use prompt::{join_system_parts, SYSTEM_PROMPT_DYNAMIC_BOUNDARY};
pub use responses::{
    prompt_cache_key, ResponsesDriver, ResponsesFlavor, OPENAI_BASE_URL, OPENROUTER_BASE_URL,
};
pub use tool_args::parse_tool_arguments;
pub use tool_loop::{
    elide_historical_user_images, elided_result, is_heavy, prepare_call, run_tool_loop, EventSink,
    LoopEnd, LoopError, LoopEvent, LoopOptions, LoopOutcome, SinkClosed, ToolCallStatus,
    ToolExecutor, ToolRejection, DEFAULT_MAX_ROUNDS, HEAVY_TOOL_NAMES, HISTORICAL_IMAGES_OMITTED,
    INTERRUPTED_TOOL_RESULT_ERROR, SCREENSHOT_TOOL,
};
pub use transport::{provider_client_builder, Endpoint, EventStream, DEFAULT_IDLE_TIMEOUT};
pub use types::{
    ChatRequest, ContentBlock, Image, Message, Role, RoundEnd, StreamEvent, ToolCall, ToolChoice,
    ToolDefinition, ToolResult, Usage, TOOL_CALL_FAILED,
};

/// Anthropic's production base URL.
pub const ANTHROPIC_BASE_URL: &str = anthropic::DEFAULT_BASE_URL;
