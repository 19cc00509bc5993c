//! `POST /admin/api/ai/chat/:scope`: the checks in the original's order (so a client meets the
//! refusal it met before): capability, body, conversation, scope, credential set, credential
//! the caller's (404) and opening (409), the images' cheap checks (400/413), the model's
//! capabilities (422), the single-writer lease (409), the images' full decode; then the user
//! message appended before anything streams, and the NDJSON event stream whose turn is run by
//! a [`TurnRunner`](crate::turn::TurnRunner) and persisted as it goes. Once the turn returned,
//! whatever its end, its credential is marked used.
//!
//! Abort owns the whole response: the turn runs in a task that watches the response body; when
//! the client goes away the runner's future is dropped (cancelling its provider request and any
//! browser tool wait), unresolved calls are persisted as interrupted and the lease is released.
//! A stopping chatd ends the same way, with an error line, each turn that waits on the browser
//! (whose result cannot reach it any more) at once, and every other turn still running shortly
//! before the drain's deadline, so each records its end and tells its editor.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use atelier_http::{ndjson_response, Request, Response};
use atelier_llm::{BilledTokens, LoopEvent, ProviderKind};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::bridge::{Bridge, Stranded};
use crate::caller::{Caller, Capability, SessionCookie};
use crate::cms::reads::CmsReader;
use crate::error::ApiError;
use crate::images::{self, ImageError};
use crate::limits::CHAT_MAX_REQUEST_BYTES;
use crate::metrics::{TurnMeter, TurnOutcome};
use crate::pricing::Pricing;
use crate::state::{blocking, State};
use crate::store::events::{AuditEvent, ChatTurn, TurnTotals};
use crate::store::history::{self, INTERRUPTED_TOOL_RESULT_ERROR};
use crate::store::{
    Committed, ContentBlock, Message, NewMessage, Role, Scope, Store, ToolCallRef, TurnUsage,
    UserTurn,
};
use crate::turn::{ModelRefusal, Turn};

/// The longest base64 image a chat body may carry.
const MAX_IMAGE_DATA_LEN: usize = 2_000_000;

/// Auto-titles are cut to this many characters (then `…`).
const TITLE_MAX_CHARS: usize = 60;

/// Buffer of the response body: the turn waits for a slow client instead of piling up lines.
const STREAM_BUFFER: usize = 64;

/// Why a turn ended that waited on the browser when chatd was stopped: the result would
/// come on a new connection, which a stopping chatd no longer accepts.
const STOPPED_WAITING_FOR_BROWSER: &str =
    "The AI runtime is restarting and could not wait for the editor's tool result. \
     Send your message again.";

/// Why a turn ended that still ran when a stopping chatd could wait no longer.
const STOPPED_MID_TURN: &str = "The AI runtime is restarting and ended this turn before its \
     answer was complete. Send your message again.";

/// How often the end of a turn is tried to be recorded before the next start is left to.
const END_RECORD_ATTEMPTS: u32 = 3;

