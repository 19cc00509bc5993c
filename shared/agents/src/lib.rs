//! The coding-agent CLI drivers: each driver's argv, its complete child environment and the
//! files it reads, the judgement of its `--version` and `--help`, and the parsers from its
//! stdout to the session events of the site daemon's contract.
//!
//! Pure: nothing here starts a process or touches a file. The daemon reads and writes through
//! its confined filesystem layer and runs everything through its run seam.
//!
//! Parts: [`DriverId`] and [`Capabilities`]; [`plan`] (a turn's argv,
//! environment and files); [`parse`] (line splitting and the per-driver parsers); [`probe`]
//! (what to ask a binary and how to judge its answers); [`canary`] (opencode's proof that its
//! switches close its configuration sources). A parser's events are [`SessionEvent`]s, the
//! contract's one event type: a driver's text, tool uses, changed files and result.
//!
//! Three drivers run somebody else's CLI (Claude Code, opencode, pi); the fourth, `atelier`,
//! runs Atelier's own `atelier-agent`, whose output lines its parser reads.

pub mod canary;
pub mod parse;
pub mod plan;
pub mod probe;

pub use canary::CanaryProbe;
pub use parse::{
    is_driver_event, line_parser, AtelierJson, ClaudeStreamJson, LineParser, LineSplitter,
    OpencodeJson,
};
pub use plan::{
    is_resume_token, opencode_db, plan_turn, proxy_env, redacted, turn_flags,
    validate_opencode_env, validate_pi_env, DriverCredentials, McpAttachment, ModelEndpoint,
    OpenAiModel, PlanError, PlannedFile, TurnPlan, TurnRequest, ATELIER_API_KEY_CREDENTIAL,
    ATELIER_API_KEY_ENV, CONFINED_MCP_URL, MAX_BRIEF_BYTES, MCP_SERVER_NAME, OPENCODE_DB_FILE,
};
pub use probe::{
    help_argv, judge_help, judge_opencode_accounts, judge_version, opencode_accounts_argv,
    probe_env, version_argv, ProbeRefusal,
};

/// The agent CLIs the contract knows (one definition, shared with every end of the contract),
/// and what the parsers make of a driver's lines: the contract's session events.
pub use atelier_site_api::{DriverId, SessionEvent};

/// What a driver can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// A later turn can resume the CLI's own session.
    pub resume: bool,
    /// It takes an MCP server over HTTP.
    pub mcp_http: bool,
    /// It reports the files it changed (else only git's backstop does).
    pub reports_file_changes: bool,
}

/// What `driver` can do.
pub fn capabilities(driver: DriverId) -> Capabilities {
    let (resume, mcp_http, reports_file_changes) = match driver {
        DriverId::ClaudeCode => (true, true, true),
        DriverId::Opencode => (true, true, false),
        // pi resumes its own session file; it speaks no MCP.
        DriverId::Pi => (true, false, false),
        // atelier-agent keeps its conversation under the resume token, is an MCP client of
        // the turn's server and says each file it writes.
        DriverId::Atelier => (true, true, true),
    };
    Capabilities {
        resume,
        mcp_http,
        reports_file_changes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_and_capabilities() {
        for driver in DriverId::ALL {
            assert_eq!(DriverId::parse(driver.as_str()), Some(driver));
            assert_eq!(
                serde_json::to_value(driver).unwrap(),
                json!(driver.as_str())
            );
        }
        assert_eq!(DriverId::parse("gpt"), None);
        assert!(capabilities(DriverId::ClaudeCode).reports_file_changes);
        assert!(!capabilities(DriverId::Pi).mcp_http);
        assert!(capabilities(DriverId::Atelier).reports_file_changes);
        assert!(capabilities(DriverId::Atelier).resume);
        assert_eq!(DriverId::parse("atelier"), Some(DriverId::Atelier));
        assert_eq!(
            DriverId::ALL.map(DriverId::as_str),
            ["claude_code", "opencode", "pi", "atelier"],
            "the order /health lists them in"
        );
    }
}
