//! The bodies sited answers with, field for field in the order it writes them. The daemon
//! serializes these and clients deserialize them; unknown fields are ignored when reading, so
//! a daemon that adds a field never breaks an older client.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::DriverId;

/// The `service` name in `/health`, kept from the original daemon because the engine checks it.
pub const SERVICE_NAME: &str = "dedalo-site-builder";

/// One agent driver in `/health` and `/v1/capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverAvailability {
    /// The driver.
    pub id: DriverId,
    /// Whether a turn could use it now.
    pub available: bool,
    /// Its version, once a probe has read one.
    pub version: Option<String>,
    /// Whether it is the instance's default.
    pub is_default: bool,
}

/// `GET /health`: the engine's liveness check and pairing proof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// [`SERVICE_NAME`].
    pub service: String,
    /// The drivers as they are now.
    pub drivers: Vec<DriverAvailability>,
    /// The pairing fingerprint (never the instance's name or its token).
    pub instance_fingerprint: String,
}

/// A site template, as capabilities list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateInfo {
    /// The template's directory name.
    pub id: String,
    /// Display label (the id when the template names none).
    pub label: String,
    /// Description (empty when the template gives none).
    pub description: String,
}

/// The instance's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The most sites.
    pub max_sites: u64,
    /// The most turns running at once.
    pub max_concurrent_sessions: u64,
    /// A site's disk quota in MiB.
    pub site_disk_quota_mb: u64,
}

/// `GET /v1/capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The drivers, as `/health` reports them.
    pub drivers: Vec<DriverAvailability>,
    /// The driver a site gets when its create names none.
    pub default_driver: DriverId,
    /// The templates.
    pub templates: Vec<TemplateInfo>,
    /// The limits.
    pub limits: Limits,
}

fn default_install() -> String {
    "bun install".to_owned()
}
fn default_build() -> String {
    "bun run build".to_owned()
}
fn default_output() -> String {
    "dist".to_owned()
}

/// How a site is built; absent fields take the contract's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildSpec {
    /// The install step (`""` means none).
    #[serde(default = "default_install")]
    pub install: String,
    /// The build step.
    #[serde(default = "default_build")]
    pub build: String,
    /// The output directory, relative to the workspace.
    #[serde(default = "default_output")]
    pub output: String,
}

impl Default for BuildSpec {
    fn default() -> Self {
        Self {
            install: default_install(),
            build: default_build(),
            output: default_output(),
        }
    }
}

/// The release production serves and who published it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    /// The release id.
    pub release: String,
    /// When, ISO-8601.
    pub at: String,
    /// The publishing actor's username.
    pub by: String,
}

/// The template a manifest without a `template` names.
pub const DEFAULT_TEMPLATE: &str = "basic";

fn default_template() -> String {
    DEFAULT_TEMPLATE.to_owned()
}

/// `site.json`, the daemon-owned manifest of a workspace, in the key order create writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteManifest {
    /// The workspace's slug; must equal its directory name.
    pub slug: String,
    /// Display name, 1–200 chars.
    pub name: String,
    /// The site's public domain.
    pub domain: String,
    /// The creator's engine user id; informational only.
    pub owner_user_id: i64,
    /// Creation time, ISO-8601.
    pub created_at: String,
    /// Display copy of the driver (the daemon's driver record is authoritative).
    pub driver: DriverId,
    /// The template it was scaffolded from.
    #[serde(default = "default_template")]
    pub template: String,
    /// How it is built.
    #[serde(default)]
    pub build: BuildSpec,
    /// What production serves, if anything.
    #[serde(default)]
    pub published: Option<Published>,
}

/// A site's live session as the daemon knows it in memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteSession {
    /// `idle`, `running`, `interrupted` or `error`.
    pub state: String,
    /// The live or last session in this process.
    pub session_id: Option<String>,
}

/// Where preproduction is served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preprod {
    /// `http://<prefix>.<domain>/`.
    pub url: String,
    /// The release the served link points at.
    pub release: Option<String>,
}

/// Where a build is: running, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildOutcome {
    /// Not ended yet (or its process died, until the boot sweep).
    Running,
    /// Promoted into preproduction.
    Success,
    /// Ended without a release; the record's `error` says why.
    Failed,
}

impl BuildOutcome {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            BuildOutcome::Running => "running",
            BuildOutcome::Success => "success",
            BuildOutcome::Failed => "failed",
        }
    }
}

/// `BuildStatus`: a build's record, as stored in its workspace and as answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildRecord {
    /// The build id.
    pub id: String,
    /// Where the build is.
    pub outcome: BuildOutcome,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub finished_at: Option<String>,
    /// The preproduction release it made.
    pub release: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

/// `GET /v1/sites/:slug/builds/:id`: the record and its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildWithLog {
    /// The record.
    #[serde(flatten)]
    pub record: BuildRecord,
    /// The build's log.
    pub log: String,
}

/// The line a build log's text starts with when sited sends only its end: how many bytes of
/// the log's start are left out.
const LEFT_OUT_PREFIX: &str = "# the log's first ";
const LEFT_OUT_SUFFIX: &str = " bytes are left out\n";

impl BuildWithLog {
    /// A log's text as sent: the whole log, or (`skipped` > 0) the line saying how many bytes
    /// of its start are left out, then its `tail`.
    pub fn log_text(skipped: u64, tail: &str) -> String {
        if skipped == 0 {
            tail.to_owned()
        } else {
            format!("{LEFT_OUT_PREFIX}{skipped}{LEFT_OUT_SUFFIX}{tail}")
        }
    }

