//! The production turn runner: the shared tool loop (`atelier_llm::run_tool_loop`) driving the
//! conversation's provider, with browser tools run through the turn's bridge.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use atelier_llm::{
    run_tool_loop, ChatRequest, ContentBlock as LlmBlock, Driver, Image, LoopEvent, LoopOptions,
    Message, ModelCapabilities, ProviderKind, Role as LlmRole, ToolCall, ToolDefinition,
    ToolExecutor, ToolRejection, ToolResult,
};

use crate::auth::{Caller, Capability};
use crate::bridge::Bridge;
use crate::chat::{check_capabilities, ModelRefusal, Preflight, Prepared, Turn, TurnRunner};
use crate::store::history::HistoryEntry;
use crate::store::{ContentBlock, Conversation, Scope};

/// Resolves the provider a conversation talks to: its driver and what its model can do.
/// Production chatd uses [`crate::providers::StoredProviders`] (the conversation's stored
/// credential); tests and benchmarks supply their own.
pub trait Providers: Send + Sync + 'static {
    /// The provider of `conversation` as `caller`, resolved before the turn is stored. The
    /// capabilities are looked up per turn — typically through an
    /// `atelier_llm::CapabilityResolver`, so cached, de-duplicated and fail-closed for
    /// vision. The future must not borrow `self`.
    fn prepare(&self, caller: &Caller, conversation: &Conversation) -> PrepareFuture;
}

/// A provider resolved for one turn.
#[derive(Clone)]
pub struct ProviderSetup {
    /// Which provider (it prices the turn's usage).
    pub kind: ProviderKind,
    /// The driver to run the turn on.
    pub driver: Arc<dyn Driver>,
    /// What the conversation's model can do.
    pub capabilities: ModelCapabilities,
}

/// Why a provider cannot be resolved for a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderRefusal {
    /// The conversation's credential is not the caller's, or is gone.
    CredentialNotFound,
    /// The credential cannot be used; the message says why.
    Unusable(String),
}

/// A provider resolution in flight (see [`Providers::prepare`]).
pub type PrepareFuture =
    Pin<Box<dyn Future<Output = Result<ProviderSetup, ProviderRefusal>> + Send + 'static>>;

/// Runs turns through the shared tool loop.
pub struct LoopRunner {
    providers: Arc<dyn Providers>,
    tools: Vec<(Scope, ToolDefinition)>,
    options: LoopOptions,
}

impl LoopRunner {
    /// A runner over `providers` offering each scope its `tools` (all run in the browser).
    pub fn new(providers: Arc<dyn Providers>, tools: Vec<(Scope, ToolDefinition)>) -> Self {
        Self {
            providers,
            tools,
            options: LoopOptions::default(),
        }
    }

    /// The tools a turn in `scope` offers `caller`. Every tool here runs in the browser, and
    /// posting a browser result takes `ai.tools.write` (§1.3); the reference still offered its
    /// read-only browser tools without it, so their results were refused and the turn hung for
    /// 90 s (§0.7). Here a caller without `ai.tools.write` is offered no browser tools at all.
    pub fn offered_tools(&self, scope: Scope, caller: &Caller) -> Vec<ToolDefinition> {
        if !caller.has(Capability::ToolsWrite) {
            return Vec::new();
        }
        self.tools
            .iter()
            .filter(|(s, _)| *s == scope)
            .map(|(_, tool)| tool.clone())
            .collect()
    }

    /// The same runner with other loop options.
    pub fn with_options(mut self, options: LoopOptions) -> Self {
        self.options = options;
        self
    }
}