/// The wait before the first retry; each later one waits one more of it.
const END_RECORD_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChatBody {
    conversation_id: String,
    content: Vec<UserBlock>,
    #[serde(default)]
    snapshot: Option<Value>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
enum UserBlock {
    Text {
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    Image {
        mime_type: String,
        data: String,
    },
}

/// The content rules of `AiChatRequestBodySchema`: one to eight images alone, or up to nine
/// blocks with exactly one text block; images are JPEG with 4 to 2,000,000 base64 characters.
fn validate_content(blocks: Vec<UserBlock>) -> Result<Vec<ContentBlock>, ApiError> {
    let texts = blocks
        .iter()
        .filter(|b| matches!(b, UserBlock::Text { .. }))
        .count();
    let count_ok = match texts {
        0 => (1..=8).contains(&blocks.len()),
        1 => (1..=9).contains(&blocks.len()),
        _ => false,
    };
    if !count_ok {
        return Err(ApiError::InvalidBody);
    }
    blocks
        .into_iter()
        .map(|block| match block {
            UserBlock::Text { text } => Ok(ContentBlock::Text { text }),
            UserBlock::Image { mime_type, data }
                if mime_type == "image/jpeg" && (4..=MAX_IMAGE_DATA_LEN).contains(&data.len()) =>
            {
                Ok(ContentBlock::Image { mime_type, data })
            }
            UserBlock::Image { .. } => Err(ApiError::InvalidBody),
        })
        .collect()
}

/// The auto-title of a turn: its text, whitespace collapsed, cut at 60 characters with `…`;
/// `Image` or `Images` for an image-only turn.
pub fn auto_title(content: &[ContentBlock]) -> String {
    let text = content.iter().find_map(|block| match block {
        ContentBlock::Text { text } => Some(text.split_whitespace().collect::<Vec<_>>().join(" ")),
        _ => None,
    });
    match text.filter(|t| !t.is_empty()) {
        Some(text) if text.chars().count() > TITLE_MAX_CHARS => {
            let cut: String = text.chars().take(TITLE_MAX_CHARS).collect();
            format!("{}…", cut.trim_end())
        }
        Some(text) => text,
        None => {
            let images = content
                .iter()
                .filter(|b| matches!(b, ContentBlock::Image { .. }))
                .count();
            if images == 1 { "Image" } else { "Images" }.to_owned()
        }
    }
}

async fn read_chat_body(request: Request) -> Result<ChatBody, ApiError> {
    let announced = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > CHAT_MAX_REQUEST_BYTES as u64) {
        return Err(ApiError::ChatTooLarge);
    }
    let bytes = atelier_http::read_body(request.into_body(), CHAT_MAX_REQUEST_BYTES)
        .await
        .map_err(|error| match error {
            atelier_http::BodyError::TooLarge { .. } => ApiError::ChatTooLarge,
            atelier_http::BodyError::Read(_) => ApiError::InvalidBody,
        })?;
    let body: ChatBody = serde_json::from_slice(&bytes).map_err(|_| ApiError::InvalidBody)?;
    if body.conversation_id.is_empty() {
        return Err(ApiError::InvalidBody);
    }
    Ok(body)
}

/// `POST /chat/:scope`, which arrived at `arrived`; the turn reads the CMS with `session`, the
/// caller's cookie.
pub(crate) async fn handle(
    state: &State,
    caller: &Caller,
    session: &SessionCookie,
    scope: Scope,
    request: Request,
    arrived: Instant,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let body = read_chat_body(request).await?;
    let content = validate_content(body.content)?;
    let user = caller.user_id.clone();
    let id = body.conversation_id.clone();
    // The history comes in the same hop: when nothing is written before the lease is held,
    // this read is the turn's and the provider is asked without another trip to the store.
    let read = blocking(&state.store, move |store| store.read_for_turn(&user, &id))
        .await?
        .ok_or(ApiError::ConversationNotFound)?;
    let conversation = read.conversation.clone();
    if conversation.scope != scope {
        return Err(ApiError::ScopeMismatch {
            actual: conversation.scope.as_str(),
            requested: scope.as_str(),
        });
    }
    if conversation.credential_id.is_none() {
        return Err(ApiError::NoCredential);
    }
    // A client that goes away while these resolve drops this future: nothing was stored.
    // The credential first: someone else's is refused, and an unopenable one, whatever the
    // images.
    let opened = state.runner.open(caller, &conversation).await?;
    // The cheap image checks come before anything asks a provider about the model.
    let content = images::preflight(content).map_err(ApiError::from)?;
    let has_images = content
        .iter()
        .any(|block| matches!(block, ContentBlock::Image { .. }));
    let prepared = opened.gate(has_images).await?;
    // Before anything is appended: a second concurrent send is refused here, retryably.
    let lease = state
        .leases
        .try_acquire(&conversation.id)
        .ok_or(ApiError::ConversationBusy)?;
    // Under the lease, each image is fully decoded and re-encoded in turn; a client that goes
    // away stops this between images, and nothing is stored.
    let content = images::canonicalize(content)
        .await
        .map_err(ApiError::from)?;

    // Under the lease the read must be current: the conversation may have been deleted or
    // repointed, or another turn may have ended, while the body was checked. When nothing was
    // written since, the first read is; otherwise it is read again, with the history.
    let (current, mut messages) = if state.store.unchanged_since(read.mark) {
        (Some(read.conversation), read.messages)
    } else {
        let user = caller.user_id.clone();
        let id = conversation.id.clone();
        blocking(&state.store, move |store| {
            let current = store.conversation(&user, &id)?;
            let messages = match current {
                Some(_) => store.messages(&id)?,
                None => Vec::new(),
            };
            Ok((current, messages))
        })
        .await?
    };
    let current = current.ok_or(ApiError::ConversationNotFound)?;
    if current.credential_id != conversation.credential_id
        || current.model_id != conversation.model_id
    {
        return Err(ApiError::ModelChanged);
    }
    let title = auto_title(&content);
    let user_message = NewMessage {
        role: Role::User,
        content,
        tool_call: None,
    };
    // The user's message (and the auto-title) commit while the provider is already being
    // asked, so the commit's fsync overlaps the provider's first bytes instead of preceding
    // them. Nothing of the answer is written before the commit landed, and a failed commit
    // ends the turn with an error; the lease keeps every other writer out meanwhile.
    // Queued here, with no thread to wait for it: the turn's own writes queue after it.
    let commit = state.store.submit_user_turn(
        &conversation.id,
        user_message.clone(),
        &title,
        &caller.user_id,
    );
    let position = messages.last().map_or(0, |m| m.position + 1);
    messages.push(Message {
        id: String::new(),
        position,
        role: Role::User,
        content: user_message.content,
        tool_call: None,
        created_at: String::new(),
    });
    let mut history = history::rebuild(&messages);
    if prepared
        .capabilities
        .is_some_and(|capabilities| !capabilities.vision_input)
    {
        history::project_images_for_blind_model(&mut history);
    }

    let (loop_tx, loop_rx) = mpsc::unbounded_channel();
    let bridge = Arc::new(
        state
            .bridges
            .open(&caller.user_id, loop_tx.clone(), body.snapshot),
    );
    let (out_tx, out_rx) = mpsc::channel(STREAM_BUFFER);
    // The body has room for the first line, so this cannot wait.
    let _ = out_tx.try_send(LoopEvent::BridgeReady {
        bridge_id: bridge.id().to_owned(),
    });
    let provider = prepared.provider;
    let credential_id = prepared.credential_id.clone();
    let pricing = provider.map(|provider| PricedModel {
        pricing: Arc::clone(&state.services.pricing),
        provider,
        model_id: conversation.model_id.clone(),
    });
    let turn = Turn {
        caller: caller.clone(),
        cms: CmsReader::new(state.authenticator.cms().clone(), session.clone()),
        conversation,
        history,
        bridge: Arc::clone(&bridge),
        prepared,
        events: loop_tx,
        metrics: state.metrics.clone(),
    };
    let run = state.runner.run(turn);
    let mut persister = Persister::new(
        Arc::clone(&state.store),
        lease.conversation_id().to_owned(),
        out_tx,
        state.metrics.turn_started(scope, provider, arrived),
    );
    persister.pricing = pricing;
    persister.commit = Some(commit);
    persister.actor.clone_from(&caller.user_id);
    persister.credential_id = credential_id;
    tokio::spawn(drive_turn(persister, lease, bridge, run, loop_rx));

    let lines = futures_util::stream::unfold(out_rx, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    });
    let mut response = ndjson_response(lines);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    Ok(response)
}

