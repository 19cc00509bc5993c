//! The browser bridge: a chat turn asks the editor in the browser to run a tool by
//! emitting `toolRequest` on its stream, and waits until the browser posts the result to
//! `POST /admin/api/ai/tool-result` (or 90 s pass, or the turn ends).
//!
//! A stopping chatd accepts no new connection, so a result the browser posts then never
//! arrives: once the registry is closed, a turn whose bridge waits (or comes to wait) on the
//! browser learns it is stranded and ends at once instead of holding the drain. A turn still
//! streaming is stranded too once the registry says turns must end (before the drain's
//! deadline, so the turn records its end and tells its editor instead of being cut off).
//!
//! Bridges live in this process only. Unlike the original, a bridge belongs to the user who
//! opened it: a result posted by anyone else is answered exactly like an unknown bridge (404),
//! so ids are no longer bearer capabilities. The CMS's own editor bridges post their results to
//! the same route; those are handed on to the CMS.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use atelier_http::{json_response, Request, Response};
use hyper::header::CONTENT_TYPE;
use hyper::StatusCode;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::caller::{Caller, Capability, SessionCookie};
use crate::cms::CmsClient;
use crate::error::{ApiError, CmsProblem};
use atelier_llm::LoopEvent;

/// How long a browser tool may take before the call fails.
pub const BROWSER_TOOL_TIMEOUT: Duration = Duration::from_secs(90);

/// Tool results carry screenshots; they get the chat body's limit.
const TOOL_RESULT_BODY_LIMIT: usize = crate::limits::CHAT_MAX_REQUEST_BYTES;

/// Why a browser tool call failed in transport (as opposed to the tool reporting `ok: false`,
/// which is a normal result the model can correct).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    /// The turn ended (or the bridge was destroyed) before the result arrived.
    #[error("AI chat stream ended before tool result arrived.")]
    Destroyed,
    /// The browser did not answer in time.
    #[error("Browser tool \"{0}\" result timed out.")]
    TimedOut(String),
}

/// An image a browser tool produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostedImage {
    /// Its media type.
    pub mime_type: String,
    /// Base64 bytes.
    pub data: String,
}

/// What the browser posted for one tool call (`AiToolOutput`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Whether the tool succeeded.
    pub ok: bool,
    /// Its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Screenshots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<PostedImage>,
}

impl ToolOutput {
    /// The output as the loop's canonical result for `call_id`.
    pub fn into_tool_result(self, call_id: &str) -> atelier_llm::ToolResult {
        atelier_llm::ToolResult {
            call_id: call_id.to_owned(),
            ok: self.ok,
            data: self.data,
            error: self.error,
            images: self
                .images
                .into_iter()
                .map(|image| atelier_llm::Image {
                    mime_type: image.mime_type,
                    data: image.data,
                })
                .collect(),
        }
    }
}

type Waiter = oneshot::Sender<ToolOutput>;

struct Entry {
    owner: String,
    pending: HashMap<String, Waiter>,
    snapshot: Arc<Mutex<Option<Arc<Value>>>>,
    /// Told of every call registered, for [`Bridge::stranded`].
    registered: Arc<Notify>,
}

/// How far the process has come in stopping (see the module's note).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stopping {
    /// Serving: nobody is stranded.
    No,
    /// No browser result can arrive any more.
    Closed,
    /// Every turn must end now.
    EndTurns,
}

/// Why a turn cannot go on (see [`Bridge::stranded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stranded {
    /// It waits on a browser result that can no longer arrive.
    WaitingOnBrowser,
    /// The process is about to go.
    Stopping,
}

/// The registry of open bridges in this process.
#[derive(Clone)]
pub struct Bridges {
    open: Arc<Mutex<HashMap<String, Entry>>>,
    /// Whether the process is stopping (see the module's note).
    closing: Arc<watch::Sender<Stopping>>,
}

impl Default for Bridges {
    fn default() -> Self {
        Self {
            open: Arc::default(),
            closing: Arc::new(watch::Sender::new(Stopping::No)),
        }
    }
}

