//! The contract between the chat stream and whatever runs the model: the [`Turn`] the stream
//! hands a [`TurnRunner`], what the runner resolves before anything is stored — in two steps,
//! the credential opened ([`Opened`]) and then the model gated ([`Prepared`]) — or why it
//! refuses ([`ModelRefusal`]), and the runner of a chatd with no provider wiring. The
//! production runner is [`crate::runtime::LoopRunner`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use atelier_llm::{Driver, LoopEvent, ModelCapabilities, ProviderKind};
use tokio::sync::mpsc;

use crate::bridge::Bridge;
use crate::caller::Caller;
use crate::cms::reads::CmsReader;
use crate::metrics::Metrics;
use crate::store::history::HistoryEntry;
use crate::store::Conversation;

/// Everything a turn runner needs: who asks, the conversation, the replay history (healed),
/// the user's new message, the bridge for browser tools, the CMS as the user sees it, and where
/// to send events.
pub struct Turn {
    /// The acting user.
    pub caller: Caller,
    /// The CMS read as the acting user, with their session cookie; it lives as long as the
    /// turn and is never stored.
    pub cms: CmsReader,
    /// The conversation, as read when the turn started.
    pub conversation: Conversation,
    /// The history to replay, the new user message last.
    pub history: Vec<HistoryEntry>,
    /// The bridge for browser tools; its snapshot is the editor state.
    pub bridge: Arc<Bridge>,
    /// What the runner resolved before the turn was stored: the model's capabilities and the
    /// driver to run it on.
    pub prepared: Prepared,
    /// Where the runner sends its events (every event of the chat stream but `bridgeReady`);
    /// the turn ends with the runner's future, or at its first `done` or `error`.
    pub events: mpsc::UnboundedSender<LoopEvent>,
    /// Where the runner counts what only it knows, such as how the provider failed.
    pub metrics: Metrics,
}

/// Why a turn is refused before anything is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelRefusal {
    /// The conversation's credential is not the caller's, or gone (404).
    CredentialNotFound,
    /// The credential cannot be opened: another master key, corruption (409, this message).
    CredentialUnusable(String),
    /// The turn carries an image and the model is not known to see (422).
    NoVision,
    /// The turn offers tools and the model is known not to call them (422).
    NoToolCalling,
    /// The runtime failed to read what the turn needs (500; the detail is logged only).
    Failed(String),
}

/// What a runner resolved for a turn before it is stored.
#[derive(Clone, Default)]
pub struct Prepared {
    /// The model's capabilities (`None` when the runner resolves nothing).
    pub capabilities: Option<ModelCapabilities>,
    /// The provider the turn runs on, which prices its usage.
    pub provider: Option<ProviderKind>,
    /// The driver to run the turn on.
    pub driver: Option<Arc<dyn Driver>>,
    /// The stored credential the turn runs on, marked used once the turn ran (`None` when
    /// the runner opened none).
    pub credential_id: Option<String>,
}

/// What a runner's model gate answers: what it resolved, or why it refuses.
pub type Preflight = Pin<Box<dyn Future<Output = Result<Prepared, ModelRefusal>> + Send + 'static>>;

/// What a runner's opening answers: the opened credential, or why it refuses.
pub type Opening = Pin<Box<dyn Future<Output = Result<Opened, ModelRefusal>> + Send + 'static>>;

/// A conversation's credential, known to be the caller's and to open; what its model can do is
/// resolved only by [`Opened::gate`], once the turn's images passed their cheap checks, so a
/// bad image is refused as such whatever the model, and before anything asks a provider.
pub struct Opened {
    gate: Box<dyn FnOnce(bool) -> Preflight + Send>,
}

impl Opened {
    /// An opened credential whose model `gate` resolves and checks, given whether the turn
    /// carries images.
    pub fn new(gate: impl FnOnce(bool) -> Preflight + Send + 'static) -> Self {
        Opened {
            gate: Box::new(gate),
        }
    }

    /// An opening with nothing left to resolve or refuse.
    pub fn ready(prepared: Prepared) -> Self {
        Opened::new(move |_| Box::pin(async move { Ok(prepared) }))
    }

    /// Resolves what the model can do and refuses a turn it cannot take: with images when
    /// `has_images`, with tools when the turn offers any.
    pub fn gate(self, has_images: bool) -> Preflight {
        (self.gate)(has_images)
    }
}

/// Runs one turn: drives the model and tools, sending [`LoopEvent`]s. Dropping the future
/// aborts the turn.
pub trait TurnRunner: Send + Sync + 'static {
    /// Runs `turn`.
    fn run(&self, turn: Turn) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

    /// Opens the conversation's credential for `caller` before anything is stored: it must be
    /// theirs and open; the [`Opened`] then gates the model. A runner that knows nothing of
    /// credentials or models (the default) refuses nothing.
    fn open(&self, caller: &Caller, conversation: &Conversation) -> Opening {
        let _ = (caller, conversation);
        Box::pin(async { Ok(Opened::ready(Prepared::default())) })
    }
}

/// The capability gate: an image needs vision; an agent turn (one that
/// offers tools) needs tool calling.
pub fn check_capabilities(
    capabilities: &ModelCapabilities,
    has_images: bool,
    offers_tools: bool,
) -> Result<(), ModelRefusal> {
    if has_images && !capabilities.vision_input {
        return Err(ModelRefusal::NoVision);
    }
    if offers_tools && !capabilities.tool_calling {
        return Err(ModelRefusal::NoToolCalling);
    }
    Ok(())
}

/// The runner of a chatd with no provider wiring: every turn ends with an error event.
pub struct UnconfiguredRunner;

/// The message [`UnconfiguredRunner`] ends every turn with.
pub const UNCONFIGURED_MESSAGE: &str =
    "AI runtime error: no provider runtime is configured in this chatd.";

impl TurnRunner for UnconfiguredRunner {
    fn run(&self, turn: Turn) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(async move {
            let _ = turn.events.send(LoopEvent::Error {
                message: UNCONFIGURED_MESSAGE.to_owned(),
            });
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_need_vision_and_agent_turns_need_tools() {
        let caps = |vision, tools| ModelCapabilities {
            tool_calling: tools,
            vision_input: vision,
            tool_result_images: false,
            prompt_cache: false,
            streaming: true,
            context_window: None,
        };
        assert_eq!(check_capabilities(&caps(true, true), true, true), Ok(()));
        assert_eq!(
            check_capabilities(&caps(false, true), true, false),
            Err(ModelRefusal::NoVision)
        );
        assert_eq!(check_capabilities(&caps(false, true), false, true), Ok(()));
        assert_eq!(
            check_capabilities(&caps(true, false), false, true),
            Err(ModelRefusal::NoToolCalling)
        );
        assert_eq!(check_capabilities(&caps(true, false), true, false), Ok(()));
    }
}
