//! The live model catalogue of each provider: one REST call
//! per provider mapped to [`ProviderModel`]s, and [`ModelCatalogue`], which bounds every listing
//! by a deadline and de-duplicates concurrent listings of one endpoint.
//!
//! No listing is kept once it ended: a credential's test must say what the provider answers
//! now (a started Ollama, a revoked key), and "successful" listings include Ollama's built-in
//! fallback and a Custom Provider's empty list, which only mean the provider was not read. No
//! turn needs the catalogue (a turn's model capabilities come from the capability resolver),
//! and the browser keeps its own copy of a successful catalogue for a few minutes.
//!
//! Cancellation is forwarded: a listing runs only while someone awaits it, so when every caller
//! goes away the provider request is dropped with them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt, Shared, WeakShared};
use serde::Serialize;
use serde_json::{json, Value};

use crate::capabilities::{fnv1a32, ModelCapabilities, ProviderKind};
use crate::chat_completions::normalize_openai_base_url;
use crate::transport::Endpoint;

/// How long a listing may take.
pub const MODEL_LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// How many `/api/show` lookups Ollama's listing runs at once.
pub const OLLAMA_SHOW_BATCH: usize = 6;

/// The Anthropic API version header the listing is written against.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Words that mark an OpenAI model as something other than a chat model.
const OPENAI_EXCLUDED: [&str; 10] = [
    "embedding",
    "whisper",
    "tts",
    "audio",
    "realtime",
    "image",
    "transcribe",
    "moderation",
    "search",
    "dall-e",
];

/// How capable a model is, for picking defaults and sorting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelTier {
    /// The provider's strongest.
    Smartest,
    /// Strong.
    Smart,
    /// The middle.
    Balanced,
    /// Quick.
    Fast,
    /// Cheapest.
    Cheap,
}

impl ModelTier {
    fn rank(tier: Option<ModelTier>) -> u8 {
        match tier {
            Some(ModelTier::Smartest) => 0,
            Some(ModelTier::Smart) => 1,
            Some(ModelTier::Balanced) => 2,
            Some(ModelTier::Fast) => 3,
            Some(ModelTier::Cheap) => 4,
            None => 9,
        }
    }
}

/// Where a catalogue entry came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogueSource {
    /// The provider listed it.
    Live,
    /// The provider could not be read; a built-in suggestion, never used for auto-defaults.
    Fallback,
}

/// Prices of a listed model in USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ListedPrice {
    /// Input.
    #[serde(rename = "inputPerMTok")]
    pub input_per_mtok: f64,
    /// Output.
    #[serde(rename = "outputPerMTok")]
    pub output_per_mtok: f64,
}

/// The capability flags of a listed model, as the wire names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedCapabilities {
    /// Calls tools.
    pub tool_calling: bool,
    /// Sees images in user turns.
    pub vision_input: bool,
    /// Takes images in tool results.
    pub tool_result_images: bool,
    /// Caches prompt prefixes.
    pub prompt_cache: bool,
    /// Streams.
    pub streaming: bool,
}

impl From<ModelCapabilities> for ListedCapabilities {
    fn from(c: ModelCapabilities) -> Self {
        ListedCapabilities {
            tool_calling: c.tool_calling,
            vision_input: c.vision_input,
            tool_result_images: c.tool_result_images,
            prompt_cache: c.prompt_cache,
            streaming: c.streaming,
        }
    }
}

/// One model of a provider's catalogue (`AiProviderModel`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderModel {
    /// The provider's model id.
    pub id: String,
    /// A human label.
    pub label: String,
    /// What it can do.
    pub capabilities: ListedCapabilities,
    /// How capable it is, when the provider's naming tells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<ModelTier>,
    /// List prices, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pricing: Option<ListedPrice>,
    /// Context window in tokens, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Where the entry came from; absent counts as live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalogue_source: Option<CatalogueSource>,
}

impl ProviderModel {
    /// Returns true if and only if the provider itself listed this model.
    pub fn is_live(&self) -> bool {
        self.catalogue_source != Some(CatalogueSource::Fallback)
    }
}

