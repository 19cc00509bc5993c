//! One turn, start to end: open the workspace and the conversation, ask the MCP server (when
//! one is named) for its tools, run the shared tool loop against the provider with the tools,
//! save the conversation, and write the last line.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_llm::{
    run_tool_loop, AnthropicDriver, ChatCompletionsDriver, ChatRequest, Driver, Endpoint, LlmError,
    LoopEnd, LoopError, LoopOptions, LoopOutcome, Message, ResponsesDriver, Role, SinkClosed,
    ToolCall, ToolChoice, ToolExecutor, ToolResult,
};

use crate::cli::{McpServer, Provider, Settings, API_KEY_ENV};
use crate::conversation::{Conversation, Conversations, ResumeToken, StoreError};
use crate::events::{FailureReason, Line, Output, Stop, Usage};
use crate::prompt::{read_brief, system_prompt, BRIEF_FILE};
use crate::tools::{RemoteTools, Tools, Workspace};

/// How the agent names itself to the provider.
const USER_AGENT: &str = concat!("atelier-agent/", env!("CARGO_PKG_VERSION"));

/// The pauses before asking the provider again for a round that failed transiently (a rate
/// limit, an overloaded or failing service, a dropped connection) before it said anything: a
/// busy provider often answers a few seconds later, and a turn is worth the wait.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(2),
    Duration::from_secs(10),
    Duration::from_secs(30),
];

/// A turn that failed before or after the loop, as its `error` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The stable code.
    pub reason: FailureReason,
    /// The message.
    pub message: String,
    /// The token of the conversation saved so far, if it was saved.
    pub resume: Option<String>,
}

impl Failure {
    fn new(reason: FailureReason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
            resume: None,
        }
    }

    /// The failure as its output line.
    pub fn line(&self) -> Line {
        Line::Error {
            reason: self.reason,
            message: self.message.clone(),
            resume: self.resume.clone(),
        }
    }
}

/// How a turn ended, for the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The `result` line was written.
    Done,
    /// The turn failed; its `error` line is to be written.
    Failed(Failure),
    /// stdout went away; nothing more can be said.
    OutputClosed,
}

