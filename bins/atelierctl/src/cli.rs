//! The command line: arguments, the commands over a [`Client`], their output, the exit codes
//! ([`Exit`]) and the one [`Failure`] every command can end in.
//!
//! A failure is told on stderr as `error: <reason>: <what>`; with `--json` it is also one JSON
//! object on stdout ([`FailureJson`]) whose `reason` is stable: sited's problem reason passed
//! through, or the client's own. [`Failure::verdict`] is the one place a failure gets its
//! reason and its exit code.

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use atelier_clidocs::progress::{self, Mode, ProgressLine};
use atelier_site_api::DriverId;

use clap::{Args, Parser, Subcommand, ValueEnum};
use futures_util::StreamExt as _;
use serde::Serialize;

use crate::render;
use atelier_site_client::client::{Client, Reply};
use atelier_site_client::config::{self, ConfigError, TargetOptions};
use atelier_site_client::error::{Error, Invalid};
use atelier_site_client::model::{
    AuditEntry, BuildOutcome, BuildStarted, BuildWithLog, Capabilities, DataList, DeleteReport,
    Health, MessageAccepted, Preview, Releases, Served, SessionEvent, SessionStarted,
    SessionStopped, SessionSummary, SiteStatus, TurnState,
};
use atelier_site_client::params::{check_required, check_text, Id, Slug};
use atelier_site_client::routes::{NewSite, Route};
use atelier_site_client::sse::StreamItem;

/// How often `build start --wait` asks for the build's record.
const BUILD_POLL: Duration = Duration::from_secs(1);

const EXAMPLES: &str = "\
Connecting:
  The client pairs like the engine: it first asks GET /health without credentials and goes on
  only if the instance fingerprint is the one --instance and the token make. A mismatch sends
  nothing else. The socket defaults to /run/atelier/<instance>/sited.sock.

  atelierctl --instance example --token-file /etc/atelier/example/credentials/SERVICE_TOKEN health
  atelierctl --engine-env /etc/atelier/example/engine.env.fragment \\
             --token-file /etc/atelier/example/credentials/SERVICE_TOKEN sites list

Examples (connection flags left out):
  atelierctl capabilities
  atelierctl sites create museo --name 'Museo de Arte' --domain museo.example.org
  atelierctl sites show museo --json
  atelierctl session start museo 'Make the home page list the collections' --follow
  atelierctl session send 6f1c2a9e-4b7d-4e0a-9c3f-2d8e5b1a7c40 'Now add a search box' --follow
  atelierctl session follow 6f1c2a9e-4b7d-4e0a-9c3f-2d8e5b1a7c40 --after 41
  atelierctl session stop 6f1c2a9e-4b7d-4e0a-9c3f-2d8e5b1a7c40
  atelierctl build start museo --wait
  atelierctl build show museo 20260715T102030123Z-000001 --log
  atelierctl publish museo --note 'spring exhibition' --confirm
  atelierctl releases museo
  atelierctl rollback museo 20260701T090000000Z-000003 --confirm
  atelierctl audit --site museo --limit 20
  atelierctl sites delete museo --purge-prod --confirm

