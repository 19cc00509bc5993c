//! The providers chatd talks to for real: the auth shape each implies,
//! where each is reached, stored credentials resolved into endpoints and drivers, and
//! [`StoredProviders`], the production [`Providers`] that runs every turn on the
//! conversation's own stored credential.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use atelier_llm::{
    AnthropicDriver, CapabilityResolver, ChatCompletionsDriver, Driver, Endpoint, ModelCatalogue,
    ProviderKind, ResponsesDriver,
};

use crate::caller::Caller;
use crate::master_key::{MasterKey, MASTER_KEY_CREDENTIAL};
use crate::pricing::Pricing;
use crate::provider_ids::provider_kind;
use crate::runtime::{PrepareFuture, ProviderRefusal, ProviderSetup, Providers};
use crate::store::{AuthMode, Conversation, CredentialRow, Store};

/// The auth shape a provider takes: hosted APIs a key; Ollama and custom endpoints a base URL
/// (with an optional bearer key).
pub fn auth_mode_of(kind: ProviderKind) -> AuthMode {
    match kind {
        ProviderKind::Anthropic | ProviderKind::OpenAi | ProviderKind::OpenRouter => {
            AuthMode::ApiKey
        }
        ProviderKind::Ollama | ProviderKind::OpenAiCompatible => AuthMode::BaseUrl,
    }
}

/// Where the hosted providers are reached (their production URLs unless overridden, for a
/// gateway or for tests); base-URL providers carry their own in the credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUrls {
    /// Anthropic's base URL.
    pub anthropic: String,
    /// OpenAI's base URL.
    pub openai: String,
    /// OpenRouter's base URL (`…/api`); the public pricing catalogue is its `/v1/models`.
    pub openrouter: String,
}

impl Default for ProviderUrls {
    fn default() -> Self {
        ProviderUrls {
            anthropic: atelier_llm::ANTHROPIC_BASE_URL.to_owned(),
            openai: atelier_llm::OPENAI_BASE_URL.to_owned(),
            openrouter: atelier_llm::OPENROUTER_BASE_URL.to_owned(),
        }
    }
}

impl ProviderUrls {
    /// The public pricing catalogue.
    pub fn pricing_catalogue(&self) -> String {
        format!("{}/v1/models", self.openrouter.trim_end_matches('/'))
    }

    fn hosted(&self, kind: ProviderKind) -> &str {
        match kind {
            ProviderKind::Anthropic => &self.anthropic,
            ProviderKind::OpenAi => &self.openai,
            _ => &self.openrouter,
        }
    }
}

/// Why a stored credential cannot be used; `Display` is the 409 body's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// chatd was given no master key, so no sealed secret can be opened.
    #[error("AI credential encryption is not configured: no {MASTER_KEY_CREDENTIAL} credential was provided.")]
    NotConfigured,
    /// The secret was sealed under another master key.
    #[error("Credential {0} was encrypted with a different master key. Re-enter the API key in /admin/ai/providers.")]
    OtherKey(String),
    /// The secret does not open (corrupted).
    #[error("Credential {0} could not be decrypted. Re-enter the API key in /admin/ai/providers.")]
    Undecryptable(String),
    /// The row breaks its auth shape or names an unknown provider.
    #[error("Credential {0} is corrupted. Delete it and add it again in /admin/ai/providers.")]
    Corrupt(String),
}

/// A credential opened for use.
#[derive(Clone)]
pub struct ResolvedCredential {
    /// The credential's id.
    pub id: String,
    /// Its provider.
    pub kind: ProviderKind,
    /// The provider endpoint, with the key.
    pub endpoint: Endpoint,
}

/// The master-key state and reachability every credential resolution needs.
#[derive(Clone)]
pub struct Credentials {
    master_key: Option<Arc<MasterKey>>,
    urls: ProviderUrls,
    idle_timeout: Duration,
    client: reqwest::Client,
}

impl Credentials {
    /// Resolution under `master_key` (none: sealed secrets cannot be used), reaching hosted
    /// providers at `urls` with `client`, each endpoint failing a request after `idle_timeout`
    /// without a byte.
    pub fn new(
        master_key: Option<Arc<MasterKey>>,
        urls: ProviderUrls,
        idle_timeout: Duration,
        client: reqwest::Client,
    ) -> Self {
        Credentials {
            master_key,
            urls,
            idle_timeout,
            client,
        }
    }

    /// An endpoint at `base_url` with this chatd's idle timeout.
    fn endpoint(&self, base_url: String, api_key: Option<String>) -> Endpoint {
        Endpoint::new(self.client.clone(), base_url, api_key).with_idle_timeout(self.idle_timeout)
    }

    /// The master key, when chatd has one.
    pub fn master_key(&self) -> Option<&MasterKey> {
        self.master_key.as_deref()
    }

    /// Where hosted providers are reached.
    pub fn urls(&self) -> &ProviderUrls {
        &self.urls
    }

    /// The shared HTTP client.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Returns true if and only if a row sealed under `fingerprint` opens with the current
    /// key (a row with no sealed secret always does).
    pub fn fingerprint_current(&self, fingerprint: Option<&str>) -> bool {
        match fingerprint {
            None => true,
            Some(fingerprint) => self
                .master_key
                .as_deref()
                .is_some_and(|key| key.fingerprint() == fingerprint),
        }
    }