/// Runs one turn in the workspace `workspace_dir` with `settings`, writing to `output`.
/// `started` is when the process began, for the result's duration.
pub async fn run(
    settings: Settings,
    workspace_dir: &Path,
    output: Arc<Output>,
    started: Instant,
) -> Ended {
    // From here a stop ends the turn through the loop, which keeps the conversation so far.
    if let Err(e) = listen_for_stop(Arc::clone(&output)) {
        return Ended::Failed(Failure::new(
            FailureReason::Usage,
            format!("the stop signals' handler: {e}"),
        ));
    }
    let setup = match Setup::prepare(&settings, workspace_dir) {
        Ok(setup) => setup,
        Err(failure) => return Ended::Failed(failure),
    };
    let Setup {
        mut tools,
        brief,
        conversations,
        token,
        mut messages,
    } = setup;
    messages.push(Message::user_text(settings.prompt.clone()));
    // Saved before anything can take time, so a turn that never reaches its last line (a stop,
    // a kill) leaves a conversation its token resumes; the start line names the token.
    let opening = Conversation::new(
        settings.provider.as_str(),
        &settings.model,
        messages.clone(),
    );
    if let Err(error) = conversations.save(&token, &opening) {
        return Ended::Failed(Failure::new(
            FailureReason::StateUnavailable,
            error.to_string(),
        ));
    }
    let start = Line::Start {
        resume: token.to_string(),
    };
    if output.line(&start).is_err() {
        return Ended::OutputClosed;
    }
    if let Some(server) = &settings.mcp {
        if offer_remote(server, &mut tools, &output).await.is_err() {
            return Ended::OutputClosed;
        }
    }
    let request = ChatRequest {
        model: settings.model.clone(),
        system: system_prompt(tools.definitions(), brief.as_deref()),
        messages,
        tools: tools.definitions().to_vec(),
        max_tokens: settings.max_output_tokens,
        scope: None,
        tool_choice: ToolChoice::Auto,
    };
    let driver = match driver(&settings) {
        Ok(driver) => driver,
        Err(failure) => return Ended::Failed(failure),
    };
    let executor = Executor {
        tools,
        output: Arc::clone(&output),
    };
    let outcome = converse(
        driver.as_ref(),
        &executor,
        request,
        settings.max_turns,
        &output,
    )
    .await;

    let conversation =
        Conversation::new(settings.provider.as_str(), &settings.model, outcome.history);
    let saved = conversations.save(&token, &conversation);

    let stop = match outcome.end {
        LoopEnd::Completed if cut_at_output_limit(outcome.stop_reason.as_deref()) => {
            Stop::MaxTokens
        }
        LoopEnd::Completed => Stop::EndTurn,
        LoopEnd::Failed(LoopError::RoundLimit { .. }) => Stop::MaxTurns,
        LoopEnd::Failed(error) => {
            return Ended::Failed(Failure {
                reason: FailureReason::Provider,
                message: failure_message(&error),
                resume: saved.is_ok().then(|| token.to_string()),
            })
        }
        LoopEnd::Aborted if output.stop_requested() => {
            let message = match &saved {
                Ok(()) => "the turn was stopped before it finished; the conversation so far is \
                           saved"
                    .to_owned(),
                Err(error) => format!(
                    "the turn was stopped before it finished, and the conversation so far \
                     could not be saved: {error}"
                ),
            };
            return Ended::Failed(Failure {
                reason: FailureReason::Interrupted,
                message,
                resume: saved.is_ok().then(|| token.to_string()),
            });
        }
        LoopEnd::Aborted => return Ended::OutputClosed,
    };
    if let Err(error) = saved {
        return Ended::Failed(Failure::new(
            FailureReason::StateUnavailable,
            error.to_string(),
        ));
    }
    let result = Line::Result {
        stop,
        rounds: outcome.rounds,
        usage: Usage::from(&outcome.usage),
        cost_usd: outcome.usage.cost_usd,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        resume: token.to_string(),
    };
    match output.line(&result) {
        Ok(()) => Ended::Done,
        Err(_) => Ended::OutputClosed,
    }
}

/// Runs the tool loop on `request` for at most `max_rounds` rounds. When the provider refuses
/// the conversation as longer than its context, the older half of the exchanges before this
/// turn's prompt is left out (a `warning` line says so) and the loop runs on from where it
/// stopped, up to [`MAX_TRIMS`] times: a session that outgrew its model goes on rather than
/// failing every turn from then on. The outcome's rounds and usage are the runs' sums.
async fn converse(
    driver: &dyn Driver,
    executor: &Executor,
    mut request: ChatRequest,
    max_rounds: u32,
    output: &Output,
) -> LoopOutcome {
    let mut rounds = 0;
    let mut usage = atelier_llm::Usage::default();
    let mut trims = 0;
    loop {
        let options = LoopOptions {
            max_rounds: max_rounds.saturating_sub(rounds).max(1),
            tool_result_images: false,
            retry_delays: RETRY_DELAYS.to_vec(),
        };
        let mut outcome = run_tool_loop(driver, executor, request.clone(), options, output).await;
        rounds += outcome.rounds;
        usage.add(&outcome.usage);
        let overflowed = matches!(
            &outcome.end,
            LoopEnd::Failed(LoopError::Provider(error)) if is_context_overflow(error)
        );
        if overflowed && trims < MAX_TRIMS {
            if let Some(left_out) = leave_out_older_half(&mut outcome.history) {
                trims += 1;
                let warning = Line::Warning {
                    message: format!(
                        "the conversation is longer than the model's context, so its \
                         {left_out} oldest messages are left out from now on"
                    ),
                };
                if output.line(&warning).is_err() {
                    return LoopOutcome {
                        end: LoopEnd::Aborted,
                        rounds,
                        usage,
                        ..outcome
                    };
                }
                request.messages = outcome.history;
                continue;
            }
        }
        return LoopOutcome {
            rounds,
            usage,
            ..outcome
        };
    }
}