Output:
  Tables and lines for people; with --json, the daemon's JSON body exactly as sent, one line
  (a stream prints each stored event's JSON line as received; --follow and --wait print the
  start's answer first). Errors go to stderr as
  'error: <reason or title> (<status>): <detail>' for sited's refusals. With --json a failure
  is also one JSON object on stdout: {\"exit\", \"reason\", \"message\"}, and sited's
  \"status\" and \"type\" when it refused with a problem.

  atelierctl --json sites show museo | jq -r '.reason // .manifest.domain'

Following and waiting:
  Ctrl-C (or a closed terminal) ends only the client: a turn followed with --follow, or a
  build waited for with --wait, goes on running in sited. 'session stop <session>' stops a
  turn; 'session follow' or 'build show' picks either up again.";

const FOLLOW_EXAMPLE: &str = "\
Output, one line per event:
     0  turn_start         turn 1: Make the home page list the collections
     1  text               I'll start with src/main.ts
     2  tool               Edit: src/main.ts
     3  file_change        1 file(s): src/main.ts
     4  result             ok, cost $0.0412, 38.2 s
     5  turn_end           state idle

sited replays every event after --after, then tails a running turn and closes after its
turn_end; the last turn_end decides the exit status. Text written by the agent is shown
escaped: no control character reaches the terminal. With --json each line is the stored
event as sent ({\"seq\":..,\"ts\":..,\"body\":{..}}).

  atelierctl session follow 6f1c2a9e-4b7d-4e0a-9c3f-2d8e5b1a7c40
  atelierctl session follow 6f1c2a9e-4b7d-4e0a-9c3f-2d8e5b1a7c40 --after 41 --json | jq .body";

/// atelierctl: the operator's client for atelier-sited.
#[derive(Debug, Parser)]
#[command(
    name = "atelierctl",
    version,
    about = "The operator's client for atelier-sited: pairs through /health, then drives every route",
    after_long_help = long_help(),
    after_help = "Run 'atelierctl --help' for examples and exit codes."
)]
pub struct Cli {
    /// Where sited is and how to pair with it.
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Print the daemon's JSON body exactly as sent (one line) instead of tables.
    #[arg(long, global = true, help_heading = "Output")]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The target and the actor.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub struct ConnectionArgs {
    /// sited's unix socket [default: /run/atelier/<instance>/sited.sock].
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The instance the token belongs to (checked by the pairing fingerprint).
    #[arg(long, global = true, value_name = "NAME")]
    pub instance: Option<String>,
    /// The instance's root-only SERVICE_TOKEN credential file (refused if world-readable).
    #[arg(long, global = true, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The engine's env file, e.g. the provisioner's engine.env.fragment: its
    /// DEDALO_SITE_BUILDER_{INSTANCE,SOCKET} (and _TOKEN, _TIMEOUT_MS when present) are
    /// read, other keys ignored, an unknown DEDALO_SITE_BUILDER_* key refused. Flags win.
    #[arg(long, global = true, value_name = "FILE")]
    pub engine_env: Option<PathBuf>,
    /// The mount prefix of sited's routes.
    #[arg(long, global = true, value_name = "PATH", default_value = config::DEFAULT_BASE_PATH)]
    pub base_path: String,
    /// The actor's user id, recorded in the audit log [default: your uid; under sudo,
    /// SUDO_UID].
    #[arg(long, global = true, value_name = "N", allow_negative_numbers = true)]
    pub actor_id: Option<i64>,
    /// The actor's username [default: your login name; under sudo, SUDO_USER].
    #[arg(long, global = true, value_name = "NAME")]
    pub actor_name: Option<String>,
    /// Seconds a control call (pairing included) may take; streams have no deadline
    /// [default: DEDALO_SITE_BUILDER_TIMEOUT_MS of the --engine-env file, else 30].
    #[arg(long, global = true, value_name = "SECONDS", value_parser = parse_seconds)]
    pub timeout: Option<Duration>,
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a number of seconds in (0, 86400]")),
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pair and show sited's health and drivers (GET /health).
    Health,
    /// Drivers, templates and limits (GET /v1/capabilities).
    Capabilities,
    /// Create, list, show and delete sites.
    #[command(subcommand)]
    Sites(SitesCommand),
    /// Agent sessions: start, send, stop, list, follow.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Builds to preproduction.
    #[command(subcommand)]
    Build(BuildCommand),
    /// A site's preview URL and release (GET /v1/sites/:slug/preview).
    Preview {
        /// The site.
        slug: String,
    },
    /// Copy the current preproduction release to production (POST .../publish).
    Publish {
        /// The site.
        slug: String,
        /// A note for the audit log (sited keeps 500 characters).
        #[arg(long)]
        note: Option<String>,
        /// Required: publishing changes the public site.
        #[arg(long)]
        confirm: bool,
    },
    /// A site's production releases, newest first; '*' marks the served one.
    Releases {
        /// The site.
        slug: String,
    },
    /// Serve an earlier production release again (POST .../rollback).
    Rollback {
        /// The site.
        slug: String,
        /// The release (see 'releases').
        release: String,
        /// Required: a rollback changes the public site.
        #[arg(long)]
        confirm: bool,
    },
    /// The audit log, newest first (GET /v1/audit).
    Audit {
        /// Only this site's entries.
        #[arg(long, value_name = "SLUG")]
        site: Option<String>,
        /// At most this many entries, 1 to 1000 [default: 100].
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
}

/// `sites ...`.
#[derive(Debug, Subcommand)]
pub enum SitesCommand {
    /// Every site, by slug.
    List,
    /// Create a site from a template (it must be declared in the instance's sites.json).
    Create {
        /// The slug: 2-40 of a-z, 0-9 and '-', starting with a letter.
        slug: String,
        /// The display name.
        #[arg(long)]
        name: String,
        /// The site's domain, as declared.
        #[arg(long)]
        domain: String,
        /// The template [default: sited's, basic].
        #[arg(long)]
        template: Option<String>,
        /// The agent driver [default: the instance's].
        #[arg(long, value_enum)]
        driver: Option<Driver>,
    },
    /// One site's status.
    Show {
        /// The site.
        slug: String,
    },
    /// Delete a site's workspace (its sources and their history) and preproduction;
    /// production stays unless purged.
    Delete {
        /// The site.
        slug: String,
        /// Also remove production.
        #[arg(long)]
        purge_prod: bool,
        /// Required: the workspace and its history are gone for good.
        #[arg(long)]
        confirm: bool,
    },
}

/// An agent driver.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Driver {
    /// Claude Code.
    #[value(name = "claude_code")]
    ClaudeCode,
    /// opencode.
    #[value(name = "opencode")]
    Opencode,
    /// pi.
    #[value(name = "pi")]
    Pi,
    /// Atelier's own agent, atelier-agent.
    #[value(name = "atelier")]
    Atelier,
}

impl From<Driver> for DriverId {
    fn from(driver: Driver) -> DriverId {
        match driver {
            Driver::ClaudeCode => DriverId::ClaudeCode,
            Driver::Opencode => DriverId::Opencode,
            Driver::Pi => DriverId::Pi,
            Driver::Atelier => DriverId::Atelier,
        }
    }
}

/// `session ...`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Start a session on a site with its first prompt; prints the session id.
    Start {
        /// The site.
        slug: String,
        /// The prompt (or --prompt-file).
        #[arg(
            required_unless_present = "prompt_file",
            conflicts_with = "prompt_file"
        )]
        prompt: Option<String>,
        /// Read the prompt from a file ('-': standard input).
        #[arg(long, value_name = "FILE")]
        prompt_file: Option<PathBuf>,
        /// The agent driver [default: the site's].
        #[arg(long, value_enum)]
        driver: Option<Driver>,
        /// Then follow the turn to its end (exit status as 'session follow'); with --json
        /// the start's body is the first line, each event's a line after it.
        #[arg(long)]
        follow: bool,
    },
    /// Send a follow-up message: the session's next turn.
    Send {
        /// The session.
        session: String,
        /// The message (or --message-file).
        #[arg(
            required_unless_present = "message_file",
            conflicts_with = "message_file"
        )]
        message: Option<String>,
        /// Read the message from a file ('-': standard input).
        #[arg(long, value_name = "FILE")]
        message_file: Option<PathBuf>,
        /// Then follow the new turn to its end. The session's log is read first, which
        /// ends at once as no turn is running.
        #[arg(long)]
        follow: bool,
    },
    /// Stop the session's running turn.
    Stop {
        /// The session.
        session: String,
    },
    /// A site's sessions, newest first.
    List {
        /// The site.
        slug: String,
    },
    /// Render a session's events live, one line each (seq, type, the salient field), until
    /// sited closes the stream. Exit 0 if the last turn shown ended idle, 4 if in error or
    /// interrupted; 0, with a note, when no turn ended after --after.
    #[command(after_long_help = FOLLOW_EXAMPLE)]
    Follow {
        /// The session.
        session: String,
        /// Only events with a seq above N (-1: all).
        #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
        after: i64,
    },
}

/// `build ...`.
#[derive(Debug, Subcommand)]
pub enum BuildCommand {
    /// Start a build of the site's workspace into preproduction; prints the build id.
    Start {
        /// The site.
        slug: String,
        /// Then wait for the build to end (exit 0 on success, 4 on failure); with --json,
        /// the started answer's line, then the record's.
        #[arg(long)]
        wait: bool,
    },
    /// One build's record.
    Show {
        /// The site.
        slug: String,
        /// The build.
        build: String,
        /// Also print the build's log.
        #[arg(long)]
        log: bool,
    },
}

/// The exit statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// Success.
    Ok = 0,
    /// sited refused.
    Refused = 1,
    /// Usage or configuration.
    Usage = 2,
    /// Pairing or transport.
    Transport = 3,
    /// The followed turn or the waited build did not succeed.
    Unsuccessful = 4,
}

// === impl Exit ===

impl Exit {
    /// Every exit status, in numeric order.
    pub const ALL: [Exit; 5] = [
        Exit::Ok,
        Exit::Refused,
        Exit::Usage,
        Exit::Transport,
        Exit::Unsuccessful,
    ];

    /// The numeric status.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// What it means, and the reasons a failure with it names, for `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success (a followed turn ended idle, a waited build succeeded)",
            Exit::Refused => {
                "sited refused the call (a problem answer) or its stream reported an error\n\
                 reason: sited's problem reason, else its type (not_found, unauthorized,\n\
                 validation_error, ...); a stream's own reason, else stream_error"
            }
            Exit::Usage => {
                "usage or configuration error; nothing was sent\n\
                 reason: usage, invalid_slug, invalid_id, text_required, text_too_long,\n\
                 confirmation_required, invalid_actor, invalid_cursor, invalid_limit,\n\
                 input_unreadable, setting_missing, invalid_instance, invalid_base_path,\n\
                 config_unreadable, not_a_config_file, config_syntax, unknown_config_key,\n\
                 duplicate_config_key, bad_config_value, token_exposed, bad_token,\n\
                 socket_required"
            }
            Exit::Transport => {
                "pairing or transport failure\n\
                 reason: instance_mismatch, unreachable, timeout, bad_response, stream_lost,\n\
                 output_failed, runtime_failed"
            }
            Exit::Unsuccessful => {
                "the followed turn ended in error or was interrupted, or the waited build failed\n\
                 reason: turn_error, turn_interrupted, build_failed"
            }
        }
    }
}

