//! The shapes sited answers with, as the client reads them: the fields sited always sends are
//! required, and anything else a newer sited adds is ignored, so an upgrade of sited alone never
//! breaks the client.

use serde::Deserialize;
use serde_json::Value;

/// One agent driver in `/health` and `/v1/capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DriverAvailability {
    /// `claude_code`, `opencode`, `pi` or `atelier`.
    pub id: String,
    /// Whether a turn could use it now.
    pub available: bool,
    /// Its version, once a probe has read one.
    pub version: Option<String>,
    /// Whether it is the instance's default.
    pub is_default: bool,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// `dedalo-site-builder`.
    pub service: String,
    /// The drivers.
    pub drivers: Vec<DriverAvailability>,
    /// The pairing fingerprint (already verified when a [`crate::Client`] returns this).
    pub instance_fingerprint: String,
}

/// A site template.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TemplateInfo {
    /// Its id.
    pub id: String,
    /// Its label.
    pub label: String,
    /// Its description.
    pub description: String,
}

/// The instance's limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Limits {
    /// The most sites.
    pub max_sites: u64,
    /// The most turns running at once.
    pub max_concurrent_sessions: u64,
    /// A site's disk quota in MiB.
    pub site_disk_quota_mb: u64,
}

/// `GET /v1/capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Capabilities {
    /// The drivers.
    pub drivers: Vec<DriverAvailability>,
    /// The driver a site gets when its create names none.
    pub default_driver: String,
    /// The templates.
    pub templates: Vec<TemplateInfo>,
    /// The limits.
    pub limits: Limits,
}

/// A site's build commands.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BuildSpec {
    /// The install step.
    pub install: String,
    /// The build step.
    pub build: String,
    /// The output directory.
    pub output: String,
}

/// When and by whom production was last published.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Published {
    /// The production release.
    pub release: String,
    /// When (ISO-8601).
    pub at: String,
    /// The publishing actor's username.
    pub by: String,
}

/// `site.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SiteManifest {
    /// The slug.
    pub slug: String,
    /// The display name.
    pub name: String,
    /// The domain.
    pub domain: String,
    /// The creator's user id (informational).
    pub owner_user_id: i64,
    /// When it was created.
    pub created_at: String,
    /// The driver (display copy).
    pub driver: String,
    /// The template it was made from.
    pub template: String,
    /// The build commands.
    pub build: BuildSpec,
    /// The last publish.
    pub published: Option<Published>,
}

/// A site's live session as sited knows it in memory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SiteSession {
    /// `idle`, `running`, `interrupted` or `error`.
    pub state: String,
    /// The last session's id in this process.
    pub session_id: Option<String>,
}

/// Where preproduction is served.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Preprod {
    /// `http://<prefix>.<domain>/`.
    pub url: String,
    /// The served release.
    pub release: Option<String>,
}

/// A build's record.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BuildStatus {
    /// The build id.
    pub id: String,
    /// `running`, `success` or `failed`.
    pub outcome: String,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub finished_at: Option<String>,
    /// The preprod release it produced.
    pub release: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

/// `SiteStatus`: `GET /v1/sites/:slug`, list items, and the create answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SiteStatus {
    /// The manifest.
    pub manifest: SiteManifest,
    /// The live session.
    pub session: SiteSession,
    /// The newest build.
    pub last_build: Option<BuildStatus>,
    /// Preproduction.
    pub preprod: Preprod,
    /// The last publish.
    pub published: Option<Published>,
}

/// A `{"data": [...]}` list answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DataList<T> {
    /// The items.
    pub data: Vec<T>,
}

/// A surface a delete could not prove and left alone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SkippedSurface {
    /// `preprod` or `prod`.
    pub surface: String,
    /// Why.
    pub reason: String,
}