impl Bridges {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every update is a single insert or remove, so the map is consistent after a panic.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a bridge for `owner`'s turn; its tool requests go to `events`, and `snapshot` is
    /// the editor state the turn started with.
    pub fn open(
        &self,
        owner: &str,
        events: mpsc::UnboundedSender<LoopEvent>,
        snapshot: Option<Value>,
    ) -> Bridge {
        let id = crate::ids::new_id();
        let snapshot = Arc::new(Mutex::new(snapshot.map(Arc::new)));
        let registered = Arc::new(Notify::new());
        self.lock().insert(
            id.clone(),
            Entry {
                owner: owner.to_owned(),
                pending: HashMap::new(),
                snapshot: Arc::clone(&snapshot),
                registered: Arc::clone(&registered),
            },
        );
        Bridge {
            id,
            bridges: self.clone(),
            events,
            snapshot,
            timeout: BROWSER_TOOL_TIMEOUT,
            registered,
        }
    }

    /// Marks the process as stopping: from now on every turn waiting on the browser, or
    /// coming to, is stranded. Idempotent.
    pub fn close(&self) {
        self.closing
            .send_if_modified(|stage| raise(stage, Stopping::Closed));
    }

    /// Strands every turn: the process is about to go. Idempotent.
    pub fn end_turns(&self) {
        self.closing
            .send_if_modified(|stage| raise(stage, Stopping::EndTurns));
    }

    fn has_pending(&self, bridge_id: &str) -> bool {
        self.lock()
            .get(bridge_id)
            .is_some_and(|entry| !entry.pending.is_empty())
    }

    /// Returns true if and only if bridge `id` is open.
    pub fn is_open(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Resolves the waiter of `request_id` on `bridge_id` with `output`, first replacing the
    /// bridge's snapshot when one was posted so the next server tool reads the new state.
    /// `false` when the bridge or request is unknown or the bridge is `user_id`'s no more.
    pub fn resolve(
        &self,
        user_id: &str,
        bridge_id: &str,
        request_id: &str,
        output: ToolOutput,
        snapshot: Option<Value>,
    ) -> bool {
        let mut open = self.lock();
        let Some(entry) = open.get_mut(bridge_id).filter(|e| e.owner == user_id) else {
            return false;
        };
        let Some(waiter) = entry.pending.remove(request_id) else {
            return false;
        };
        if let Some(snapshot) = snapshot {
            *entry.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(snapshot));
        }
        waiter.send(output).is_ok()
    }

    fn register(&self, bridge_id: &str, request_id: &str, waiter: Waiter) -> bool {
        match self.lock().get_mut(bridge_id) {
            Some(entry) => {
                entry.pending.insert(request_id.to_owned(), waiter);
                // A permit is kept when nobody waits yet, so no registration goes unseen.
                entry.registered.notify_one();
                true
            }
            None => false,
        }
    }

    fn forget(&self, bridge_id: &str, request_id: &str) {
        if let Some(entry) = self.lock().get_mut(bridge_id) {
            entry.pending.remove(request_id);
        }
    }

    fn destroy(&self, bridge_id: &str) {
        if let Some(entry) = self.lock().remove(bridge_id) {
            if !entry.pending.is_empty() {
                tracing::warn!(
                    bridge_id,
                    pending = entry.pending.len(),
                    "bridge destroyed with browser tool calls still pending"
                );
            }
            // Dropping the waiters fails every pending call with `Destroyed`.
        }
    }
}

/// One turn's bridge; dropping it (or [`Bridge::destroy`]) fails every pending call.
pub struct Bridge {
    id: String,
    bridges: Bridges,
    events: mpsc::UnboundedSender<LoopEvent>,
    snapshot: Arc<Mutex<Option<Arc<Value>>>>,
    timeout: Duration,
    registered: Arc<Notify>,
}

/// Removes a call's waiter however the call ends, an abort (the future dropped) included.
struct PendingGuard<'a> {
    bridges: &'a Bridges,
    bridge_id: &'a str,
    request_id: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.bridges.forget(self.bridge_id, &self.request_id);
    }
}

impl Bridge {
    /// The bridge's id, sent to the browser in `bridgeReady`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The editor state as last posted (the turn's, until a tool result refreshes it); shared,
    /// not copied: a page's snapshot can be megabytes, and every server tool reads it.
    pub fn snapshot(&self) -> Option<Arc<Value>> {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the per-call upper bound (tests use short ones).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Asks the browser to run `tool_name` with `input` and waits for its posted result.
    pub async fn call_browser(
        &self,
        tool_name: &str,
        input: Value,
    ) -> Result<ToolOutput, BridgeError> {
        let request_id = crate::ids::new_id();
        let (waiter, result) = oneshot::channel();
        if !self.bridges.register(&self.id, &request_id, waiter) {
            return Err(BridgeError::Destroyed);
        }
        let _guard = PendingGuard {
            bridges: &self.bridges,
            bridge_id: &self.id,
            request_id: request_id.clone(),
        };
        let request = LoopEvent::ToolRequest {
            request_id,
            tool_name: tool_name.to_owned(),
            input,
        };
        if self.events.send(request).is_err() {
            return Err(BridgeError::Destroyed);
        }
        match tokio::time::timeout(self.timeout, result).await {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(_)) => Err(BridgeError::Destroyed),
            Err(_) => Err(BridgeError::TimedOut(tool_name.to_owned())),
        }
    }