/// The long help's tail: the examples, then every exit status from [`Exit`].
fn long_help() -> String {
    let mut text = format!("{EXAMPLES}\n\nExit status:\n");
    for exit in Exit::ALL {
        let mut lines = exit.meaning().lines();
        let _ = writeln!(
            text,
            "  {}  {}",
            exit.code(),
            lines.next().unwrap_or_default()
        );
        for line in lines {
            let _ = writeln!(text, "     {line}");
        }
    }
    text
}

/// Why a command failed. Printed as `error: {failure}`; [`Failure::verdict`] names its reason
/// and exit status.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The command line does not parse.
    #[error("{}", usage_message(.0))]
    Usage(clap::Error),
    /// A call failed or was refused before anything was sent.
    #[error(transparent)]
    Call(#[from] Error),
    /// The configuration is refused; nothing was sent.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A prompt or message file (or standard input) could not be read.
    #[error("reading the {what} from {}: {source}", input_name(.path))]
    Input {
        /// Which text.
        what: &'static str,
        /// The file; `-` for standard input.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The output could not be written.
    #[error("writing the output: {0}")]
    Output(#[source] std::io::Error),
    /// sited ended a session's stream with an error frame.
    #[error("{reason}: {}", .message.as_deref().unwrap_or("sited ended the session's stream with an error"))]
    Stream {
        /// The frame's reason (or code), else `stream_error`.
        reason: String,
        /// The frame's sentence for a person, when it has one.
        message: Option<String>,
    },
    /// The followed session's last turn did not end idle.
    #[error("turn_{0}: the session's last turn ended {0}")]
    Turn(String),
    /// The waited build did not succeed.
    #[error("build_{outcome}: {error}")]
    Build {
        /// The build's outcome as sited recorded it.
        outcome: String,
        /// Its error, or `no error recorded`.
        error: String,
    },
    /// The async runtime could not start.
    #[error("runtime_failed: starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

fn input_name(path: &std::path::Path) -> String {
    if path == std::path::Path::new("-") {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    }
}

fn usage_message(error: &clap::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").to_owned()
}

// === impl Failure ===

impl Failure {
    /// The one mapping from every failure to its exit status and its stable reason.
    pub fn verdict(&self) -> (Exit, Cow<'_, str>) {
        match self {
            Failure::Usage(_) => (Exit::Usage, "usage".into()),
            Failure::Call(error) => {
                let exit = match error {
                    Error::Problem(_) => Exit::Refused,
                    Error::Invalid(_) => Exit::Usage,
                    Error::InstanceMismatch { .. }
                    | Error::Unreachable { .. }
                    | Error::Timeout { .. }
                    | Error::BadResponse { .. }
                    | Error::StreamLost(_) => Exit::Transport,
                };
                let reason = match error {
                    Error::Problem(problem) => match &problem.reason {
                        Some(reason) => Cow::Borrowed(reason.as_str()),
                        None => Cow::Owned(snake(problem.type_name(), "problem")),
                    },
                    other => Cow::Borrowed(other.code()),
                };
                (exit, reason)
            }
            Failure::Config(error) => {
                let reason = match error {
                    ConfigError::Read { .. } => "config_unreadable",
                    ConfigError::NotAConfigFile { .. } => "not_a_config_file",
                    ConfigError::Syntax { .. } => "config_syntax",
                    ConfigError::UnknownKey { .. } => "unknown_config_key",
                    ConfigError::DuplicateKey { .. } => "duplicate_config_key",
                    ConfigError::BadValue { .. } => "bad_config_value",
                    ConfigError::TokenExposed { .. } => "token_exposed",
                    ConfigError::BadToken { .. } => "bad_token",
                    ConfigError::UrlOnly { .. } => "socket_required",
                    ConfigError::Missing { .. } => "setting_missing",
                    ConfigError::BadInstance(_) => "invalid_instance",
                    ConfigError::BadBasePath(_) => "invalid_base_path",
                    ConfigError::Actor(invalid) => invalid.reason(),
                };
                (Exit::Usage, reason.into())
            }
            Failure::Input { .. } => (Exit::Usage, "input_unreadable".into()),
            Failure::Output(_) => (Exit::Transport, "output_failed".into()),
            Failure::Stream { reason, .. } => (Exit::Refused, Cow::Borrowed(reason)),
            Failure::Turn(state) => (
                Exit::Unsuccessful,
                format!("turn_{}", snake(state, "ended")).into(),
            ),
            Failure::Build { outcome, .. } => (
                Exit::Unsuccessful,
                format!("build_{}", snake(outcome, "unsuccessful")).into(),
            ),
            Failure::Runtime(_) => (Exit::Transport, "runtime_failed".into()),
        }
    }

    /// The exit status.
    pub fn exit(&self) -> Exit {
        self.verdict().0
    }

    /// The stable snake_case reason.
    pub fn reason(&self) -> Cow<'_, str> {
        self.verdict().1
    }

    /// Words for a person, without the reason the text form leads with.
    pub fn message(&self) -> String {
        if let Failure::Call(Error::Problem(problem)) = self {
            return if problem.detail.is_empty() {
                problem.title.clone()
            } else {
                problem.detail.clone()
            };
        }
        let text = self.to_string();
        let reason = self.reason();
        match text
            .strip_prefix(reason.as_ref())
            .and_then(|t| t.strip_prefix(": "))
        {
            Some(rest) => rest.to_owned(),
            None => text,
        }
    }

    /// Whether the reader of the output went away (`| head`): nothing more to say to anyone.
    fn reader_gone(&self) -> bool {
        matches!(self, Failure::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// `text` as a reason: lowercase, `-` and anything else outside `[a-z0-9_.]` made `_`;
/// `fallback` when empty.
fn snake(text: &str, fallback: &str) -> String {
    let out: String = text
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_' | '.') => c,
            _ => '_',
        })
        .collect();
    if out.is_empty() {
        fallback.to_owned()
    } else {
        out
    }
}

impl From<Invalid> for Failure {
    fn from(invalid: Invalid) -> Self {
        Failure::Call(Error::Invalid(invalid))
    }
}

/// A failure as `--json` prints it: one object, one line, on stdout.
#[derive(Debug, Serialize)]
pub struct FailureJson<'a> {
    /// The exit status's name.
    pub exit: Exit,
    /// The stable reason.
    pub reason: Cow<'a, str>,
    /// Words for a person.
    pub message: String,
    /// sited's HTTP status, when it refused with a problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// sited's problem `type`, when it refused with one.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub r#type: Option<&'a str>,
}

impl<'a> FailureJson<'a> {
    /// The object for `failure`.
    pub fn of(failure: &'a Failure) -> Self {
        let (exit, reason) = failure.verdict();
        let problem = match failure {
            Failure::Call(error) => error.problem(),
            _ => None,
        };
        FailureJson {
            exit,
            reason,
            message: failure.message(),
            status: problem.map(|p| p.status),
            r#type: problem.map(|p| p.r#type.as_str()),
        }
    }
}

/// Whether `--json` is among the arguments (before a `--`), so that a command line clap refuses
/// is answered in JSON too.
fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Parses `args` (program name first) and runs them; a command line clap refuses is a
/// [`Failure::Usage`], in JSON too under `--json`.
pub fn run_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => run(cli),
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = e.print();
            let failure = Failure::Usage(e);
            if wants_json(&args) {
                print_json(&failure);
            }
            ExitCode::from(failure.exit().code())
        }
    }
}

