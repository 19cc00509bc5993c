//! The agent's output: one JSON object per line on stdout, the only thing it writes there.
//! This module is the one definition of those lines; the `atelier` driver's parser reads them.
//!
//! | `type` | fields | when |
//! |---|---|---|
//! | `start` | `resume` | first, once the conversation (with this turn's prompt) is saved under the token `resume`: a turn that ends without its last line (killed) is resumed with it |
//! | `text` | `text` | a run of the model's text, whole: cut only where a tool call or the end of a round interrupts it |
//! | `tool` | `id`, `name`, `input` | the model called a tool (before it runs); `input` is its arguments as sent. The workspace's tools are `read`, `write`, `edit`, `list`, `glob` and `grep`; an MCP server's are `mcp__<server>__<tool>` |
//! | `tool_result` | `id`, `name`, `ok`, `error`? | the call's outcome; `error` (present exactly when `ok` is false) is the named refusal the model reads, e.g. `refused: symlink (…)` |
//! | `file_change` | `path`, `kind` | a call created (`"created"`) or changed (`"modified"`) the workspace file `path`, written before that call's `tool_result` |
//! | `warning` | `message` | something the turn goes on without: an MCP server that is unavailable (its tools are not offered), a tool of it that cannot be offered, a provider round that failed transiently and is asked again after a pause |
//! | `result` | `stop`, `rounds`, `usage`, `cost_usd`?, `duration_ms`, `resume` | the turn ended: `stop` is `"end_turn"` (the model stopped calling tools), `"max_turns"` (the round limit stopped it) or `"max_tokens"` (its last answer was cut at its output limit, unfinished); `usage` holds `input_tokens`, `output_tokens` and, when reported, `cache_read_tokens`, `cache_write_tokens`; `cost_usd` only when the provider priced the turn itself; `resume` is the token a later turn passes to `--resume` |
//! | `error` | `reason`, `message`, `resume`? | the turn failed; the last line, and the process exits non-zero. `reason` is a stable code ([`FailureReason`]); `resume` is there when the conversation so far was saved |
//!
//! A run writes one `start` line (unless it fails before: a usage error, an unusable workspace,
//! brief, state directory or resume token), zero or more `text`, `tool`, `tool_result`,
//! `file_change` and `warning` lines, then exactly one `result` (exit 0) or `error` (exit 1) —
//! except when stdout itself goes away. SIGTERM or SIGINT stops the turn where it is: the
//! conversation so far is saved and the `error` line's `reason` is `interrupted`. Absent
//! optional fields are left out, never `null`.
//!
//! As session events: `text` → `text`; `tool` → `tool` (its summary from `input.path`, else
//! `input.pattern`); `file_change` → `file_change` with `files: [path]`; `result` → `result`
//! with `resumeToken` = `resume`, `costUsd` = `cost_usd`, `durationMs` = `duration_ms`;
//! `tool_result` and `warning` are for the log only; `error`'s `message` is the turn's failure.
//! `start` is no event: its `resume` is the session's token when the turn ends without a
//! `result` (an `error` line's own `resume`, when it has one, comes after it and wins).

use std::io::Write;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use atelier_llm::{EventSink, LlmError, LoopEvent, SinkClosed};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::ChangeKind;

/// One output line (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// The conversation is saved under `resume`, before the first model request.
    Start {
        /// The token that resumes this conversation.
        resume: String,
    },
    /// The model said something.
    Text {
        /// What it said.
        text: String,
    },
    /// The model called a tool.
    Tool {
        /// The provider's id of the call.
        id: String,
        /// The tool.
        name: String,
        /// The arguments as the model sent them (parsed, not validated).
        input: Value,
    },
    /// A call's outcome.
    ToolResult {
        /// The call it answers.
        id: String,
        /// The tool.
        name: String,
        /// Whether it succeeded.
        ok: bool,
        /// What the model was told instead, when it did not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A workspace file was created or changed.
    FileChange {
        /// Relative to the workspace.
        path: String,
        /// Created or modified.
        kind: ChangeKind,
    },
    /// Something the turn goes on without.
    Warning {
        /// What, for a person.
        message: String,
    },
    /// The turn ended.
    Result {
        /// Why it ended.
        stop: Stop,
        /// Provider rounds it took.
        rounds: u32,
        /// Tokens over all rounds.
        usage: Usage,
        /// The provider's own price of the turn in USD, when it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// Wall time from start to this line.
        duration_ms: u64,
        /// The token that resumes this conversation.
        resume: String,
    },
    /// The turn failed.
    Error {
        /// A stable code.
        reason: FailureReason,
        /// What went wrong, for a person.
        message: String,
        /// The token that resumes the conversation saved so far, if it was saved.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume: Option<String>,
    },
}