impl TurnRunner for LoopRunner {
    fn preflight(
        &self,
        caller: &Caller,
        conversation: &Conversation,
        has_images: bool,
    ) -> Preflight {
        let offers_tools = !self.offered_tools(conversation.scope, caller).is_empty();
        let setup = self.providers.prepare(caller, conversation);
        Box::pin(async move {
            let setup = setup.await.map_err(|refusal| match refusal {
                ProviderRefusal::CredentialNotFound => ModelRefusal::CredentialNotFound,
                ProviderRefusal::Unusable(message) => ModelRefusal::CredentialUnusable(message),
            })?;
            check_capabilities(&setup.capabilities, has_images, offers_tools)?;
            Ok(Prepared {
                capabilities: Some(setup.capabilities),
                provider: Some(setup.kind),
                driver: Some(setup.driver),
            })
        })
    }

    fn run(&self, turn: Turn) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let scope = turn.conversation.scope;
        let tools = self.offered_tools(scope, &turn.caller);
        let driver = turn
            .prepared
            .driver
            .clone()
            .ok_or_else(|| "AI runtime error: the turn has no provider.".to_owned());
        let mut options = self.options.clone();
        if let Some(capabilities) = &turn.prepared.capabilities {
            // Screenshots go back as images only to models that take them in tool results.
            options.tool_result_images &= capabilities.tool_result_images;
        }
        Box::pin(async move {
            let driver = match driver {
                Ok(driver) => driver,
                Err(message) => {
                    let _ = turn.events.send(LoopEvent::Error { message });
                    return;
                }
            };
            let request = ChatRequest {
                model: turn.conversation.model_id.clone(),
                system: vec![system_prompt(scope)],
                messages: history_messages(&turn.history),
                tools,
                max_tokens: None,
                scope: Some(scope.as_str().to_owned()),
            };
            let executor = BridgeExecutor {
                offered: request.tools.iter().map(|t| t.name.clone()).collect(),
                bridge: Arc::clone(&turn.bridge),
            };
            let outcome =
                run_tool_loop(driver.as_ref(), &executor, request, options, &turn.events).await;
            tracing::info!(
                conversation_id = %turn.conversation.id,
                rounds = outcome.rounds,
                end = ?outcome.end,
                "turn ended"
            );
        })
    }
}

/// The scope's system prompt. The reference's per-scope prompts (§10.7) are not ported yet;
/// this is the one the reference gives scopes without tools.
fn system_prompt(scope: Scope) -> String {
    format!(
        "You are the AI assistant embedded in the \"{}\" workspace of the CMS editor.",
        scope.as_str()
    )
}

/// Runs the turn's offered tools in the browser through the turn's bridge; a call of any
/// other tool is answered `Unknown tool: <name>` and never reaches the browser.
pub struct BridgeExecutor {
    /// The names of the tools the turn offered.
    pub offered: std::collections::HashSet<String>,
    /// The turn's bridge.
    pub bridge: Arc<Bridge>,
}

impl BridgeExecutor {
    fn unknown(call: &ToolCall) -> ToolResult {
        ToolResult {
            call_id: call.id.clone(),
            ok: false,
            data: None,
            error: Some(format!("Unknown tool: {}", call.name)),
            images: Vec::new(),
        }
    }
}

impl ToolExecutor for BridgeExecutor {
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>> {
        Box::pin(async move {
            if !self.offered.contains(&call.name) {
                return Self::unknown(call);
            }
            match self.bridge.execute(call).await {
                Ok(result) => result,
                Err(error) => ToolResult {
                    call_id: call.id.clone(),
                    ok: false,
                    data: None,
                    error: Some(error.to_string()),
                    images: Vec::new(),
                },
            }
        })
    }

    fn is_browser_tool(&self, name: &str) -> bool {
        self.offered.contains(name)
    }

    fn execute_or_reject<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = Result<ToolResult, ToolRejection>> + Send + 'a>> {
        Box::pin(async move {
            if !self.offered.contains(&call.name) {
                return Ok(Self::unknown(call));
            }
            self.bridge
                .execute(call)
                .await
                .map_err(|error| ToolRejection::new(error.to_string()))
        })
    }
}