fn print_json(failure: &Failure) {
    if let Ok(line) = serde_json::to_string(&FailureJson::of(failure)) {
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    }
}

/// Runs the command line, printing to stdout and stderr, and returns the exit status.
pub fn run(cli: Cli) -> ExitCode {
    let json = cli.json;
    let result = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(execute_showing(
            cli,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
            ProgressLine::for_stderr(),
        )),
        Err(e) => Err(Failure::Runtime(e)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) if failure.reader_gone() => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", render::clean(&failure.to_string()));
            if json {
                print_json(&failure);
            }
            ExitCode::from(failure.exit().code())
        }
    }
}

/// Runs one command, writing its output to `out`, with no progress line.
pub async fn execute(cli: Cli, out: &mut dyn Write) -> Result<(), Failure> {
    execute_showing(
        cli,
        out,
        &mut std::io::sink(),
        ProgressLine::new(Mode::Plain, 0),
    )
    .await
}

/// [`execute`], with `progress` drawn on `err` while `build start --wait` waits for the build
/// (it draws nothing unless `err` is a terminal: see [`ProgressLine::for_stderr`]).
pub async fn execute_showing(
    cli: Cli,
    out: &mut dyn Write,
    err: &mut dyn Write,
    progress: ProgressLine,
) -> Result<(), Failure> {
    let c = &cli.connection;
    let options = TargetOptions {
        socket: c.socket.clone(),
        instance: c.instance.clone(),
        token_file: c.token_file.clone(),
        engine_env: c.engine_env.clone(),
        base_path: Some(c.base_path.clone()),
        timeout: c.timeout,
    };
    // Everything that can be refused locally is refused before the first byte is sent.
    let plan = Plan::of(&cli.command)?;
    let (target, timeout) = config::resolve(&options)?;
    let actor = config::actor(c.actor_id, c.actor_name.as_deref())?;
    let client = Client::new(target, actor).with_timeout(timeout);
    let mut output = Output {
        out,
        json: cli.json,
        progress,
        err,
    };
    plan.run(&client, &mut output).await
}

/// Where results go.
struct Output<'a> {
    out: &'a mut dyn Write,
    json: bool,
    /// The line that shows a long wait, drawn on `err`; erased before anything is written.
    progress: ProgressLine,
    err: &'a mut dyn Write,
}

impl Output<'_> {
    fn write(&mut self, text: &str) -> Result<(), Failure> {
        self.clear_progress();
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(Failure::Output)
    }

    /// Shows `label` on the progress line, running for `elapsed`. The line is a courtesy: a
    /// stderr that cannot be written fails nothing.
    fn show_progress(&mut self, label: &str, elapsed: Duration) {
        let _ = self.progress.show(self.err, label, elapsed);
    }

    /// Erases the progress line, if it is drawn.
    fn clear_progress(&mut self) {
        let _ = self.progress.clear(self.err);
    }

    /// Tells the operator on stderr what a wait or a follow is doing about a fault. A courtesy,
    /// like the progress line: a stderr that cannot be written fails nothing.
    fn note(&mut self, text: &str) {
        self.clear_progress();
        let _ = writeln!(self.err, "note: {text}").and_then(|()| self.err.flush());
    }

    /// Waits `period`, keeping the progress line (if any) current with `label` and the time
    /// since `started`.
    async fn wait_showing(&mut self, period: Duration, label: &str, started: Instant) {
        if !self.progress.is_live() {
            tokio::time::sleep(period).await;
            return;
        }
        let until = Instant::now() + period;
        loop {
            self.show_progress(label, started.elapsed());
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.min(progress::TICK)).await;
        }
    }

    /// The body as sent (one line), or the rendering of its shape.
    fn reply<T: serde::de::DeserializeOwned>(
        &mut self,
        reply: &Reply,
        render: impl FnOnce(T) -> String,
    ) -> Result<(), Failure> {
        if self.json {
            self.write(&format!("{}\n", reply.text().trim_end()))
        } else {
            let value: T = reply.parse()?;
            self.write(&render(value))
        }
    }
}

/// A command with its arguments checked, ready to run.
enum Plan {
    Call(Route),
    StartSession {
        route: Route,
        follow: bool,
    },
    SendMessage {
        route: Route,
        session: Id,
        follow: bool,
    },
    Follow {
        session: Id,
        after: i64,
    },
    StartBuild {
        slug: Slug,
        wait: bool,
    },
    ShowBuild {
        route: Route,
        log: bool,
    },
}