/// Why a provider's catalogue could not be listed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelListError {
    /// The request failed or the answer was not JSON.
    #[error("{label} model list request failed: {detail}")]
    Request {
        /// The provider label.
        label: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// The provider answered with a non-OK status.
    #[error("{label} model list answered {status}")]
    Status {
        /// The provider label.
        label: &'static str,
        /// The status.
        status: u16,
    },
    /// The listing took longer than its deadline.
    #[error("Model catalogue request timed out.")]
    TimedOut,
}

/// The user-facing label of a provider.
pub fn provider_label(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => "Anthropic",
        ProviderKind::OpenAi => "OpenAI",
        ProviderKind::OpenRouter => "OpenRouter",
        ProviderKind::Ollama => "Ollama",
        ProviderKind::OpenAiCompatible => "Custom Provider",
    }
}

/// Lists `kind`'s models at `endpoint` once, with no deadline (see [`ModelCatalogue`]).
pub async fn list_models(
    kind: ProviderKind,
    endpoint: &Endpoint,
) -> Result<Vec<ProviderModel>, ModelListError> {
    match kind {
        ProviderKind::Anthropic => anthropic(endpoint).await,
        ProviderKind::OpenAi => openai(endpoint).await,
        ProviderKind::OpenRouter => openrouter(endpoint).await,
        ProviderKind::Ollama => Ok(ollama(endpoint).await),
        ProviderKind::OpenAiCompatible => Ok(openai_compatible(endpoint).await.unwrap_or_default()),
    }
}

fn key(endpoint: &Endpoint) -> Option<&str> {
    endpoint.api_key.as_deref().filter(|key| !key.is_empty())
}

async fn get_json(
    label: &'static str,
    builder: reqwest::RequestBuilder,
) -> Result<Value, ModelListError> {
    let failed = |error: reqwest::Error| ModelListError::Request {
        label,
        detail: error.without_url().to_string(),
    };
    let response = builder.send().await.map_err(failed)?;
    if !response.status().is_success() {
        return Err(ModelListError::Status {
            label,
            status: response.status().as_u16(),
        });
    }
    response.json().await.map_err(failed)
}

async fn anthropic(endpoint: &Endpoint) -> Result<Vec<ProviderModel>, ModelListError> {
    let Some(key) = key(endpoint) else {
        return Ok(Vec::new());
    };
    let builder = endpoint
        .client
        .get(format!("{}/v1/models?limit=1000", endpoint.trimmed_base()))
        .header("x-api-key", key)
        .header("anthropic-version", ANTHROPIC_VERSION);
    let body = get_json("Anthropic", builder).await?;
    Ok(anthropic_models(&body))
}

/// Anthropic's `GET /v1/models` answer as catalogue entries: the first opus is the smartest,
/// later ones smart; sonnet balanced; haiku fast.
pub fn anthropic_models(body: &Value) -> Vec<ProviderModel> {
    let base = ProviderKind::Anthropic.static_capabilities();
    let mut seen_opus = false;
    body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|model| {
            let id = model["id"].as_str()?.to_owned();
            let tier = if id.contains("opus") {
                let tier = if seen_opus {
                    ModelTier::Smart
                } else {
                    ModelTier::Smartest
                };
                seen_opus = true;
                Some(tier)
            } else if id.contains("sonnet") {
                Some(ModelTier::Balanced)
            } else if id.contains("haiku") {
                Some(ModelTier::Fast)
            } else {
                None
            };
            let vision_input = model
                .pointer("/capabilities/image_input/supported")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            Some(ProviderModel {
                label: model["display_name"].as_str().unwrap_or(&id).to_owned(),
                capabilities: ModelCapabilities {
                    vision_input,
                    ..base
                }
                .into(),
                tier,
                pricing: None,
                context_window: None,
                catalogue_source: None,
                id,
            })
        })
        .collect()
}

async fn openai(endpoint: &Endpoint) -> Result<Vec<ProviderModel>, ModelListError> {
    let Some(key) = key(endpoint) else {
        return Ok(Vec::new());
    };
    let builder = endpoint
        .client
        .get(format!("{}/v1/models", endpoint.trimmed_base()))
        .bearer_auth(key);
    let body = get_json("OpenAI", builder).await?;
    Ok(openai_models(&body))
}

