//! What a model can do — vision input, tool calling, its context window — resolved per turn
//! from the provider's model endpoints where it has them, cached and de-duplicated.
//!
//! A lookup that fails or times out answers the provider's static capabilities with vision
//! off (fail-closed: an image to a model that cannot see it is refused, never sent), and that
//! answer is not cached, so the next turn asks again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use serde_json::Value;

use crate::chat_completions::normalize_openai_base_url;
use crate::transport::Endpoint;

/// How long a resolved lookup is reused.
pub const CAPABILITY_CACHE_TTL: Duration = Duration::from_secs(5 * 60);

/// How long a lookup may take before the fail-closed answer is used.
pub const CAPABILITY_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many resolved lookups one resolver keeps; past it, the oldest inserted goes first.
pub const CAPABILITY_CACHE_ENTRIES: usize = 256;

/// What a model can do (`AiProviderCapabilities`, plus the context window when known).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelCapabilities {
    /// It can call tools (agent turns).
    pub tool_calling: bool,
    /// It accepts images in user turns.
    pub vision_input: bool,
    /// It accepts images inside tool results.
    pub tool_result_images: bool,
    /// The provider caches prompt prefixes.
    pub prompt_cache: bool,
    /// It streams.
    pub streaming: bool,
    /// Its context window in tokens, when the provider says.
    pub context_window: Option<u64>,
}

/// The providers chatd talks to, as far as capabilities go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// Anthropic Messages: no lookup, everything on.
    Anthropic,
    /// OpenAI Responses: no lookup, tools and vision.
    OpenAi,
    /// OpenRouter: the model's entry in `GET /api/v1/models`.
    OpenRouter,
    /// Ollama: `POST /api/show`.
    Ollama,
    /// Any OpenAI-compatible endpoint: no lookup, tools without vision.
    OpenAiCompatible,
}

impl ProviderKind {
    /// What the provider's models can do without asking it (the driver's static answer).
    pub fn static_capabilities(self) -> ModelCapabilities {
        let all = ModelCapabilities {
            tool_calling: true,
            vision_input: true,
            tool_result_images: true,
            prompt_cache: true,
            streaming: true,
            context_window: None,
        };
        match self {
            ProviderKind::Anthropic => all,
            // OpenAI caches prompts on its own (the cache key is a routing hint, not a cache
            // point a request sets), so its models report no prompt cache, as they did.
            ProviderKind::OpenAi => ModelCapabilities {
                tool_result_images: false,
                prompt_cache: false,
                ..all
            },
            // A model's own catalogue entry says whether it sees images.
            ProviderKind::OpenRouter => ModelCapabilities {
                vision_input: false,
                tool_result_images: false,
                prompt_cache: false,
                ..all
            },
            ProviderKind::Ollama | ProviderKind::OpenAiCompatible => ModelCapabilities {
                vision_input: false,
                tool_result_images: false,
                prompt_cache: false,
                ..all
            },
        }
    }

    /// Whether the provider's models are looked up at all.
    pub fn has_lookup(self) -> bool {
        matches!(self, ProviderKind::OpenRouter | ProviderKind::Ollama)
    }
}

/// Why a lookup failed (logged; the caller gets the fail-closed answer).
#[derive(Debug, thiserror::Error)]
pub enum CapabilityLookupError {
    /// The request failed or the answer was not readable JSON.
    #[error("capability lookup failed: {0}")]
    Request(String),
    /// The provider answered with a non-OK status.
    #[error("capability lookup answered {0}")]
    Status(u16),
    /// No answer within the lookup timeout.
    #[error("capability lookup timed out after {0:?}")]
    TimedOut(Duration),
}

/// Cache key: the endpoint (base URL and a hash of the key, never the key) and the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    base_url: String,
    key_hash: u32,
    model: String,
}

type Lookup = Shared<BoxFuture<'static, ModelCapabilities>>;

#[derive(Default)]
struct Cache {
    resolved: HashMap<Key, (Instant, ModelCapabilities)>,
    /// Insertion order of `resolved`, for eviction.
    order: VecDeque<Key>,
    in_flight: HashMap<Key, Lookup>,
}

