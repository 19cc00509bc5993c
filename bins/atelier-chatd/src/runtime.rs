//! The production turn runner: the shared tool loop (`atelier_llm::run_tool_loop`) driving the
//! conversation's provider, with browser tools run through the turn's bridge and server-side
//! reads answered from the snapshot and the CMS, as the turn's user.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use atelier_llm::{
    run_tool_loop, ChatRequest, ContentBlock as LlmBlock, Driver, Image, LoopEnd, LoopError,
    LoopEvent, LoopOptions, Message, ModelCapabilities, ProviderKind, Role as LlmRole, ToolCall,
    ToolChoice, ToolExecutor, ToolRejection, ToolResult,
};
use serde_json::Value;

use crate::bridge::Bridge;
use crate::caller::Caller;
use crate::cms::reads::CmsReader;
use crate::store::history::HistoryEntry;
use crate::store::{ContentBlock, Conversation, Scope};
use crate::tools::{Execution, ToolSpec};
use crate::turn::{check_capabilities, ModelRefusal, Opened, Opening, Prepared, Turn, TurnRunner};

/// Resolves the provider a conversation talks to: its driver and what its model can do.
/// Production chatd uses [`crate::providers::StoredProviders`] (the conversation's stored
/// credential); tests and benchmarks supply their own.
pub trait Providers: Send + Sync + 'static {
    /// The provider of `conversation` as `caller`, resolved before the turn is stored: the
    /// future ends once the credential is known to be the caller's and to open. The
    /// capabilities are looked up per turn, by the setup's [`CapabilityLookup`] and only if
    /// it is awaited — typically through an `atelier_llm::CapabilityResolver`, so cached,
    /// de-duplicated and fail-closed for vision. The future must not borrow `self`.
    fn prepare(&self, caller: &Caller, conversation: &Conversation) -> PrepareFuture;
}

/// The lookup of what a conversation's model can do, run only when awaited.
pub type CapabilityLookup = Pin<Box<dyn Future<Output = ModelCapabilities> + Send + 'static>>;

/// A provider resolved for one turn.
pub struct ProviderSetup {
    /// Which provider (it prices the turn's usage).
    pub kind: ProviderKind,
    /// The driver to run the turn on.
    pub driver: Arc<dyn Driver>,
    /// The stored credential opened, marked used once a turn ran on it (`None` when the
    /// provider is not a stored credential).
    pub credential_id: Option<String>,
    /// What the conversation's model can do.
    pub capabilities: CapabilityLookup,
}

impl ProviderSetup {
    /// A setup whose model's capabilities are already known, with no stored credential.
    pub fn known(
        kind: ProviderKind,
        driver: Arc<dyn Driver>,
        capabilities: ModelCapabilities,
    ) -> Self {
        ProviderSetup {
            kind,
            driver,
            credential_id: None,
            capabilities: Box::pin(std::future::ready(capabilities)),
        }
    }
}

/// Why a provider cannot be resolved for a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderRefusal {
    /// The conversation's credential is not the caller's, or is gone.
    CredentialNotFound,
    /// The credential cannot be used; the message says why.
    Unusable(String),
    /// The credential could not be read (the store failed): no fault of the credential.
    Failed(String),
}

/// A provider resolution in flight (see [`Providers::prepare`]).
pub type PrepareFuture =
    Pin<Box<dyn Future<Output = Result<ProviderSetup, ProviderRefusal>> + Send + 'static>>;

/// Runs turns through the shared tool loop.
pub struct LoopRunner {
    providers: Arc<dyn Providers>,
    tools: Vec<ToolSpec>,
    options: LoopOptions,
}

impl LoopRunner {
    /// A runner over `providers` offering the `tools` of each scope.
    pub fn new(providers: Arc<dyn Providers>, tools: Vec<ToolSpec>) -> Self {
        Self {
            providers,
            tools,
            options: LoopOptions::default(),
        }
    }

    /// The tools a turn in `scope` offers `caller`, gated by capabilities (see
    /// [`crate::tools::offered`]).
    pub fn offered_tools(&self, scope: Scope, caller: &Caller) -> Vec<ToolSpec> {
        crate::tools::offered(&self.tools, scope, caller)
    }

