//! The command line, `atelier-provision <render DIR|plan|apply|check|verify|remove>
//! --declaration PATH [--json]`, its exit codes ([`Exit`]) and the stable reason every run that
//! does not end in 0 names ([`Reason`]).
//!
//! With `--json`, stdout carries one JSON object per run: the verb's report, or the failure
//! that stopped it. Either, when its exit is not 0, names a `reason`; [`Failure::reason`] and
//! [`unfinished`] are where every failure gets it, and [`Reason::as_str`] is the only place a
//! reason is spelled. Human sentences keep going to stderr.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use atelier_clidocs::progress::{self, Mode, ProgressLine};
use atelier_layout::declaration::DeclarationError;
use atelier_layout::Declaration;
use clap::{Parser, Subcommand};
use serde::Serialize;
use serde_json::json;

use crate::lock::{InstanceLock, LockError};
use crate::plan::{Holdback, Refusal};
use crate::verbs::{self, Exit, Renderer, VerbError};

/// Renders and applies a whole Atelier instance from one declaration.
#[derive(Debug, Parser)]
#[command(
    name = "atelier-provision",
    version,
    after_help = "Run 'atelier-provision --help' for exit codes, reasons and examples.",
    after_long_help = long_help()
)]
pub struct Cli {
    /// The verb.
    #[command(subcommand)]
    pub verb: Verb,
    /// The instance declaration (`instance.json`).
    #[arg(long, global = true)]
    pub declaration: Option<PathBuf>,
    /// Print one JSON object instead of lines (a failure too, with its reason).
    #[arg(long, global = true)]
    pub json: bool,
    /// The host root every host path is read and written below (tests only).
    #[arg(long, global = true, hide = true, default_value = "/")]
    pub root: PathBuf,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Write every rendered artifact below DIR for review.
    Render {
        /// Where to write.
        dir: PathBuf,
    },
    /// Print the actions `apply` would take.
    Plan,
    /// Make the host match the declaration.
    Apply,
    /// Report drift without writing; exit 1 on drift.
    Check,
    /// Prove every site's served links resolve to a release holding bytes.
    Verify,
    /// Decommission: unlink what is stamped ours, archive marked trees, lock identities.
    Remove {
        /// Remove even while production serves a site (its vhosts go, so it goes offline).
        #[arg(long)]
        purge_published: bool,
        /// Print the steps remove would take, in order, and change nothing; a site production
        /// serves still refuses it without --purge-published.
        #[arg(long)]
        dry_run: bool,
    },
}

// === impl Verb ===

impl Verb {
    /// The verb's name, as typed and as `--json` reports it.
    pub fn name(&self) -> &'static str {
        match self {
            Verb::Render { .. } => "render",
            Verb::Plan => "plan",
            Verb::Apply => "apply",
            Verb::Check => "check",
            Verb::Verify => "verify",
            Verb::Remove { .. } => "remove",
        }
    }
}

/// How the long help shows a verb being run; one line each.
const EXAMPLES: &str = "\
Examples:
  atelier-provision plan --declaration instance.json
  atelier-provision render review/ --declaration instance.json
  atelier-provision apply --declaration instance.json
  atelier-provision check --declaration instance.json --json | jq -r .reason
  atelier-provision verify --declaration instance.json
  atelier-provision remove --dry-run --declaration instance.json
  atelier-provision remove --declaration instance.json
  atelier-provision remove --purge-published --declaration instance.json";

/// The long help's tail: every exit code with its meaning and the reasons that end in it,
/// built from [`Exit`] and [`Reason`] so neither is written twice, then the examples.
pub fn long_help() -> String {
    let mut text = String::from(
        "Exit status. With --json, a run that does not exit 0 prints one JSON object on stdout\n\
         whose \"reason\" is one listed under its code, and a \"message\"; declaration_invalid\n\
         adds \"problems\" and refused \"refusals\", each with its own path or subject and reason.\n",
    );
    for exit in Exit::ALL {
        let _ = writeln!(
            text,
            "  {}  {:<8} {}",
            exit.code(),
            exit.name(),
            exit.meaning()
        );
        let reasons: Vec<&str> = Reason::ALL
            .iter()
            .filter(|r| r.exit() == exit)
            .map(|r| r.as_str())
            .collect();
        if !reasons.is_empty() {
            let _ = writeln!(text, "              reasons: {}", reasons.join(", "));
        }
    }
    text.push('\n');
    text.push_str(EXAMPLES);
    text
}

