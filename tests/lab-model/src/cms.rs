//! TEST FIXTURE, not the CMS: a stand-in for the CMS's own API on loopback, for the tests of
//! components that ask the CMS who a browser's session belongs to (chatd), that read its
//! content as the signed-in user, and that hand it results meant for its own editor bridges.
//!
//! It knows sessions by their cookie value and answers like the CMS does:
//! - `GET /admin/api/cms/me`: 200 `{"user":…,"role":…,"capabilities":[…]}` for a known session
//!   cookie, 401 `{"error":"mfa_required"}` for a session still waiting for its second factor,
//!   and 401 `{"error":"Unauthorized"}` without a cookie or with an unknown one.
//! - `POST /admin/api/ai/tool-result`: checked like the CMS checks it (401, 403 without
//!   `ai.tools.write`, 400 without a `bridgeId`); a result for one of the CMS's own editor
//!   bridges (opened with [`CmsState::open_bridge`]) is answered 200 with what arrived, so a
//!   test can see a forward end to end; any other bridge id gets the CMS's 404.
//! - The content routes of [`content`]: data tables, rows (the CMS's own-rows rule applied),
//!   search, authors, users and media, read from [`CmsState::content`], and `POST` of a new row.
//!
//! Every request is recorded whole (method, path, headers, body): a test can count the session
//! checks ([`CmsState::me_calls`]) and read what a forward carried ([`CmsState::tool_results`]).
//! Everything else is 404 `{"error":"Not found"}`. More of the CMS's routes join [`handle`]'s
//! match as tests need them, each reading what it serves from [`CmsState`].
//!
//! Three users are built in ([`editor`], [`client`] and [`author`]) with fixed cookies
//! ([`EDITOR_COOKIE`], [`CLIENT_COOKIE`], [`AUTHOR_COOKIE`]), and [`MFA_PENDING_COOKIE`] names a
//! session waiting for its second factor; tests add their own users with
//! [`CmsState::add_session`] or [`CmsState::session_for`].

pub mod content;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use atelier_http::{json_response, Listener, Request, Response};
use hyper::header::{HeaderMap, CONTENT_TYPE, COOKIE};
use hyper::{Method, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use content::ContentModel;

use crate::mcp::McpServer;

/// The name of the CMS's session cookie.
pub const SESSION_COOKIE: &str = "instatic_admin_session";

/// The session cookie of the built-in [`editor`].
pub const EDITOR_COOKIE: &str = "lab-editor-session-0000000000000000000000000";

/// The session cookie of the built-in [`client`].
pub const CLIENT_COOKIE: &str = "lab-client-session-0000000000000000000000000";

/// The session cookie of the built-in [`author`].
pub const AUTHOR_COOKIE: &str = "lab-author-session-0000000000000000000000000";

/// The session cookie of the built-in [`admin`].
pub const ADMIN_COOKIE: &str = "lab-admin-session-00000000000000000000000000";

/// A session that exists but has not passed its second factor.
pub const MFA_PENDING_COOKIE: &str = "lab-mfa-pending-session-000000000000000000000";

/// The CMS's who-am-I route.
const ME_PATH: &str = "/admin/api/cms/me";

/// The route the CMS's editor bridges take their results on.
const TOOL_RESULT_PATH: &str = "/admin/api/ai/tool-result";

/// The largest request body read: a tool result with screenshots.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// How long a stopping stand-in waits for requests in flight.
const DRAIN: Duration = Duration::from_secs(1);

/// A role, as the CMS's `/me` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CmsRole {
    /// The role's id.
    pub id: String,
    /// Its slug (`owner`, `admin`, `client`, …).
    pub slug: String,
    /// Its display name.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// Whether the CMS made it.
    pub is_system: bool,
    /// What it allows.
    pub capabilities: Vec<String>,
}

/// A user, with the fields of the CMS's public user that its callers read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmsUser {
    /// The opaque id (the CMS's are 21 URL-safe characters).
    pub id: String,
    /// The sign-in address.
    pub email: String,
    /// The name shown.
    pub display_name: String,
    /// The one role; its capabilities are the user's.
    pub role: CmsRole,
}

impl CmsUser {
    /// A user `id` whose role `slug` allows exactly `capabilities`.
    pub fn new(id: &str, slug: &str, capabilities: &[&str]) -> CmsUser {
        CmsUser {
            id: id.to_owned(),
            email: format!("{id}@lab.example"),
            display_name: id.to_owned(),
            role: CmsRole {
                id: format!("role_{slug}"),
                slug: slug.to_owned(),
                name: slug.to_owned(),
                description: format!("The lab's {slug} role."),
                is_system: false,
                capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
            },
        }
    }