impl Plan {
    fn of(command: &Command) -> Result<Plan, Failure> {
        let slug = atelier_site_client::params::slug;
        let session = |text: &str| Id::parse("session", text);
        Ok(match command {
            Command::Health => Plan::Call(Route::Health),
            Command::Capabilities => Plan::Call(Route::Capabilities),
            Command::Sites(SitesCommand::List) => Plan::Call(Route::ListSites),
            Command::Sites(SitesCommand::Create {
                slug: s,
                name,
                domain,
                template,
                driver,
            }) => {
                check_required("name", name)?;
                check_required("domain", domain)?;
                Plan::Call(Route::CreateSite(NewSite {
                    slug: slug(s)?,
                    name: name.clone(),
                    domain: domain.clone(),
                    template: template.clone(),
                    driver: driver.map(DriverId::from),
                }))
            }
            Command::Sites(SitesCommand::Show { slug: s }) => Plan::Call(Route::GetSite(slug(s)?)),
            Command::Sites(SitesCommand::Delete {
                slug: s,
                purge_prod,
                confirm,
            }) => {
                if !confirm {
                    return Err(Invalid::ConfirmationRequired(if *purge_prod {
                        "deleting the site with production (--purge-prod)"
                    } else {
                        "deleting the site's workspace and its history"
                    })
                    .into());
                }
                Plan::Call(Route::DeleteSite {
                    slug: slug(s)?,
                    purge_prod: *purge_prod,
                })
            }
            Command::Session(SessionCommand::Start {
                slug: s,
                prompt,
                prompt_file,
                driver,
                follow,
            }) => {
                let prompt = text_argument(prompt.as_deref(), prompt_file.as_deref(), "prompt")?;
                Plan::StartSession {
                    route: Route::StartSession {
                        slug: slug(s)?,
                        prompt,
                        driver: driver.map(DriverId::from),
                    },
                    follow: *follow,
                }
            }
            Command::Session(SessionCommand::Send {
                session: id,
                message,
                message_file,
                follow,
            }) => {
                let message =
                    text_argument(message.as_deref(), message_file.as_deref(), "message")?;
                let id = session(id)?;
                Plan::SendMessage {
                    route: Route::SendMessage {
                        session: id.clone(),
                        message,
                    },
                    session: id,
                    follow: *follow,
                }
            }
            Command::Session(SessionCommand::Stop { session: id }) => {
                Plan::Call(Route::StopSession(session(id)?))
            }
            Command::Session(SessionCommand::List { slug: s }) => {
                Plan::Call(Route::ListSessions(slug(s)?))
            }
            Command::Session(SessionCommand::Follow { session: id, after }) => {
                if *after < -1 {
                    return Err(Invalid::Cursor(*after).into());
                }
                Plan::Follow {
                    session: session(id)?,
                    after: *after,
                }
            }
            Command::Build(BuildCommand::Start { slug: s, wait }) => Plan::StartBuild {
                slug: slug(s)?,
                wait: *wait,
            },
            Command::Build(BuildCommand::Show {
                slug: s,
                build,
                log,
            }) => Plan::ShowBuild {
                route: Route::GetBuild {
                    slug: slug(s)?,
                    build: Id::parse("build", build)?,
                },
                log: *log,
            },
            Command::Preview { slug: s } => Plan::Call(Route::Preview(slug(s)?)),
            Command::Publish {
                slug: s,
                note,
                confirm,
            } => {
                if !confirm {
                    return Err(Invalid::ConfirmationRequired("publishing").into());
                }
                Plan::Call(Route::Publish {
                    slug: slug(s)?,
                    note: note.clone(),
                })
            }
            Command::Releases { slug: s } => Plan::Call(Route::Releases(slug(s)?)),
            Command::Rollback {
                slug: s,
                release,
                confirm,
            } => {
                if !confirm {
                    return Err(Invalid::ConfirmationRequired("rolling production back").into());
                }
                Plan::Call(Route::Rollback {
                    slug: slug(s)?,
                    release: Id::parse("release", release)?,
                })
            }
            Command::Audit { site, limit } => {
                Invalid::check_audit_limit(*limit)?;
                Plan::Call(Route::Audit {
                    site: site.as_deref().map(slug).transpose()?,
                    limit: *limit,
                })
            }
        })
    }

    async fn run(self, client: &Client, out: &mut Output<'_>) -> Result<(), Failure> {
        match self {
            Plan::Call(route) => {
                let reply = client.send(&route).await?;
                print_reply(&route, &reply, out)
            }
            Plan::StartSession { route, follow } => {
                let reply = client.send(&route).await?;
                let started: SessionStarted = reply.parse()?;
                if out.json {
                    out.write(&format!("{}\n", reply.text().trim_end()))?;
                } else {
                    out.write(&format!("{}\n", render::clean(&started.session_id)))?;
                }
                if !follow {
                    return Ok(());
                }
                let session = Id::parse("session", &started.session_id)?;
                follow_session(client, &session, -1, out).await
            }
            Plan::SendMessage {
                route,
                session,
                follow,
            } => {
                // The log's end before the new turn: sited replays it and closes at once
                // while no turn runs (if one does, the message is refused anyway).
                let after = if follow {
                    Some(last_seq(client, &session).await?)
                } else {
                    None
                };
                let reply = client.send(&route).await?;
                out.reply(&reply, |m: MessageAccepted| {
                    format!("accepted: session {}\n", render::clean(&m.session_id))
                })?;
                match after {
                    Some(after) => follow_session(client, &session, after, out).await,
                    None => Ok(()),
                }
            }
            Plan::Follow { session, after } => follow_session(client, &session, after, out).await,
            Plan::StartBuild { slug, wait } => {
                let reply = client.send(&Route::StartBuild(slug.clone())).await?;
                let started: BuildStarted = reply.parse()?;
                if !wait {
                    return out.reply(&reply, |b: BuildStarted| {
                        format!("{}\n", render::clean(&b.build_id))
                    });
                }
                // The id first, in JSON too: a wait that fails still leaves it to pick up.
                out.reply(&reply, |b: BuildStarted| {
                    format!("build {} started\n", render::clean(&b.build_id))
                })?;
                let build = Id::parse("build", &started.build_id)?;
                wait_for_build(client, slug, build, out).await
            }
            Plan::ShowBuild { route, log } => {
                let reply = client.send(&route).await?;
                out.reply(&reply, |b: BuildWithLog| render::build(&b, log))
            }
        }
    }
}

/// Prints a control call's answer.
fn print_reply(route: &Route, reply: &Reply, out: &mut Output<'_>) -> Result<(), Failure> {
    match route {
        Route::Health => out.reply(reply, |h: Health| render::health(&h)),
        Route::Capabilities => out.reply(reply, |c: Capabilities| render::capabilities(&c)),
        Route::CreateSite(_) => out.reply(reply, |s: SiteStatus| {
            format!(
                "created {}\n{}",
                render::clean(&s.manifest.slug),
                render::site(&s)
            )
        }),
        Route::ListSites => out.reply(reply, |l: DataList<SiteStatus>| render::sites(&l.data)),
        Route::GetSite(_) => out.reply(reply, |s: SiteStatus| render::site(&s)),
        Route::DeleteSite { .. } => out.reply(reply, |d: DeleteReport| render::deleted(&d)),
        Route::ListSessions(_) => out.reply(reply, |l: DataList<SessionSummary>| {
            render::sessions(&l.data)
        }),
        Route::StopSession(_) => out.reply(reply, |s: SessionStopped| {
            format!("stopped: session {}\n", render::clean(&s.session_id))
        }),
        Route::Preview(_) => out.reply(reply, |p: Preview| render::preview(&p)),
        Route::Publish { .. } | Route::Rollback { .. } => {
            out.reply(reply, |s: Served| render::served(&s))
        }
        Route::Releases(_) => out.reply(reply, |r: Releases| render::releases(&r)),
        Route::Audit { .. } => out.reply(reply, |l: DataList<AuditEntry>| render::audit(&l.data)),
        // Commands with their own printing never reach here; print the body as sent.
        Route::StartSession { .. }
        | Route::Events { .. }
        | Route::SendMessage { .. }
        | Route::StartBuild(_)
        | Route::GetBuild { .. } => out.write(&format!("{}\n", reply.text().trim_end())),
    }
}

/// The prompt or message from its argument or its file (`-` is standard input).
fn text_argument(
    text: Option<&str>,
    file: Option<&std::path::Path>,
    what: &'static str,
) -> Result<String, Failure> {
    let text = match (text, file) {
        (Some(text), _) => text.to_owned(),
        (None, Some(path)) if path == std::path::Path::new("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|source| {
                Failure::Input {
                    what,
                    path: path.to_owned(),
                    source,
                }
            })?;
            text
        }
        (None, Some(path)) => std::fs::read_to_string(path).map_err(|source| Failure::Input {
            what,
            path: path.to_owned(),
            source,
        })?,
        (None, None) => return Err(Invalid::TextRequired(what).into()),
    };
    check_text(what, &text)?;
    Ok(text)
}