/// The healed history as the loop's messages, same-role neighbours merged (a text row and the
/// tool-call rows after it are one assistant turn on every wire).
pub fn history_messages(history: &[HistoryEntry]) -> Vec<Message> {
    let mut messages: Vec<Message> = Vec::new();
    for entry in history {
        let (role, blocks) = match entry {
            HistoryEntry::User(blocks) => {
                (LlmRole::User, blocks.iter().filter_map(to_llm).collect())
            }
            HistoryEntry::Assistant(blocks) => (
                LlmRole::Assistant,
                blocks.iter().filter_map(to_llm).collect(),
            ),
            HistoryEntry::ToolResult {
                tool_call_id,
                ok,
                error,
            } => (
                LlmRole::Tool,
                vec![LlmBlock::ToolResult(ToolResult {
                    call_id: tool_call_id.clone(),
                    ok: *ok,
                    data: None,
                    error: error.clone(),
                    images: Vec::new(),
                })],
            ),
        };
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(Message {
                role,
                content: blocks,
            }),
        }
    }
    messages.retain(|m| !m.content.is_empty());
    messages
}

fn to_llm(block: &ContentBlock) -> Option<LlmBlock> {
    match block {
        ContentBlock::Text { text } => Some(LlmBlock::Text { text: text.clone() }),
        ContentBlock::Image { mime_type, data } => Some(LlmBlock::Image(Image {
            mime_type: mime_type.clone(),
            data: data.clone(),
        })),
        ContentBlock::ToolCall {
            tool_call_id,
            tool_name,
            input,
        } => Some(LlmBlock::ToolCall(ToolCall {
            id: tool_call_id.clone(),
            name: tool_name.clone(),
            arguments: input.clone(),
        })),
        // Results live in their own rows; a stray block in another row has nothing to answer.
        ContentBlock::ToolResult { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct NoProviders;

    impl Providers for NoProviders {
        fn prepare(&self, _: &Caller, _: &Conversation) -> PrepareFuture {
            Box::pin(async { Err(ProviderRefusal::CredentialNotFound) })
        }
    }

    #[test]
    fn browser_tools_are_offered_per_scope_to_writers_only() {
        let tool = |name: &str| ToolDefinition {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        };
        let runner = LoopRunner::new(
            Arc::new(NoProviders),
            vec![(Scope::Site, tool("a")), (Scope::Content, tool("b"))],
        );
        let caller = |caps: &[&str]| Caller {
            user_id: "u".into(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
        };
        let writer = caller(&["ai.chat", "ai.tools.write"]);
        let names: Vec<String> = runner
            .offered_tools(Scope::Site, &writer)
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["a"]);
        assert!(runner
            .offered_tools(Scope::Site, &caller(&["ai.chat"]))
            .is_empty());
        assert!(runner.offered_tools(Scope::Data, &writer).is_empty());
    }

    #[test]
    fn history_merges_neighbours_and_keeps_results_apart() {
        let call = ContentBlock::ToolCall {
            tool_call_id: "c1".into(),
            tool_name: "t".into(),
            input: json!({"a": 1}),
        };
        let history = vec![
            HistoryEntry::User(vec![ContentBlock::Text { text: "hi".into() }]),
            HistoryEntry::Assistant(vec![ContentBlock::Text { text: "ok".into() }]),
            HistoryEntry::Assistant(vec![call]),
            HistoryEntry::ToolResult {
                tool_call_id: "c1".into(),
                ok: false,
                error: Some("no".into()),
            },
            HistoryEntry::User(vec![ContentBlock::Text {
                text: "again".into(),
            }]),
        ];
        let messages = history_messages(&history);
        let roles: Vec<LlmRole> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                LlmRole::User,
                LlmRole::Assistant,
                LlmRole::Tool,
                LlmRole::User
            ]
        );
        assert_eq!(messages[1].content.len(), 2);
        assert_eq!(
            messages[2].content,
            [LlmBlock::ToolResult(ToolResult {
                call_id: "c1".into(),
                ok: false,
                data: None,
                error: Some("no".into()),
                images: vec![],
            })]
        );
    }
}