/// Why a turn ended without failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The model stopped calling tools.
    EndTurn,
    /// The model was still calling tools at `--max-turns` rounds; those calls were not run.
    MaxTurns,
    /// The model's last answer was cut at its output limit: what it was writing (a text, a
    /// tool call, which was not run) is unfinished.
    MaxTokens,
}

/// Why a turn failed: the `reason` of an `error` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// The command line or its environment cannot make a turn (no key where one is needed, no
    /// state directory, an unreadable prompt).
    Usage,
    /// The workspace cannot be opened.
    WorkspaceUnavailable,
    /// `AGENTS.md` exists but is refused (a link, a hard link, not a regular file).
    BriefRefused,
    /// The state directory cannot be opened or written.
    StateUnavailable,
    /// `--resume` names no saved conversation.
    ResumeNotFound,
    /// The saved conversation cannot be read back.
    ResumeUnreadable,
    /// The provider refused or broke off a round.
    Provider,
    /// SIGTERM or SIGINT stopped the turn before it finished.
    Interrupted,
}

/// Token counts of a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens over all rounds.
    pub input_tokens: u64,
    /// Completion tokens over all rounds.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to the provider's cache, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

impl From<&atelier_llm::Usage> for Usage {
    fn from(usage: &atelier_llm::Usage) -> Usage {
        Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
        }
    }
}

/// Where the lines go: a writer (stdout in production), written a whole line at a time and
/// flushed after each, so a reader sees every line as soon as it is decided. Also the tool
/// loop's event sink: it turns the loop's events into lines, gathering text deltas into runs,
/// and it is how a stop reaches the loop ([`Output::stop`]).
pub struct Output {
    state: Mutex<State>,
    /// Set once the turn is to stop; the loop's wait on [`EventSink::closed`] watches it.
    stop: tokio::sync::watch::Sender<bool>,
}

struct State {
    writer: Box<dyn Write + Send>,
    /// Text not yet written.
    pending: String,
}

// === impl Output ===

impl Output {
    /// Lines written to `writer`.
    pub fn new(writer: Box<dyn Write + Send>) -> Output {
        Output {
            state: Mutex::new(State {
                writer,
                pending: String::new(),
            }),
            stop: tokio::sync::watch::channel(false).0,
        }
    }

    /// Stops the turn: the loop ends where it is, as if the reader had gone, and the runner
    /// (which sees [`Output::stop_requested`]) says why.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Whether [`Output::stop`] was called.
    pub fn stop_requested(&self) -> bool {
        *self.stop.borrow()
    }

    /// Lines written to stdout.
    pub fn stdout() -> Output {
        Output::new(Box::new(std::io::stdout()))
    }

    /// Writes `line`, after any text still pending. Fails when the reader is gone.
    pub fn line(&self, line: &Line) -> Result<(), SinkClosed> {
        let mut state = self.state.lock().map_err(|_| SinkClosed)?;
        state.flush_text()?;
        state.write(line)
    }

    fn event(&self, event: LoopEvent) -> Result<(), SinkClosed> {
        let mut state = self.state.lock().map_err(|_| SinkClosed)?;
        match event {
            LoopEvent::Text { text } => {
                state.pending.push_str(&text);
                Ok(())
            }
            LoopEvent::ToolCall {
                tool_call_id,
                tool_name,
                input,
                ..
            } => {
                state.flush_text()?;
                state.write(&Line::Tool {
                    id: tool_call_id,
                    name: tool_name,
                    input,
                })
            }
            LoopEvent::ToolResult {
                tool_call_id,
                tool_name,
                ok,
                error,
            } => {
                state.flush_text()?;
                state.write(&Line::ToolResult {
                    id: tool_call_id,
                    name: tool_name,
                    ok,
                    error,
                })
            }
            // The turn's end is written by the runner once the conversation is saved, from the
            // loop's outcome; the per-round context has no line of its own.
            LoopEvent::Context { .. }
            | LoopEvent::Usage { .. }
            | LoopEvent::Done
            | LoopEvent::Error { .. }
            | LoopEvent::BridgeReady { .. }
            | LoopEvent::ToolRequest { .. } => state.flush_text(),
        }
    }
}

impl State {
    fn write(&mut self, line: &Line) -> Result<(), SinkClosed> {
        let mut bytes = serde_json::to_vec(line).map_err(|_| SinkClosed)?;
        bytes.push(b'\n');
        self.writer.write_all(&bytes).map_err(|_| SinkClosed)?;
        self.writer.flush().map_err(|_| SinkClosed)
    }

    /// Writes the pending text as one line, unless it is only whitespace.
    fn flush_text(&mut self) -> Result<(), SinkClosed> {
        let text = std::mem::take(&mut self.pending);
        if text.trim().is_empty() {
            return Ok(());
        }
        self.write(&Line::Text { text })
    }
}

