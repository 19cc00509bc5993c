//! What the router hands every request handler: the shared [`State`], the prefix every route
//! lives under (handlers build links with it), and [`blocking`] for store calls, which must not
//! run on the async threads.

use std::sync::Arc;

use crate::auth::Authenticator;
use crate::bridge::Bridges;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::providers::Services;
use crate::store::{Leases, Store, StoreError};
use crate::turn::TurnRunner;

/// The prefix every chatd route lives under.
pub const API_PREFIX: &str = "/admin/api/ai/";

/// Everything a request handler may use.
pub(crate) struct State {
    pub(crate) store: Arc<Store>,
    pub(crate) leases: Leases,
    pub(crate) bridges: Bridges,
    pub(crate) runner: Arc<dyn TurnRunner>,
    pub(crate) services: Services,
    pub(crate) authenticator: Authenticator,
    pub(crate) metrics: Metrics,
    /// Whether every public origin is HTTPS, so answers carry HSTS.
    pub(crate) https: bool,
}

/// Runs a store call off the async threads: every write waits for an fsync.
pub(crate) async fn blocking<T, F>(store: &Arc<Store>, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
{
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || work(&store))
        .await
        .map_err(|error| ApiError::Internal(format!("store task: {error}")))?
        .map_err(ApiError::from)
}
