//! The multi-round tool loop: stream a provider round, run the calls it issued, answer them,
//! and go again until the model stops calling tools, fails, or the consumer goes away.
//!
//! The loop writes the turn's stream as [`LoopEvent`]s (already the NDJSON wire lines the
//! browser reads) into an [`EventSink`]: a bounded or unbounded tokio [`mpsc`] sender, or
//! the caller's own. Between `bridgeReady` (the runner's)
//! and the terminal line, a turn's lines are, in order:
//!
//! 1. per provider round: `text` deltas and a `toolCall` per call as each completes in the
//!    stream; then `context` with the round's own usage (if reported); then, for each call in
//!    order, the executor's own `toolRequest` (browser tools, sent by the bridge through a clone
//!    of the sender) and the loop's `toolResult`;
//! 2. on a clean end: the summed `usage`, a failed `toolResult` for any call announced but
//!    never answered (an Anthropic `max_tokens` stop), then `done`;
//! 3. on a provider error: a failed `toolResult` (interrupted) for every unanswered call, then
//!    `error`, with no `usage` (the reference loses those tokens too);
//! 4. on a rejected browser call: its failed `toolResult`, the summed `usage`, interrupted
//!    results for the round's remaining calls, then `error`;
//! 5. on reaching [`LoopOptions::max_rounds`] with calls still issued: a failed `toolResult`
//!    per unrun call, the summed `usage`, then `error`.
//!
//! Abort: when the sink closes (the receiver is dropped), the loop notices at its next send or while it awaits
//! the provider or a tool, drops the provider stream (which cancels the HTTP request) and
//! returns [`LoopEnd::Aborted`] without writing more. Dropping the loop's future does the same.
//! Whatever ends a turn, the outcome's history answers every call its last assistant message
//! made (those that did not run as interrupted), so it stays a history a provider accepts.
//!
//! Retry: a round that failed transiently ([`LlmError::is_transient`]) before sending anything
//! is asked again after each of [`LoopOptions::retry_delays`] in turn, the sink told first
//! ([`EventSink::retrying`]). The chat runtime gives none, as the original did.

mod event;
mod evidence;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::driver::Driver;
use crate::error::LlmError;
use crate::types::{
    ChatRequest, ContentBlock, Message, Role, RoundEnd, StreamEvent, ToolCall, ToolChoice,
    ToolResult, Usage,
};

pub use event::{LoopEvent, ToolCallStatus};
pub use evidence::{
    elide_historical_user_images, elided_result, is_heavy, prepare_call, HEAVY_TOOL_NAMES,
    HISTORICAL_IMAGES_OMITTED, SCREENSHOT_TOOL,
};

use evidence::HeavyEvidence;

/// The error text of a call that was announced but never answered.
pub const INTERRUPTED_TOOL_RESULT_ERROR: &str =
    "Tool call did not complete — the previous turn was interrupted before a result was produced.";

/// The default [`LoopOptions::max_rounds`]. The original server had no limit; this one only
/// stops a model that never stops calling tools.
pub const DEFAULT_MAX_ROUNDS: u32 = 64;

/// Why a tool call could not be carried out at all (as opposed to a tool that ran and
/// failed, which is an `ok: false` [`ToolResult`] the model can correct). For a browser tool it
/// ends the turn; the reference's reasons are the bridge's timeout, abort and teardown texts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ToolRejection {
    /// What went wrong, e.g. `Browser tool "site_add_node" result timed out.`
    pub reason: String,
}

impl ToolRejection {
    /// A rejection for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        ToolRejection {
            reason: reason.into(),
        }
    }
}

/// Runs the model's tool calls: the server-side tools in process and the browser tools through
/// the bridge. Unknown tools, invalid input and refused permissions are the executor's to
/// answer as failed results (the reference says `Unknown tool: <name>`).
pub trait ToolExecutor: Send + Sync {
    /// Runs `call` and returns its outcome; `call.arguments` already carries the loop's
    /// additions ([`prepare_call`]). The loop sets the result's `call_id` to `call.id`.
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>>;

    /// Whether `name` runs in the browser, where a [`ToolRejection`] is a transport failure
    /// that ends the turn. A rejection of any other tool is fed back to the model as a failed
    /// result, as a throwing server handler is in the reference.
    fn is_browser_tool(&self, _name: &str) -> bool {
        false
    }