impl From<ImageError> for ApiError {
    fn from(error: ImageError) -> Self {
        ApiError::ImageRefused {
            too_large: error.is_too_large(),
            message: error.to_string(),
        }
    }
}

impl From<ModelRefusal> for ApiError {
    fn from(refusal: ModelRefusal) -> Self {
        match refusal {
            ModelRefusal::CredentialNotFound => ApiError::CredentialInaccessible,
            ModelRefusal::CredentialUnusable(message) => ApiError::CredentialUnusable(message),
            ModelRefusal::NoVision => ApiError::ModelWithoutVision,
            ModelRefusal::NoToolCalling => ApiError::ModelWithoutTools,
            ModelRefusal::Failed(detail) => ApiError::Internal(detail),
        }
    }
}

/// The user message's commit, running while the turn starts.
type UserCommit = Committed<UserTurn>;

/// The model a turn's usage is priced on.
struct PricedModel {
    pricing: Arc<Pricing>,
    provider: ProviderKind,
    model_id: String,
}

/// How a turn ended.
enum Ending {
    /// The runner finished or said `done`.
    Done,
    /// The runner (or persistence) failed with this message.
    Error(String),
    /// The client went away.
    Aborted,
}

/// Runs the turn to its end, persisting and forwarding events, then finalises.
async fn drive_turn(
    mut persister: Persister,
    lease: crate::store::Lease,
    bridge: Arc<Bridge>,
    run: Pin<Box<dyn Future<Output = ()> + Send>>,
    mut events: mpsc::UnboundedReceiver<LoopEvent>,
) {
    let mut run = Some(run);
    let stranded = bridge.stranded();
    tokio::pin!(stranded);
    let ending = loop {
        tokio::select! {
            biased;
            () = persister.out.closed() => break Ending::Aborted,
            event = events.recv() => {
                if let Some(event) = event {
                    if let Some(ending) = persister.handle(event).await {
                        break ending;
                    }
                }
            }
            // After the queued events, so the call it waits on has its row.
            why = &mut stranded => break Ending::Error(match why {
                Stranded::WaitingOnBrowser => STOPPED_WAITING_FOR_BROWSER,
                Stranded::Stopping => STOPPED_MID_TURN,
            }.to_owned()),
            () = async { if let Some(run) = run.as_mut() { run.await } }, if run.is_some() => {
                run = None;
                // Whatever the runner sent before finishing is still queued.
                let mut ending = Ending::Done;
                while let Ok(event) = events.try_recv() {
                    if let Some(end) = persister.handle(event).await {
                        ending = end;
                        break;
                    }
                }
                break ending;
            }
        }
    };
    // Dropping the runner cancels its provider request and any browser tool wait.
    drop(run);
    bridge.destroy();
    // The turn has returned, whatever its end: its credential was used. Queued before the
    // end's own writes, so it is committed by the time the client reads the last line.
    if let Some(id) = persister.credential_id.take() {
        if let Err(error) = persister.store.touch_credential(&id) {
            tracing::warn!(%error, credential_id = %id, "marking a credential used failed");
        }
    }
    persister.finish(ending).await;
    drop(lease);
}