/// Whether a round's stop reason says its answer was cut at the output limit: Anthropic's
/// `max_tokens`, chat completions' `length`, Responses' `incomplete`.
fn cut_at_output_limit(stop_reason: Option<&str>) -> bool {
    matches!(stop_reason, Some("max_tokens" | "length" | "incomplete"))
}

/// How many times one turn leaves out older messages before it fails on an overflow.
const MAX_TRIMS: u32 = 3;

/// Whether `error` is the provider refusing the conversation as longer than its context: the
/// shared classification, and the refusals it does not class as one because the chat runtime's
/// original did not (Anthropic's `prompt is too long`, llama.cpp's `exceeds the available
/// context size`).
fn is_context_overflow(error: &LlmError) -> bool {
    match error {
        LlmError::Overflow { .. } => true,
        LlmError::Http {
            status: 400,
            message,
        } => ["prompt is too long", "exceeds the available context size"]
            .iter()
            .any(|said| message.contains(said)),
        _ => false,
    }
}

/// Leaves out the older half (rounded up) of the exchanges before the last user message (this
/// turn's prompt), an exchange being a user message and what followed it; how many messages
/// went, or `None` when there is nothing before the prompt to leave out.
fn leave_out_older_half(history: &mut Vec<Message>) -> Option<usize> {
    let starts: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, message)| message.role == Role::User)
        .map(|(index, _)| index)
        .collect();
    let older = starts.len().checked_sub(1).filter(|older| *older > 0)?;
    let keep_from = starts[older.div_ceil(2)];
    history.drain(..keep_from);
    Some(keep_from)
}

/// Stops the turn through `output` on the first SIGTERM (a stop or a timeout of the turn's
/// unit) or SIGINT. Once the handlers are in place neither signal ends the process itself.
fn listen_for_stop(output: Arc<Output>) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        output.stop();
    });
    Ok(())
}

/// What a turn needs before its first request, each part refused by name.
struct Setup {
    tools: Tools,
    brief: Option<String>,
    conversations: Conversations,
    token: ResumeToken,
    messages: Vec<Message>,
}

impl Setup {
    fn prepare(settings: &Settings, workspace_dir: &Path) -> Result<Setup, Failure> {
        let workspace = Workspace::open(workspace_dir).map_err(|e| {
            Failure::new(
                FailureReason::WorkspaceUnavailable,
                format!("the workspace: {e}"),
            )
        })?;
        let brief = read_brief(workspace.root())
            .map_err(|e| Failure::new(FailureReason::BriefRefused, format!("{BRIEF_FILE}: {e}")))?;
        let mut tools = Tools::new();
        tools
            .add(Arc::new(workspace))
            .map_err(|e| Failure::new(FailureReason::Usage, e.to_string()))?;
        let conversations = Conversations::open(&settings.state_dir)
            .map_err(|e| Failure::new(FailureReason::StateUnavailable, e.to_string()))?;
        let (token, messages) = match &settings.resume {
            Some(token) => {
                let conversation = conversations.load(token).map_err(|e| {
                    let reason = match e {
                        StoreError::NotFound(_) => FailureReason::ResumeNotFound,
                        _ => FailureReason::ResumeUnreadable,
                    };
                    Failure::new(reason, e.to_string())
                })?;
                (token.clone(), conversation.messages)
            }
            None => {
                let token = ResumeToken::fresh().map_err(|e| {
                    Failure::new(
                        FailureReason::StateUnavailable,
                        format!("a fresh resume token: {e}"),
                    )
                })?;
                (token, Vec::new())
            }
        };
        Ok(Setup {
            tools,
            brief,
            conversations,
            token,
            messages,
        })
    }
}

