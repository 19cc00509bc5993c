//! Routing under `BASE_PATH`: the public health check, the bearer gate, then the route table
//! and its handlers.

use std::future::Future;
use std::sync::Arc;

use atelier_http::{json_bytes_response, json_response, Request, Response};
use atelier_site_api::{
    route, BuildStarted, BuildWithLog, Capabilities, DataList, DriverId, Endpoint, Limits, Matched,
    MessageAccepted, SessionId, SessionStarted, SessionStopped, Slug, Verb,
};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use crate::actor::{actor_of, parse_body, Actor};
use crate::audit::{self, Audit};
use crate::builds::{BuildError, Builds};
use crate::drivers::Drivers;
use crate::health::{instance_fingerprint, Health};
use crate::metrics::Metrics;
use crate::problem::ApiError;
use crate::publishing::PublishError;
use crate::requests;
use crate::runs::{DoorSettings, Mode, NoneSpawner, Runner, SystemdDoors};
use crate::sessions::{parse_after, SessionError, Sessions};
use crate::settings::Confinement;
use crate::settings::Settings;
use crate::sites::{SiteError, Sites};
use crate::turns::TurnSettings;
use std::path::Path;

pub use atelier_site_api::limits::MAX_BODY_BYTES;
pub use atelier_site_api::SERVICE_NAME;

/// The directory under the agents' state root holding unconfined runs' door HOMEs.
const UNCONFINED_DIR: &str = "unconfined";
/// Its mode: the daemon's alone.
const UNCONFINED_DIR_MODE: u32 = 0o700;

/// The route table (the contract crate's), which the API document's test holds
/// `docs/openapi/sited.json` to.
pub use atelier_site_api::ROUTES;

/// Answers every request sited receives.
#[derive(Clone)]
pub struct Router {
    inner: Arc<RouterState>,
}

struct RouterState {
    base_path: String,
    service_token: String,
    health: Health,
    default_driver: DriverId,
    max_concurrent_sessions: u32,
    sites: Sites,
    sessions: Sessions,
    builds: Builds,
    audit: Audit,
}

/// Why the daemon's services could not be put together.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// sited's own network namespace identity could not be read.
    #[error("reading the daemon's network namespace: {0}")]
    Netns(#[source] std::io::Error),
    /// Unconfined runs need a directory for the doors' HOMEs.
    #[error("preparing the unconfined runs' directory under {}: {source}", .path.display())]
    UnconfinedHomes {
        /// The agents' state root.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: atelier_fs::FsError,
    },
}

impl Router {
    /// Builds the router and the services behind it for an instance, its metrics registered
    /// nowhere.
    pub fn new(settings: &Settings) -> Result<Self, BootError> {
        Self::with_metrics(settings, Metrics::unregistered())
    }