/// How long the session's replay may pause before a running turn is taken as running: its
/// stream stays open until the turn ends, and the message will be refused anyway.
const REPLAY_PAUSE: Duration = Duration::from_millis(300);
/// The longest a running turn's stream is read for its last seq.
const RUNNING_READ_MAX: Duration = Duration::from_secs(2);

/// The seq of the session's last stored event (-1 for none), from its stream. While no turn
/// runs, sited replays the log and closes the stream at once. While one runs the stream stays
/// open until the turn ends; the message sent next is then refused as the session is running,
/// so the read stops at the replay's first pause instead of waiting for the turn.
async fn last_seq(client: &Client, session: &Id) -> Result<i64, Failure> {
    let mut stream = client.follow(session, -1).await?;
    let mut last = -1;
    let mut turn_open = false;
    let started = std::time::Instant::now();
    loop {
        let item = if turn_open {
            let left = RUNNING_READ_MAX.saturating_sub(started.elapsed());
            match tokio::time::timeout(REPLAY_PAUSE.min(left), stream.next()).await {
                Ok(item) => item,
                Err(_) => break,
            }
        } else {
            stream.next().await
        };
        match item {
            None => break,
            Some(Ok(StreamItem::Event { event, .. })) => {
                last = last.max(i64::try_from(event.seq).unwrap_or(i64::MAX));
                turn_open = !matches!(event.event(), Ok(SessionEvent::TurnEnd { .. }));
            }
            // What the stream reports is the follow's to show; the send comes first.
            Some(Ok(StreamItem::Error { .. })) => break,
            Some(Err(error)) => return Err(error.into()),
        }
    }
    Ok(last)
}

/// How long a broken stream is tried again before the follow gives up: enough for sited to be
/// restarted by PID 1 (its socket keeps listening meanwhile).
const RECONNECT_BUDGET: Duration = Duration::from_secs(60);
/// The waits between attempts to open the stream again, the last one repeated.
const RECONNECT_BACKOFF_MS: [u64; 5] = [100, 250, 500, 1000, 2000];

/// Follows a session's stream to its end; the last `turn_end` decides the exit status.
///
/// A stream that breaks (a dropped connection, a restarted sited) is opened again after the
/// last event shown, so no event is shown twice and none is missed. A stream that ends cleanly
/// while a turn is still open (its last event is not a `turn_end`) is opened again once too:
/// sited closes its streams when it stops, and its next boot ends the turn.
async fn follow_session(
    client: &Client,
    session: &Id,
    after: i64,
    out: &mut Output<'_>,
) -> Result<(), Failure> {
    let mut cursor = after;
    let mut last_end: Option<TurnState> = None;
    let mut turn_open = false;
    let mut retry: Option<(std::time::Instant, usize)> = None;
    loop {
        let opened = client.follow(session, cursor).await;
        let mut stream = match opened {
            Ok(stream) => stream,
            // Only a sited this run has reached is waited for (it may be restarting): a
            // wrong socket or a missing permission fails at once.
            Err(error) if reconnectable(&error) && client.is_paired() => {
                if retry.is_none() {
                    out.note(&format!("{error}; following again after seq {cursor}"));
                }
                if retry_again(&mut retry).await {
                    continue;
                }
                return Err(error.into());
            }
            Err(error) => return Err(error.into()),
        };
        let mut progressed = false;
        let mut broke = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(StreamItem::Event { event, raw }) => {
                    if out.json {
                        out.write(&format!("{raw}\n"))?;
                    } else {
                        out.write(&format!("{}\n", render::event_line(&event)))?;
                    }
                    cursor = i64::try_from(event.seq).unwrap_or(i64::MAX);
                    progressed = true;
                    turn_open = match event.event() {
                        Ok(SessionEvent::TurnEnd { state, .. }) => {
                            last_end = Some(state);
                            false
                        }
                        _ => true,
                    };
                }
                Ok(StreamItem::Error { raw, payload }) => {
                    if out.json {
                        out.write(&format!("{raw}\n"))?;
                    }
                    let text = |key: &str| payload.get(key).and_then(serde_json::Value::as_str);
                    let reason = text("reason")
                        .or_else(|| text("code"))
                        .unwrap_or("stream_error")
                        .to_owned();
                    let message = text("message").map(str::to_owned);
                    return Err(Failure::Stream { reason, message });
                }
                Err(error) if reconnectable(&error) => {
                    broke = Some(error);
                    break;
                }
                Err(error) => return Err(error.into()),
            }
        }
        if progressed {
            retry = None;
        }
        match broke {
            Some(error) => {
                out.note(&format!("{error}; following again after seq {cursor}"));
                if !retry_again(&mut retry).await {
                    return Err(error.into());
                }
            }
            // Ended cleanly mid-turn: once more, in case sited was stopping; a stream that
            // then brings nothing new is the end.
            None if turn_open && progressed => {
                out.note(&format!(
                    "the stream closed mid-turn after seq {cursor}; following again"
                ));
            }
            None => break,
        }
    }
    match (turn_open, last_end) {
        (false, Some(TurnState::Idle)) => Ok(()),
        (false, Some(state)) => Err(Failure::Turn(state.as_str().to_owned())),
        _ => {
            out.note(&format!(
                "the stream closed after seq {cursor} with no turn_end: no turn is running"
            ));
            Ok(())
        }
    }
}

/// Whether following again may help: the stream broke or sited could not be reached (it may
/// be restarting), as opposed to a refusal or an answer outside the contract.
fn reconnectable(error: &Error) -> bool {
    matches!(
        error,
        Error::StreamLost(_) | Error::Unreachable { .. } | Error::Timeout { .. }
    )
}

/// Waits before the next attempt; false once [`RECONNECT_BUDGET`] is spent. `retry` holds when
/// the current run of failures began and how many there were.
async fn retry_again(retry: &mut Option<(std::time::Instant, usize)>) -> bool {
    let (since, attempts) = retry.get_or_insert_with(|| (std::time::Instant::now(), 0));
    if since.elapsed() >= RECONNECT_BUDGET {
        return false;
    }
    let wait = RECONNECT_BACKOFF_MS[(*attempts).min(RECONNECT_BACKOFF_MS.len() - 1)];
    *attempts += 1;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    true
}

/// Polls a build until it is no longer running, showing its log as it grows.
async fn wait_for_build(
    client: &Client,
    slug: Slug,
    build: Id,
    out: &mut Output<'_>,
) -> Result<(), Failure> {
    let started = Instant::now();
    let waited = poll_build(client, Route::GetBuild { slug, build }, started, out).await;
    // A failure is told on stderr next: it must not land on the progress line.
    out.clear_progress();
    waited
}

/// The progress line's text while a build runs: the step its log last announced.
fn build_label(log: &str) -> String {
    let step = log
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("# "))
        .unwrap_or("starting");
    format!("building: {step}")
}