/// Resolves one provider's model capabilities, caching answers for [`CAPABILITY_CACHE_TTL`]
/// and running at most one lookup per endpoint and model at a time.
pub struct CapabilityResolver {
    kind: ProviderKind,
    ttl: Duration,
    timeout: Duration,
    cache: Arc<Mutex<Cache>>,
}

impl CapabilityResolver {
    /// A resolver for `kind` with the reference's cache lifetime and timeout.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            ttl: CAPABILITY_CACHE_TTL,
            timeout: CAPABILITY_LOOKUP_TIMEOUT,
            cache: Arc::default(),
        }
    }

    /// The same resolver with another cache lifetime.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The same resolver with another lookup timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The provider this resolver asks.
    pub fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// What `model` at `endpoint` can do. Never fails: a failed lookup answers the static
    /// capabilities with vision off. The lookup runs in its own task, so a caller that goes
    /// away does not cancel it for the others waiting on it.
    pub async fn resolve(&self, endpoint: &Endpoint, model: &str) -> ModelCapabilities {
        let fallback = self.kind.static_capabilities();
        if !self.kind.has_lookup() {
            return fallback;
        }
        let key = Key {
            base_url: endpoint.base_url.clone(),
            key_hash: fnv1a32(endpoint.api_key.as_deref().unwrap_or("").as_bytes()),
            model: model.to_owned(),
        };
        let lookup = {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            match cache.resolved.get(&key) {
                Some((expires, capabilities)) if *expires > Instant::now() => return *capabilities,
                Some(_) => {
                    cache.resolved.remove(&key);
                    cache.order.retain(|k| *k != key);
                }
                None => {}
            }
            if let Some(lookup) = cache.in_flight.get(&key) {
                lookup.clone()
            } else {
                let lookup = self.spawn_lookup(endpoint.clone(), key.clone());
                cache.in_flight.insert(key, lookup.clone());
                lookup
            }
        };
        lookup.await
    }

    fn spawn_lookup(&self, endpoint: Endpoint, key: Key) -> Lookup {
        let (kind, ttl, timeout) = (self.kind, self.ttl, self.timeout);
        let cache = Arc::clone(&self.cache);
        let task = tokio::spawn(async move {
            let looked_up =
                match tokio::time::timeout(timeout, lookup(kind, &endpoint, &key.model)).await {
                    Ok(result) => result,
                    Err(_) => Err(CapabilityLookupError::TimedOut(timeout)),
                };
            let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache.in_flight.remove(&key);
            match looked_up {
                Ok(capabilities) => {
                    cache
                        .resolved
                        .insert(key.clone(), (Instant::now() + ttl, capabilities));
                    cache.order.push_back(key);
                    while cache.resolved.len() > CAPABILITY_CACHE_ENTRIES {
                        match cache.order.pop_front() {
                            Some(oldest) => {
                                cache.resolved.remove(&oldest);
                            }
                            None => break,
                        }
                    }
                    capabilities
                }
                Err(error) => {
                    tracing::warn!(%error, model = key.model, "model capabilities unknown; vision off");
                    fail_closed(kind)
                }
            }
        });
        async move { task.await.unwrap_or_else(|_| fail_closed(kind)) }
            .boxed()
            .shared()
    }
}

fn fail_closed(kind: ProviderKind) -> ModelCapabilities {
    ModelCapabilities {
        vision_input: false,
        ..kind.static_capabilities()
    }
}

/// FNV-1a, 32 bits: the reference's key fingerprint, so the key itself is never held twice.
pub(crate) fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

