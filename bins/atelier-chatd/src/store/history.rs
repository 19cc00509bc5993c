//! The history a turn replays to the model, rebuilt from stored rows. A tool call whose result
//! never arrived (the turn was interrupted, chatd was killed) is healed with a synthetic failed
//! result, so a provider is never shown a call without its answer.

use super::{ContentBlock, Message, Role};

/// The error every healed (never answered) tool call carries; the tool loop writes the same.
pub use atelier_llm::INTERRUPTED_TOOL_RESULT_ERROR;

/// One entry of the replayed history.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryEntry {
    /// What the editor said.
    User(Vec<ContentBlock>),
    /// What the model said, tool calls included.
    Assistant(Vec<ContentBlock>),
    /// A tool call's outcome; only `{ok, error}` is ever persisted.
    ToolResult {
        /// The call it answers.
        tool_call_id: String,
        /// Whether the tool succeeded.
        ok: bool,
        /// Why it failed.
        error: Option<String>,
    },
}

/// Rebuilds the replay history from rows in position order.
///
/// Calls are answered in the order they were made. A user row first closes every call still
/// open; a tool row that answers no open call (an orphan, or a result that arrived after the
/// user moved on) is dropped; whatever is still open at the end is closed too.
pub fn rebuild(messages: &[Message]) -> Vec<HistoryEntry> {
    let mut history = Vec::with_capacity(messages.len());
    let mut open_calls: Vec<String> = Vec::new();
    for message in messages {
        match message.role {
            Role::User => {
                close_open_calls(&mut open_calls, &mut history);
                history.push(HistoryEntry::User(message.content.clone()));
            }
            Role::Assistant => {
                open_calls.extend(message.content.iter().filter_map(|block| match block {
                    ContentBlock::ToolCall { tool_call_id, .. } => Some(tool_call_id.clone()),
                    _ => None,
                }));
                history.push(HistoryEntry::Assistant(message.content.clone()));
            }
            Role::Tool => {
                let Some(call) = &message.tool_call else {
                    continue;
                };
                let Some(index) = open_calls.iter().position(|id| *id == call.id) else {
                    continue;
                };
                let tool_call_id = open_calls.remove(index);
                let outcome = message.content.iter().find_map(|block| match block {
                    ContentBlock::ToolResult { ok, error } => Some((*ok, error.clone())),
                    _ => None,
                });
                let (ok, error) = outcome
                    .unwrap_or_else(|| (false, Some(INTERRUPTED_TOOL_RESULT_ERROR.to_owned())));
                history.push(HistoryEntry::ToolResult {
                    tool_call_id,
                    ok,
                    error,
                });
            }
        }
    }
    close_open_calls(&mut open_calls, &mut history);
    history
}

fn close_open_calls(open_calls: &mut Vec<String>, history: &mut Vec<HistoryEntry>) {
    history.extend(
        open_calls
            .drain(..)
            .map(|tool_call_id| HistoryEntry::ToolResult {
                tool_call_id,
                ok: false,
                error: Some(INTERRUPTED_TOOL_RESULT_ERROR.to_owned()),
            }),
    );
}

/// What a model that cannot see gets in place of a user message's images: one breadcrumb
/// where the first image was.
pub const IMAGE_OMITTED_FOR_MODEL: &str =
    "[Attached image omitted because the selected model does not support image input.]";

/// Projects the history for a model without vision: every user message keeps its other blocks
/// and gets [`IMAGE_OMITTED_FOR_MODEL`] in place of its images. Stored rows are untouched, so
/// switching back to a vision model replays every image.
pub fn project_images_for_blind_model(history: &mut [HistoryEntry]) {
    for entry in history {
        let HistoryEntry::User(blocks) = entry else {
            continue;
        };
        let Some(first) = blocks
            .iter()
            .position(|b| matches!(b, ContentBlock::Image { .. }))
        else {
            continue;
        };
        let mut projected = Vec::with_capacity(blocks.len());
        for (index, block) in blocks.drain(..).enumerate() {
            if index == first {
                projected.push(ContentBlock::Text {
                    text: IMAGE_OMITTED_FOR_MODEL.to_owned(),
                });
            }
            if !matches!(block, ContentBlock::Image { .. }) {
                projected.push(block);
            }
        }
        *blocks = projected;
    }
}