    /// Runs `call`, or says why it could not be run at all. The default never rejects; the
    /// bridge executor overrides it to report timeouts, aborts and teardown.
    fn execute_or_reject<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = Result<ToolResult, ToolRejection>> + Send + 'a>> {
        Box::pin(async move { Ok(self.execute(call).await) })
    }
}

/// The consumer of a turn's events is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the consumer of the chat events is gone")]
pub struct SinkClosed;

/// Where the loop writes a turn's events. A failed send, or [`EventSink::closed`] resolving,
/// means the consumer is gone, and the loop aborts. Implemented for tokio's bounded and
/// unbounded senders of [`LoopEvent`]; the browser bridge sends its `toolRequest` lines into
/// the same channel through its own clone, so they land between the call and its result.
pub trait EventSink: Send + Sync {
    /// Delivers `event`, waiting for room if the sink is bounded.
    fn send<'a>(
        &'a self,
        event: LoopEvent,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkClosed>> + Send + 'a>>;

    /// Resolves once the consumer is gone; the loop races every wait against it.
    fn closed<'a>(&'a self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

    /// The round failed with `error` before sending anything, and is asked again after
    /// `delay`. Nothing is sent by default: the browser's wire has no line for it.
    fn retrying(&self, _error: &LlmError, _delay: Duration) {}
}

impl EventSink for mpsc::Sender<LoopEvent> {
    fn send<'a>(
        &'a self,
        event: LoopEvent,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkClosed>> + Send + 'a>> {
        Box::pin(async move {
            mpsc::Sender::send(self, event)
                .await
                .map_err(|_| SinkClosed)
        })
    }

    fn closed<'a>(&'a self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(mpsc::Sender::closed(self))
    }
}

impl EventSink for mpsc::UnboundedSender<LoopEvent> {
    fn send<'a>(
        &'a self,
        event: LoopEvent,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkClosed>> + Send + 'a>> {
        Box::pin(std::future::ready(
            mpsc::UnboundedSender::send(self, event).map_err(|_| SinkClosed),
        ))
    }

    fn closed<'a>(&'a self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(mpsc::UnboundedSender::closed(self))
    }
}

/// How one turn's loop behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopOptions {
    /// The most provider rounds one turn may take; a round that still issues calls at the
    /// limit ends the turn with an error instead of running them.
    pub max_rounds: u32,
    /// Whether the model can see images in tool results (the model's `visionInput &&
    /// toolResultImages`): the value of `captureScreenshot` on [`SCREENSHOT_TOOL`] calls.
    pub tool_result_images: bool,
    /// The pauses before asking again for a round that failed transiently before sending
    /// anything: one more attempt per entry, counted afresh for every round. Empty: the first
    /// failure ends the turn.
    pub retry_delays: Vec<Duration>,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            max_rounds: DEFAULT_MAX_ROUNDS,
            tool_result_images: false,
            retry_delays: Vec::new(),
        }
    }
}

/// Why a turn failed; `Display` is the message of its `error` line.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LoopError {
    /// The provider refused or broke off a round.
    #[error("{0}")]
    Provider(#[from] LlmError),
    /// The browser could not run a tool (the bridge rejected the call).
    #[error("Browser tool transport failed: {reason}")]
    BrowserTransport {
        /// The tool.
        tool: String,
        /// The bridge's reason.
        reason: String,
    },
    /// The model was still calling tools after [`LoopOptions::max_rounds`] rounds.
    #[error(
        "The assistant was still calling tools after {rounds} rounds, so this turn was stopped. \
         Send a message to let it continue."
    )]
    RoundLimit {
        /// The limit that was reached.
        rounds: u32,
    },
}

/// How a turn ended.
#[derive(Clone, Debug, PartialEq)]
pub enum LoopEnd {
    /// The model stopped calling tools; `usage` and `done` were sent.
    Completed,
    /// The turn failed; its `error` line was sent.
    Failed(LoopError),
    /// The consumer went away; nothing more was sent.
    Aborted,
}