/// Writes rows as events pass: text accumulates and is flushed as one assistant row
/// before a tool call, usage, an error or the end; each tool call and each result is a row.
struct Persister {
    store: Arc<Store>,
    conversation_id: String,
    out: mpsc::Sender<LoopEvent>,
    text: String,
    /// Calls persisted but not yet answered, in the order issued.
    pending: Vec<ToolCallRef>,
    /// The turn's last assistant row, which usage is booked on.
    last_assistant: Option<String>,
    /// The context size of the latest round.
    latest_context: Option<u64>,
    /// Prices usage the provider did not price itself; `None` books it at 0.
    pricing: Option<PricedModel>,
    /// The user message's commit until it has been seen to land.
    commit: Option<UserCommit>,
    /// Why the user message's commit failed: nothing more of the turn is written, so no
    /// answer is stored without its question.
    commit_failed: Option<String>,
    consumer_gone: bool,
    /// Who runs the turn, for its audit records.
    actor: String,
    /// The turn as its start was recorded (with the user message); `None` until then.
    started: Option<ChatTurn>,
    /// What the turn booked so far, for the record of its end.
    booked: TurnTotals,
    /// The turn's metrics; dropping it with the task takes the turn off the in-flight gauge.
    meter: TurnMeter,
    /// The stored credential the turn runs on, marked used once the turn returned.
    credential_id: Option<String>,
}

