//! A session's events: what a turn's agent said and did, and how the turn began and ended.
//! One enum for the driver's events and the daemon's own (turn start and end, faults, the
//! agent's output tail), stored one per line as `{"seq","ts","body"}` and replayed as the SSE
//! stream's `data:`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// One event body. The wire form is an object whose `type` names the variant; optional
/// fields are left out rather than written as `null`, and read leniently so logs written by an
/// earlier daemon (an `error` with only a `message`, say) still read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SessionEvent {
    /// A turn began.
    TurnStart {
        /// The turn's number in its session, from 1.
        turn: u32,
        /// Its prompt.
        prompt: String,
    },
    /// Text from the agent, or the daemon's notices (a gate decision among them).
    Text {
        /// The text.
        text: String,
        /// A gate decision's fields, beside its sentence, for a client that reads them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        egress: Option<Egress>,
    },
    /// The agent used a tool.
    Tool {
        /// The tool's name.
        name: String,
        /// `<name>: <target>` or the name.
        summary: String,
    },
    /// Files the turn changed (workspace-relative paths).
    FileChange {
        /// The paths.
        files: Vec<String>,
    },
    /// The agent finished its turn.
    Result {
        /// Whether the agent says it succeeded.
        ok: bool,
        /// The driver's own session, for the next turn to resume.
        #[serde(
            rename = "resumeToken",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        resume_token: Option<String>,
        /// What the turn cost, when the agent says.
        #[serde(rename = "costUsd", default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// How long it took, by the agent's count.
        #[serde(
            rename = "durationMs",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        duration_ms: Option<u64>,
    },
    /// A turn fault.
    Error {
        /// The machine reason (`turn_timeout`, `confinement.unit_refused`, …); absent only in
        /// logs written before reasons existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Whether retrying may help.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retriable: Option<bool>,
        /// A fixed human sentence for the reason (never the agent's own output).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The bounded tail of the agent's output, after a failed turn.
    AgentOutput {
        /// Which stream (`stderr`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        /// The text.
        text: String,
        /// Whether the tail was cut to its bound.
        #[serde(default)]
        truncated: bool,
    },
    /// The resume token was dropped, so this turn starts the agent's conversation afresh.
    ResumeUnavailable {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The turn ended; the last event of a turn.
    TurnEnd {
        /// The state it ended in.
        state: TurnState,
        /// The driver's session, for the next turn to resume.
        #[serde(
            rename = "resumeToken",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        resume_token: Option<String>,
    },
}

/// A gate decision as a session shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// The requested host.
    pub host: String,
    /// The requested port, when the target parsed.
    pub port: Option<u16>,
    /// `allowed`, `refused`, `failed`, `relayed` or `closed`.
    pub verdict: String,
    /// Why, in the gate's words.
    pub reason: String,
}

/// A body this reader does not know: an unknown `type`, or fields that do not fit its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEvent {
    /// The `type`, when the body has a string one.
    pub kind: Option<String>,
}

impl SessionEvent {
    /// Reads a body that may come from a newer daemon: what does not fit a known shape is an
    /// [`UnknownEvent`], for a follower to pass over rather than fail on.
    pub fn read(body: &Value) -> Result<SessionEvent, UnknownEvent> {
        SessionEvent::deserialize(body).map_err(|_| UnknownEvent {
            kind: body.get("type").and_then(Value::as_str).map(str::to_owned),
        })
    }

    /// The wire `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionEvent::TurnStart { .. } => "turn_start",
            SessionEvent::Text { .. } => "text",
            SessionEvent::Tool { .. } => "tool",
            SessionEvent::FileChange { .. } => "file_change",
            SessionEvent::Result { .. } => "result",
            SessionEvent::Error { .. } => "error",
            SessionEvent::AgentOutput { .. } => "agent_output",
            SessionEvent::ResumeUnavailable { .. } => "resume_unavailable",
            SessionEvent::TurnEnd { .. } => "turn_end",
        }
    }

    /// Whether this ends a turn (and so a follower's stream).
    pub fn is_turn_end(&self) -> bool {
        matches!(self, SessionEvent::TurnEnd { .. })
    }

    /// A plain text notice.
    pub fn text(text: impl Into<String>) -> SessionEvent {
        SessionEvent::Text {
            text: text.into(),
            egress: None,
        }
    }
}

/// The state a turn ended in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TurnState {
    /// The turn finished.
    Idle,
    /// The turn was stopped, or its daemon stopped.
    Interrupted,
    /// The turn failed; an `error` event before it says why.
    Error,
    /// A state this reader does not know (a newer daemon's); never written by this one.
    Other(String),
}

impl TurnState {
    /// The state as text.
    pub fn parse(text: &str) -> TurnState {
        match text {
            "idle" => TurnState::Idle,
            "interrupted" => TurnState::Interrupted,
            "error" => TurnState::Error,
            other => TurnState::Other(other.to_owned()),
        }
    }

    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            TurnState::Idle => "idle",
            TurnState::Interrupted => "interrupted",
            TurnState::Error => "error",
            TurnState::Other(other) => other,
        }
    }
}

impl Serialize for TurnState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TurnState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(TurnState::parse(&text))
    }
}

impl StoredEvent<Value> {
    /// The body's `type`, when it has a string one.
    pub fn kind(&self) -> Option<&str> {
        self.body.get("type").and_then(Value::as_str)
    }