/// Offers the tools of the MCP server `server` beside the others. A server that cannot be
/// used (unreachable, an HTTP error, not MCP, too slow), or a tool of it that cannot be
/// offered, is a `warning` line: the turn goes on without. Fails only when the output is gone.
async fn offer_remote(
    server: &McpServer,
    tools: &mut Tools,
    output: &Output,
) -> Result<(), SinkClosed> {
    let warnings = match RemoteTools::connect(server.name.clone(), server.url.clone()).await {
        Ok((remote, mut warnings)) => {
            if let Err(error) = tools.add(Arc::new(remote)) {
                warnings.push(format!(
                    "the {} server's tools are not offered: {error}",
                    server.name
                ));
            }
            warnings
        }
        Err(error) => vec![format!(
            "the MCP server {} is unavailable, so its tools are not offered this turn: {error}",
            server.name
        )],
    };
    for message in warnings {
        output.line(&Line::Warning { message })?;
    }
    Ok(())
}

/// The provider's driver, over an HTTP client that takes its proxy from the environment
/// (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`): in the turn door, the gate's loopback forward is
/// the only way out.
fn driver(settings: &Settings) -> Result<Box<dyn Driver>, Failure> {
    let client = atelier_llm::provider_client_builder()
        .user_agent(USER_AGENT)
        .build()
        .map_err(|e| Failure::new(FailureReason::Usage, format!("the HTTP client: {e}")))?;
    let endpoint = Endpoint::new(client, settings.base_url.clone(), settings.api_key.clone());
    Ok(match settings.provider {
        Provider::Anthropic => Box::new(AnthropicDriver::new(endpoint)),
        Provider::OpenAi => Box::new(ResponsesDriver::openai(endpoint)),
        Provider::OpenRouter => Box::new(ResponsesDriver::openrouter(endpoint)),
        Provider::Ollama => Box::new(ChatCompletionsDriver::ollama(endpoint)),
        Provider::OpenAiCompatible => Box::new(ChatCompletionsDriver::openai_compatible(endpoint)),
    })
}

/// A failed loop's sentence for this agent's readers (the session, its operator): the loop's
/// own, except where that sentence is the chat runtime's and sends its reader to the CMS's
/// provider settings, which an agent does not have: its key is the one it was given.
fn failure_message(error: &LoopError) -> String {
    match error {
        LoopError::Provider(LlmError::Auth { label, status }) => format!(
            "{label} refused the API key (HTTP {status}): check the credential the agent was \
             given in {API_KEY_ENV}"
        ),
        LoopError::Provider(LlmError::MissingSetting { label, setting }) => {
            format!(
                "{label} requires {}, and the agent was given none",
                setting.needs()
            )
        }
        LoopError::Provider(LlmError::ResponseFailed { label }) => format!(
            "{label} said the response failed, giving no reason: check the agent's API key \
             and model"
        ),
        other => other.to_string(),
    }
}

/// Runs the model's calls through the tools, reporting each changed file as it changes.
struct Executor {
    tools: Tools,
    output: Arc<Output>,
}