    /// The same runner with other loop options.
    pub fn with_options(mut self, options: LoopOptions) -> Self {
        self.options = options;
        self
    }
}

impl TurnRunner for LoopRunner {
    fn open(&self, caller: &Caller, conversation: &Conversation) -> Opening {
        let offers_tools = !self.offered_tools(conversation.scope, caller).is_empty();
        let setup = self.providers.prepare(caller, conversation);
        Box::pin(async move {
            let setup = setup.await.map_err(|refusal| match refusal {
                ProviderRefusal::CredentialNotFound => ModelRefusal::CredentialNotFound,
                ProviderRefusal::Unusable(message) => ModelRefusal::CredentialUnusable(message),
                ProviderRefusal::Failed(detail) => ModelRefusal::Failed(detail),
            })?;
            Ok(Opened::new(move |has_images| {
                Box::pin(async move {
                    let capabilities = setup.capabilities.await;
                    check_capabilities(&capabilities, has_images, offers_tools)?;
                    Ok(Prepared {
                        capabilities: Some(capabilities),
                        provider: Some(setup.kind),
                        driver: Some(setup.driver),
                        credential_id: setup.credential_id,
                    })
                })
            }))
        })
    }

    fn run(&self, turn: Turn) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let scope = turn.conversation.scope;
        let tools = self.offered_tools(scope, &turn.caller);
        let mut system = crate::prompts::system_prompt(scope, turn.bridge.snapshot().as_deref());
        system.extend(crate::prompts::withheld_tools(scope, &tools, &self.tools));
        let provider = turn.prepared.provider;
        let driver = turn
            .prepared
            .driver
            .clone()
            .ok_or_else(|| "AI runtime error: the turn has no provider.".to_owned());
        let mut options = self.options.clone();
        if let Some(capabilities) = &turn.prepared.capabilities {
            // A screenshot is worth capturing only for a model that sees and whose wire takes
            // images in tool results.
            options.tool_result_images =
                capabilities.vision_input && capabilities.tool_result_images;
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
                system,
                messages: history_messages(&turn.history),
                tools: tools.iter().map(ToolSpec::definition).collect(),
                max_tokens: None,
                scope: Some(scope.as_str().to_owned()),
                // The editor's turns leave the choice to the model, as the original did.
                tool_choice: ToolChoice::Auto,
            };
            let executor = TurnExecutor {
                tools,
                caller: turn.caller.clone(),
                bridge: Arc::clone(&turn.bridge),
                cms: turn.cms.clone(),
            };
            let outcome =
                run_tool_loop(driver.as_ref(), &executor, request, options, &turn.events).await;
            // The error line went into an unbounded channel without waiting, so this runs in
            // the same poll, before the turn's driver can see that line and drop this future.
            if let (LoopEnd::Failed(LoopError::Provider(error)), Some(provider)) =
                (&outcome.end, provider)
            {
                turn.metrics.provider_failed(provider, error);
            }
            tracing::info!(
                conversation_id = %turn.conversation.id,
                rounds = outcome.rounds,
                end = ?outcome.end,
                "turn ended"
            );
        })
    }
}

/// The longest server-side read result the model is sent, in JSON characters (some 250,000
/// tokens, past any model's context): the original sends every result whole, and several reads
/// (a document, the site's page list) take no filter, limit or offset, so a long article or a
/// large site must still be read. Only a result no model could take is refused.
pub const MAX_SERVER_RESULT_CHARS: usize = 1_000_000;

/// Runs one turn's tool calls: checks the input against the tool's schema (cleaned and
/// coerced), the caller's capabilities again, and the payload (CSS, HTML) before anything
/// reaches the browser; answers server-side reads in process (asking the CMS as the caller
/// where a read needs its data); runs the rest through the bridge.
/// A call of a tool the turn did not offer is answered `Unknown tool: <name>`.
pub struct TurnExecutor {
    /// The tools the turn offered.
    pub tools: Vec<ToolSpec>,
    /// Who is acting.
    pub caller: Caller,
    /// The turn's bridge (and the latest snapshot).
    pub bridge: Arc<Bridge>,
    /// The CMS as the caller sees it, for the reads of its data.
    pub cms: CmsReader,
}