/// [`wait_for_build`]'s polling, from `started`. A poll that cannot reach sited (restarted by
/// PID 1, say) is tried again, as a follow is, within [`RECONNECT_BUDGET`]: the build runs on in
/// its own unit, and its record, not the fault, decides the exit status.
async fn poll_build(
    client: &Client,
    route: Route,
    started: Instant,
    out: &mut Output<'_>,
) -> Result<(), Failure> {
    // How much of the log is shown: each poll shows the lines added since (the JSON output is
    // the final record alone).
    let mut shown = 0;
    let mut retry: Option<(std::time::Instant, usize)> = None;
    loop {
        let reply = match client.send(&route).await {
            Ok(reply) => {
                retry = None;
                reply
            }
            Err(error) if reconnectable(&error) => {
                if retry.is_none() {
                    out.note(&format!("{error}; asking for the build again"));
                }
                if retry_again(&mut retry).await {
                    continue;
                }
                return Err(error.into());
            }
            Err(error) => return Err(error.into()),
        };
        let record: BuildWithLog = reply.parse()?;
        let ended = record.record.outcome != BuildOutcome::Running;
        if !out.json {
            out.write(&render::log_since(record.log_window(), &mut shown, ended))?;
        }
        if ended {
            out.reply(&reply, |b: BuildWithLog| render::build(&b, false))?;
            return if record.record.outcome == BuildOutcome::Success {
                Ok(())
            } else {
                Err(Failure::Build {
                    outcome: record.record.outcome.as_str().to_owned(),
                    error: record
                        .record
                        .error
                        .clone()
                        .unwrap_or_else(|| "no error recorded".to_owned()),
                })
            };
        }
        out.wait_showing(BUILD_POLL, &build_label(&record.log), started)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(args: &[&str]) -> Result<Plan, Failure> {
        let mut argv = vec!["atelierctl"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(Failure::Usage)?;
        Plan::of(&cli.command)
    }

    fn refused(args: &[&str]) -> String {
        match plan(args) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(f) => {
                assert_eq!(f.exit(), Exit::Usage, "{args:?}");
                f.to_string()
            }
        }
    }

    #[test]
    fn the_build_label_is_the_step_the_log_last_announced() {
        let cases = [
            ("an empty log", "", "building: starting"),
            (
                "the install step",
                "# install: npm ci\nadded 5 packages\n",
                "building: install: npm ci",
            ),
            (
                "the build step after it",
                "# install: npm ci\nok\n\n# build: node build.js\nhalf a li",
                "building: build: node build.js",
            ),
            (
                "a refusal",
                "# install: x\n\n# refused: step_timeout\n",
                "building: refused: step_timeout",
            ),
        ];
        for (name, log, want) in cases {
            assert_eq!(build_label(log), want, "{name}");
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_is_sent() {
        let cases: &[(&str, &[&str], &str)] = &[
            ("bad slug", &["sites", "show", "../audit"], "invalid_slug"),
            (
                "uppercase slug",
                &[
                    "sites", "create", "Museo", "--name", "M", "--domain", "m.org",
                ],
                "invalid_slug",
            ),
            (
                "blank name",
                &[
                    "sites", "create", "museo", "--name", " ", "--domain", "m.org",
                ],
                "text_required: the name",
            ),
            (
                "blank domain",
                &["sites", "create", "museo", "--name", "M", "--domain", ""],
                "text_required: the domain",
            ),
            (
                "purge without confirm",
                &["sites", "delete", "museo", "--purge-prod"],
                "confirmation_required: deleting the site with production",
            ),
            (
                "delete without confirm",
                &["sites", "delete", "museo"],
                "confirmation_required: deleting the site's workspace",
            ),
            (
                "rollback without confirm",
                &["rollback", "museo", "r-1"],
                "confirmation_required: rolling production back",
            ),
            (
                "publish without confirm",
                &["publish", "museo"],
                "confirmation_required: publishing",
            ),
            (
                "path in session id",
                &["session", "stop", "../../v1/sites/museo"],
                "invalid_id: session",
            ),
            (
                "query in session id",
                &["session", "follow", "abc?after=5"],
                "invalid_id",
            ),
            (
                "cursor below -1",
                &["session", "follow", "abc", "--after", "-2"],
                "invalid_cursor",
            ),
            (
                "blank prompt",
                &["session", "start", "museo", "   "],
                "text_required: the prompt",
            ),
            (
                "blank message",
                &["session", "send", "abc", ""],
                "text_required: the message",
            ),
            (
                "bad build id",
                &["build", "show", "museo", "a/b"],
                "invalid_id: build",
            ),
            (
                "bad release",
                &["rollback", "museo", "..", "--confirm"],
                "invalid_id: release",
            ),
            (
                "audit limit zero",
                &["audit", "--limit", "0"],
                "invalid_limit",
            ),
            (
                "audit limit past sited's most",
                &["audit", "--limit", "1001"],
                "invalid_limit: limit must be from 1 to 1000",
            ),
            ("audit bad site", &["audit", "--site", "A"], "invalid_slug"),
            (
                "unknown driver",
                &[
                    "sites", "create", "museo", "--name", "M", "--domain", "m.org", "--driver",
                    "gpt",
                ],
                "invalid value",
            ),
            (
                "prompt and file",
                &["session", "start", "museo", "p", "--prompt-file", "f"],
                "cannot be used with",
            ),
            ("no prompt", &["session", "start", "museo"], "required"),
            (
                "bad timeout",
                &["--timeout", "0", "health"],
                "not a number of seconds",
            ),
        ];
        for (name, args, want) in cases {
            let error = refused(args);
            assert!(error.contains(want), "{name}: {error}");
        }
    }

    #[test]
    fn good_arguments_make_their_routes() {
        let route = |args: &[&str]| match plan(args) {
            Ok(Plan::Call(route)) => route,
            Ok(_) => panic!("{args:?}: not a plain call"),
            Err(f) => panic!("{args:?}: {f}"),
        };
        assert_eq!(
            route(&["sites", "delete", "museo", "--purge-prod", "--confirm"]),
            Route::DeleteSite {
                slug: Slug::parse("museo").unwrap(),
                purge_prod: true
            }
        );
        assert_eq!(
            route(&["--json", "audit", "--site", "museo", "--limit", "5"]),
            Route::Audit {
                site: Some(Slug::parse("museo").unwrap()),
                limit: Some(5)
            }
        );
        assert_eq!(
            route(&[
                "publish",
                "museo",
                "--note",
                "spring",
                "--confirm",
                "--json"
            ]),
            Route::Publish {
                slug: Slug::parse("museo").unwrap(),
                note: Some("spring".into())
            }
        );
        assert!(matches!(
            plan(&["session", "follow", "abc", "--after", "-1"]),
            Ok(Plan::Follow { after: -1, .. })
        ));
        assert!(matches!(
            plan(&["session", "start", "museo", "hello", "--follow", "--driver", "opencode"]),
            Ok(Plan::StartSession {
                follow: true,
                route: Route::StartSession {
                    driver: Some(_),
                    ..
                }
            })
        ));
        for (flag, wire) in [
            ("claude_code", "claude_code"),
            ("opencode", "opencode"),
            ("pi", "pi"),
            ("atelier", "atelier"),
        ] {
            match plan(&["session", "start", "museo", "hello", "--driver", flag]) {
                Ok(Plan::StartSession {
                    route: Route::StartSession { driver, .. },
                    ..
                }) => assert_eq!(driver.map(DriverId::as_str), Some(wire), "{flag}"),
                _ => panic!("{flag}: not a session start"),
            }
        }
    }

    /// One failure of every class the client can end in (sited's problems and stream frames
    /// aside: their reasons are sited's).
    fn one_of_each() -> Vec<Failure> {
        use atelier_site_client::error::Mismatch;
        use std::path::PathBuf;
        let path = || PathBuf::from("/x");
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let invalid = [
            Invalid::Slug("A".into()),
            Invalid::Id {
                what: "session",
                value: "..".into(),
            },
            Invalid::TextRequired("prompt"),
            Invalid::TextTooLong {
                what: "prompt",
                len: 2,
                limit: 1,
            },
            Invalid::ConfirmationRequired("publishing"),
            Invalid::Actor("x".into()),
            Invalid::Cursor(-2),
            Invalid::Limit,
        ];
        let mut all: Vec<Failure> = invalid.into_iter().map(Failure::from).collect();
        all.extend([
            Failure::Usage(Cli::try_parse_from(["atelierctl", "frob"]).unwrap_err()),
            Failure::Call(Error::InstanceMismatch {
                socket: path(),
                instance: "x".into(),
                why: Mismatch::Different,
            }),
            Failure::Call(Error::Unreachable {
                socket: path(),
                why: "gone".into(),
            }),
            Failure::Call(Error::Timeout {
                socket: path(),
                after: Duration::from_secs(1),
            }),
            Failure::Call(Error::BadResponse {
                status: 200,
                why: "x".into(),
            }),
            Failure::Call(Error::StreamLost("x".into())),
            Failure::Config(ConfigError::Read {
                path: path(),
                source: io(),
            }),
            Failure::Config(ConfigError::NotAConfigFile {
                path: path(),
                why: "x",
            }),
            Failure::Config(ConfigError::Syntax {
                path: path(),
                line: 1,
                why: "x".into(),
            }),
            Failure::Config(ConfigError::UnknownKey {
                path: path(),
                line: 1,
                key: "K".into(),
            }),
            Failure::Config(ConfigError::DuplicateKey {
                path: path(),
                line: 1,
                key: "K".into(),
            }),
            Failure::Config(ConfigError::BadValue {
                path: path(),
                key: "K",
                why: "x".into(),
            }),
            Failure::Config(ConfigError::TokenExposed {
                path: path(),
                mode: 0o644,
            }),
            Failure::Config(ConfigError::BadToken {
                source_name: "x".into(),
                why: "is empty",
            }),
            Failure::Config(ConfigError::UrlOnly { path: path() }),
            Failure::Config(ConfigError::Missing {
                what: "instance",
                hint: "x",
            }),
            Failure::Config(ConfigError::BadInstance(
                atelier_layout::InstanceName::new("Bad Name").unwrap_err(),
            )),
            Failure::Config(ConfigError::BadBasePath("x".into())),
            Failure::Config(ConfigError::Actor(Invalid::Actor("x".into()))),
            Failure::Input {
                what: "prompt",
                path: path(),
                source: io(),
            },
            Failure::Output(io()),
            Failure::Turn("error".into()),
            Failure::Turn("interrupted".into()),
            Failure::Build {
                outcome: "failed".into(),
                error: "x".into(),
            },
            Failure::Runtime(io()),
        ]);
        all
    }

    #[test]
    fn every_failure_has_a_snake_case_reason_listed_under_its_exit_status() {
        let help = long_help();
        for failure in one_of_each() {
            let (exit, reason) = failure.verdict();
            assert_ne!(exit, Exit::Ok, "{failure:?}");
            assert!(
                !reason.is_empty()
                    && reason
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{reason:?}"
            );
            // Listed under its own code: the help names the reason in that code's lines.
            let listed = exit.meaning().split([',', ' ', '\n']).any(|w| w == reason);
            assert!(listed, "{reason} under {exit:?}");
            assert!(help.contains(reason.as_ref()), "{reason}");
            let message = failure.message();
            assert!(!message.is_empty(), "{failure:?}");
            assert!(!message.starts_with(&format!("{reason}:")), "{message}");
        }
    }

    #[test]
    fn sited_problems_pass_their_reason_through_else_their_type() {
        let problem = |body: &str| {
            Failure::Call(Error::Problem(
                atelier_site_client::error::Problem::parse(409, body.as_bytes()).unwrap(),
            ))
        };
        let with_reason = problem(
            r#"{"type":"https://dedalo.dev/site-builder/problems/conflict","title":"Conflict","detail":"taken","reason":"slug_exists"}"#,
        );
        assert_eq!(with_reason.verdict(), (Exit::Refused, "slug_exists".into()));
        assert_eq!(with_reason.message(), "taken");
        let without = problem(
            r#"{"type":"https://dedalo.dev/site-builder/problems/not-found","title":"Not Found"}"#,
        );
        assert_eq!(without.verdict(), (Exit::Refused, "not_found".into()));
        assert_eq!(without.message(), "Not Found");
        let json = serde_json::to_value(FailureJson::of(&with_reason)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "exit": "refused", "reason": "slug_exists", "message": "taken", "status": 409,
                "type": "https://dedalo.dev/site-builder/problems/conflict"
            })
        );
        let stream = Failure::Stream {
            reason: "replay_failed".into(),
            message: None,
        };
        assert_eq!(stream.verdict(), (Exit::Refused, "replay_failed".into()));
        assert_eq!(
            stream.message(),
            "sited ended the session's stream with an error"
        );
        let said = Failure::Stream {
            reason: "replay_failed".into(),
            message: Some("The log could not be read.".into()),
        };
        assert_eq!(said.verdict(), (Exit::Refused, "replay_failed".into()));
        assert_eq!(said.message(), "The log could not be read.");
        assert_eq!(
            said.to_string(),
            "replay_failed: The log could not be read."
        );
    }

    #[test]
    fn the_exit_statuses_are_listed_once_in_order() {
        let position = |exit: Exit| match exit {
            Exit::Ok => 0,
            Exit::Refused => 1,
            Exit::Usage => 2,
            Exit::Transport => 3,
            Exit::Unsuccessful => 4,
        };
        for (i, exit) in Exit::ALL.into_iter().enumerate() {
            assert_eq!(position(exit), i);
            assert_eq!(usize::from(exit.code()), i);
        }
    }

    #[test]
    fn the_help_names_the_exit_codes_and_examples() {
        use clap::CommandFactory as _;
        let help = Cli::command().render_long_help().to_string();
        for want in [
            "Exit status:",
            "2  usage or configuration error",
            "instance_mismatch",
            "--engine-env",
            "--token-file",
            "session start museo",
            "--follow",
        ] {
            assert!(help.contains(want), "{want}");
        }
    }
}