/// `DELETE /v1/sites/:slug`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DeleteReport {
    /// The slug.
    pub deleted: String,
    /// Whether production was purged.
    pub purged_prod: bool,
    /// Surfaces removed.
    pub removed_surfaces: Vec<String>,
    /// Surfaces skipped.
    pub skipped_surfaces: Vec<SkippedSurface>,
}

/// `POST /v1/sites/:slug/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SessionStarted {
    /// The new session.
    pub session_id: String,
}

/// `POST /v1/sessions/:id/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MessageAccepted {
    /// The session.
    pub session_id: String,
    /// `true`.
    pub accepted: bool,
}

/// `POST /v1/sessions/:id/stop`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SessionStopped {
    /// The session.
    pub session_id: String,
    /// `true`.
    pub stopped: bool,
}

/// A session in `GET /v1/sites/:slug/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SessionSummary {
    /// The session.
    pub session_id: String,
    /// When it started.
    pub started_at: String,
    /// Turns so far.
    pub turns: u64,
    /// Its state.
    pub state: String,
}

/// `POST /v1/sites/:slug/build`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BuildStarted {
    /// The build.
    pub build_id: String,
}

/// `GET /v1/sites/:slug/builds/:id`: the record and its log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BuildRecord {
    /// The record.
    #[serde(flatten)]
    pub status: BuildStatus,
    /// The build's log.
    pub log: String,
}

/// `GET /v1/sites/:slug/preview`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Preview {
    /// The preview URL.
    pub url: String,
    /// The served preprod release.
    pub release: Option<String>,
    /// Always null in the contract.
    pub built_at: Option<String>,
}

/// `POST /v1/sites/:slug/publish` and `.../rollback`: the release now served in production.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Served {
    /// The production release.
    pub release: String,
    /// The production URL.
    pub url: String,
}

/// `GET /v1/sites/:slug/releases`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Releases {
    /// Production releases, newest first.
    pub releases: Vec<String>,
    /// The one served.
    pub current: Option<String>,
}

/// The actor of an audit entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AuditActor {
    /// The user id.
    pub user_id: i64,
    /// The username.
    pub username: String,
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AuditEntry {
    /// When.
    pub ts: String,
    /// Who.
    pub actor: AuditActor,
    /// `create_site`, `delete_site`, `session_start`, ...
    pub action: String,
    /// The site.
    pub site: Option<String>,
    /// The action's details.
    pub detail: Value,
}

/// The state a turn ended in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnState {
    /// The turn finished.
    Idle,
    /// The turn was stopped, or its daemon died.
    Interrupted,
    /// The turn failed.
    Error,
    /// A state this client does not know.
    Other(String),
}

impl TurnState {
    fn parse(text: &str) -> TurnState {
        match text {
            "idle" => TurnState::Idle,
            "interrupted" => TurnState::Interrupted,
            "error" => TurnState::Error,
            other => TurnState::Other(other.to_owned()),
        }
    }

    /// The state as sited writes it.
    pub fn as_str(&self) -> &str {
        match self {
            TurnState::Idle => "idle",
            TurnState::Interrupted => "interrupted",
            TurnState::Error => "error",
            TurnState::Other(other) => other,
        }
    }
}