    /// The log read back: the bytes of its start left out (0 for a whole log), and the text
    /// that follows them.
    pub fn log_window(&self) -> (u64, &str) {
        let left_out = self
            .log
            .strip_prefix(LEFT_OUT_PREFIX)
            .and_then(|rest| rest.split_once(LEFT_OUT_SUFFIX))
            .and_then(|(count, tail)| Some((count.parse::<u64>().ok()?, tail)));
        left_out.unwrap_or((0, &self.log))
    }
}

/// `SiteStatus`: `GET /v1/sites/:slug`, the list's items, and the create answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteStatus {
    /// The manifest.
    pub manifest: SiteManifest,
    /// The live session.
    pub session: SiteSession,
    /// The newest build.
    pub last_build: Option<BuildRecord>,
    /// Preproduction.
    pub preprod: Preprod,
    /// The manifest's `published`.
    pub published: Option<Published>,
}

/// A `{"data": [...]}` list answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataList<T> {
    /// The items.
    pub data: Vec<T>,
}

/// A surface a delete could not prove and left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedSurface {
    /// `preprod` or `prod`.
    pub surface: String,
    /// Why it could not be proved.
    pub reason: String,
}

/// `DELETE /v1/sites/:slug`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteReport {
    /// The slug.
    pub deleted: String,
    /// Whether production was asked to go too.
    pub purged_prod: bool,
    /// Surfaces whose link and store were removed.
    pub removed_surfaces: Vec<String>,
    /// Surfaces left alone.
    pub skipped_surfaces: Vec<SkippedSurface>,
}

/// `POST /v1/sites/:slug/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStarted {
    /// The new session.
    pub session_id: String,
}

/// `POST /v1/sessions/:id/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageAccepted {
    /// The session.
    pub session_id: String,
    /// `true`.
    pub accepted: bool,
}

/// `POST /v1/sessions/:id/stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStopped {
    /// The session.
    pub session_id: String,
    /// `true`.
    pub stopped: bool,
}

/// A session in `GET /v1/sites/:slug/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session.
    pub session_id: String,
    /// When it started.
    pub started_at: String,
    /// Turns run so far.
    pub turns: u32,
    /// Its state.
    pub state: String,
}

/// `POST /v1/sites/:slug/build`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildStarted {
    /// The build.
    pub build_id: String,
}

/// `GET /v1/sites/:slug/preview`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    /// `http://<prefix>.<domain>/`.
    pub url: String,
    /// The release preproduction serves.
    pub release: Option<String>,
    /// Always null, as the original.
    pub built_at: Option<String>,
}

/// `POST /v1/sites/:slug/publish` and `.../rollback`: the release production now serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// The production release now served.
    pub release: String,
    /// `<scheme>://<domain>/`.
    pub url: String,
}

/// `GET /v1/sites/:slug/releases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Releases {
    /// Production's releases, newest first.
    pub releases: Vec<String>,
    /// The one served.
    pub current: Option<String>,
}

/// Who asked the engine for a mutation: recorded (audit, owner), never used to authorize.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The engine's user id.
    pub user_id: i64,
    /// The engine's username.
    pub username: String,
}

/// One line of the audit log, and one item of `GET /v1/audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When (ISO-8601).
    pub ts: String,
    /// Who, as the engine said.
    pub actor: Actor,
    /// What: `create_site`, `delete_site`, `session_start`, `session_message`,
    /// `session_stop`, `build`, `publish` or `rollback`.
    pub action: String,
    /// The site it concerned, if any.
    pub site: Option<String>,
    /// The action's details.
    pub detail: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_site_status_of_the_contract_is_read_and_extra_fields_are_ignored() {
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
        assert_eq!(status.manifest.driver, DriverId::ClaudeCode);
        assert_eq!(
            status.last_build.as_ref().map(|b| b.outcome),
            Some(BuildOutcome::Running)
        );
        assert_eq!(status.published.unwrap().by, "ana");
    }

    #[test]
    fn a_build_with_its_log_is_flat_on_the_wire() {
        let wire = json!({"id": "b1", "outcome": "failed", "started_at": "t", "finished_at": "u",
            "release": null, "error": "build failed", "log": "# install: \n"});
        let read: BuildWithLog = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(read.record.error.as_deref(), Some("build failed"));
        assert_eq!(read.log, "# install: \n");
        assert_eq!(serde_json::to_value(&read).unwrap(), wire);
    }

    #[test]
    fn a_log_sent_without_its_start_says_how_much_is_left_out() {
        let record = |log: String| BuildWithLog {
            record: serde_json::from_value(json!({"id": "b1", "outcome": "running",
                "started_at": "t", "finished_at": null, "release": null, "error": null}))
            .unwrap(),
            log,
        };
        let cases = [
            ("whole", 0, "# build: x\nok\n"),
            ("its end", 9_000_000, "ok\n# done\n"),
            (
                "an end that looks like the line",
                12,
                "# the log's first 3 bytes are left out\n",
            ),
        ];
        for (name, skipped, tail) in cases {
            let sent = record(BuildWithLog::log_text(skipped, tail));
            assert_eq!(sent.log_window(), (skipped, tail), "{name}");
        }
        let whole = record("# the log's first many bytes are left out\n".into());
        assert_eq!(whole.log_window(), (0, whole.log.as_str()), "not a count");
    }

    #[test]
    fn a_manifest_without_optional_keys_takes_the_defaults() {
        let read: SiteManifest = serde_json::from_value(json!({"slug": "ab", "name": "A",
            "domain": "a.example", "owner_user_id": 1, "created_at": "t", "driver": "pi"}))
        .unwrap();
        assert_eq!(read.template, DEFAULT_TEMPLATE);
        assert_eq!(read.build, BuildSpec::default());
        assert_eq!(read.published, None);
    }
}