    /// Runs a model's tool call in the browser, as the loop's canonical result.
    pub async fn execute(
        &self,
        call: &atelier_llm::ToolCall,
    ) -> Result<atelier_llm::ToolResult, BridgeError> {
        let output = self
            .call_browser(&call.name, call.arguments.clone())
            .await?;
        Ok(output.into_tool_result(&call.id))
    }

    /// Resolves once the process is stopping while this bridge waits for a browser result,
    /// which can then no longer arrive, or once every turn must end; pending for as long as
    /// neither holds.
    pub async fn stranded(&self) -> Stranded {
        let mut closing = self.bridges.closing.subscribe();
        loop {
            let stage = *closing.borrow_and_update();
            if stage == Stopping::EndTurns {
                return Stranded::Stopping;
            }
            if stage == Stopping::Closed && self.bridges.has_pending(&self.id) {
                return Stranded::WaitingOnBrowser;
            }
            tokio::select! {
                changed = closing.changed() => {
                    if changed.is_err() {
                        // The registry is gone with the process; nothing will change.
                        std::future::pending::<()>().await;
                    }
                }
                () = self.registered.notified() => {}
            }
        }
    }

    /// Closes the bridge: later posts get 404 and pending calls fail. Idempotent.
    pub fn destroy(&self) {
        self.bridges.destroy(&self.id);
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Moves `stage` on to `to`, never back; whether it moved.
fn raise(stage: &mut Stopping, to: Stopping) -> bool {
    let moved = *stage < to;
    *stage = (*stage).max(to);
    moved
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    // `snapshot: null` is a snapshot (the original tested `!== undefined`).
    Value::deserialize(deserializer).map(Some)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolResultBody {
    bridge_id: String,
    request_id: String,
    result: ToolOutput,
    #[serde(default, deserialize_with = "present")]
    snapshot: Option<Value>,
}

/// Just enough of a tool result to tell whose bridge it is for.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BridgeOf {
    bridge_id: String,
}

/// `POST /tool-result`. The route is shared with the CMS's own editor bridges: a result
/// for a bridge open in this process is answered here; any other goes to the CMS unchanged (the
/// same session cookie, body and content type) and its answer comes back as it is.
pub(crate) async fn handle_tool_result(
    bridges: &Bridges,
    cms: &CmsClient,
    caller: &Caller,
    session: &SessionCookie,
    request: Request,
) -> Result<Response, ApiError> {
    caller.require(Capability::ToolsWrite)?;
    let content_type = request.headers().get(CONTENT_TYPE).cloned();
    let raw = atelier_http::read_body(request.into_body(), TOOL_RESULT_BODY_LIMIT)
        .await
        .map_err(|_| ApiError::InvalidBody)?;
    let bridge: BridgeOf = serde_json::from_slice(&raw).map_err(|_| ApiError::InvalidBody)?;
    if bridge.bridge_id.is_empty() {
        return Err(ApiError::InvalidBody);
    }
    // chatd's bridge ids are 126 random bits: an id it does not hold open is the CMS's (or
    // gone, and then the CMS answers the same 404 chatd would).
    if !bridges.is_open(&bridge.bridge_id) {
        return match cms.forward_tool_result(session, content_type, raw).await {
            Ok(relayed) => Ok(relayed.into_response()),
            Err(error) => {
                tracing::warn!(%error, cms = %cms.origin(), "forwarding a tool result failed");
                Err(ApiError::CmsUnavailable(CmsProblem::ForwardFailed))
            }
        };
    }
    let body: ToolResultBody = serde_json::from_slice(&raw).map_err(|_| ApiError::InvalidBody)?;
    if body.request_id.is_empty() {
        return Err(ApiError::InvalidBody);
    }
    if bridges.resolve(
        &caller.user_id,
        &body.bridge_id,
        &body.request_id,
        body.result,
        body.snapshot,
    ) {
        Ok(json_response(StatusCode::OK, &json!({ "ok": true })))
    } else {
        Err(ApiError::BridgeGone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(ok: bool) -> ToolOutput {
        ToolOutput {
            ok,
            data: Some(json!({"n": 1})),
            error: None,
            images: vec![],
        }
    }

    #[tokio::test]
    async fn a_posted_result_resolves_its_waiter_and_refreshes_the_snapshot() {
        let bridges = Bridges::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let bridge = bridges.open("alice", tx, Some(json!({"v": 0})));
        let call = bridge.call_browser("site_read_document", json!({"id": 1}));
        let answer = async {
            let Some(LoopEvent::ToolRequest {
                request_id,
                tool_name,
                input,
            }) = rx.recv().await
            else {
                panic!("no toolRequest");
            };
            assert_eq!(tool_name, "site_read_document");
            assert_eq!(input, json!({"id": 1}));
            assert!(!bridges.resolve("mallory", bridge.id(), &request_id, output(true), None));
            assert!(bridges.resolve(
                "alice",
                bridge.id(),
                &request_id,
                output(true),
                Some(json!({"v": 1}))
            ));
            assert!(!bridges.resolve("alice", bridge.id(), &request_id, output(true), None));
        };
        let (result, ()) = tokio::join!(call, answer);
        assert_eq!(result.unwrap(), output(true));
        assert_eq!(bridge.snapshot().as_deref(), Some(&json!({"v": 1})));
    }

    #[tokio::test]
    async fn timeouts_and_destruction_fail_the_call_in_transport() {
        let bridges = Bridges::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let bridge = bridges
            .open("alice", tx.clone(), None)
            .with_timeout(Duration::from_millis(20));
        assert_eq!(
            bridge.call_browser("slow", json!({})).await,
            Err(BridgeError::TimedOut("slow".into()))
        );

        let long = bridges.open("alice", tx, None);
        let id = long.id().to_owned();
        let call = long.call_browser("t", json!({}));
        let destroy = async {
            tokio::task::yield_now().await;
            long.destroy();
        };
        let (result, ()) = tokio::join!(call, destroy);
        assert_eq!(result, Err(BridgeError::Destroyed));
        assert!(!bridges.is_open(&id));
        assert_eq!(
            long.call_browser("t", json!({})).await,
            Err(BridgeError::Destroyed)
        );
    }

    use futures_util::FutureExt as _;

    /// Whether `future` has resolved after the ready work it can do.
    fn resolved<F: std::future::Future + Unpin>(future: &mut F) -> bool {
        future.now_or_never().is_some()
    }

    #[tokio::test]
    async fn a_stopping_process_strands_exactly_the_turns_waiting_on_the_browser() {
        let bridges = Bridges::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let waiting = bridges.open("alice", tx.clone(), None);
        let idle = bridges.open("bob", tx, None);
        let call = waiting.call_browser("t", json!({}));
        tokio::pin!(call);
        assert!(!resolved(&mut call));
        assert!(matches!(rx.try_recv(), Ok(LoopEvent::ToolRequest { .. })));
        let stranded = waiting.stranded();
        tokio::pin!(stranded);
        let idle_stranded = idle.stranded();
        tokio::pin!(idle_stranded);
        assert!(!resolved(&mut stranded), "a serving process strands nobody");

        bridges.close();
        assert_eq!(
            (&mut stranded).now_or_never(),
            Some(Stranded::WaitingOnBrowser),
            "its call cannot be answered any more"
        );
        assert!(!resolved(&mut idle_stranded), "a turn not waiting goes on");
        // A call the idle turn makes after the close strands it at once.
        let late = idle.call_browser("t", json!({}));
        tokio::pin!(late);
        assert!(!resolved(&mut late));
        assert!(resolved(&mut idle_stranded));
    }

    #[tokio::test]
    async fn ending_the_turns_strands_every_turn_and_a_close_after_it_changes_nothing() {
        let bridges = Bridges::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let streaming = bridges.open("alice", tx, None);
        let stranded = streaming.stranded();
        tokio::pin!(stranded);
        bridges.close();
        assert!(!resolved(&mut stranded), "a streaming turn goes on");
        bridges.end_turns();
        bridges.close();
        assert_eq!(stranded.now_or_never(), Some(Stranded::Stopping));
        assert_eq!(
            streaming.stranded().now_or_never(),
            Some(Stranded::Stopping)
        );
    }

    #[test]
    fn dropping_the_bridge_closes_it() {
        let bridges = Bridges::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let id = bridges.open("alice", tx, None).id().to_owned();
        assert!(!bridges.is_open(&id));
    }
}