/// A session event's body, read from its `type`. A body whose fields do not fit its
/// type's shape reads as [`Event::Other`], so a newer sited never breaks a follower.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A turn began.
    TurnStart {
        /// The turn's number.
        turn: u64,
        /// Its prompt.
        prompt: String,
    },
    /// Text from the agent (or the daemon's notices).
    Text {
        /// The text.
        text: String,
    },
    /// A tool use.
    Tool {
        /// The tool.
        name: String,
        /// What it did.
        summary: String,
    },
    /// Files the turn changed.
    FileChange {
        /// Their paths.
        files: Vec<String>,
    },
    /// The agent's result.
    Result {
        /// Whether the agent succeeded.
        ok: bool,
        /// The turn's cost.
        cost_usd: Option<f64>,
        /// The turn's duration.
        duration_ms: Option<f64>,
    },
    /// A turn fault (newest shape: `reason`; older: `message`).
    Error {
        /// The machine reason.
        reason: Option<String>,
        /// The older shape's prose.
        message: Option<String>,
        /// Whether retrying may help.
        retriable: Option<bool>,
    },
    /// The bounded tail of an agent's output.
    AgentOutput {
        /// Which stream.
        source: Option<String>,
        /// The text.
        text: String,
    },
    /// The resume token was dropped.
    ResumeUnavailable {
        /// Why.
        reason: Option<String>,
    },
    /// The turn ended.
    TurnEnd {
        /// Its final state.
        state: TurnState,
    },
    /// A type this client does not know, or a body that does not fit its type.
    Other {
        /// The `type`, when the body has a string one.
        kind: Option<String>,
    },
}

/// The known bodies, as serde reads them.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum KnownBody {
    TurnStart {
        turn: u64,
        prompt: String,
    },
    Text {
        text: String,
    },
    Tool {
        name: String,
        summary: String,
    },
    FileChange {
        files: Vec<String>,
    },
    Result {
        ok: bool,
        #[serde(default, rename = "costUsd")]
        cost_usd: Option<f64>,
        #[serde(default, rename = "durationMs")]
        duration_ms: Option<f64>,
    },
    Error {
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        retriable: Option<bool>,
    },
    AgentOutput {
        #[serde(default)]
        source: Option<String>,
        text: String,
    },
    ResumeUnavailable {
        #[serde(default)]
        reason: Option<String>,
    },
    TurnEnd {
        state: String,
    },
}

/// One stored session event: a JSONL line of the log and an SSE frame's `data:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StoredEvent {
    /// Monotonic per session, from 0.
    pub seq: u64,
    /// When it was appended.
    pub ts: String,
    /// The body: an object with a string `type`.
    pub body: Value,
}

impl StoredEvent {
    /// The body's `type`, when it has a string one.
    pub fn kind(&self) -> Option<&str> {
        self.body.get("type").and_then(Value::as_str)
    }