/// What a turn did, for the runner's bookkeeping (the events already told the client).
#[derive(Clone, Debug, PartialEq)]
pub struct LoopOutcome {
    /// How it ended.
    pub end: LoopEnd,
    /// Provider rounds that finished (the overflow retry's refused attempt is not one).
    pub rounds: u32,
    /// Usage summed over the finished rounds; `cost_usd` sums the rounds that reported one.
    pub usage: Usage,
    /// The working history at the end: the request's messages (projected if the overflow
    /// retry ran) plus this turn's assistant and tool messages, stale heavy results elided. A
    /// completed turn's last answer is its last message.
    pub history: Vec<Message>,
    /// The provider's stop reason for the last round that finished, as it said it (e.g.
    /// Anthropic's `max_tokens`, chat completions' `length`, Responses' `incomplete`).
    pub stop_reason: Option<String>,
}

/// Runs one chat turn from `request` (system, history ending with the user's message, tools)
/// until the model stops calling tools, a round fails, [`LoopOptions::max_rounds`] is reached,
/// or the `events` sink closes. See the module docs for the exact event order.
///
/// A round the provider refuses as an overflow ([`LlmError::is_overflow`]) before any round
/// has finished is retried once, silently, with older user images turned into breadcrumbs
/// ([`elide_historical_user_images`]), if that projection changes anything.
pub async fn run_tool_loop(
    driver: &dyn Driver,
    executor: &dyn ToolExecutor,
    request: ChatRequest,
    options: LoopOptions,
    events: &dyn EventSink,
) -> LoopOutcome {
    let mut turn = Turn {
        driver,
        executor,
        events,
        options,
        request,
        rounds: 0,
        usage: Usage::default(),
        unanswered: Vec::new(),
        stop_reason: None,
    };
    let end = match turn.run().await {
        Ok(()) => LoopEnd::Completed,
        Err(Stop::Failed(error)) => LoopEnd::Failed(error),
        Err(Stop::Aborted) => LoopEnd::Aborted,
    };
    LoopOutcome {
        end,
        rounds: turn.rounds,
        usage: turn.usage,
        history: turn.request.messages,
        stop_reason: turn.stop_reason,
    }
}

/// Why the turn stopped early.
enum Stop {
    /// The consumer is gone.
    Aborted,
    /// The turn failed; its error line was sent.
    Failed(LoopError),
}

/// How one provider round went.
enum Round {
    Finished(RoundEnd),
    /// The round failed; `quiet` when it had sent nothing yet.
    Failed {
        error: LlmError,
        quiet: bool,
    },
}

struct Turn<'a> {
    driver: &'a dyn Driver,
    executor: &'a dyn ToolExecutor,
    events: &'a dyn EventSink,
    options: LoopOptions,
    request: ChatRequest,
    rounds: u32,
    usage: Usage,
    /// Calls announced with a `toolCall` line and not yet answered, as (id, name).
    unanswered: Vec<(String, String)>,
    /// The last finished round's stop reason.
    stop_reason: Option<String>,
}

