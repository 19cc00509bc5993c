//! The provider ids of the wire and the store (`anthropic`, `openai`, …) and the llm crate's
//! provider each names. Settings routes, metrics labels and the credential resolver all read
//! them, so they sit below all of those.

use atelier_llm::ProviderKind;

/// Every provider id, in the order error messages list them.
pub const PROVIDER_IDS: [&str; 5] = [
    "anthropic",
    "openai",
    "ollama",
    "openrouter",
    "openai-compatible",
];

/// The provider behind a provider id; `None` for an unknown id.
pub fn provider_kind(provider_id: &str) -> Option<ProviderKind> {
    match provider_id {
        "anthropic" => Some(ProviderKind::Anthropic),
        "openai" => Some(ProviderKind::OpenAi),
        "ollama" => Some(ProviderKind::Ollama),
        "openrouter" => Some(ProviderKind::OpenRouter),
        "openai-compatible" => Some(ProviderKind::OpenAiCompatible),
        _ => None,
    }
}

/// The provider id of `kind`, the inverse of [`provider_kind`].
pub fn provider_id(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::OpenAi => "openai",
        ProviderKind::Ollama => "ollama",
        ProviderKind::OpenRouter => "openrouter",
        ProviderKind::OpenAiCompatible => "openai-compatible",
    }
}