/// Why a run did not end in 0: the stable names a script keys on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `check` found drift.
    Drift,
    /// The arguments do not parse.
    Usage,
    /// `--root` given to a verb that acts on the real host.
    RootNotAllowed,
    /// A verb that reads the real host run by a user other than root.
    NotRoot,
    /// No `--declaration`.
    DeclarationRequired,
    /// The declaration file could not be read, or is not UTF-8.
    DeclarationUnreadable,
    /// The declaration was read and refused; `problems` names each issue.
    DeclarationInvalid,
    /// The plan refused to touch the host; `refusals` names each reason.
    Refused,
    /// `apply` did everything else and awaits an operator file.
    AwaitingOperatorFile,
    /// `apply` did everything else; a running daemon's restart waits for the runs it serves.
    RestartDeferred,
    /// The host's account files could not be read.
    HostUnreadable,
    /// A rendered artifact could not be written below the review folder.
    WriteFailed,
    /// The output itself could not be written.
    OutputFailed,
    /// The output looked like it carried a credential, so none was printed.
    OutputWithheld,
    /// An `apply` action failed; the run stopped there.
    ActionFailed,
    /// `verify` found a surface not provably served.
    NotServed,
    /// A `remove` step failed: the removal stopped there, or (a step whose failure it
    /// tolerates) went on.
    RemovalStopped,
    /// The instance's lock, which keeps a second `apply` or `remove` waiting, could not be
    /// taken.
    LockFailed,
}

// === impl Reason ===

impl Reason {
    /// Every reason, grouped by exit code.
    pub const ALL: [Reason; 18] = [
        Reason::Drift,
        Reason::Usage,
        Reason::RootNotAllowed,
        Reason::NotRoot,
        Reason::DeclarationRequired,
        Reason::DeclarationUnreadable,
        Reason::DeclarationInvalid,
        Reason::Refused,
        Reason::AwaitingOperatorFile,
        Reason::RestartDeferred,
        Reason::HostUnreadable,
        Reason::WriteFailed,
        Reason::OutputFailed,
        Reason::OutputWithheld,
        Reason::ActionFailed,
        Reason::NotServed,
        Reason::RemovalStopped,
        Reason::LockFailed,
    ];

    /// The wire string, and its exit code.
    fn spec(self) -> (&'static str, Exit) {
        match self {
            Reason::Drift => ("drift", Exit::Drift),
            Reason::Usage => ("usage", Exit::Usage),
            Reason::RootNotAllowed => ("root_not_allowed", Exit::Usage),
            Reason::NotRoot => ("not_root", Exit::Usage),
            Reason::DeclarationRequired => ("declaration_required", Exit::Usage),
            Reason::DeclarationUnreadable => ("declaration_unreadable", Exit::Refused),
            Reason::DeclarationInvalid => ("declaration_invalid", Exit::Refused),
            Reason::Refused => ("refused", Exit::Refused),
            Reason::AwaitingOperatorFile => ("awaiting_operator_file", Exit::Refused),
            Reason::RestartDeferred => ("restart_deferred", Exit::Refused),
            Reason::HostUnreadable => ("host_unreadable", Exit::Failed),
            Reason::WriteFailed => ("write_failed", Exit::Failed),
            Reason::OutputFailed => ("output_failed", Exit::Failed),
            Reason::OutputWithheld => ("output_withheld", Exit::Failed),
            Reason::ActionFailed => ("action_failed", Exit::Failed),
            Reason::NotServed => ("not_served", Exit::Failed),
            Reason::RemovalStopped => ("removal_stopped", Exit::Failed),
            Reason::LockFailed => ("lock_failed", Exit::Failed),
        }
    }

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        self.spec().0
    }

    /// The exit code it ends the run with.
    pub fn exit(self) -> Exit {
        self.spec().1
    }
}