    /// Opens `row` into an endpoint.
    pub fn resolve(&self, row: &CredentialRow) -> Result<ResolvedCredential, ResolveError> {
        let corrupt = || ResolveError::Corrupt(row.id.clone());
        let kind = provider_kind(&row.provider_id).ok_or_else(corrupt)?;
        let api_key = match &row.sealed {
            None => None,
            Some(sealed) => {
                let key = self
                    .master_key
                    .as_deref()
                    .ok_or(ResolveError::NotConfigured)?;
                if row.key_fingerprint.as_deref() != Some(key.fingerprint()) {
                    return Err(ResolveError::OtherKey(row.id.clone()));
                }
                Some(
                    key.open(sealed)
                        .map_err(|_| ResolveError::Undecryptable(row.id.clone()))?,
                )
            }
        };
        let base_url = match row.auth_mode {
            AuthMode::ApiKey if api_key.is_none() || row.base_url.is_some() => {
                return Err(corrupt())
            }
            AuthMode::ApiKey => self.urls.hosted(kind).to_owned(),
            AuthMode::BaseUrl => row.base_url.clone().ok_or_else(corrupt)?,
        };
        Ok(ResolvedCredential {
            id: row.id.clone(),
            kind,
            endpoint: self.endpoint(base_url, api_key),
        })
    }

    /// The endpoint a catalogue is listed at when no credential is named: the hosted URL
    /// without a key, or nothing for base-URL providers.
    pub fn placeholder(&self, kind: ProviderKind) -> Endpoint {
        let base = match auth_mode_of(kind) {
            AuthMode::ApiKey => self.urls.hosted(kind).to_owned(),
            AuthMode::BaseUrl => String::new(),
        };
        self.endpoint(base, None)
    }
}

/// The driver that speaks `kind`'s wire at `endpoint`.
pub fn driver_for(kind: ProviderKind, endpoint: Endpoint) -> Arc<dyn Driver> {
    match kind {
        ProviderKind::Anthropic => Arc::new(AnthropicDriver::new(endpoint)),
        ProviderKind::OpenAi => Arc::new(ResponsesDriver::openai(endpoint)),
        ProviderKind::OpenRouter => Arc::new(ResponsesDriver::openrouter(endpoint)),
        ProviderKind::Ollama => Arc::new(ChatCompletionsDriver::ollama(endpoint)),
        ProviderKind::OpenAiCompatible => {
            Arc::new(ChatCompletionsDriver::openai_compatible(endpoint))
        }
    }
}

/// Everything that turns stored settings into provider calls, shared by the routes and the
/// production runner: the store, credential resolution, the model catalogue, capability
/// resolvers and pricing.
#[derive(Clone)]
pub struct Services {
    /// The database.
    pub store: Arc<Store>,
    /// Credential resolution.
    pub credentials: Credentials,
    /// Live model lists.
    pub catalogue: ModelCatalogue,
    /// Per-provider capability lookups.
    pub resolvers: Arc<HashMap<ProviderKind, CapabilityResolver>>,
    /// Prices and context windows.
    pub pricing: Arc<Pricing>,
}

impl Services {
    /// Services over `store` with `credentials`.
    pub fn new(store: Arc<Store>, credentials: Credentials) -> Self {
        let kinds = [
            ProviderKind::Anthropic,
            ProviderKind::OpenAi,
            ProviderKind::OpenRouter,
            ProviderKind::Ollama,
            ProviderKind::OpenAiCompatible,
        ];
        let pricing = Pricing::new(
            Arc::clone(&store),
            credentials.client().clone(),
            credentials.urls().pricing_catalogue(),
        );
        Services {
            store,
            catalogue: ModelCatalogue::default(),
            resolvers: Arc::new(
                kinds
                    .into_iter()
                    .map(|kind| (kind, CapabilityResolver::new(kind)))
                    .collect(),
            ),
            pricing,
            credentials,
        }
    }
}

/// The production providers: each turn runs on its conversation's stored credential, which
/// must belong to the acting user.
pub struct StoredProviders {
    services: Services,
}

impl StoredProviders {
    /// Providers over `services`.
    pub fn new(services: Services) -> Self {
        StoredProviders { services }
    }
}

impl Providers for StoredProviders {
    fn prepare(&self, caller: &Caller, conversation: &Conversation) -> PrepareFuture {
        let services = self.services.clone();
        let user = caller.user_id.clone();
        let credential_id = conversation.credential_id.clone();
        let model = conversation.model_id.clone();
        Box::pin(async move {
            let credential_id = credential_id.ok_or(ProviderRefusal::CredentialNotFound)?;
            let store = Arc::clone(&services.store);
            // Only read: the credential is marked used once a turn ran on it, not here, where
            // the send may still be refused.
            let row = tokio::task::spawn_blocking(move || store.credential(&user, &credential_id))
                .await
                .map_err(|error| {
                    ProviderRefusal::Failed(format!("reading the credential: {error}"))
                })?
                .map_err(|error| {
                    ProviderRefusal::Failed(format!("reading the credential: {error}"))
                })?
                .ok_or(ProviderRefusal::CredentialNotFound)?;
            let resolved = services
                .credentials
                .resolve(&row)
                .map_err(|error| ProviderRefusal::Unusable(error.to_string()))?;
            let (kind, endpoint) = (resolved.kind, resolved.endpoint.clone());
            let capabilities = Box::pin(async move {
                match services.resolvers.get(&kind) {
                    Some(resolver) => resolver.resolve(&endpoint, &model).await,
                    None => kind.static_capabilities(),
                }
            });
            Ok(ProviderSetup {
                kind,
                driver: driver_for(kind, resolved.endpoint),
                credential_id: Some(resolved.id),
                capabilities,
            })
        })
    }
}