impl Persister {
    fn new(
        store: Arc<Store>,
        conversation_id: String,
        out: mpsc::Sender<LoopEvent>,
        meter: TurnMeter,
    ) -> Self {
        Self {
            store,
            conversation_id,
            out,
            text: String::new(),
            pending: Vec::new(),
            last_assistant: None,
            latest_context: None,
            pricing: None,
            commit: None,
            commit_failed: None,
            consumer_gone: false,
            actor: String::new(),
            started: None,
            booked: TurnTotals::default(),
            meter,
            credential_id: None,
        }
    }

    /// Waits for the user message's commit; every write of the turn comes after it, and
    /// none is made once it failed.
    async fn committed(&mut self) -> Result<(), String> {
        if let Some(failed) = &self.commit_failed {
            return Err(failed.clone());
        }
        let Some(commit) = self.commit.take() else {
            return Ok(());
        };
        match commit.await {
            Ok(stored) => {
                self.started = Some(stored.turn);
                Ok(())
            }
            Err(error) => {
                let failed = format!("AI runtime error: {error}");
                self.commit_failed = Some(failed.clone());
                Err(failed)
            }
        }
    }

    async fn append(&mut self, message: NewMessage) -> Result<(), String> {
        self.committed().await?;
        let id = self.conversation_id.clone();
        let written = blocking(&self.store, move |store| {
            store.append_message(&id, &message)
        })
        .await
        .map_err(|error| format!("AI runtime error: {error}"))?;
        if written.role == Role::Assistant {
            self.last_assistant = Some(written.id);
        }
        Ok(())
    }

    /// Books usage on the turn's last assistant row; a turn that wrote none books nothing.
    async fn record_usage(&mut self, usage: TurnUsage) -> Result<(), String> {
        self.committed().await?;
        let Some(message_id) = self.last_assistant.clone() else {
            return Ok(());
        };
        let id = self.conversation_id.clone();
        blocking(&self.store, move |store| {
            store.record_usage(&id, &message_id, &usage)
        })
        .await
        .map_err(|error| format!("AI runtime error: {error}"))?;
        self.booked.prompt_tokens += usage.prompt_tokens;
        self.booked.completion_tokens += usage.completion_tokens;
        self.booked.cost_usd += usage.cost_usd;
        self.meter.booked(&usage);
        Ok(())
    }

    async fn emit(&mut self, event: LoopEvent) {
        if self.consumer_gone {
            return;
        }
        let answer = matches!(event, LoopEvent::Text { .. } | LoopEvent::ToolCall { .. });
        if self.out.send(event).await.is_err() {
            self.consumer_gone = true;
        } else if answer {
            self.meter.answer_sent();
        }
    }