impl ToolExecutor for Executor {
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>> {
        Box::pin(async move {
            match self.tools.call(&call.name, &call.arguments).await {
                Ok(output) => {
                    for change in output.changes {
                        // A closed output is the loop's to notice, at its next line.
                        let _ = self.output.line(&Line::FileChange {
                            path: change.path,
                            kind: change.kind,
                        });
                    }
                    ToolResult {
                        call_id: call.id.clone(),
                        ok: true,
                        data: Some(output.data),
                        error: None,
                        images: Vec::new(),
                    }
                }
                Err(error) => ToolResult::failed(&call.id, error.to_string()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use atelier_llm::Setting;

    use super::*;

    #[test]
    fn the_older_half_of_the_exchanges_before_the_prompt_is_left_out() {
        let user = |text: &str| Message::user_text(text);
        let answer = |text: &str| Message {
            role: Role::Assistant,
            content: vec![atelier_llm::ContentBlock::Text { text: text.into() }],
        };
        let texts = |history: &[Message]| -> Vec<String> {
            history
                .iter()
                .map(|m| match &m.content[0] {
                    atelier_llm::ContentBlock::Text { text } => text.clone(),
                    other => format!("{other:?}"),
                })
                .collect()
        };
        let mut history = vec![
            user("u1"),
            answer("a1"),
            user("u2"),
            answer("a2"),
            user("u3"),
            answer("a3"),
            user("now"),
            answer("working"),
        ];
        // Three older exchanges: two go (half, rounded up), then the last, then nothing more.
        assert_eq!(leave_out_older_half(&mut history), Some(4));
        assert_eq!(texts(&history), ["u3", "a3", "now", "working"]);
        assert_eq!(leave_out_older_half(&mut history), Some(2));
        assert_eq!(texts(&history), ["now", "working"]);
        assert_eq!(leave_out_older_half(&mut history), None);
        assert_eq!(texts(&history), ["now", "working"]);
        assert_eq!(leave_out_older_half(&mut Vec::new()), None);
    }

    #[test]
    fn context_overflow_table() {
        let http = |status, message: &str| LlmError::Http {
            status,
            message: message.to_owned(),
        };
        for (name, error, overflow) in [
            (
                "classified",
                atelier_llm::classify_http_failure("X", 413, ""),
                true,
            ),
            (
                "anthropic",
                http(
                    400,
                    "Anthropic error (400): prompt is too long: 208310 tokens > 200000 maximum.",
                ),
                true,
            ),
            (
                "llama.cpp",
                http(
                    400,
                    "Custom Provider error (400): the request exceeds the available context \
                     size, try increasing it.",
                ),
                true,
            ),
            ("another 400", http(400, "X error (400): bad field."), false),
            ("not a 400", http(500, "prompt is too long"), false),
            (
                "rate limit",
                LlmError::RateLimited {
                    status: 429,
                    message: "prompt is too long".into(),
                },
                false,
            ),
        ] {
            assert_eq!(is_context_overflow(&error), overflow, "{name}");
        }
    }

    #[test]
    fn failures_that_would_send_the_reader_to_the_cms_are_said_in_the_agents_words() {
        let provider = |error| LoopError::Provider(error);
        for (name, error, said) in [
            (
                "refused key",
                provider(LlmError::Auth {
                    label: "Anthropic",
                    status: 403,
                }),
                "Anthropic refused the API key (HTTP 403): check the credential the agent was \
                 given in AGENT_API_KEY",
            ),
            (
                "missing key",
                provider(LlmError::MissingSetting {
                    label: "OpenAI",
                    setting: Setting::ApiKey,
                }),
                "OpenAI requires an API key, and the agent was given none",
            ),
            (
                "missing base URL",
                provider(LlmError::MissingSetting {
                    label: "Custom Provider",
                    setting: Setting::BaseUrl,
                }),
                "Custom Provider requires a base URL, and the agent was given none",
            ),
            (
                "failed response",
                provider(LlmError::ResponseFailed {
                    label: "OpenRouter",
                }),
                "OpenRouter said the response failed, giving no reason: check the agent's API \
                 key and model",
            ),
            // Everything else is the loop's own sentence, which names no place to go.
            (
                "service error",
                provider(LlmError::Http {
                    status: 503,
                    message: "Ollama service error (503). Please try again.".to_owned(),
                }),
                "Ollama service error (503). Please try again.",
            ),
            (
                "round limit",
                LoopError::RoundLimit { rounds: 3 },
                "The assistant was still calling tools after 3 rounds, so this turn was \
                 stopped. Send a message to let it continue.",
            ),
        ] {
            let message = failure_message(&error);
            assert_eq!(message, said, "{name}");
            assert!(!message.contains("/admin/"), "{name}");
            if name.starts_with("refused") || name.starts_with("missing") {
                assert!(error.to_string().contains("/admin/ai/providers"), "{name}");
            }
        }
    }
}
