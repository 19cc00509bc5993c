//! Prices and context windows: OpenRouter's public catalogue, kept in a
//! six-hour memo refreshed in the background and copied into SQLite so a cold start prices the
//! first turn from the last known data. A failed refresh keeps what was there.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use atelier_llm::{
    compute_cost_usd, fetch_openrouter_catalogue, pricing_key, BilledTokens, CatalogueEntry,
    PricingCatalogue, ProviderKind,
};
use futures_util::future::{BoxFuture, FutureExt, Shared};

use crate::store::Store;

/// How long a fetched catalogue is served before a background refresh.
pub const PRICING_TTL: Duration = Duration::from_secs(6 * 60 * 60); // 6 hours

/// How long an empty catalogue (the first fetch failed and nothing was stored) is served
/// before the next turn tries again, so an offline host does not wait on every turn.
const EMPTY_RETRY: Duration = Duration::from_secs(60);

struct Memo {
    catalogue: Arc<PricingCatalogue>,
    /// `None` for data read back from SQLite: served, but refreshed at once.
    fresh_until: Option<Instant>,
}

type Refresh = Shared<BoxFuture<'static, bool>>;

/// The pricing memo; one per process, shared by the models route and the persister.
pub struct Pricing {
    store: Arc<Store>,
    client: reqwest::Client,
    url: String,
    ttl: Duration,
    memo: Mutex<Option<Memo>>,
    refreshing: Mutex<Option<Refresh>>,
}

impl Pricing {
    /// Pricing from the catalogue at `url`, copied into `store`.
    pub fn new(store: Arc<Store>, client: reqwest::Client, url: String) -> Arc<Self> {
        Arc::new(Pricing {
            store,
            client,
            url,
            ttl: PRICING_TTL,
            memo: Mutex::new(None),
            refreshing: Mutex::new(None),
        })
    }

    /// The catalogue: the memo, refreshed in the background once stale; on first use the
    /// SQLite copy (with a background refresh), or — when there is none — one blocking fetch.
    pub async fn catalogue(self: &Arc<Self>) -> Arc<PricingCatalogue> {
        let cached = {
            let memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
            memo.as_ref()
                .map(|m| (Arc::clone(&m.catalogue), m.fresh_until))
        };
        match cached {
            Some((catalogue, Some(until))) if until > Instant::now() => catalogue,
            Some((catalogue, _)) => {
                self.refresh_in_background();
                catalogue
            }
            None => self.cold_start().await,
        }
    }

    async fn cold_start(self: &Arc<Self>) -> Arc<PricingCatalogue> {
        let store = Arc::clone(&self.store);
        let stored = tokio::task::spawn_blocking(move || store.pricing())
            .await
            .map_err(|error| error.to_string())
            .and_then(|rows| rows.map_err(|error| error.to_string()));
        match stored {
            Ok(rows) if !rows.is_empty() => {
                let catalogue: PricingCatalogue = rows
                    .into_iter()
                    .map(|row| (row.pricing_key, row.entry))
                    .collect();
                let catalogue = Arc::new(catalogue);
                self.set_memo(Arc::clone(&catalogue), None);
                self.refresh_in_background();
                return catalogue;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reading the stored pricing catalogue failed"),
        }
        if !self.refresh().await {
            self.set_memo(Arc::default(), Some(Instant::now() + EMPTY_RETRY));
        }
        let memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        memo.as_ref()
            .map(|m| Arc::clone(&m.catalogue))
            .unwrap_or_default()
    }

    fn set_memo(&self, catalogue: Arc<PricingCatalogue>, fresh_until: Option<Instant>) {
        *self.memo.lock().unwrap_or_else(PoisonError::into_inner) = Some(Memo {
            catalogue,
            fresh_until,
        });
    }

    fn refresh_in_background(self: &Arc<Self>) {
        let refresh = self.refresh();
        tokio::spawn(async move {
            refresh.await;
        });
    }

    /// Fetches the catalogue, memoises it and replaces the SQLite copy; one refresh runs at a
    /// time and callers share it. `false` (logged) when the fetch failed: the old data stays.
    pub fn refresh(self: &Arc<Self>) -> Refresh {
        let mut refreshing = self
            .refreshing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = refreshing.as_ref() {
            return running.clone();
        }
        let pricing = Arc::clone(self);
        // Its own task: a caller that goes away does not stop the refresh for the others.
        let task = tokio::spawn(async move {
            let fetched = fetch_openrouter_catalogue(&pricing.client, &pricing.url).await;
            let ok = match fetched {
                Ok(catalogue) => {
                    let catalogue = Arc::new(catalogue);
                    pricing.set_memo(Arc::clone(&catalogue), Some(Instant::now() + pricing.ttl));
                    let store = Arc::clone(&pricing.store);
                    let written =
                        tokio::task::spawn_blocking(move || store.replace_pricing(&catalogue))
                            .await;
                    let failure = match written {
                        Ok(Ok(())) => None,
                        Ok(Err(error)) => Some(error.to_string()),
                        Err(error) => Some(error.to_string()),
                    };
                    if let Some(error) = failure {
                        tracing::warn!(%error, "storing the pricing catalogue failed");
                    }
                    true
                }
                Err(error) => {
                    tracing::warn!(%error, "pricing refresh failed; keeping the previous prices");
                    false
                }
            };
            *pricing
                .refreshing
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
            ok
        });
        let shared = async move { task.await.unwrap_or(false) }.boxed().shared();
        *refreshing = Some(shared.clone());
        shared
    }

    /// What the catalogue knows of `model_id`.
    pub async fn entry(self: &Arc<Self>, model_id: &str) -> Option<CatalogueEntry> {
        self.catalogue().await.get(&pricing_key(model_id)).copied()
    }

    /// The cost of `tokens` on `model_id` of `kind`: Ollama is free; a model the catalogue
    /// does not price costs 0 (logged).
    pub async fn cost_usd(
        self: &Arc<Self>,
        kind: ProviderKind,
        model_id: &str,
        tokens: BilledTokens,
    ) -> f64 {
        if kind == ProviderKind::Ollama {
            return 0.0;
        }
        match self.entry(model_id).await {
            Some(entry) => compute_cost_usd(kind == ProviderKind::Anthropic, tokens, &entry.prices),
            None => {
                tracing::warn!(model_id, "no price for the model; its usage is booked at 0");
                0.0
            }
        }
    }
}