    /// The user's capabilities: its role's.
    pub fn capabilities(&self) -> &[String] {
        &self.role.capabilities
    }

    /// The body of a 200 from `GET /admin/api/cms/me`.
    pub fn me_body(&self) -> Value {
        json!({
            "user": {
                "id": self.id,
                "email": self.email,
                "displayName": self.display_name,
                "status": "active",
                "role": self.role,
                "capabilities": self.role.capabilities,
                "lastLoginAt": null,
                "mfaEnabled": false,
                "createdAt": "2026-01-01T00:00:00.000Z",
                "updatedAt": "2026-01-01T00:00:00.000Z",
            },
            "role": self.role,
            "capabilities": self.role.capabilities,
        })
    }
}

/// The built-in editor: chats, posts tool results, and edits the site and its content.
pub fn editor() -> CmsUser {
    CmsUser::new(
        "usr_lab_editor_000000",
        "editor",
        &[
            "ai.chat",
            "ai.tools.write",
            "dashboard.read",
            "site.read",
            "site.content.edit",
            "site.structure.edit",
            "site.style.edit",
            "content.edit.any",
            "media.read",
            "data.custom.tables.read",
        ],
    )
}

/// The built-in client (the CMS's `client` role): reads and edits content, no AI at all.
pub fn client() -> CmsUser {
    CmsUser::new(
        "usr_lab_client_000000",
        "client",
        &[
            "dashboard.read",
            "site.read",
            "site.content.edit",
            "media.read",
            "data.custom.tables.read",
        ],
    )
}

/// The built-in administrator: the editor's site and AI capabilities, and the management of
/// AI providers and the reading of the AI audit, so they can configure a model of their own.
pub fn admin() -> CmsUser {
    let mut capabilities: Vec<&str> = vec!["ai.providers.manage", "ai.audit.read"];
    let editor = editor();
    capabilities.extend(editor.capabilities().iter().map(String::as_str));
    CmsUser::new("usr_lab_admin_0000000", "admin", &capabilities)
}

/// The built-in author: writes and publishes their own posts only, with the AI's help.
pub fn author() -> CmsUser {
    CmsUser::new(
        "usr_lab_author_000000",
        "author",
        &[
            "ai.chat",
            "ai.tools.write",
            "dashboard.read",
            "content.create",
            "content.edit.own",
            "content.publish.own",
            "media.read",
            "data.custom.tables.read",
        ],
    )
}

/// What a session cookie stands for.
#[derive(Debug, Clone)]
enum Session {
    Active(CmsUser),
    MfaPending,
}

/// The CMS's answer to a result for a bridge it does not hold.
pub const BRIDGE_GONE: &str =
    "The AI tool bridge is no longer active. The server may have restarted; send the message again.";

pub use crate::record::RecordedRequest;

/// What the stand-in knows and has seen, shared by every request.
#[derive(Debug, Default)]
pub struct CmsState {
    sessions: Mutex<HashMap<String, Session>>,
    bridges: Mutex<HashSet<String>>,
    requests: Mutex<Vec<RecordedRequest>>,
    content: Mutex<ContentModel>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is one insert or push: a panic elsewhere leaves the data consistent.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl CmsState {
    /// A stand-in knowing the built-in [`editor`], [`client`], [`author`] and the MFA-pending
    /// session, with the seeded content ([`ContentModel::lab`]).
    pub fn with_lab_users() -> CmsState {
        let state = CmsState::default();
        state.add_session(EDITOR_COOKIE, editor());
        state.add_session(CLIENT_COOKIE, client());
        state.add_session(AUTHOR_COOKIE, author());
        state.add_session(ADMIN_COOKIE, admin());
        *state.content() = ContentModel::lab();
        lock(&state.sessions).insert(MFA_PENDING_COOKIE.to_owned(), Session::MfaPending);
        state
    }

    /// Makes `cookie` a signed-in session of `user`.
    pub fn add_session(&self, cookie: &str, user: CmsUser) {
        lock(&self.sessions).insert(cookie.to_owned(), Session::Active(user));
    }

    /// Signs `cookie` out: the CMS no longer knows it.
    pub fn revoke(&self, cookie: &str) {
        lock(&self.sessions).remove(cookie);
    }

    /// The session cookie of user `user_id` with exactly `capabilities` (comma-separated),
    /// made on first use; the same pair always gets the same cookie.
    pub fn session_for(&self, user_id: &str, capabilities: &str) -> String {
        let digest = Sha256::digest(format!("{user_id}\n{capabilities}").as_bytes());
        let cookie = format!("lab-{}", hex::encode(&digest[..16]));
        let capabilities: Vec<&str> = capabilities
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        lock(&self.sessions)
            .entry(cookie.clone())
            .or_insert_with(|| Session::Active(CmsUser::new(user_id, "lab", &capabilities)));
        cookie
    }

    /// Opens one of the CMS's own editor bridges: results for it are answered 200.
    pub fn open_bridge(&self, bridge_id: &str) {
        lock(&self.bridges).insert(bridge_id.to_owned());
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.requests).clone()
    }