    /// Builds the router and the services behind it for an instance, counting in `metrics`.
    pub fn with_metrics(settings: &Settings, metrics: Metrics) -> Result<Self, BootError> {
        let fingerprint = instance_fingerprint(settings.instance.as_str(), &settings.service_token);
        let agents = &settings.agents;
        let mode = match agents.confinement {
            Confinement::None => {
                let homes = UNCONFINED_DIR;
                atelier_fs::Root::open(&agents.state_root)
                    .and_then(|root| root.create_dir_all(homes, UNCONFINED_DIR_MODE))
                    .map_err(|source| BootError::UnconfinedHomes {
                        path: agents.state_root.clone(),
                        source,
                    })?;
                Mode::None(NoneSpawner::new(
                    &agents.shim_bin,
                    agents.state_root.join(homes),
                ))
            }
            Confinement::SystemdScope => Mode::Systemd(SystemdDoors::new(DoorSettings {
                instance: settings.instance.clone(),
                identities: agents.site_identities.clone(),
                sites_root: settings.sites.sites_root.clone(),
                agents_root: agents.state_root.clone(),
                config_dir: settings
                    .sites
                    .site_table_file
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
                shim: agents.shim_bin.clone(),
                ceilings_ms: [
                    u64::try_from(agents.turn_timeout.as_millis()).unwrap_or(u64::MAX),
                    atelier_layout::paths::build_door_ceiling_ms(
                        settings.builds.install_timeout_ms,
                        settings.builds.build_timeout_ms,
                    ),
                    u64::try_from(settings.sites.git_timeout.as_millis()).unwrap_or(u64::MAX),
                ],
            })),
        };
        let runner = Runner::new(mode).map_err(BootError::Netns)?;
        let drivers = Drivers::new(agents.bins.iter().cloned(), settings.sites.default_driver);
        let sites = Sites::new(settings.sites.clone(), runner.clone());
        let builds = Builds::new(
            sites.clone(),
            runner.clone(),
            settings.builds.clone(),
            metrics.clone(),
        );
        let turn_settings = TurnSettings {
            turn_timeout: agents.turn_timeout,
            credentials: agents.driver_credentials(),
            publication_api_key: agents.credentials.publication_api_key.clone(),
            identity_epoch: agents.identity_epoch,
            endpoint: agents.endpoint.clone(),
        };
        let sessions = Sessions::new(
            sites.clone(),
            runner,
            drivers.clone(),
            turn_settings,
            settings.max_concurrent_sessions,
            metrics,
        );
        sessions.metrics().sites_counted(sites.slugs().len());
        Ok(Self {
            inner: Arc::new(RouterState {
                base_path: settings.base_path.clone(),
                service_token: settings.service_token.clone(),
                health: Health::new(fingerprint, drivers),
                default_driver: settings.sites.default_driver,
                max_concurrent_sessions: settings.max_concurrent_sessions,
                sites,
                sessions,
                builds,
                audit: Audit::new(&settings.audit_dir),
            }),
        })
    }

    /// The audit log.
    pub fn audit(&self) -> &Audit {
        &self.inner.audit
    }

    /// The build service.
    pub fn builds(&self) -> &Builds {
        &self.inner.builds
    }

    /// The site service behind the routes.
    pub fn sites(&self) -> &Sites {
        &self.inner.sites
    }