/// Everything that stops a run before its verb's report.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The arguments do not parse.
    #[error("{}", first_line(&.0.to_string()).trim_start_matches("error: "))]
    Usage(clap::Error),
    /// `--root` given to `apply` or `remove`.
    #[error("--root is for read-only verbs")]
    RootNotAllowed,
    /// A verb that reads the real host, run by a user other than root.
    #[error(
        "{0} reads the instance's credentials and state, which only root may read: run it as root"
    )]
    NotRoot(&'static str),
    /// No `--declaration`.
    #[error("--declaration PATH is required")]
    DeclarationRequired,
    /// The declaration file could not be read.
    #[error("{}: {source}", .path.display())]
    DeclarationUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The declaration file is not UTF-8.
    #[error("{}: not UTF-8", .path.display())]
    DeclarationNotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The declaration was read and refused.
    #[error("{}: {source}", .path.display())]
    DeclarationInvalid {
        /// The file.
        path: PathBuf,
        /// Every issue.
        #[source]
        source: DeclarationError,
    },
    /// A line of the output looked like it carried a credential.
    #[error("output line {line} looks like it carries a credential; nothing printed")]
    OutputWithheld {
        /// The 1-based line.
        line: usize,
    },
    /// The instance's lock could not be taken.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The verb stopped before acting.
    #[error(transparent)]
    Verb(#[from] VerbError),
}

// === impl Failure ===

impl Failure {
    /// The one mapping from every failure to its reason (and so to its exit code).
    pub fn reason(&self) -> Reason {
        match self {
            Failure::Usage(_) => Reason::Usage,
            Failure::RootNotAllowed => Reason::RootNotAllowed,
            Failure::NotRoot(_) => Reason::NotRoot,
            Failure::DeclarationRequired => Reason::DeclarationRequired,
            Failure::DeclarationUnreadable { .. } | Failure::DeclarationNotUtf8 { .. } => {
                Reason::DeclarationUnreadable
            }
            Failure::DeclarationInvalid { .. } => Reason::DeclarationInvalid,
            Failure::OutputWithheld { .. } => Reason::OutputWithheld,
            Failure::Lock(_) => Reason::LockFailed,
            Failure::Verb(VerbError::Refused(_)) => Reason::Refused,
            Failure::Verb(VerbError::Host(_)) => Reason::HostUnreadable,
            Failure::Verb(VerbError::Write { .. }) => Reason::WriteFailed,
            Failure::Verb(VerbError::Output(_)) => Reason::OutputFailed,
        }
    }

    /// The exit code.
    pub fn exit(&self) -> Exit {
        self.reason().exit()
    }
}

/// The reason a verb's report names when its exit is not 0; `held` is what an apply's plan
/// left unmet.
pub fn unfinished(verb: &Verb, exit: Exit, held: Option<Holdback>) -> Option<Reason> {
    match (verb, exit) {
        (_, Exit::Ok) => None,
        (Verb::Check, _) => Some(Reason::Drift),
        (Verb::Apply, Exit::Refused) => Some(match held {
            Some(Holdback::DeferredRestart) => Reason::RestartDeferred,
            Some(Holdback::OperatorFile) | None => Reason::AwaitingOperatorFile,
        }),
        (Verb::Apply, _) => Some(Reason::ActionFailed),
        (Verb::Verify, _) => Some(Reason::NotServed),
        (Verb::Remove { .. }, _) => Some(Reason::RemovalStopped),
        // `render` and `plan` end in 0 or in a failure.
        (Verb::Render { .. } | Verb::Plan, _) => None,
    }
}

/// The one-line `message` of a verb's report naming `reason` (see [`unfinished`]).
pub fn unfinished_message(reason: Reason) -> &'static str {
    match reason {
        Reason::Drift => "the host differs from the declaration",
        Reason::AwaitingOperatorFile => {
            "everything else was applied; an operator file the instance needs is missing"
        }
        Reason::RestartDeferred => {
            "everything else was applied; a daemon's restart waits for the runs it serves"
        }
        Reason::ActionFailed => "an action failed; apply stopped there",
        Reason::NotServed => "a surface is not provably served",
        Reason::RemovalStopped => "a removal step failed",
        // A verb's report names only the reasons above; the rest end a run as failures.
        Reason::Usage
        | Reason::RootNotAllowed
        | Reason::NotRoot
        | Reason::DeclarationRequired
        | Reason::DeclarationUnreadable
        | Reason::DeclarationInvalid
        | Reason::Refused
        | Reason::HostUnreadable
        | Reason::WriteFailed
        | Reason::OutputFailed
        | Reason::OutputWithheld
        | Reason::LockFailed => reason.as_str(),
    }
}