impl EventSink for Output {
    fn send<'a>(
        &'a self,
        event: LoopEvent,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<(), SinkClosed>> + Send + 'a>> {
        Box::pin(std::future::ready(self.event(event)))
    }

    fn closed<'a>(&'a self) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        // A pipe tells its writer it is gone only on a write, which `send` reports; this is
        // the stop.
        let mut stop = self.stop.subscribe();
        Box::pin(async move {
            let _ = stop.wait_for(|stop| *stop).await;
        })
    }

    fn retrying(&self, error: &LlmError, delay: Duration) {
        // A closed output is the loop's to notice, at its next line.
        let _ = self.line(&Line::Warning {
            message: format!(
                "the provider failed ({error}); asking again in {} s",
                delay.as_secs()
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn every_line_is_spelled_as_documented() {
        let cases = [
            (
                Line::Start {
                    resume: "abc".into(),
                },
                r#"{"type":"start","resume":"abc"}"#,
            ),
            (
                Line::Text { text: "hi".into() },
                r#"{"type":"text","text":"hi"}"#,
            ),
            (
                Line::Tool {
                    id: "c1".into(),
                    name: "write".into(),
                    input: json!({"path": "a"}),
                },
                r#"{"type":"tool","id":"c1","name":"write","input":{"path":"a"}}"#,
            ),
            (
                Line::ToolResult {
                    id: "c1".into(),
                    name: "write".into(),
                    ok: true,
                    error: None,
                },
                r#"{"type":"tool_result","id":"c1","name":"write","ok":true}"#,
            ),
            (
                Line::ToolResult {
                    id: "c2".into(),
                    name: "read".into(),
                    ok: false,
                    error: Some("not found (a)".into()),
                },
                r#"{"type":"tool_result","id":"c2","name":"read","ok":false,"error":"not found (a)"}"#,
            ),
            (
                Line::Warning {
                    message: "the p server did not answer".into(),
                },
                r#"{"type":"warning","message":"the p server did not answer"}"#,
            ),
            (
                Line::FileChange {
                    path: "a/b.html".into(),
                    kind: ChangeKind::Created,
                },
                r#"{"type":"file_change","path":"a/b.html","kind":"created"}"#,
            ),
            (
                Line::Result {
                    stop: Stop::EndTurn,
                    rounds: 2,
                    usage: Usage {
                        input_tokens: 10,
                        output_tokens: 3,
                        cache_read_tokens: Some(4),
                        cache_write_tokens: None,
                    },
                    cost_usd: None,
                    duration_ms: 12,
                    resume: "abc".into(),
                },
                r#"{"type":"result","stop":"end_turn","rounds":2,"usage":{"input_tokens":10,"output_tokens":3,"cache_read_tokens":4},"duration_ms":12,"resume":"abc"}"#,
            ),
            (
                Line::Result {
                    stop: Stop::MaxTurns,
                    rounds: 1,
                    usage: Usage::default(),
                    cost_usd: Some(0.25),
                    duration_ms: 0,
                    resume: "abc".into(),
                },
                r#"{"type":"result","stop":"max_turns","rounds":1,"usage":{"input_tokens":0,"output_tokens":0},"cost_usd":0.25,"duration_ms":0,"resume":"abc"}"#,
            ),
            (
                Line::Error {
                    reason: FailureReason::ResumeNotFound,
                    message: "m".into(),
                    resume: None,
                },
                r#"{"type":"error","reason":"resume_not_found","message":"m"}"#,
            ),
            (
                Line::Error {
                    reason: FailureReason::Interrupted,
                    message: "m".into(),
                    resume: Some("abc".into()),
                },
                r#"{"type":"error","reason":"interrupted","message":"m","resume":"abc"}"#,
            ),
        ];
        for (line, want) in cases {
            assert_eq!(serde_json::to_string(&line).unwrap(), want);
            assert_eq!(serde_json::from_str::<Line>(want).unwrap(), line);
        }
    }

    #[test]
    fn text_deltas_become_one_line_per_run_and_the_last_round_is_kept() {
        let shared = Shared::default();
        let output = Output::new(Box::new(shared.clone()));
        let text = |t: &str| LoopEvent::Text { text: t.into() };
        for event in [
            text("I will "),
            text("write it."),
            LoopEvent::ToolCall {
                tool_call_id: "c1".into(),
                tool_name: "write".into(),
                input: json!({}),
                status: atelier_llm::ToolCallStatus::Pending,
            },
            LoopEvent::ToolResult {
                tool_call_id: "c1".into(),
                tool_name: "write".into(),
                ok: true,
                error: None,
            },
            text("  "),
            LoopEvent::Done,
            text("Done"),
            text("."),
        ] {
            output.event(event).unwrap();
        }
        output
            .line(&Line::FileChange {
                path: "x".into(),
                kind: ChangeKind::Modified,
            })
            .unwrap();
        let lines: Vec<Value> = shared
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["text", "tool", "tool_result", "text", "file_change"]
        );
        assert_eq!(lines[0]["text"], "I will write it.");
        assert_eq!(lines[3]["text"], "Done.");
    }
}