    /// How many `GET /admin/api/cms/me` requests arrived.
    pub fn me_calls(&self) -> usize {
        lock(&self.requests)
            .iter()
            .filter(|r| r.method == Method::GET && r.path == ME_PATH)
            .count()
    }

    /// Every tool result posted so far, oldest first.
    pub fn tool_results(&self) -> Vec<RecordedRequest> {
        lock(&self.requests)
            .iter()
            .filter(|r| r.method == Method::POST && r.path == TOOL_RESULT_PATH)
            .cloned()
            .collect()
    }

    /// The content the content routes serve; a test may change it (rows a browser would have
    /// written, a table of its own).
    pub fn content(&self) -> MutexGuard<'_, ContentModel> {
        lock(&self.content)
    }

    fn session(&self, cookie: Option<&str>) -> Option<Session> {
        lock(&self.sessions).get(cookie?).cloned()
    }
}

/// The value of the session cookie as the CMS reads it: the first `name=value` pair of the
/// `Cookie` header whose name is exactly the session cookie's; empty counts as none.
pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    let header = headers.get(COOKIE)?.to_str().ok()?;
    header
        .split(';')
        .map(|part| {
            let part = part.trim();
            part.split_once('=').unwrap_or((part, ""))
        })
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_owned())
        .filter(|value| !value.is_empty())
}

/// The user of the session `cookie` names, or the error of the CMS's 401 answer.
fn authenticate(state: &CmsState, cookie: Option<&str>) -> Result<CmsUser, &'static str> {
    match state.session(cookie) {
        Some(Session::Active(user)) => Ok(user),
        Some(Session::MfaPending) => Err("mfa_required"),
        None => Err("Unauthorized"),
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response(status, &json!({ "error": message }))
}