    async fn flush_text(&mut self) -> Result<(), String> {
        if self.text.is_empty() {
            return Ok(());
        }
        let text = std::mem::take(&mut self.text);
        self.append(NewMessage {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text }],
            tool_call: None,
        })
        .await
    }

    /// Persists and forwards one event; `Some` when it ends the turn.
    async fn handle(&mut self, mut event: LoopEvent) -> Option<Ending> {
        if let LoopEvent::Usage {
            prompt_tokens,
            completion_tokens,
            cost_usd,
            cache_read_tokens,
            cache_creation_tokens,
            provider_cost_usd,
        } = &mut event
        {
            // The wire carries the booked cost: the provider's own price when it reports one
            // (OpenRouter), else the catalogue's price of the turn's tokens.
            *cost_usd = match (*provider_cost_usd, &self.pricing) {
                (Some(native), _) => native,
                (None, Some(priced)) => {
                    let tokens = BilledTokens {
                        prompt: *prompt_tokens,
                        completion: *completion_tokens,
                        cache_read: cache_read_tokens.unwrap_or(0),
                        cache_creation: cache_creation_tokens.unwrap_or(0),
                    };
                    priced
                        .pricing
                        .cost_usd(priced.provider, &priced.model_id, tokens)
                        .await
                }
                (None, None) => 0.0,
            };
        }
        let persisted = match &event {
            LoopEvent::Text { text } => {
                self.text.push_str(text);
                Ok(())
            }
            LoopEvent::ToolCall {
                tool_call_id,
                tool_name,
                input,
                ..
            } => {
                let call = ToolCallRef {
                    id: tool_call_id.clone(),
                    name: tool_name.clone(),
                };
                let block = ContentBlock::ToolCall {
                    tool_call_id: tool_call_id.clone(),
                    tool_name: tool_name.clone(),
                    input: input.clone(),
                };
                let written = match self.flush_text().await {
                    Ok(()) => {
                        self.append(NewMessage {
                            role: Role::Assistant,
                            content: vec![block],
                            tool_call: Some(call.clone()),
                        })
                        .await
                    }
                    Err(error) => Err(error),
                };
                if written.is_ok() {
                    self.pending.push(call);
                }
                written
            }
            LoopEvent::ToolResult {
                tool_call_id,
                tool_name,
                ok,
                error,
            } => {
                self.pending.retain(|call| call.id != *tool_call_id);
                self.append(tool_row(tool_call_id, tool_name, *ok, error.as_deref()))
                    .await
            }
            LoopEvent::Usage {
                prompt_tokens,
                completion_tokens,
                cost_usd,
                cache_read_tokens,
                cache_creation_tokens,
                ..
            } => {
                let usage = TurnUsage {
                    prompt_tokens: clamp(*prompt_tokens),
                    completion_tokens: clamp(*completion_tokens),
                    cost_usd: *cost_usd,
                    cache_read_tokens: clamp(cache_read_tokens.unwrap_or(0)),
                    cache_creation_tokens: clamp(cache_creation_tokens.unwrap_or(0)),
                    context_tokens: clamp(self.latest_context.unwrap_or(*prompt_tokens)),
                };
                match self.flush_text().await {
                    Ok(()) => self.record_usage(usage).await,
                    Err(error) => Err(error),
                }
            }
            LoopEvent::Context { context_tokens, .. } => {
                self.latest_context = Some(*context_tokens);
                Ok(())
            }
            LoopEvent::Done => return Some(Ending::Done),
            LoopEvent::Error { message } => return Some(Ending::Error(message.clone())),
            LoopEvent::BridgeReady { .. } | LoopEvent::ToolRequest { .. } => Ok(()),
        };
        if let Err(message) = persisted {
            return Some(Ending::Error(message));
        }
        self.emit(event).await;
        if self.consumer_gone {
            return Some(Ending::Aborted);
        }
        None
    }

    /// Flushes text, closes every unanswered call as interrupted, and ends the stream.
    async fn finish(mut self, mut ending: Ending) {
        if let Err(error) = self.committed().await {
            tracing::error!(%error, "the user message was not stored");
            ending = Ending::Error(error);
        }
        if let Err(error) = self.flush_text().await {
            tracing::error!(%error, "flushing assistant text failed");
        }
        for call in std::mem::take(&mut self.pending) {
            let row = tool_row(
                &call.id,
                &call.name,
                false,
                Some(INTERRUPTED_TOOL_RESULT_ERROR),
            );
            if let Err(error) = self.append(row).await {
                tracing::error!(%error, tool_call_id = call.id, "persisting an interrupted call failed");
            }
            self.emit(LoopEvent::ToolResult {
                tool_call_id: call.id,
                tool_name: call.name,
                ok: false,
                error: Some(INTERRUPTED_TOOL_RESULT_ERROR.to_owned()),
            })
            .await;
        }
        // Recorded before the last line: a client that saw the turn end can read its record.
        self.record_end(&ending).await;
        self.meter.ended(match ending {
            Ending::Done => TurnOutcome::Done,
            Ending::Error(_) => TurnOutcome::Error,
            Ending::Aborted => TurnOutcome::Cancelled,
        });
        match ending {
            Ending::Done | Ending::Aborted => self.emit(LoopEvent::Done).await,
            Ending::Error(message) => self.emit(LoopEvent::Error { message }).await,
        }
    }

    /// Records how a turn whose start was recorded ended, retrying a failed write a few
    /// times; a turn that still has no end is recorded as failed at the next start.
    async fn record_end(&mut self, ending: &Ending) {
        let Some(turn) = self.started.take() else {
            return;
        };
        let totals = self.booked;
        let event = match ending {
            // A turn its editor stopped (or whose page went away) ended as they asked: the CMS
            // records it completed, with what it booked, and so does chatd. Its metrics count
            // it as cancelled.
            Ending::Done | Ending::Aborted => AuditEvent::ChatCompleted { turn, totals },
            Ending::Error(message) => AuditEvent::ChatFailed {
                turn,
                totals,
                error: message.clone(),
            },
        };
        for attempt in 1..=END_RECORD_ATTEMPTS {
            match crate::audit::try_record(&self.store, &self.actor, event.clone()).await {
                Ok(()) => return,
                Err(error) if attempt < END_RECORD_ATTEMPTS => {
                    tracing::warn!(%error, attempt, "recording a turn's end failed; retrying");
                    tokio::time::sleep(END_RECORD_RETRY_DELAY * attempt).await;
                }
                Err(error) => {
                    tracing::error!(%error, conversation_id = %self.conversation_id, "recording a turn's end failed; the next start records it as failed");
                }
            }
        }
    }
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn tool_row(tool_call_id: &str, tool_name: &str, ok: bool, error: Option<&str>) -> NewMessage {
    let error = (!ok).then(|| error.unwrap_or(atelier_llm::TOOL_CALL_FAILED).to_owned());
    NewMessage {
        role: Role::Tool,
        content: vec![ContentBlock::ToolResult { ok, error }],
        tool_call: Some(ToolCallRef {
            id: tool_call_id.to_owned(),
            name: tool_name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn text(t: &str) -> UserBlock {
        UserBlock::Text { text: t.into() }
    }

    fn image(mime: &str, len: usize) -> UserBlock {
        UserBlock::Image {
            mime_type: mime.into(),
            data: "A".repeat(len),
        }
    }

    #[test]
    fn content_follows_the_schema() {
        assert!(validate_content(vec![text("hi")]).is_ok());
        assert!(validate_content((0..8).map(|_| image("image/jpeg", 4)).collect()).is_ok());
        let mut nine = vec![text("x")];
        nine.extend((0..8).map(|_| image("image/jpeg", 4)));
        assert!(validate_content(nine).is_ok());
        let refused: Vec<(&str, Vec<UserBlock>)> = vec![
            ("empty", vec![]),
            ("two texts", vec![text("a"), text("b")]),
            (
                "nine images",
                (0..9).map(|_| image("image/jpeg", 4)).collect(),
            ),
            ("png", vec![image("image/png", 4)]),
            ("short data", vec![image("image/jpeg", 3)]),
            (
                "long data",
                vec![image("image/jpeg", MAX_IMAGE_DATA_LEN + 1)],
            ),
        ];
        for (name, blocks) in refused {
            assert_eq!(
                validate_content(blocks).err(),
                Some(ApiError::InvalidBody),
                "{name}"
            );
        }
    }

    #[test]
    fn auto_titles_collapse_cut_and_name_images() {
        let t = |s: &str| vec![ContentBlock::Text { text: s.into() }];
        assert_eq!(auto_title(&t("  hello \n  world ")), "hello world");
        let long = format!("{} tail", "a".repeat(59));
        assert_eq!(auto_title(&t(&long)), format!("{}…", "a".repeat(59)));
        let img = ContentBlock::Image {
            mime_type: "image/jpeg".into(),
            data: "AAAA".into(),
        };
        assert_eq!(auto_title(std::slice::from_ref(&img)), "Image");
        assert_eq!(auto_title(&[img.clone(), img]), "Images");
    }
}