    /// The session service behind the routes.
    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// Answers one request.
    pub async fn handle(&self, request: Request) -> Response {
        let path = self.route_path(request.uri().path()).to_owned();
        let segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        // The only public request is exactly `GET /health`; everything else, unknown paths and
        // `POST /health` included, meets the same 401 first so a stranger learns nothing.
        if request.method() == Method::GET && segments == ["health"] {
            return json_response(StatusCode::OK, &self.inner.health.body());
        }
        if let Err(detail) = self.authenticate(&request) {
            return ApiError::Unauthorized(detail).into_response();
        }
        match self.dispatch(request, &segments, &path).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        }
    }

    async fn dispatch(
        &self,
        request: Request,
        segments: &[String],
        path: &str,
    ) -> Result<Response, ApiError> {
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let method = request.method().clone();
        let (endpoint, params) = match route(method.as_str(), &segments) {
            Matched::Endpoint { endpoint, params } => (endpoint, params),
            Matched::MethodNotAllowed(verbs) => {
                return Err(ApiError::MethodNotAllowed(
                    format!("Method {method} not allowed for {path}"),
                    verbs.into_iter().map(hyper_method).collect(),
                ));
            }
            Matched::NotFound => {
                return Err(ApiError::NotFound(format!("Route not found: {path}")))
            }
        };
        // The table gives each endpoint exactly its parameters, in order.
        let param_at = |i: usize| param(params.get(i).copied().unwrap_or_default());
        // A path's slug: one outside the grammar names no site.
        let site_at = |i: usize| {
            let text = param_at(i)?;
            Slug::parse(&text).map_err(|_| ApiError::from(SiteError::NotFound(text)))
        };
        let sites = &self.inner.sites;
        match endpoint {
            Endpoint::Health => Ok(json_response(StatusCode::OK, &self.inner.health.body())),
            Endpoint::Capabilities => Ok(json_response(
                StatusCode::OK,
                &Capabilities {
                    drivers: self.inner.health.drivers(),
                    default_driver: self.inner.default_driver,
                    templates: sites.templates().list(),
                    limits: Limits {
                        max_sites: u64::from(sites.config().max_sites),
                        max_concurrent_sessions: u64::from(self.inner.max_concurrent_sessions),
                        site_disk_quota_mb: sites.config().site_disk_quota_mb,
                    },
                },
            )),
            Endpoint::ListSites => {
                // Kept in memory while nothing it was read from changed: no thread hop.
                if let Some(body) = sites.list_body_fresh() {
                    return Ok(json_bytes_response(StatusCode::OK, body));
                }
                let list = off_the_workers(sites, Sites::list).await?;
                Ok(json_response(StatusCode::OK, &DataList { data: list }))
            }
            Endpoint::CreateSite => {
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                let site = requests::create_site(&body)?;
                // Cut between its steps, a create would leave half a site that no undo removes
                // and whose slug is taken.
                let this = self.clone();
                let status = to_its_end(async move {
                    let created = this.inner.sites.create(site, &actor).await;
                    this.count_sites().await;
                    let status = created?;
                    tracing::info!(site = %status.manifest.slug, actor = %actor.username, "site created");
                    let detail = json!({"template": status.manifest.template,
                                        "domain": status.manifest.domain});
                    this.record(&actor, "create_site", Some(&status.manifest.slug), detail)
                        .await;
                    Ok(status)
                })
                .await?;
                Ok(json_response(StatusCode::CREATED, &status))
            }
            Endpoint::GetSite => {
                let slug = site_at(0)?;
                let status = off_the_workers(sites, move |s| s.get(&slug)).await?;
                Ok(json_response(StatusCode::OK, &status))
            }
            Endpoint::DeleteSite => {
                let slug = site_at(0)?;
                let purge_prod = query_flag(request.uri().query(), "purge_prod");
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                // Its sessions forgotten and its audit line written however the engine waits.
                let this = self.clone();
                let report = to_its_end(async move {
                    let deleted =
                        off_the_workers(&this.inner.sites, move |s| s.delete(&slug, purge_prod))
                            .await;
                    this.count_sites().await;
                    let report = deleted?;
                    this.inner.sessions.forget_site(&report.deleted);
                    tracing::info!(site = %report.deleted, actor = %actor.username, "site deleted");
                    let detail = json!({
                        "purge_prod": report.purged_prod,
                        "removed": report.removed_surfaces,
                        "skipped": report.skipped_surfaces,
                    });
                    this.record(&actor, "delete_site", Some(&report.deleted), detail)
                        .await;
                    Ok(report)
                })
                .await?;
                Ok(json_response(StatusCode::OK, &report))
            }
            Endpoint::ListSessions => {
                let slug = site_at(0)?;
                let sessions = self.inner.sessions.clone();
                let list = tokio::task::spawn_blocking(move || sessions.list(&slug))
                    .await
                    .map_err(|e| ApiError::Internal(format!("session task: {e}")))??;
                Ok(json_response(StatusCode::OK, &DataList { data: list }))
            }
            Endpoint::StartSession => {
                // The site is checked before the body and the actor, so a request for a missing
                // site is a 404 whatever its body holds.
                let slug = site_at(0)?;
                let check = slug.clone();
                off_the_workers(sites, move |s| s.get(&check)).await?;
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                let start = requests::start_session(&body)?;
                // Cut between its steps, a start would leave a meta that says running with no
                // turn, or a turn without its audit line.
                let this = self.clone();
                let id = to_its_end(async move {
                    let id = this.inner.sessions.start(&slug, start, &actor).await?;
                    let detail = json!({ "session_id": id.as_str() });
                    this.record(&actor, "session_start", Some(slug.as_str()), detail)
                        .await;
                    Ok(id)
                })
                .await?;
                let started = SessionStarted {
                    session_id: id.to_string(),
                };
                Ok(json_response(StatusCode::CREATED, &started))
            }
            Endpoint::SendMessage => {
                let id = param_at(0)?;
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                // The message is refused before an unknown session, as the contract orders.
                let message = requests::send_message(&body)?;
                let session = SessionId::parse(&id)
                    .ok_or_else(|| SessionError::UnknownSession(id.clone()))?;
                // Cut between its steps, a follow-up would leave a meta that says running with
                // no turn, or a turn without its audit line.
                let this = self.clone();
                let session_id = id.clone();
                to_its_end(async move {
                    let site = this.inner.sessions.send_message(&session, message).await?;
                    let detail = json!({ "session_id": session_id });
                    this.record(&actor, "session_message", Some(&site), detail)
                        .await;
                    Ok(())
                })
                .await?;
                let accepted = MessageAccepted {
                    session_id: id,
                    accepted: true,
                };
                Ok(json_response(StatusCode::OK, &accepted))
            }
            Endpoint::StopSession => {
                let id = param_at(0)?;
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                // An id that is no session's has no running turn to stop.
                let session = SessionId::parse(&id).ok_or(SessionError::NotRunning)?;
                // A stop waits for the run to be gone; its audit line must not be cut off.
                let this = self.clone();
                let session_id = id.clone();
                to_its_end(async move {
                    let slug = this.inner.sessions.stop(&session).await?;
                    let site = (!slug.is_empty()).then_some(slug);
                    let detail = json!({ "session_id": session_id });
                    this.record(&actor, "session_stop", site.as_deref(), detail)
                        .await;
                    Ok(())
                })
                .await?;
                let stopped = SessionStopped {
                    session_id: id,
                    stopped: true,
                };
                Ok(json_response(StatusCode::OK, &stopped))
            }
            Endpoint::StartBuild => {
                let slug = site_at(0)?;
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                // Cut between its steps, a start would leave a build recorded running with no
                // run, or a build without its audit line.
                let this = self.clone();
                let id = to_its_end(async move {
                    let id = this.inner.builds.start(&slug).await?;
                    let detail = json!({ "build_id": id });
                    this.record(&actor, "build", Some(slug.as_str()), detail)
                        .await;
                    Ok(id)
                })
                .await?;
                Ok(json_response(
                    StatusCode::ACCEPTED,
                    &BuildStarted { build_id: id },
                ))
            }
            Endpoint::GetBuild => {
                let id = param_at(1)?;
                // A slug outside the grammar is an unknown build of that site, as for any id.
                let slug = param_at(0)?;
                let slug = Slug::parse(&slug).map_err(|_| BuildError::UnknownBuild {
                    slug: slug.clone(),
                    id: id.clone(),
                })?;
                let builds = self.inner.builds.clone();
                let (record, log) = tokio::task::spawn_blocking(move || builds.get(&slug, &id))
                    .await
                    .map_err(|e| ApiError::Internal(format!("build task: {e}")))??;
                Ok(json_response(StatusCode::OK, &BuildWithLog { record, log }))
            }
            Endpoint::Preview => {
                let slug = site_at(0)?;
                let preview = publishing_task(sites, move |s| s.preview(&slug)).await?;
                Ok(json_response(StatusCode::OK, &preview))
            }
            Endpoint::Publish => {
                let slug = site_at(0)?;
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                let publish = requests::publish(&body)?;
                let audit = self.inner.audit.clone();
                let served = publishing_task(sites, move |s| {
                    // In the change's own task, which runs to its end even when the caller
                    // stops waiting, and right after the flip: production never changes
                    // without its entry.
                    s.publish(&slug, &actor, |release| {
                        let mut detail = json!({ "release": release });
                        if let Some(note) = publish.note {
                            detail["note"] = Value::String(note);
                        }
                        audit.record(&actor, "publish", Some(slug.as_str()), detail);
                    })
                })
                .await?;
                Ok(json_response(StatusCode::OK, &served))
            }
            Endpoint::Releases => {
                let slug = site_at(0)?;
                let releases = publishing_task(sites, move |s| s.releases(&slug)).await?;
                Ok(json_response(StatusCode::OK, &releases))
            }
            Endpoint::Rollback => {
                let slug = site_at(0)?;
                let body = parse_body(&read_body(request).await?)?;
                let actor = actor_of(&body)?;
                let release = requests::rollback(&body).release;
                let audit = self.inner.audit.clone();
                let served = publishing_task(sites, move |s| {
                    let served = s.rollback(&slug, &release, &actor)?;
                    // As for a publish: in the task that changed production.
                    let detail = json!({ "release": release });
                    audit.record(&actor, "rollback", Some(slug.as_str()), detail);
                    Ok(served)
                })
                .await?;
                Ok(json_response(StatusCode::OK, &served))
            }
            Endpoint::Audit => {
                let query = request.uri().query();
                let site = query_value(query, "site");
                let limit = audit::parse_limit(query_value(query, "limit").as_deref())
                    .map_err(ApiError::Validation)?;
                let audit = self.inner.audit.clone();
                let entries =
                    tokio::task::spawn_blocking(move || audit.read(site.as_deref(), limit))
                        .await
                        .map_err(|e| ApiError::Internal(format!("audit task: {e}")))?
                        .map_err(|e| ApiError::Internal(format!("reading the audit log: {e}")))?;
                Ok(json_response(StatusCode::OK, &DataList { data: entries }))
            }
            Endpoint::Events => {
                let id = param_at(0)?;
                // The standard SSE reconnect names the last `id:` seen; it means what `after`
                // means, and an explicit `?after=` wins.
                // An empty header names no event (an empty `?after=` is the contract's 0).
                let last_event_id = request
                    .headers()
                    .get("last-event-id")
                    .and_then(|value| value.to_str().ok())
                    .filter(|value| !value.trim().is_empty())
                    .map(str::to_owned);
                let after = query_value(request.uri().query(), "after").or(last_event_id);
                let session = SessionId::parse(&id)
                    .ok_or_else(|| SessionError::UnknownSession(id.clone()))?;
                let after = match parse_after(after.as_deref()) {
                    Ok(after) => after,
                    // The session is looked up first: an unknown one is 404 whatever the cursor.
                    Err(refusal) => {
                        self.inner.sessions.site_of(&session).await?;
                        return Err(refusal.into());
                    }
                };
                Ok(self.inner.sessions.follow(&session, after).await?)
            }
        }
    }

    /// Brings the sites gauge up to date after a create or delete, whether or not it
    /// succeeded (a failure may have left or removed part of a site).
    async fn count_sites(&self) {
        let counted = off_the_workers(&self.inner.sites, |s| Ok(s.slugs().len())).await;
        match counted {
            Ok(count) => self.inner.sessions.metrics().sites_counted(count),
            Err(error) => tracing::warn!(?error, "counting the sites failed"),
        }
    }

    /// Appends one audit line off the async workers.
    async fn record(&self, actor: &Actor, action: &'static str, site: Option<&str>, detail: Value) {
        let (audit, actor, site) = (
            self.inner.audit.clone(),
            actor.clone(),
            site.map(str::to_owned),
        );
        let written = tokio::task::spawn_blocking(move || {
            audit.record(&actor, action, site.as_deref(), detail);
        })
        .await;
        if let Err(e) = written {
            tracing::error!(error = %e, "[audit] the audit task failed");
        }
    }

    /// The request path with the mount prefix removed; `''` becomes `/`.
    fn route_path<'a>(&self, path: &'a str) -> &'a str {
        let base = self.inner.base_path.as_str();
        let rest = match path.strip_prefix(base) {
            Some(rest) if base != "/" && (rest.is_empty() || rest.starts_with('/')) => rest,
            _ => path,
        };
        if rest.is_empty() {
            "/"
        } else {
            rest
        }
    }

    /// Checks `Authorization: Bearer <token>` in constant time.
    fn authenticate(&self, request: &Request) -> Result<(), &'static str> {
        let header = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let mut parts = header.splitn(2, |&b| b == b' ');
        let scheme = parts.next().unwrap_or_default();
        // The original split on spaces and ignored text after a second one; keep that.
        let token = parts
            .next()
            .unwrap_or_default()
            .split(|&b| b == b' ')
            .next()
            .unwrap_or_default();
        if scheme != b"Bearer" || token.is_empty() {
            return Err("Missing bearer token");
        }
        let expected = self.inner.service_token.as_bytes();
        if token.len() == expected.len() && bool::from(token.ct_eq(expected)) {
            Ok(())
        } else {
            Err("Invalid bearer token")
        }
    }
}