/// A failure as `--json` prints it: one object on stdout.
#[derive(Debug, Serialize)]
struct FailureJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    verb: Option<&'static str>,
    exit: Exit,
    reason: &'static str,
    message: String,
    /// A refused declaration's issues.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    problems: Vec<ProblemJson<'a>>,
    /// A refused plan's reasons.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    refusals: &'a [Refusal],
}

/// One issue of a refused declaration.
#[derive(Debug, Serialize)]
struct ProblemJson<'a> {
    /// The JSON path of the value, e.g. `sites[1].domain`; empty for the document.
    path: &'a str,
    reason: &'static str,
    message: &'a str,
}

impl<'a> FailureJson<'a> {
    fn of(failure: &'a Failure, verb: Option<&Verb>) -> Self {
        let problems = match failure {
            Failure::DeclarationInvalid { source, .. } => source
                .issues
                .iter()
                .map(|issue| ProblemJson {
                    path: &issue.path,
                    reason: issue.reason.as_str(),
                    message: &issue.message,
                })
                .collect(),
            _ => Vec::new(),
        };
        let refusals: &[Refusal] = match failure {
            Failure::Verb(VerbError::Refused(plan)) => &plan.refusals,
            _ => &[],
        };
        let reason = failure.reason();
        FailureJson {
            verb: verb.map(Verb::name),
            exit: reason.exit(),
            reason: reason.as_str(),
            message: first_line(&failure.to_string()).to_owned(),
            problems,
            refusals,
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Whether `--json` is among the arguments (before a `--`), so that a command line clap refuses
/// is answered in JSON too.
fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Runs the command line `args` (program name first), printing to `out` and `err`, with no
/// progress line.
pub fn run(
    args: impl IntoIterator<Item = OsString>,
    render: Renderer<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit {
    run_showing(args, render, out, err, ProgressLine::new(Mode::Plain, 0))
}

/// [`run`], with `progress` drawn on `err` while `apply` waits on a long step (it draws
/// nothing unless `err` is a terminal: see [`ProgressLine::for_stderr`]).
pub fn run_showing(
    args: impl IntoIterator<Item = OsString>,
    render: Renderer<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    progress: ProgressLine,
) -> Exit {
    let args: Vec<OsString> = args.into_iter().collect();
    let json = wants_json(&args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = write!(out, "{e}");
            return Exit::Ok;
        }
        Err(e) => {
            let _ = write!(err, "{e}");
            let failure = Failure::Usage(e);
            if json {
                print_json(out, &FailureJson::of(&failure, None));
            }
            return failure.exit();
        }
    };
    // Every line is printed only after the secret guard has read it; from the first that looks
    // like a credential on, nothing more is.
    let mut guard = SecretGuard::new(out);
    let live = Live {
        line: progress,
        err: &mut *err,
        withheld: false,
    };
    let exit = match prepare_and_execute(&cli, render, &mut guard, live) {
        Ok(exit) => exit,
        Err(failure) => {
            let _ = writeln!(err, "atelier-provision: {failure}");
            if cli.json {
                let json = FailureJson::of(&failure, Some(&cli.verb));
                let _ = serde_json::to_writer(&mut guard, &json);
                let _ = guard.write_all(b"\n");
            }
            failure.exit()
        }
    };
    let (out, withheld) = guard.finish();
    if let Some(line) = withheld {
        let failure = Failure::OutputWithheld { line };
        let _ = writeln!(err, "atelier-provision: {failure}");
        if cli.json {
            print_json(out, &FailureJson::of(&failure, Some(&cli.verb)));
        }
        return failure.exit();
    }
    exit
}

/// A writer that passes whole lines on (flushed, so progress shows as it happens) once
/// [`looks_like_a_secret`] has read them, and withholds the first that looks like a credential
/// and everything after it.
struct SecretGuard<'a> {
    out: &'a mut dyn Write,
    /// The line being written, up to its newline.
    line: Vec<u8>,
    /// Lines passed on or withheld so far.
    lines: usize,
    /// The 1-based number of the first withheld line.
    withheld: Option<usize>,
}

impl<'a> SecretGuard<'a> {
    fn new(out: &'a mut dyn Write) -> Self {
        SecretGuard {
            out,
            line: Vec::new(),
            lines: 0,
            withheld: None,
        }
    }

    /// Reads one complete line (newline included) and passes it on unless withheld.
    fn pass(&mut self) -> std::io::Result<()> {
        self.lines += 1;
        let text = String::from_utf8_lossy(&self.line);
        if self.withheld.is_none() && looks_like_a_secret(text.trim_end_matches('\n')) {
            self.withheld = Some(self.lines);
        }
        if self.withheld.is_none() {
            self.out.write_all(&self.line)?;
            self.out.flush()?;
        }
        self.line.clear();
        Ok(())
    }

    /// Passes on an unterminated last line; returns the real output and the first withheld
    /// line's number, if any.
    fn finish(mut self) -> (&'a mut dyn Write, Option<usize>) {
        if !self.line.is_empty() {
            let _ = self.pass();
        }
        (self.out, self.withheld)
    }
}

impl Write for SecretGuard<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for chunk in buf.split_inclusive(|b| *b == b'\n') {
            self.line.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") {
                self.pass()?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn print_json(out: &mut dyn Write, json: &FailureJson<'_>) {
    if serde_json::to_writer(&mut *out, json).is_ok() {
        let _ = writeln!(out);
    }
}

/// Checks the arguments, loads the declaration and runs the verb into `out`.
fn prepare_and_execute(
    cli: &Cli,
    render: Renderer<'_>,
    out: &mut dyn Write,
    live: Live<'_>,
) -> Result<Exit, Failure> {
    let mutates = matches!(cli.verb, Verb::Apply | Verb::Remove { dry_run: false, .. });
    if mutates && cli.root != Path::new("/") {
        // Their commands (useradd, systemctl) act on the real host whatever the root.
        return Err(Failure::RootNotAllowed);
    }
    // Run by another user, what only root may read would look absent: credentials awaited
    // that are there, every owed step pending, drift that does not exist.
    let reads_host = !matches!(cli.verb, Verb::Render { .. });
    if reads_host && cli.root == Path::new("/") && !rustix::process::geteuid().is_root() {
        return Err(Failure::NotRoot(cli.verb.name()));
    }
    let path = cli
        .declaration
        .clone()
        .ok_or(Failure::DeclarationRequired)?;
    let (decl, bytes) = load(&path)?;
    // Held until the verb's report is written: the plan is read and acted on by this run alone.
    let _lock = if mutates {
        let waiting = |held: &Path| {
            let _ = writeln!(
                live.err,
                "atelier-provision: another apply or remove of {} is running (it holds {}); \
                 waiting for it to end",
                decl.instance,
                held.display()
            );
        };
        Some(InstanceLock::take(&cli.root, &decl.instance, waiting)?)
    } else {
        None
    };
    Ok(execute(cli, &decl, &bytes, render, out, live)?)
}

fn load(path: &Path) -> Result<(Declaration, Vec<u8>), Failure> {
    let bytes = std::fs::read(path).map_err(|source| Failure::DeclarationUnreadable {
        path: path.to_owned(),
        source,
    })?;
    let text = std::str::from_utf8(&bytes).map_err(|_| Failure::DeclarationNotUtf8 {
        path: path.to_owned(),
    })?;
    let decl = Declaration::parse(text).map_err(|source| Failure::DeclarationInvalid {
        path: path.to_owned(),
        source,
    })?;
    Ok((decl, bytes))
}

/// A verb's `--json` report, with the reason it names when its exit is not 0.
fn report(
    verb: &Verb,
    exit: Exit,
    held: Option<Holdback>,
    mut body: serde_json::Value,
) -> serde_json::Value {
    if let serde_json::Value::Object(map) = &mut body {
        map.insert("verb".into(), verb.name().into());
        map.insert("exit".into(), json!(exit));
        if let Some(reason) = unfinished(verb, exit, held) {
            map.insert("reason".into(), reason.as_str().into());
            map.insert("message".into(), unfinished_message(reason).into());
        }
    }
    body
}

fn execute(
    cli: &Cli,
    decl: &Declaration,
    bytes: &[u8],
    render: Renderer<'_>,
    out: &mut dyn Write,
    live: Live<'_>,
) -> Result<Exit, VerbError> {
    let root = cli.root.as_path();
    let io = VerbError::Output;
    match &cli.verb {
        Verb::Render { dir } => {
            let written = verbs::render_verb(decl, root, dir, render)?;
            if cli.json {
                let body = report(&cli.verb, Exit::Ok, None, json!({ "written": written }));
                writeln!(out, "{body}").map_err(io)?;
            } else {
                for path in &written {
                    writeln!(out, "{}", path.display()).map_err(io)?;
                }
            }
            Ok(Exit::Ok)
        }
        Verb::Plan => {
            let actions = verbs::plan_verb(decl, Some(bytes), root, render)?;
            if cli.json {
                let body = report(&cli.verb, Exit::Ok, None, json!({ "actions": actions }));
                writeln!(out, "{body}").map_err(io)?;
            } else {
                writeln!(out, "{} actions", actions.len()).map_err(io)?;
                for action in &actions {
                    writeln!(out, "{action}").map_err(io)?;
                }
            }
            Ok(Exit::Ok)
        }
        Verb::Check => {
            let (drift, exit) = verbs::check_verb(decl, Some(bytes), root, render)?;
            if cli.json {
                let body = report(&cli.verb, exit, None, json!({ "drift": drift.items }));
                writeln!(out, "{body}").map_err(io)?;
            } else {
                writeln!(out, "{} drifted", drift.items.len()).map_err(io)?;
                for item in &drift.items {
                    writeln!(out, "{:<12} {}", item.class, item.subject).map_err(io)?;
                }
            }
            Ok(exit)
        }
        Verb::Verify => {
            let (proofs, exit) = verbs::verify_verb(decl, root);
            if cli.json {
                let body = report(&cli.verb, exit, None, json!({ "surfaces": proofs }));
                writeln!(out, "{body}").map_err(io)?;
            } else {
                for p in &proofs {
                    let state = match (&p.problem, &p.release) {
                        (Some(problem), _) => format!("FAILED {problem}"),
                        (None, Some(release)) => format!("serving {release}"),
                        (None, None) => "unpublished".to_owned(),
                    };
                    writeln!(out, "{} {} {state}", p.slug, p.surface.dir_name()).map_err(io)?;
                }
            }
            Ok(exit)
        }
        Verb::Remove {
            purge_published,
            dry_run: true,
        } => {
            let actions = verbs::removal_plan_verb(decl, root, render, *purge_published)?;
            if cli.json {
                let body = report(
                    &cli.verb,
                    Exit::Ok,
                    None,
                    json!({ "dry_run": true, "actions": actions, "outcomes": [] }),
                );
                writeln!(out, "{body}").map_err(io)?;
            } else {
                writeln!(
                    out,
                    "{} actions (dry run: nothing was changed)",
                    actions.len()
                )
                .map_err(io)?;
                for action in &actions {
                    writeln!(out, "{action}").map_err(io)?;
                }
            }
            Ok(Exit::Ok)
        }
        Verb::Remove {
            purge_published,
            dry_run: false,
        } => {
            let (removed, exit) = verbs::remove_verb(decl, root, render, *purge_published)?;
            if cli.json {
                let body = report(
                    &cli.verb,
                    exit,
                    None,
                    json!({ "actions": removed.actions, "outcomes": removed.outcomes }),
                );
                writeln!(out, "{body}").map_err(io)?;
            } else {
                for o in &removed.outcomes {
                    let status = serde_json::to_value(o.status).unwrap_or_default();
                    let status = status.as_str().unwrap_or("?");
                    match &o.error {
                        Some(e) => writeln!(out, "{status:<10} {} -- {e}", o.action),
                        None => writeln!(out, "{status:<10} {}", o.action),
                    }
                    .map_err(io)?;
                }
            }
            Ok(exit)
        }
        Verb::Apply => {
            let (mut silent, mut lines) = (
                (),
                OutcomeLines {
                    out,
                    failed: None,
                    live: Some(live),
                },
            );
            let progress: &mut dyn verbs::Progress =
                if cli.json { &mut silent } else { &mut lines };
            let (applied, exit) = verbs::apply_verb(decl, Some(bytes), root, render, progress)?;
            if let Some(error) = lines.failed {
                return Err(io(error));
            }
            if cli.json {
                let body = report(
                    &cli.verb,
                    exit,
                    applied.held,
                    json!({ "actions": applied.actions, "outcomes": applied.report.outcomes }),
                );
                writeln!(out, "{body}").map_err(io)?;
            } else if applied.report.outcomes.is_empty() {
                // Nothing ran: each action says what holds it back, as its outcome would.
                for action in &applied.actions {
                    let held = match action.holdback() {
                        Some(Holdback::DeferredRestart) => "deferred",
                        Some(Holdback::OperatorFile) | None => "awaiting",
                    };
                    writeln!(out, "{held:<10} {action}").map_err(io)?;
                }
            }
            Ok(exit)
        }
    }
}

/// `apply`'s plain progress: the plan's size, then one line per action as it completes; on a
/// terminal also the progress line while an action waits.
struct OutcomeLines<'a, 'e> {
    out: &'a mut dyn Write,
    /// The first write that failed; the rest are not tried.
    failed: Option<std::io::Error>,
    /// The progress line, if there is one.
    live: Option<Live<'e>>,
}

/// The progress line of a waiting action, drawn on the error stream and erased before each
/// outcome line. It shows the action as its outcome line will, read first by
/// [`looks_like_a_secret`] like every line printed.
struct Live<'a> {
    line: ProgressLine,
    err: &'a mut dyn Write,
    /// Set by the first text that looked like a credential: from then on nothing is drawn.
    withheld: bool,
}

impl OutcomeLines<'_, '_> {
    fn line(&mut self, line: std::fmt::Arguments<'_>) {
        if let Some(live) = &mut self.live {
            if live.line.clear(live.err).is_err() {
                // A progress line that cannot be written is dropped; the outcomes go on.
                self.live = None;
            }
        }
        if self.failed.is_none() {
            if let Err(error) = writeln!(self.out, "{line}") {
                self.failed = Some(error);
            }
        }
    }
}

impl verbs::Progress for OutcomeLines<'_, '_> {
    fn planned(&mut self, actions: &[crate::plan::Action]) {
        self.line(format_args!("{} actions", actions.len()));
    }

    fn completed(&mut self, o: &crate::apply::ActionOutcome) {
        let status = serde_json::to_value(o.status).unwrap_or_default();
        let status = status.as_str().unwrap_or("?");
        let text = match &o.error {
            Some(e) => format!("{status:<10} {} -- {e}", o.action),
            None => format!("{status:<10} {}", o.action),
        };
        if let Some(live) = &mut self.live {
            // The guard withholds this line and every later one; the progress line follows.
            live.withheld |= looks_like_a_secret(&text);
        }
        self.line(format_args!("{text}"));
    }

    fn pace(&self) -> Option<std::time::Duration> {
        self.live
            .as_ref()
            .filter(|live| live.line.is_live() && !live.withheld)
            .map(|_| progress::TICK)
    }

    fn waiting(&mut self, action: &crate::plan::Action, elapsed: std::time::Duration) {
        let Some(live) = &mut self.live else {
            return;
        };
        let label = action.to_string();
        live.withheld |= looks_like_a_secret(&label);
        let drawn = if live.withheld {
            live.line.clear(live.err)
        } else {
            live.line.show(live.err, &label, elapsed)
        };
        if drawn.is_err() {
            self.live = None;
        }
    }
}

/// Whether `line` holds `NAME=value` (or `"NAME":"value"`) where NAME names a key, token,
/// secret or password and the value could be one: 8 or more characters, no whitespace, not a
/// path. Provisioning never prints a credential; this catches a mistake before it is printed.
pub fn looks_like_a_secret(line: &str) -> bool {
    for (i, _) in line.match_indices(['=', ':']) {
        let name: String = line[..i]
            .trim_end_matches('"')
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let upper = name.to_ascii_uppercase();
        if !["KEY", "TOKEN", "SECRET", "PASSWORD"]
            .iter()
            .any(|w| upper.contains(w))
        {
            continue;
        }
        let rest = &line[i + 1..];
        let rest = rest.trim_start_matches('"');
        let value: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '"' && *c != ',')
            .collect();
        if value.len() >= 8 && !value.starts_with('/') {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use std::path::Path;

    use super::{looks_like_a_secret, Live, Mode, OutcomeLines, ProgressLine, SecretGuard};
    use crate::apply::{apply_watched, ActionOutcome, Status};
    use crate::plan::{Action, ExecStep};
    use crate::verbs::{Progress as _, Watching};

    #[test]
    fn guarded_output_passes_whole_lines_and_withholds_from_the_first_secret_on() {
        let mut out = Vec::new();
        let mut guard = SecretGuard::new(&mut out);
        guard.write_all(b"3 actions\ndone      ").unwrap();
        guard.write_all(b"identity run groupadd x\n").unwrap();
        guard
            .write_all(b"SERVICE_TOKEN=abcdefgh12345\nlater line\n")
            .unwrap();
        guard.write_all(b"unterminated").unwrap();
        let (_, withheld) = guard.finish();
        assert_eq!(withheld, Some(3));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "3 actions\ndone      identity run groupadd x\n"
        );

        let mut out = Vec::new();
        let mut guard = SecretGuard::new(&mut out);
        guard.write_all(b"a\nlast, unterminated").unwrap();
        assert_eq!(guard.finish().1, None);
        assert_eq!(out, b"a\nlast, unterminated");
    }

    #[test]
    fn apply_tells_the_plan_then_each_outcome_as_a_line() {
        let mut out = Vec::new();
        let mut lines = OutcomeLines {
            out: &mut out,
            failed: None,
            live: None,
        };
        lines.planned(&[]);
        lines.completed(&ActionOutcome {
            action: "service  run systemctl daemon-reload".into(),
            status: Status::Done,
            error: None,
        });
        lines.completed(&ActionOutcome {
            action: "web      run nginx -t".into(),
            status: Status::Failed,
            error: Some("exit status 1".into()),
        });
        assert!(lines.failed.is_none());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0 actions\n\
             done       service  run systemctl daemon-reload\n\
             failed     web      run nginx -t -- exit status 1\n"
        );
    }

    /// Applies `actions` with outcome lines on `out` and a progress line in `mode` on `err`.
    fn apply_showing(actions: &[Action], mode: Mode) -> (String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut lines = OutcomeLines {
            out: &mut out,
            failed: None,
            live: Some(Live {
                line: ProgressLine::new(mode, 80),
                err: &mut err,
                withheld: false,
            }),
        };
        apply_watched(actions, Path::new("/"), &mut Watching(&mut lines));
        assert!(lines.failed.is_none());
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    fn exec(argv: &[&str]) -> Action {
        Action::Exec {
            step: ExecStep::RestartServices,
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn on_a_terminal_a_waiting_action_shows_a_line_erased_before_its_outcome() {
        let actions = [exec(&["sleep", "0.35"]), exec(&["true"])];
        let plain = "done       service  run sleep 0.35\ndone       service  run true\n";
        let (out, err) = apply_showing(&actions, Mode::Plain);
        assert_eq!((out.as_str(), err.as_str()), (plain, ""), "plain");

        let (out, err) = apply_showing(&actions, Mode::Terminal);
        assert_eq!(out, plain, "the outcome lines are the plain ones");
        let frames: Vec<&str> = err.split('\r').skip(1).collect();
        assert!(frames.len() >= 5, "{err:?}");
        assert!(
            frames[0].starts_with("| 0s service  run sleep 0.35"),
            "{err:?}"
        );
        assert!(
            frames.iter().all(|f| f.ends_with("\x1b[K")),
            "every frame clears its row: {err:?}"
        );
        assert!(err.ends_with("\r\x1b[K"), "the line is erased: {err:?}");
        assert!(!err.contains('\n'), "{err:?}");
        assert_eq!(err.matches("\r\x1b[K").count(), 2, "once per step");
    }

    #[test]
    fn the_progress_line_never_draws_what_looks_like_a_credential() {
        let actions = [
            exec(&["sh", "-c", "sleep 0.25 # TOKEN=abcdefgh12345"]),
            exec(&["sleep", "0.25"]),
        ];
        let (out, err) = apply_showing(&actions, Mode::Terminal);
        assert!(
            out.contains("TOKEN=abcdefgh12345"),
            "the guard's to withhold"
        );
        assert_eq!(err, "", "and from that line on, nothing is drawn");
    }

    #[test]
    fn the_secret_guard_catches_values_not_names_or_paths() {
        for line in [
            "SERVICE_TOKEN=abcdefgh12345",
            r#"{"ANTHROPIC_API_KEY":"sk-ant-0123456789"}"#,
            r#"env PASSWORD="hunter2hunter2""#,
        ] {
            assert!(looks_like_a_secret(line), "{line}");
        }
        for line in [
            "secret   create /etc/atelier/example/credentials/SERVICE_TOKEN root:root 0600",
            "SERVICE_TOKEN_FILE=/etc/atelier/example/credentials/SERVICE_TOKEN",
            "API_KEY=short",
            "awaiting operator file /etc/atelier/example/credentials/ANTHROPIC_API_KEY root:root 0600",
            r#"{"path":"/etc/atelier/example/credentials/PUBLICATION_API_KEY","action":"file"}"#,
        ] {
            assert!(!looks_like_a_secret(line), "{line}");
        }
    }
}