/// The input a tool receives, or the error the model reads instead: the schema's
/// validation, the capability re-check, then the payload checks.
pub fn prepare_input(spec: &ToolSpec, caller: &Caller, arguments: &Value) -> Result<Value, String> {
    let mut arguments = arguments.clone();
    // The loop adds the screenshot flag, which the tool's schema does not declare: it is
    // taken out for validation and put back after, so the browser really receives it instead
    // of validation dropping it as an undeclared key.
    let screenshot = match (spec.name, arguments.as_object_mut()) {
        (atelier_llm::SCREENSHOT_TOOL, Some(map)) => map.remove("captureScreenshot"),
        _ => None,
    };
    let mut input = crate::tools::schema::validate(&spec.input_schema, arguments)
        .map_err(|error| format!("Invalid input for {}: {error}.", spec.name))?;
    if !spec.allowed_for(caller) {
        return Err(format!(
            "Tool {} is not permitted for this user.",
            spec.name
        ));
    }
    match spec.name {
        "site_apply_css" => crate::tools::css::check_apply_css(&input)?,
        "site_insert_html" | "site_replace_node_html" => {
            let html = input["html"].as_str().unwrap_or_default();
            let checked = crate::tools::html::check_html(html)?;
            input["html"] = Value::String(checked.html);
        }
        _ => {}
    }
    if let Some(flag) = screenshot {
        input["captureScreenshot"] = flag;
    }
    Ok(input)
}

impl TurnExecutor {
    async fn run_server(&self, spec: &ToolSpec, input: Value) -> Result<Value, String> {
        let name = spec.name;
        let data = match spec.scope {
            Scope::Site => {
                let posted = self.bridge.snapshot();
                let snapshot = crate::tools::snapshot::SiteSnapshot::read(posted.as_deref());
                crate::tools::site_reads::run(&self.cms, &snapshot, name, &input).await
            }
            _ => crate::tools::content_reads::run(&self.cms, name, &input).await,
        }?;
        within_result_limit(name, data)
    }
}

/// `data`, unless it is longer than [`MAX_SERVER_RESULT_CHARS`] as JSON.
fn within_result_limit(name: &str, data: Value) -> Result<Value, String> {
    let size = data.to_string().len();
    if size > MAX_SERVER_RESULT_CHARS {
        return Err(format!(
            "The {name} result is too large to send ({size} characters); if the tool takes a \
             filter, limit or offset, narrow it."
        ));
    }
    Ok(data)
}

impl ToolExecutor for TurnExecutor {
    fn execute<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>> {
        Box::pin(async move {
            match self.execute_or_reject(call).await {
                Ok(result) => result,
                Err(rejection) => ToolResult::failed(&call.id, rejection.reason),
            }
        })
    }

    fn is_browser_tool(&self, name: &str) -> bool {
        self.tools
            .iter()
            .any(|t| t.name == name && t.execution == Execution::Browser)
    }