async fn lookup(
    kind: ProviderKind,
    endpoint: &Endpoint,
    model: &str,
) -> Result<ModelCapabilities, CapabilityLookupError> {
    let base = endpoint.trimmed_base();
    let builder = match kind {
        ProviderKind::OpenRouter => endpoint.client.get(format!("{base}/v1/models")),
        ProviderKind::Ollama => endpoint
            .client
            .post(format!("{}/api/show", normalize_openai_base_url(base)))
            .json(&serde_json::json!({ "model": model })),
        _ => return Ok(kind.static_capabilities()),
    };
    let builder = match &endpoint.api_key {
        Some(key) => builder.bearer_auth(key),
        None => builder,
    };
    let failed =
        |error: reqwest::Error| CapabilityLookupError::Request(error.without_url().to_string());
    let response = builder.send().await.map_err(failed)?;
    if !response.status().is_success() {
        return Err(CapabilityLookupError::Status(response.status().as_u16()));
    }
    let body: Value = response.json().await.map_err(failed)?;
    Ok(match kind {
        ProviderKind::OpenRouter => openrouter_capabilities(&body, model),
        _ => ollama_capabilities(&body),
    })
}

/// The model's entry in OpenRouter's catalogue: tools from `supported_parameters` (on when
/// absent), vision from `architecture.input_modalities`; a model not listed gets the static
/// answer with vision off.
pub fn openrouter_capabilities(catalogue: &Value, model: &str) -> ModelCapabilities {
    let fallback = ProviderKind::OpenRouter.static_capabilities();
    let entry = catalogue["data"]
        .as_array()
        .and_then(|models| models.iter().find(|m| m["id"].as_str() == Some(model)));
    let Some(entry) = entry else {
        return ModelCapabilities {
            vision_input: false,
            ..fallback
        };
    };
    let tool_calling = entry["supported_parameters"]
        .as_array()
        .is_none_or(|params| params.iter().any(|p| p.as_str() == Some("tools")));
    let vision_input = entry["architecture"]["input_modalities"]
        .as_array()
        .is_some_and(|modes| modes.iter().any(|m| m.as_str() == Some("image")));
    ModelCapabilities {
        tool_calling,
        vision_input,
        context_window: entry["context_length"].as_u64(),
        ..fallback
    }
}

/// Ollama's `/api/show` answer: tools and vision from `capabilities[]` (without it, the static
/// answer with vision off); the context window from `model_info`'s `<family>.context_length`.
pub fn ollama_capabilities(show: &Value) -> ModelCapabilities {
    let fallback = ProviderKind::Ollama.static_capabilities();
    let context_window = show["model_info"].as_object().and_then(|info| {
        info.iter()
            .find(|(name, _)| name.ends_with(".context_length"))
            .and_then(|(_, value)| value.as_u64())
    });
    let Some(capabilities) = show["capabilities"].as_array() else {
        return ModelCapabilities {
            vision_input: false,
            context_window,
            ..fallback
        };
    };
    let has = |name: &str| capabilities.iter().any(|c| c.as_str() == Some(name));
    ModelCapabilities {
        tool_calling: has("tools"),
        vision_input: has("vision"),
        context_window,
        ..fallback
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn openrouter_entries_give_tools_vision_and_context() {
        let catalogue = json!({"data": [
            {"id": "a/vision", "context_length": 200000,
             "architecture": {"input_modalities": ["text", "image"]},
             "supported_parameters": ["tools", "temperature"]},
            {"id": "b/text", "architecture": {"input_modalities": ["text"]},
             "supported_parameters": ["temperature"]},
            {"id": "c/bare"}
        ]});
        let vision = openrouter_capabilities(&catalogue, "a/vision");
        assert!(vision.vision_input && vision.tool_calling);
        assert_eq!(vision.context_window, Some(200_000));
        let text = openrouter_capabilities(&catalogue, "b/text");
        assert!(!text.vision_input && !text.tool_calling);
        let bare = openrouter_capabilities(&catalogue, "c/bare");
        assert!(bare.tool_calling && !bare.vision_input);
        assert!(!openrouter_capabilities(&catalogue, "missing").vision_input);
    }

    #[test]
    fn ollama_show_gives_tools_vision_and_context() {
        let show = json!({"capabilities": ["completion", "vision"],
                          "model_info": {"gemma3.context_length": 131072}});
        let caps = ollama_capabilities(&show);
        assert!(caps.vision_input && !caps.tool_calling);
        assert_eq!(caps.context_window, Some(131_072));
        let old = ollama_capabilities(&json!({}));
        assert!(old.tool_calling && !old.vision_input);
    }

    #[test]
    fn the_key_fingerprint_is_fnv1a() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
    }
}