/// Runs a blocking publishing operation off the async workers.
async fn publishing_task<T, F>(sites: &Sites, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Sites) -> Result<T, PublishError> + Send + 'static,
{
    let sites = sites.clone();
    tokio::task::spawn_blocking(move || work(&sites))
        .await
        .map_err(|e| ApiError::Internal(format!("publishing task: {e}")))?
        .map_err(ApiError::from)
}

/// Runs a blocking site operation (it walks the filesystem) off the async workers.
async fn off_the_workers<T, F>(sites: &Sites, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Sites) -> Result<T, SiteError> + Send + 'static,
{
    let sites = sites.clone();
    tokio::task::spawn_blocking(move || work(&sites))
        .await
        .map_err(|e| ApiError::Internal(format!("site task: {e}")))?
        .map_err(ApiError::from)
}

/// The hyper method of a contract verb.
fn hyper_method(verb: Verb) -> Method {
    match verb {
        Verb::Get => Method::GET,
        Verb::Post => Method::POST,
        Verb::Delete => Method::DELETE,
    }
}

async fn read_body(request: Request) -> Result<hyper::body::Bytes, ApiError> {
    atelier_http::read_body(request.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(|e| match e {
            atelier_http::BodyError::TooLarge { .. } => ApiError::TooLarge(e.to_string()),
            atelier_http::BodyError::Read(_) => ApiError::Validation(e.to_string()),
        })
}

/// A path parameter, percent-decoded.
fn param(segment: &str) -> Result<String, ApiError> {
    percent_decode(segment)
        .ok_or_else(|| ApiError::Validation(format!("Malformed path segment: {segment}")))
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Runs `work` (a mutation and its audit line) in a task of its own, to its end: an engine
/// that stops waiting (its timeout, a dropped connection) drops the request's future, which
/// must not cut a mutation between its steps.
async fn to_its_end<T: Send + 'static>(
    work: impl Future<Output = Result<T, ApiError>> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::spawn(work)
        .await
        .map_err(|e| ApiError::Internal(format!("request task: {e}")))?
}

/// The first value of `name` in the query, decoded as a form value (`+` is a space).
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    query
        .unwrap_or_default()
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| percent_decode(&v.replace('+', " ")).unwrap_or_default())
}

/// True only when the first value of `name` in the query is, decoded, exactly `true` (a
/// later `name=true` does not count, as for the engine's own query reading).
fn query_flag(query: Option<&str>, name: &str) -> bool {
    query_value(query, name).as_deref() == Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_parameters_and_query_flags() {
        assert_eq!(percent_decode("a%2Db").as_deref(), Some("a-b"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%2"), None);
        for q in [
            "x=1&purge_prod=true",
            "purge_prod=%74rue",
            "purge_prod=true&purge_prod=no",
        ] {
            assert!(query_flag(Some(q), "purge_prod"), "{q:?}");
        }
        for q in [
            None,
            Some("purge_prod=1"),
            Some("purge_prod=True"),
            Some("purge_prod"),
            Some("purge_prod=false&purge_prod=true"),
            Some("purge_prod=true%20"),
        ] {
            assert!(!query_flag(q, "purge_prod"), "{q:?}");
        }
    }
}