impl Turn<'_> {
    async fn run(&mut self) -> Result<(), Stop> {
        let mut overflow_retried = false;
        let mut retries = 0;
        let mut evidence = HeavyEvidence::default();
        let mut names: HashMap<String, String> = HashMap::new();
        loop {
            let end = match self.round().await? {
                Round::Finished(end) => end,
                Round::Failed { error, quiet } => {
                    if quiet && self.rounds == 0 && !overflow_retried && error.is_overflow() {
                        overflow_retried = true;
                        if elide_historical_user_images(&mut self.request.messages) {
                            tracing::info!(
                                "provider overflow; retrying once without older user images"
                            );
                            continue;
                        }
                    }
                    if let Some(delay) = self.options.retry_delays.get(retries).copied() {
                        if quiet && error.is_transient() {
                            retries += 1;
                            self.pause(&error, delay).await?;
                            continue;
                        }
                    }
                    return Err(self.fail(LoopError::Provider(error)).await);
                }
            };
            self.rounds += 1;
            retries = 0;
            self.stop_reason.clone_from(&end.stop_reason);
            if let Some(usage) = end.usage {
                self.usage.add(&usage);
                let context = LoopEvent::Context {
                    prompt_tokens: usage.input_tokens,
                    cache_read_tokens: usage.cache_read_tokens,
                    cache_creation_tokens: usage.cache_write_tokens,
                    context_tokens: self.driver.context_tokens(&usage),
                };
                self.emit(context).await?;
            }
            if end.stop || end.tool_calls.is_empty() {
                self.emit(self.usage_event()).await?;
                self.answer_unanswered(INTERRUPTED_TOOL_RESULT_ERROR)
                    .await?;
                self.keep_last_answer(end);
                self.emit(LoopEvent::Done).await?;
                return Ok(());
            }
            if self.rounds >= self.options.max_rounds {
                let error = LoopError::RoundLimit {
                    rounds: self.options.max_rounds,
                };
                let not_run = format!(
                    "Tool call was not run: the turn reached its limit of {} rounds.",
                    self.options.max_rounds
                );
                self.answer_unanswered(&not_run).await?;
                self.emit(self.usage_event()).await?;
                self.emit(LoopEvent::Error {
                    message: error.to_string(),
                })
                .await?;
                return Err(Stop::Failed(error));
            }
            if let Some(assistant) = end.assistant {
                self.request.messages.push(assistant);
            }
            let mut results = Vec::with_capacity(end.tool_calls.len());
            let ran = self
                .run_calls(&end.tool_calls, &mut names, &mut results)
                .await;
            // The calls that did not run (the turn stopped among them) are answered too.
            results.extend(interrupted_results(&end.tool_calls[results.len()..]));
            self.request.messages.push(Message {
                role: Role::Tool,
                content: results,
            });
            ran?;
            let index = self.request.messages.len() - 1;
            evidence.record(&mut self.request.messages, index, &names);
            // A forced call has been made and answered; forcing it again would call it every
            // round until the round limit, so the model chooses from here on.
            if matches!(
                self.request.tool_choice,
                ToolChoice::Required | ToolChoice::Function(_)
            ) {
                self.request.tool_choice = ToolChoice::Auto;
            }
        }
    }

    /// Runs `calls` in order, sending each result as it comes and keeping it in `results`,
    /// until they all ran or the turn stops.
    async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        names: &mut HashMap<String, String>,
        results: &mut Vec<ContentBlock>,
    ) -> Result<(), Stop> {
        for call in calls {
            names.insert(call.id.clone(), call.name.clone());
            let result = self.execute(call).await?;
            self.answered(&call.id);
            let line = LoopEvent::tool_result(&call.name, &result);
            results.push(ContentBlock::ToolResult(result));
            self.emit(line).await?;
        }
        Ok(())
    }

    /// Tells the sink a failed round is asked again, and waits `delay` (or until the
    /// consumer goes).
    async fn pause(&self, error: &LlmError, delay: Duration) -> Result<(), Stop> {
        tracing::info!(%error, ?delay, "a transient provider failure; asking again");
        self.events.retrying(error, delay);
        tokio::select! {
            biased;
            () = self.events.closed() => Err(Stop::Aborted),
            () = tokio::time::sleep(delay) => Ok(()),
        }
    }

    /// Streams one provider round, sending its text and announced calls as they come.
    async fn round(&mut self) -> Result<Round, Stop> {
        let mut stream = self.driver.stream(&self.request);
        let mut quiet = true;
        loop {
            let item = tokio::select! {
                biased;
                () = self.events.closed() => return Err(Stop::Aborted),
                item = stream.next() => item,
            };
            match item {
                Some(Ok(StreamEvent::TextDelta(text))) => {
                    quiet = false;
                    self.emit(LoopEvent::Text { text }).await?;
                }
                Some(Ok(StreamEvent::ToolCallCompleted(call))) => {
                    quiet = false;
                    self.unanswered.push((call.id.clone(), call.name.clone()));
                    self.emit(LoopEvent::tool_call(&call)).await?;
                }
                Some(Ok(StreamEvent::Finished(end))) => return Ok(Round::Finished(end)),
                Some(Ok(
                    StreamEvent::ToolCallStarted { .. }
                    | StreamEvent::ToolCallArgumentsDelta { .. },
                )) => {}
                Some(Err(error)) => return Ok(Round::Failed { error, quiet }),
                None => {
                    let error = LlmError::Stream {
                        label: self.driver.label(),
                        detail: "the stream ended before the round finished".to_owned(),
                    };
                    return Ok(Round::Failed { error, quiet });
                }
            }
        }
    }

    /// Runs one call; a browser tool's rejection ends the turn.
    async fn execute(&mut self, call: &ToolCall) -> Result<ToolResult, Stop> {
        let prepared = prepare_call(call, self.options.tool_result_images);
        let outcome = tokio::select! {
            biased;
            () = self.events.closed() => return Err(Stop::Aborted),
            outcome = self.executor.execute_or_reject(&prepared) => outcome,
        };
        match outcome {
            Ok(mut result) => {
                result.call_id.clone_from(&call.id);
                Ok(result)
            }
            Err(rejection) if self.executor.is_browser_tool(&call.name) => {
                let failed = ToolResult::failed(&call.id, rejection.reason.clone());
                self.answered(&call.id);
                self.emit(LoopEvent::tool_result(&call.name, &failed))
                    .await?;
                self.emit(self.usage_event()).await?;
                let error = LoopError::BrowserTransport {
                    tool: call.name.clone(),
                    reason: rejection.reason,
                };
                Err(self.fail(error).await)
            }
            Err(rejection) => Ok(ToolResult::failed(&call.id, rejection.reason)),
        }
    }

    /// Answers every unanswered call as interrupted, then sends the error line.
    async fn fail(&mut self, error: LoopError) -> Stop {
        if let Err(stop) = self.answer_unanswered(INTERRUPTED_TOOL_RESULT_ERROR).await {
            return stop;
        }
        let message = error.to_string();
        match self.emit(LoopEvent::Error { message }).await {
            Ok(()) => Stop::Failed(error),
            Err(stop) => stop,
        }
    }

    /// Sends a failed `toolResult` with `error` for every call still unanswered.
    async fn answer_unanswered(&mut self, error: &str) -> Result<(), Stop> {
        for (id, name) in std::mem::take(&mut self.unanswered) {
            self.emit(LoopEvent::ToolResult {
                tool_call_id: id,
                tool_name: name,
                ok: false,
                error: Some(error.to_owned()),
            })
            .await?;
        }
        Ok(())
    }

    /// The last round's answer joins the history, so the outcome holds the whole turn for the
    /// next one to continue. Calls it issued but that were never run (a `max_tokens` stop) are
    /// answered there as interrupted, as their `toolResult` lines said, so the history stays
    /// one a provider accepts.
    fn keep_last_answer(&mut self, end: RoundEnd) {
        let Some(assistant) = end.assistant else {
            return;
        };
        // An answer of whitespace only says nothing, and a provider refuses a text block of it
        // in the next turn's request.
        let blank = |block: &ContentBlock| matches!(block, ContentBlock::Text { text } if text.trim().is_empty());
        if assistant.content.iter().all(blank) {
            return;
        }
        self.request.messages.push(assistant);
        if end.tool_calls.is_empty() {
            return;
        }
        self.request.messages.push(Message {
            role: Role::Tool,
            content: interrupted_results(&end.tool_calls).collect(),
        });
    }

    fn answered(&mut self, id: &str) {
        self.unanswered.retain(|(pending, _)| pending != id);
    }

    /// The terminal `usage` line: zero cache buckets omitted, the provider's cost or 0.
    fn usage_event(&self) -> LoopEvent {
        let nonzero = |bucket: Option<u64>| bucket.filter(|tokens| *tokens > 0);
        LoopEvent::Usage {
            prompt_tokens: self.usage.input_tokens,
            completion_tokens: self.usage.output_tokens,
            cost_usd: self.usage.cost_usd.unwrap_or(0.0),
            cache_read_tokens: nonzero(self.usage.cache_read_tokens),
            cache_creation_tokens: nonzero(self.usage.cache_write_tokens),
            provider_cost_usd: self.usage.cost_usd,
        }
    }

    async fn emit(&self, event: LoopEvent) -> Result<(), Stop> {
        self.events.send(event).await.map_err(|_| Stop::Aborted)
    }
}

/// Results answering each of `calls` as interrupted.
fn interrupted_results(calls: &[ToolCall]) -> impl Iterator<Item = ContentBlock> + '_ {
    calls.iter().map(|call| {
        ContentBlock::ToolResult(ToolResult::failed(&call.id, INTERRUPTED_TOOL_RESULT_ERROR))
    })
}