/// Whether `id` names an OpenAI chat model: `gpt-`, `chatgpt-` or `o1`…`o9`, and none of the
/// words of other model kinds.
fn is_openai_chat_model(id: &str) -> bool {
    let bytes = id.as_bytes();
    let family = id.starts_with("gpt-")
        || id.starts_with("chatgpt-")
        || (bytes.first() == Some(&b'o')
            && bytes.get(1).is_some_and(|b| (b'1'..=b'9').contains(b)));
    family && !OPENAI_EXCLUDED.iter().any(|word| id.contains(word))
}

/// `gpt-4o-mini` → `GPT 4o Mini`: `gpt`/`chatgpt` spelled as the brand, o-series and numbers
/// kept, other words capitalised.
fn openai_label(id: &str) -> String {
    id.split('-')
        .map(|word| match word {
            "gpt" => "GPT".to_owned(),
            "chatgpt" => "ChatGPT".to_owned(),
            w if w.starts_with(|c: char| c.is_ascii_digit()) => w.to_owned(),
            w if w.len() > 1
                && w.starts_with('o')
                && w[1..].starts_with(|c: char| c.is_ascii_digit()) =>
            {
                w.to_owned()
            }
            w => {
                let mut chars = w.chars();
                match chars.next() {
                    Some(first) => first.to_uppercase().chain(chars).collect(),
                    None => String::new(),
                }
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// OpenAI's `GET /v1/models` answer as catalogue entries: chat models only, tiered by name
/// (`nano` cheap, `mini` fast, else smartest), sorted by tier then id descending.
pub fn openai_models(body: &Value) -> Vec<ProviderModel> {
    let capabilities = ProviderKind::OpenAi.static_capabilities().into();
    let mut models: Vec<ProviderModel> = body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|model| model["id"].as_str())
        .filter(|id| is_openai_chat_model(id))
        .map(|id| {
            let tier = if id.contains("nano") {
                ModelTier::Cheap
            } else if id.contains("mini") {
                ModelTier::Fast
            } else {
                ModelTier::Smartest
            };
            ProviderModel {
                id: id.to_owned(),
                label: openai_label(id),
                capabilities,
                tier: Some(tier),
                pricing: None,
                context_window: None,
                catalogue_source: None,
            }
        })
        .collect();
    models.sort_by(|a, b| {
        ModelTier::rank(a.tier)
            .cmp(&ModelTier::rank(b.tier))
            .then_with(|| b.id.cmp(&a.id))
    });
    models
}

async fn openrouter(endpoint: &Endpoint) -> Result<Vec<ProviderModel>, ModelListError> {
    let mut builder = endpoint
        .client
        .get(format!("{}/v1/models", endpoint.trimmed_base()));
    if let Some(key) = key(endpoint) {
        builder = builder.bearer_auth(key);
    }
    let body = get_json("OpenRouter", builder).await?;
    Ok(openrouter_models(&body))
}

fn per_mtok(value: &Value) -> Option<f64> {
    let per_token = match value {
        Value::String(text) => text.trim().parse::<f64>().ok()?,
        Value::Number(number) => number.as_f64()?,
        _ => return None,
    };
    Some(per_token * 1e6).filter(|n| n.is_finite())
}

/// OpenRouter's `GET /api/v1/models` answer as catalogue entries, with its own prices and
/// context windows; no tiers.
pub fn openrouter_models(body: &Value) -> Vec<ProviderModel> {
    let base = ProviderKind::OpenRouter.static_capabilities();
    body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|model| {
            let id = model["id"].as_str()?.to_owned();
            let tool_calling = model["supported_parameters"]
                .as_array()
                .is_none_or(|params| params.iter().any(|p| p.as_str() == Some("tools")));
            let vision_input = model["architecture"]["input_modalities"]
                .as_array()
                .is_some_and(|modes| modes.iter().any(|m| m.as_str() == Some("image")));
            let pricing = match (
                per_mtok(&model["pricing"]["prompt"]),
                per_mtok(&model["pricing"]["completion"]),
            ) {
                (Some(input_per_mtok), Some(output_per_mtok)) => Some(ListedPrice {
                    input_per_mtok,
                    output_per_mtok,
                }),
                _ => None,
            };
            let context_window = model["context_length"]
                .as_f64()
                .filter(|n| n.is_finite() && *n > 0.0)
                .map(|n| n as u64);
            Some(ProviderModel {
                label: model["name"].as_str().unwrap_or(&id).to_owned(),
                capabilities: ModelCapabilities {
                    tool_calling,
                    vision_input,
                    ..base
                }
                .into(),
                tier: None,
                pricing,
                context_window,
                catalogue_source: None,
                id,
            })
        })
        .collect()
}

/// Ollama's built-in suggestions when its tags cannot be read.
pub fn ollama_fallback_models() -> Vec<ProviderModel> {
    let base = ProviderKind::Ollama.static_capabilities();
    [
        ("llama4", "Llama 4", true, ModelTier::Smart),
        ("llama3.3", "Llama 3.3", false, ModelTier::Balanced),
        ("qwen3", "Qwen 3", false, ModelTier::Balanced),
    ]
    .into_iter()
    .map(|(id, label, vision_input, tier)| ProviderModel {
        id: id.to_owned(),
        label: label.to_owned(),
        capabilities: ModelCapabilities {
            vision_input,
            ..base
        }
        .into(),
        tier: Some(tier),
        pricing: None,
        context_window: None,
        catalogue_source: Some(CatalogueSource::Fallback),
    })
    .collect()
}

async fn ollama(endpoint: &Endpoint) -> Vec<ProviderModel> {
    let base = endpoint.trimmed_base().to_owned();
    let mut builder = endpoint.client.get(format!("{base}/api/tags"));
    if let Some(key) = key(endpoint) {
        builder = builder.bearer_auth(key);
    }
    let ids: Vec<String> = match get_json("Ollama", builder).await {
        Ok(body) => body["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["name"].as_str().or(m["model"].as_str()))
            .map(str::to_owned)
            .collect(),
        Err(error) => {
            tracing::info!(%error, "Ollama tags unreadable; offering the fallback models");
            Vec::new()
        }
    };
    if ids.is_empty() {
        return ollama_fallback_models();
    }
    let static_caps = ProviderKind::Ollama.static_capabilities();
    let mut models = Vec::with_capacity(ids.len());
    for batch in ids.chunks(OLLAMA_SHOW_BATCH) {
        let shows = batch.iter().map(|id| ollama_show(endpoint, &base, id));
        for (id, show) in batch
            .iter()
            .zip(futures_util::future::join_all(shows).await)
        {
            let (tool_calling, vision_input) = match show {
                Some(capabilities) => (
                    capabilities.iter().any(|c| c == "tools"),
                    capabilities.iter().any(|c| c == "vision"),
                ),
                None => (true, false),
            };
            models.push(ProviderModel {
                id: id.clone(),
                label: id.clone(),
                capabilities: ModelCapabilities {
                    tool_calling,
                    vision_input,
                    ..static_caps
                }
                .into(),
                tier: None,
                pricing: None,
                context_window: None,
                catalogue_source: Some(CatalogueSource::Live),
            });
        }
    }
    models
}

/// The `capabilities` of one model from `POST /api/show`; `None` when it cannot be read.
async fn ollama_show(endpoint: &Endpoint, base: &str, model: &str) -> Option<Vec<String>> {
    let mut builder = endpoint
        .client
        .post(format!("{base}/api/show"))
        .json(&json!({ "model": model }));
    if let Some(key) = key(endpoint) {
        builder = builder.bearer_auth(key);
    }
    let body = get_json("Ollama", builder).await.ok()?;
    Some(
        body["capabilities"]
            .as_array()?
            .iter()
            .filter_map(|c| c.as_str().map(str::to_owned))
            .collect(),
    )
}

async fn openai_compatible(endpoint: &Endpoint) -> Result<Vec<ProviderModel>, ModelListError> {
    let base = normalize_openai_base_url(&endpoint.base_url);
    if base.is_empty() {
        return Ok(Vec::new());
    }
    let mut builder = endpoint.client.get(format!("{base}/v1/models"));
    if let Some(key) = key(endpoint) {
        builder = builder.bearer_auth(key);
    }
    let body = get_json("Custom Provider", builder).await?;
    let capabilities = ProviderKind::OpenAiCompatible.static_capabilities().into();
    Ok(body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .map(|id| ProviderModel {
            id: id.to_owned(),
            label: id.to_owned(),
            capabilities,
            tier: None,
            pricing: None,
            context_window: None,
            catalogue_source: Some(CatalogueSource::Live),
        })
        .collect())
}

type Listing = Shared<BoxFuture<'static, Result<Arc<Vec<ProviderModel>>, ModelListError>>>;
type WeakListing = WeakShared<BoxFuture<'static, Result<Arc<Vec<ProviderModel>>, ModelListError>>>;

/// The endpoint a listing is shared under: its provider, base URL and a hash of the key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CatalogueKey {
    kind: ProviderKind,
    base_url: String,
    key_hash: u32,
}

impl CatalogueKey {
    fn new(kind: ProviderKind, endpoint: &Endpoint) -> Self {
        CatalogueKey {
            kind,
            base_url: endpoint.base_url.clone(),
            key_hash: fnv1a32(endpoint.api_key.as_deref().unwrap_or("").as_bytes()),
        }
    }
}

/// Provider catalogues, each listing bounded by [`MODEL_LIST_TIMEOUT`] and shared by the callers
/// that ask for one endpoint while it runs; none is kept once it ended.
#[derive(Clone)]
pub struct ModelCatalogue {
    timeout: Duration,
    in_flight: Arc<Mutex<HashMap<CatalogueKey, WeakListing>>>,
}

impl Default for ModelCatalogue {
    fn default() -> Self {
        ModelCatalogue {
            timeout: MODEL_LIST_TIMEOUT,
            in_flight: Arc::default(),
        }
    }
}

impl ModelCatalogue {
    /// The same catalogue with another deadline.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `kind`'s models at `endpoint`, asked of the provider now, or shared with a listing of
    /// the same endpoint already running. Dropping the returned future stops waiting; the
    /// provider request stops too once nobody else waits for it.
    pub async fn list(
        &self,
        kind: ProviderKind,
        endpoint: &Endpoint,
    ) -> Result<Arc<Vec<ProviderModel>>, ModelListError> {
        let key = CatalogueKey::new(kind, endpoint);
        let listing = {
            let mut in_flight = self
                .in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match in_flight.get(&key).and_then(WeakShared::upgrade) {
                Some(listing) => listing,
                None => {
                    let listing = self.listing(kind, endpoint.clone(), key.clone());
                    if let Some(weak) = listing.downgrade() {
                        in_flight.insert(key, weak);
                    }
                    listing
                }
            }
        };
        listing.await
    }

    fn listing(&self, kind: ProviderKind, endpoint: Endpoint, key: CatalogueKey) -> Listing {
        let timeout = self.timeout;
        let in_flight = Arc::clone(&self.in_flight);
        async move {
            let listed = tokio::time::timeout(timeout, list_models(kind, &endpoint)).await;
            in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
            match listed {
                Ok(Ok(models)) => Ok(Arc::new(models)),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(ModelListError::TimedOut),
            }
        }
        .boxed()
        .shared()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_tiers_follow_the_names() {
        let body = json!({"data": [
            {"id": "claude-opus-4-8", "display_name": "Claude Opus 4.8"},
            {"id": "claude-opus-4-1"},
            {"id": "claude-sonnet-4-5", "capabilities": {"image_input": {"supported": false}}},
            {"id": "claude-haiku-4-5"},
            {"id": "claude-instant"},
            {"display_name": "no id"},
        ]});
        let models = anthropic_models(&body);
        let tiers: Vec<_> = models.iter().map(|m| (m.id.as_str(), m.tier)).collect();
        assert_eq!(
            tiers,
            [
                ("claude-opus-4-8", Some(ModelTier::Smartest)),
                ("claude-opus-4-1", Some(ModelTier::Smart)),
                ("claude-sonnet-4-5", Some(ModelTier::Balanced)),
                ("claude-haiku-4-5", Some(ModelTier::Fast)),
                ("claude-instant", None),
            ]
        );
        assert_eq!(models[0].label, "Claude Opus 4.8");
        assert_eq!(models[1].label, "claude-opus-4-1");
        assert!(!models[2].capabilities.vision_input);
        assert!(models[3].capabilities.vision_input);
        assert_eq!(
            serde_json::to_value(&models[0]).unwrap(),
            json!({"id": "claude-opus-4-8", "label": "Claude Opus 4.8", "tier": "smartest",
                   "capabilities": {"toolCalling": true, "visionInput": true,
                                    "toolResultImages": true, "promptCache": true, "streaming": true}})
        );
    }

    #[test]
    fn openai_keeps_chat_models_labelled_tiered_and_sorted() {
        let body = json!({"data": [
            {"id": "gpt-4o-mini"}, {"id": "text-embedding-3-large"}, {"id": "gpt-4o"},
            {"id": "o3"}, {"id": "gpt-5-nano"}, {"id": "whisper-1"}, {"id": "gpt-4o-realtime-preview"},
            {"id": "chatgpt-4o-latest"}, {"id": "omni-moderation-latest"}, {"id": "o4-mini"},
            {"id": "dall-e-3"}, {"id": "gpt-image-1"},
        ]});
        let models = openai_models(&body);
        let listed: Vec<(&str, &str, Option<ModelTier>)> = models
            .iter()
            .map(|m| (m.id.as_str(), m.label.as_str(), m.tier))
            .collect();
        assert_eq!(
            listed,
            [
                ("o3", "o3", Some(ModelTier::Smartest)),
                ("gpt-4o", "GPT 4o", Some(ModelTier::Smartest)),
                (
                    "chatgpt-4o-latest",
                    "ChatGPT 4o Latest",
                    Some(ModelTier::Smartest)
                ),
                ("o4-mini", "o4 Mini", Some(ModelTier::Fast)),
                ("gpt-4o-mini", "GPT 4o Mini", Some(ModelTier::Fast)),
                ("gpt-5-nano", "GPT 5 Nano", Some(ModelTier::Cheap)),
            ]
        );
        assert!(!models[0].capabilities.tool_result_images);
    }

    #[test]
    fn openrouter_entries_carry_their_prices_and_windows() {
        let body = json!({"data": [
            {"id": "anthropic/claude-opus-4.8", "name": "Claude Opus 4.8", "context_length": 200000,
             "architecture": {"input_modalities": ["text", "image"]},
             "supported_parameters": ["tools"],
             "pricing": {"prompt": "0.000015", "completion": "0.000075"}},
            {"id": "x/text", "supported_parameters": ["temperature"],
             "pricing": {"prompt": "abc", "completion": "0.1"}},
        ]});
        let models = openrouter_models(&body);
        assert_eq!(models[0].label, "Claude Opus 4.8");
        assert!(models[0].capabilities.vision_input && models[0].capabilities.tool_calling);
        let price = models[0].pricing.unwrap();
        assert!((price.input_per_mtok - 15.0).abs() < 1e-9);
        assert!((price.output_per_mtok - 75.0).abs() < 1e-9);
        assert_eq!(models[0].context_window, Some(200_000));
        let wire = serde_json::to_value(&models[0]).unwrap();
        assert_eq!(
            wire["pricing"],
            json!({"inputPerMTok": 15.0, "outputPerMTok": 75.0})
        );
        assert_eq!(wire["contextWindow"], 200_000);
        assert_eq!(models[1].label, "x/text");
        assert!(!models[1].capabilities.tool_calling && !models[1].capabilities.vision_input);
        assert_eq!(models[1].pricing, None);
        assert_eq!(models[1].tier, None);
    }

    #[test]
    fn ollama_fallbacks_are_marked() {
        let models = ollama_fallback_models();
        assert_eq!(
            models.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
            ["llama4", "llama3.3", "qwen3"]
        );
        assert!(models.iter().all(|m| !m.is_live()));
        assert!(models[0].capabilities.vision_input && !models[1].capabilities.vision_input);
    }
}