    fn execute_or_reject<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = Result<ToolResult, ToolRejection>> + Send + 'a>> {
        Box::pin(async move {
            let Some(spec) = self.tools.iter().find(|t| t.name == call.name) else {
                return Ok(ToolResult::failed(
                    &call.id,
                    format!("Unknown tool: {}", call.name),
                ));
            };
            let input = match prepare_input(spec, &self.caller, &call.arguments) {
                Ok(input) => input,
                Err(error) => return Ok(ToolResult::failed(&call.id, error)),
            };
            match spec.execution {
                Execution::Server => Ok(match self.run_server(spec, input).await {
                    Ok(data) => ToolResult {
                        call_id: call.id.clone(),
                        ok: true,
                        data: Some(data),
                        error: None,
                        images: Vec::new(),
                    },
                    Err(error) => ToolResult::failed(&call.id, error),
                }),
                Execution::Browser => self
                    .bridge
                    .call_browser(&call.name, input)
                    .await
                    .map(|output| output.into_tool_result(&call.id))
                    .map_err(|error| ToolRejection::new(error.to_string())),
            }
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

    #[test]
    fn a_long_document_is_sent_whole_and_only_a_result_no_model_could_take_is_refused() {
        // A long article: well past the 100,000 characters the first limit allowed.
        let article = json!({"id": "row_1", "body": "x".repeat(150_000)});
        assert_eq!(
            within_result_limit("content_get_document", article.clone()),
            Ok(article)
        );
        let flood = json!({"body": "x".repeat(MAX_SERVER_RESULT_CHARS)});
        let refusal = within_result_limit("content_get_document", flood).unwrap_err();
        assert!(
            refusal.starts_with("The content_get_document result is too large to send ("),
            "{refusal}"
        );
    }

    struct NoProviders;

    impl Providers for NoProviders {
        fn prepare(&self, _: &Caller, _: &Conversation) -> PrepareFuture {
            Box::pin(async { Err(ProviderRefusal::CredentialNotFound) })
        }
    }

    fn caller(caps: &[&str]) -> Caller {
        Caller {
            user_id: "u".into(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
            label: None,
        }
    }

    #[test]
    fn tools_are_offered_per_scope_and_capability() {
        let runner = LoopRunner::new(Arc::new(NoProviders), crate::tools::catalogue());
        let names = |caller: &Caller, scope| -> Vec<&'static str> {
            runner
                .offered_tools(scope, caller)
                .into_iter()
                .map(|t| t.name)
                .collect()
        };
        let editor = caller(&[
            "ai.chat",
            "ai.tools.write",
            "site.read",
            "site.structure.edit",
            "site.content.edit",
            "site.style.edit",
        ]);
        assert_eq!(names(&editor, Scope::Site).len(), 35);
        // A reader without ai.tools.write gets the server-side reads only.
        assert_eq!(
            names(&caller(&["ai.chat", "site.read"]), Scope::Site),
            [
                "site_list_documents",
                "site_list_modules",
                "site_list_tokens",
                "site_list_post_types",
                "site_list_loop_sources",
                "site_list_breakpoints",
            ]
        );
        // Style editing without structure editing: no HTML inserts.
        let stylist = names(&caller(&["ai.tools.write", "site.style.edit"]), Scope::Site);
        assert!(stylist.contains(&"site_apply_css") && !stylist.contains(&"site_insert_html"));
        assert!(stylist.contains(&"site_render_snapshot"));
        assert!(names(&editor, Scope::Data).is_empty());
        assert!(
            names(&editor, Scope::Content).is_empty()
                || !names(&editor, Scope::Content).contains(&"content_list_users")
        );
    }

    #[test]
    fn the_screenshot_flag_survives_validation_and_payloads_are_checked() {
        let tools = crate::tools::catalogue();
        let spec = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
        let editor = caller(&["ai.tools.write", "site.structure.edit", "site.style.edit"]);
        assert_eq!(
            prepare_input(
                spec("site_render_snapshot"),
                &editor,
                &json!({"captureScreenshot": true, "stray": 1})
            ),
            Ok(json!({"captureScreenshot": true}))
        );
        assert_eq!(
            prepare_input(
                spec("site_insert_html"),
                &editor,
                &json!({"parentId": "n1", "html": "<p onclick=\"x()\">Hi</p><script>x()</script>"})
            ),
            Ok(json!({"parentId": "n1", "html": "<p>Hi</p>"}))
        );
        assert_eq!(
            prepare_input(
                spec("site_apply_css"),
                &editor,
                &json!({"operation": "delete"})
            ),
            Err("site_apply_css delete needs selectors".to_owned())
        );
        assert_eq!(
            prepare_input(
                spec("site_insert_html"),
                &caller(&["ai.tools.write", "site.style.edit"]),
                &json!({"parentId": "n", "html": "<p/>"})
            ),
            Err("Tool site_insert_html is not permitted for this user.".to_owned())
        );
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