/// Answers one request from `state`, after recording it.
pub async fn handle(state: Arc<CmsState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match atelier_http::read_body(body, MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(refused) => return error(refused.status(), "Invalid request body."),
    };
    let cookie = session_cookie(&parts.headers);
    let recorded = RecordedRequest::new(&parts, body);
    lock(&state.requests).push(recorded.clone());
    if let Some(response) = content::answer(&state, &recorded, parts.uri.query(), cookie.as_deref())
    {
        return response;
    }
    match (&recorded.method, recorded.path.as_str()) {
        (&Method::GET, ME_PATH) => match authenticate(&state, cookie.as_deref()) {
            Ok(user) => json_response(StatusCode::OK, &user.me_body()),
            Err(refusal) => error(StatusCode::UNAUTHORIZED, refusal),
        },
        (&Method::POST, TOOL_RESULT_PATH) => tool_result(&state, cookie.as_deref(), &recorded),
        (_, ME_PATH | TOOL_RESULT_PATH) => {
            error(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed")
        }
        _ => error(StatusCode::NOT_FOUND, "Not found"),
    }
}

/// Answers a tool result as the CMS's checks do; for one of its bridges, with what arrived.
fn tool_result(state: &CmsState, cookie: Option<&str>, recorded: &RecordedRequest) -> Response {
    let user = match authenticate(state, cookie) {
        Ok(user) => user,
        Err(refusal) => return error(StatusCode::UNAUTHORIZED, refusal),
    };
    if !user.capabilities().iter().any(|c| c == "ai.tools.write") {
        return error(StatusCode::FORBIDDEN, "Forbidden");
    }
    let bridge_id = serde_json::from_slice::<Value>(&recorded.body)
        .ok()
        .and_then(|body| body.get("bridgeId")?.as_str().map(str::to_owned))
        .filter(|id| !id.is_empty());
    let Some(bridge_id) = bridge_id else {
        return error(StatusCode::BAD_REQUEST, "Invalid request body.");
    };
    if !lock(&state.bridges).contains(&bridge_id) {
        return error(StatusCode::NOT_FOUND, BRIDGE_GONE);
    }
    json_response(
        StatusCode::OK,
        &json!({
            "ok": true,
            "labReceived": {
                "userId": user.id,
                "contentType": recorded.header(CONTENT_TYPE.as_str()),
                "body": String::from_utf8_lossy(&recorded.body),
            },
        }),
    )
}

/// A stand-in serving on loopback until dropped (or, from [`run`], until SIGTERM).
#[derive(Debug)]
pub struct LabCms {
    addr: SocketAddr,
    state: Arc<CmsState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl LabCms {
    /// Binds `addr` (port 0 picks one) and serves `state` on the current Tokio runtime.
    pub fn spawn(addr: SocketAddr, state: Arc<CmsState>) -> std::io::Result<LabCms> {
        let listener = std::net::TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let listener = Listener::try_from(listener)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = Arc::clone(&state);
        tokio::spawn(atelier_http::serve(
            listener,
            move |request| handle(Arc::clone(&served), request),
            async move {
                let _ = stopped.await;
            },
            DRAIN,
        ));
        Ok(LabCms {
            addr,
            state,
            stop: Some(stop),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its origin, `http://127.0.0.1:PORT`, as a client configures it.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it knows and has seen.
    pub fn state(&self) -> &Arc<CmsState> {
        &self.state
    }
}

impl Drop for LabCms {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Why the stand-in binary could not serve.
#[derive(Debug, thiserror::Error)]
pub enum CmsRunError {
    /// Only loopback is served: the stand-in knows users' sessions.
    #[error("{flag} {addr} is not a loopback address")]
    NotLoopback {
        /// The option that named it.
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
    },
    /// The listener or the runtime could not be set up.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The `--listen` address.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Serves the built-in users on `addr` until SIGTERM or SIGINT, on a single-threaded runtime;
/// prints `listening on ADDR` once bound. With `publication`, also serves the Publication
/// API's MCP stand-in ([`crate::mcp`]) there, and prints `publication API on ADDR`.
pub fn run(addr: SocketAddr, publication: Option<SocketAddr>) -> Result<(), CmsRunError> {
    let named =
        std::iter::once(("--listen", addr)).chain(publication.map(|a| ("--publication-listen", a)));
    for (flag, addr) in named {
        if !addr.ip().is_loopback() {
            return Err(CmsRunError::NotLoopback { flag, addr });
        }
    }
    let publication = publication
        .map(|addr| McpServer::bind(addr).map_err(|source| CmsRunError::Listen { addr, source }))
        .transpose()?;
    if let Some(publication) = &publication {
        println!("publication API on {}", publication.addr);
    }
    let listen = |source| CmsRunError::Listen { addr, source };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(listen)?;
    runtime.block_on(async {
        let cms = LabCms::spawn(addr, Arc::new(CmsState::with_lab_users())).map_err(listen)?;
        println!("listening on {}", cms.addr());
        atelier_http::shutdown_signal().await;
        drop(cms);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn request(cookie: Option<&str>) -> hyper::Request<()> {
        let mut builder = hyper::Request::builder().uri("/admin/api/cms/me");
        if let Some(cookie) = cookie {
            builder = builder.header(COOKIE, cookie);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn the_cookie_is_read_like_the_cms_reads_it() {
        let cases = [
            ("none", None, None),
            ("alone", Some("instatic_admin_session=abc"), Some("abc")),
            (
                "among others",
                Some("a=1; instatic_admin_session=abc=; b=2"),
                Some("abc="),
            ),
            (
                "first of two",
                Some("instatic_admin_session=one; instatic_admin_session=two"),
                Some("one"),
            ),
            ("empty", Some("instatic_admin_session="), None),
            (
                "a bare name first",
                Some("instatic_admin_session; instatic_admin_session=abc"),
                None,
            ),
            ("another name", Some("xinstatic_admin_session=abc"), None),
        ];
        for (name, header, expected) in cases {
            assert_eq!(
                session_cookie(request(header).headers()).as_deref(),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn session_for_is_stable_per_user_and_capabilities() {
        let state = CmsState::default();
        let one = state.session_for("alice", "ai.chat");
        assert_eq!(one, state.session_for("alice", "ai.chat"));
        assert_ne!(one, state.session_for("alice", "ai.chat,ai.tools.write"));
        assert_ne!(one, state.session_for("bob", "ai.chat"));
        let Some(Session::Active(user)) = state.session(Some(&one)) else {
            panic!("no session");
        };
        assert_eq!(user.capabilities(), ["ai.chat"]);
    }
}
