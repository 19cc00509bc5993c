//! The command line: arguments, the commands over a [`Client`], their output, and the exit
//! codes (0 ok, 1 refused by sited, 2 usage or configuration, 3 pairing or transport, 4 the
//! followed turn or build did not succeed).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use futures_util::StreamExt as _;

use crate::client::{Client, Reply};
use crate::config::{self, TargetOptions};
use crate::error::{Error, Invalid};
use crate::model::{
    AuditEntry, BuildRecord, BuildStarted, Capabilities, DataList, DeleteReport, Event, Health,
    MessageAccepted, Preview, Releases, Served, SessionStarted, SessionStopped, SessionSummary,
    SiteStatus, TurnState,
};
use crate::params::{check_required, check_text, Id, Slug};
use crate::render;
use crate::routes::{NewSite, Route};
use crate::sse::StreamItem;

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
  atelierctl rollback museo 20260701T090000000Z-000003
  atelierctl audit --site museo --limit 20
  atelierctl sites delete museo --purge-prod --confirm

Output:
  Tables and lines for people; with --json, the daemon's JSON body exactly as sent, one line
  (a stream prints each stored event's JSON line as received). Errors go to stderr as
  'error: <reason or title> (<status>): <detail>' for sited's refusals.

Exit status:
  0  success (a followed turn ended idle, a waited build succeeded)
  1  sited refused the call (a problem answer) or its stream reported an error
  2  usage or configuration error; nothing was sent
  3  pairing or transport failure: instance_mismatch, unreachable, timeout, bad_response,
     stream_lost
  4  the followed turn ended in error or was interrupted, or the waited build failed";

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
    after_long_help = EXAMPLES,
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
    /// The actor's user id, recorded in the audit log [default: your uid].
    #[arg(long, global = true, value_name = "N", allow_negative_numbers = true)]
    pub actor_id: Option<i64>,
    /// The actor's username [default: your login name].
    #[arg(long, global = true, value_name = "NAME")]
    pub actor_name: Option<String>,
    /// Seconds a control call (pairing included) may take; streams have no deadline
    /// [default: 30, or DEDALO_SITE_BUILDER_TIMEOUT_MS].
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
    },
    /// The audit log, newest first (GET /v1/audit).
    Audit {
        /// Only this site's entries.
        #[arg(long, value_name = "SLUG")]
        site: Option<String>,
        /// At most this many entries (sited: 100 by default, 1000 at most).
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
    /// Delete a site's workspace and preproduction; production stays unless purged.
    Delete {
        /// The site.
        slug: String,
        /// Also remove production (needs --confirm).
        #[arg(long)]
        purge_prod: bool,
        /// Confirms --purge-prod.
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
}

impl Driver {
    fn as_str(self) -> &'static str {
        match self {
            Driver::ClaudeCode => "claude_code",
            Driver::Opencode => "opencode",
            Driver::Pi => "pi",
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
    /// sited closes the stream. Exit 0 if the last turn ended idle, 4 if in error or
    /// interrupted.
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
        /// Then wait for the build to end (exit 0 on success, 4 on failure).
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

/// A failed command: what to print and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// The exit status.
    pub status: u8,
    /// What went wrong; printed as `error: {error:#}`.
    pub error: anyhow::Error,
}

impl Failure {
    fn new(status: u8, error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            status,
            error: error.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let status = match &error {
            Error::Problem(_) => 1,
            Error::Invalid(_) => 2,
            _ => 3,
        };
        Failure::new(status, error)
    }
}

impl From<Invalid> for Failure {
    fn from(invalid: Invalid) -> Self {
        Failure::new(2, invalid)
    }
}

impl From<config::ConfigError> for Failure {
    fn from(error: config::ConfigError) -> Self {
        Failure::new(2, error)
    }
}

/// Runs the command line, printing to stdout and stderr, and returns the exit status.
pub fn run(cli: Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let mut stdout = std::io::stdout();
    match runtime.block_on(execute(cli, &mut stdout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let closed = failure
                .error
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe);
            if closed {
                // The reader stopped reading (`| head`): nothing more to say to anyone.
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", render::clean(&format!("{:#}", failure.error)));
            ExitCode::from(failure.status)
        }
    }
}

/// Runs one command, writing its output to `out`.
pub async fn execute(cli: Cli, out: &mut dyn Write) -> Result<(), Failure> {
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
    };
    plan.run(&client, &mut output).await
}

/// Where results go.
struct Output<'a> {
    out: &'a mut dyn Write,
    json: bool,
}

impl Output<'_> {
    fn write(&mut self, text: &str) -> Result<(), Failure> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|e| Failure::new(3, anyhow::Error::new(e).context("writing the output")))
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
        let slug = |text: &str| Slug::parse(text);
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
                    driver: driver.map(|d| d.as_str().to_owned()),
                }))
            }
            Command::Sites(SitesCommand::Show { slug: s }) => Plan::Call(Route::GetSite(slug(s)?)),
            Command::Sites(SitesCommand::Delete {
                slug: s,
                purge_prod,
                confirm,
            }) => {
                if *purge_prod && !confirm {
                    return Err(Invalid::ConfirmationRequired(
                        "deleting production (--purge-prod)",
                    )
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
                        driver: driver.map(|d| d.as_str().to_owned()),
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
            Command::Rollback { slug: s, release } => Plan::Call(Route::Rollback {
                slug: slug(s)?,
                release: Id::parse("release", release)?,
            }),
            Command::Audit { site, limit } => {
                if *limit == Some(0) {
                    return Err(Invalid::Limit.into());
                }
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
                if !out.json {
                    out.write(&format!(
                        "build {} started\n",
                        render::clean(&started.build_id)
                    ))?;
                }
                let build = Id::parse("build", &started.build_id)?;
                wait_for_build(client, slug, build, out).await
            }
            Plan::ShowBuild { route, log } => {
                let reply = client.send(&route).await?;
                out.reply(&reply, |b: BuildRecord| render::build(&b, log))
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
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("reading standard input")
                .map_err(|e| Failure::new(2, e))?;
            text
        }
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the {what} from {}", path.display()))
            .map_err(|e| Failure::new(2, e))?,
        (None, None) => return Err(Invalid::TextRequired(what).into()),
    };
    check_text(what, &text)?;
    Ok(text)
}

/// The last seq of a session with no running turn (-1 when its log is empty).
async fn last_seq(client: &Client, session: &Id) -> Result<i64, Failure> {
    let reply = client
        .send(&Route::Events {
            session: session.clone(),
            after: -1,
        })
        .await?;
    let mut parser = crate::sse::SseParser::new();
    let items = parser
        .push(&reply.body)
        .map_err(|e| Failure::from(Error::StreamLost(e.to_string())))?;
    let mut last = -1;
    for item in items {
        if let crate::sse::SseItem::Frame(frame) = item {
            if frame.event.is_none() {
                if let Ok(event) = serde_json::from_str::<crate::model::StoredEvent>(&frame.data) {
                    last = last.max(i64::try_from(event.seq).unwrap_or(i64::MAX));
                }
            }
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
            Err(error) if reconnectable(&error) && retry_again(&mut retry).await => continue,
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
                        Event::TurnEnd { state } => {
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
                    let reason = payload
                        .get("reason")
                        .or_else(|| payload.get("code"))
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("stream_error")
                        .to_owned();
                    return Err(Failure::new(
                        1,
                        anyhow::anyhow!("{reason}: sited ended the session's stream with an error"),
                    ));
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
                eprintln!("note: {error}; following again after seq {cursor}");
                if !retry_again(&mut retry).await {
                    return Err(error.into());
                }
            }
            // Ended cleanly mid-turn: once more, in case sited was stopping; a stream that
            // then brings nothing new is the end.
            None if turn_open && progressed => {
                eprintln!("note: the stream closed mid-turn after seq {cursor}; following again");
            }
            None => break,
        }
    }
    match (turn_open, last_end) {
        (false, Some(TurnState::Idle)) => Ok(()),
        (false, Some(state)) => Err(Failure::new(
            4,
            anyhow::anyhow!(
                "turn_{}: the session's last turn ended {}",
                state.as_str(),
                state.as_str()
            ),
        )),
        _ => {
            eprintln!(
                "note: the stream closed after seq {cursor} with no turn_end: no turn is running"
            );
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

/// Polls a build until it is no longer running.
async fn wait_for_build(
    client: &Client,
    slug: Slug,
    build: Id,
    out: &mut Output<'_>,
) -> Result<(), Failure> {
    let route = Route::GetBuild { slug, build };
    loop {
        let reply = client.send(&route).await?;
        let record: BuildRecord = reply.parse()?;
        if record.status.outcome != "running" {
            out.reply(&reply, |b: BuildRecord| render::build(&b, false))?;
            return if record.status.outcome == "success" {
                Ok(())
            } else {
                Err(Failure::new(
                    4,
                    anyhow::anyhow!(
                        "build_{}: {}",
                        render::clean(&record.status.outcome),
                        render::clean(
                            record
                                .status
                                .error
                                .as_deref()
                                .unwrap_or("no error recorded")
                        )
                    ),
                ))
            };
        }
        tokio::time::sleep(BUILD_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(args: &[&str]) -> Result<Plan, Failure> {
        let mut argv = vec!["atelierctl"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| Failure::new(2, anyhow::anyhow!("{e}")))?;
        Plan::of(&cli.command)
    }

    fn refused(args: &[&str]) -> String {
        match plan(args) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(f) => {
                assert_eq!(f.status, 2, "{args:?}");
                format!("{:#}", f.error)
            }
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
                "confirmation_required",
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
                &["rollback", "museo", ".."],
                "invalid_id: release",
            ),
            (
                "audit limit zero",
                &["audit", "--limit", "0"],
                "invalid_limit",
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
            Err(f) => panic!("{args:?}: {:#}", f.error),
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