    /// The body, read by its type.
    pub fn event(&self) -> Event {
        let Ok(known) = KnownBody::deserialize(&self.body) else {
            return Event::Other {
                kind: self.kind().map(str::to_owned),
            };
        };
        match known {
            KnownBody::TurnStart { turn, prompt } => Event::TurnStart { turn, prompt },
            KnownBody::Text { text } => Event::Text { text },
            KnownBody::Tool { name, summary } => Event::Tool { name, summary },
            KnownBody::FileChange { files } => Event::FileChange { files },
            KnownBody::Result {
                ok,
                cost_usd,
                duration_ms,
            } => Event::Result {
                ok,
                cost_usd,
                duration_ms,
            },
            KnownBody::Error {
                reason,
                message,
                retriable,
            } => Event::Error {
                reason,
                message,
                retriable,
            },
            KnownBody::AgentOutput { source, text } => Event::AgentOutput { source, text },
            KnownBody::ResumeUnavailable { reason } => Event::ResumeUnavailable { reason },
            KnownBody::TurnEnd { state } => Event::TurnEnd {
                state: TurnState::parse(&state),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(body: Value) -> Event {
        StoredEvent {
            seq: 0,
            ts: "2026-01-01T00:00:00Z".into(),
            body,
        }
        .event()
    }

    #[test]
    fn event_bodies_are_read_by_type() {
        let cases: Vec<(&str, Value, Event)> = vec![
            (
                "turn_start",
                json!({"type": "turn_start", "turn": 2, "prompt": "p"}),
                Event::TurnStart {
                    turn: 2,
                    prompt: "p".into(),
                },
            ),
            (
                "text",
                json!({"type": "text", "text": "hi"}),
                Event::Text { text: "hi".into() },
            ),
            (
                "tool",
                json!({"type": "tool", "name": "Edit", "summary": "index.html"}),
                Event::Tool {
                    name: "Edit".into(),
                    summary: "index.html".into(),
                },
            ),
            (
                "file_change",
                json!({"type": "file_change", "files": ["a", "b"]}),
                Event::FileChange {
                    files: vec!["a".into(), "b".into()],
                },
            ),
            (
                "result in camelCase",
                json!({"type": "result", "ok": true, "costUsd": 0.5, "durationMs": 1200, "resumeToken": "t"}),
                Event::Result {
                    ok: true,
                    cost_usd: Some(0.5),
                    duration_ms: Some(1200.0),
                },
            ),
            (
                "newest error",
                json!({"type": "error", "reason": "turn_setup_failed", "retriable": false}),
                Event::Error {
                    reason: Some("turn_setup_failed".into()),
                    message: None,
                    retriable: Some(false),
                },
            ),
            (
                "stored error",
                json!({"type": "error", "message": "turn timed out", "retriable": true}),
                Event::Error {
                    reason: None,
                    message: Some("turn timed out".into()),
                    retriable: Some(true),
                },
            ),
            (
                "agent_output",
                json!({"type": "agent_output", "source": "stderr", "text": "boom", "truncated": false}),
                Event::AgentOutput {
                    source: Some("stderr".into()),
                    text: "boom".into(),
                },
            ),
            (
                "resume_unavailable",
                json!({"type": "resume_unavailable", "reason": "agent identity migrated"}),
                Event::ResumeUnavailable {
                    reason: Some("agent identity migrated".into()),
                },
            ),
            (
                "turn_end idle",
                json!({"type": "turn_end", "state": "idle", "resumeToken": "x"}),
                Event::TurnEnd {
                    state: TurnState::Idle,
                },
            ),
            (
                "turn_end unknown state",
                json!({"type": "turn_end", "state": "paused"}),
                Event::TurnEnd {
                    state: TurnState::Other("paused".into()),
                },
            ),
            (
                "unknown type",
                json!({"type": "thinking", "text": "hm"}),
                Event::Other {
                    kind: Some("thinking".into()),
                },
            ),
            (
                "known type, wrong shape",
                json!({"type": "text", "text": 5}),
                Event::Other {
                    kind: Some("text".into()),
                },
            ),
            ("no type", json!({"text": "x"}), Event::Other { kind: None }),
            ("not an object", json!("text"), Event::Other { kind: None }),
        ];
        for (name, body, want) in cases {
            assert_eq!(event(body), want, "{name}");
        }
    }

    #[test]
    fn a_site_status_of_the_contract_is_read() {
        let body = json!({
            "manifest": {"slug": "alpha", "name": "Alpha", "domain": "alpha.example.org",
                "owner_user_id": 42, "created_at": "2026-01-01T00:00:00Z", "driver": "claude_code",
                "template": "basic", "build": {"install": "", "build": "true", "output": "dist"},
                "published": null},
            "session": {"state": "idle", "session_id": null},
            "last_build": {"id": "b1", "outcome": "running", "started_at": "t", "finished_at": null,
                "release": null, "error": null},
            "preprod": {"url": "http://pre.alpha.example.org/", "release": null},
            "published": {"release": "r1", "at": "t", "by": "ana"},
            "added_later": true
        });
        let status: SiteStatus = serde_json::from_value(body).unwrap();
        assert_eq!(status.manifest.slug, "alpha");
        assert_eq!(status.last_build.unwrap().outcome, "running");
        assert_eq!(status.published.unwrap().by, "ana");
        let record: BuildRecord = serde_json::from_value(json!({"id": "b1", "outcome": "failed",
            "started_at": "t", "finished_at": "u", "release": null, "error": "build failed",
            "log": "# install: \n"}))
        .unwrap();
        assert_eq!(record.status.error.as_deref(), Some("build failed"));
        assert_eq!(record.log, "# install: \n");
    }
}