    /// The body, read by its type (see [`SessionEvent::read`]).
    pub fn event(&self) -> Result<SessionEvent, UnknownEvent> {
        SessionEvent::read(&self.body)
    }
}

/// One stored event: a line of the session's log and an SSE frame's `data:`. A client that
/// must survive a newer daemon reads `StoredEvent<Value>` and each body with
/// [`SessionEvent::read`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent<B = SessionEvent> {
    /// Monotonic per session, from 0, across turns.
    pub seq: u64,
    /// When it was appended (ISO-8601).
    pub ts: String,
    /// The event.
    pub body: B,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(body: Value) -> Result<SessionEvent, UnknownEvent> {
        SessionEvent::read(&body)
    }

    /// Each variant's wire form, written independently of the enum, reads to the variant and
    /// writes back to the same object.
    #[test]
    fn every_variant_round_trips_through_its_wire_form() {
        let cases: Vec<(&str, Value, SessionEvent)> = vec![
            (
                "turn_start",
                json!({"type": "turn_start", "turn": 2, "prompt": "p"}),
                SessionEvent::TurnStart {
                    turn: 2,
                    prompt: "p".into(),
                },
            ),
            (
                "text",
                json!({"type": "text", "text": "hi"}),
                SessionEvent::text("hi"),
            ),
            (
                "egress text",
                json!({"type": "text", "text": "[egress] refused",
                    "egress": {"host": "h", "port": null, "verdict": "refused", "reason": "r"}}),
                SessionEvent::Text {
                    text: "[egress] refused".into(),
                    egress: Some(Egress {
                        host: "h".into(),
                        port: None,
                        verdict: "refused".into(),
                        reason: "r".into(),
                    }),
                },
            ),
            (
                "tool",
                json!({"type": "tool", "name": "Edit", "summary": "index.html"}),
                SessionEvent::Tool {
                    name: "Edit".into(),
                    summary: "index.html".into(),
                },
            ),
            (
                "file_change",
                json!({"type": "file_change", "files": ["a", "b"]}),
                SessionEvent::FileChange {
                    files: vec!["a".into(), "b".into()],
                },
            ),
            (
                "result in camelCase",
                json!({"type": "result", "ok": true, "resumeToken": "t", "costUsd": 0.5, "durationMs": 1200}),
                SessionEvent::Result {
                    ok: true,
                    resume_token: Some("t".into()),
                    cost_usd: Some(0.5),
                    duration_ms: Some(1200),
                },
            ),
            (
                "error",
                json!({"type": "error", "reason": "turn_timeout", "retriable": true, "message": "M."}),
                SessionEvent::Error {
                    reason: Some("turn_timeout".into()),
                    retriable: Some(true),
                    message: Some("M.".into()),
                },
            ),
            (
                "error without a message",
                json!({"type": "error", "reason": "turn_setup_failed", "retriable": false}),
                SessionEvent::Error {
                    reason: Some("turn_setup_failed".into()),
                    retriable: Some(false),
                    message: None,
                },
            ),
            (
                "an earlier daemon's error",
                json!({"type": "error", "message": "turn timed out", "retriable": true}),
                SessionEvent::Error {
                    reason: None,
                    retriable: Some(true),
                    message: Some("turn timed out".into()),
                },
            ),
            (
                "agent_output",
                json!({"type": "agent_output", "source": "stderr", "text": "boom", "truncated": false}),
                SessionEvent::AgentOutput {
                    source: Some("stderr".into()),
                    text: "boom".into(),
                    truncated: false,
                },
            ),
            (
                "resume_unavailable",
                json!({"type": "resume_unavailable", "reason": "agent identity migrated"}),
                SessionEvent::ResumeUnavailable {
                    reason: Some("agent identity migrated".into()),
                },
            ),
            (
                "turn_end with a token",
                json!({"type": "turn_end", "state": "idle", "resumeToken": "x"}),
                SessionEvent::TurnEnd {
                    state: TurnState::Idle,
                    resume_token: Some("x".into()),
                },
            ),
            (
                "turn_end of a newer daemon's state",
                json!({"type": "turn_end", "state": "paused"}),
                SessionEvent::TurnEnd {
                    state: TurnState::Other("paused".into()),
                    resume_token: None,
                },
            ),
        ];
        for (name, wire, event) in cases {
            assert_eq!(read(wire.clone()), Ok(event.clone()), "{name}: read");
            assert_eq!(
                serde_json::to_value(&event).unwrap(),
                wire,
                "{name}: written"
            );
            assert_eq!(event.kind(), wire["type"], "{name}: kind");
        }
    }

    #[test]
    fn what_does_not_fit_reads_as_unknown() {
        let cases: Vec<(&str, Value, Option<&str>)> = vec![
            (
                "unknown type",
                json!({"type": "thinking", "text": "hm"}),
                Some("thinking"),
            ),
            (
                "known type, wrong shape",
                json!({"type": "text", "text": 5}),
                Some("text"),
            ),
            ("no type", json!({"text": "x"}), None),
            ("not an object", json!("text"), None),
        ];
        for (name, body, kind) in cases {
            assert_eq!(
                read(body),
                Err(UnknownEvent {
                    kind: kind.map(str::to_owned)
                }),
                "{name}"
            );
        }
    }

    #[test]
    fn only_turn_end_ends_a_turn() {
        let end = SessionEvent::TurnEnd {
            state: TurnState::Error,
            resume_token: None,
        };
        assert!(end.is_turn_end());
        assert!(!SessionEvent::text("turn_end").is_turn_end());
    }
}
