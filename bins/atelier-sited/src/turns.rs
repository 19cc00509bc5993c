//! One agent turn, start to end: plan the driver's run, open it through the site's turn
//! door, turn its stdout into session events, end it on stop or deadline, derive the changed
//! files from git, commit, then write the meta and `turn_end`.
//!
//! A turn has exactly one terminal fault: a stop is `turn_interrupted`, a deadline
//! `turn_timeout`, a connection without an exit record `turn_unit_lost`, a non-zero exit
//! `turn_agent_exited` (or `turn_agent_killed` for a signal) after the agent's stderr tail as
//! `agent_output`; each is a [`TurnFault`], whose `error` event carries a fixed sentence.
//! Whatever happens, `turn_end` is written and the site and slot are released.
//!
//! A turn is given [`TurnServices`], the pieces of the daemon it uses, and its holds; it never
//! reaches back into the session service that started it. The global turn slots
//! ([`TurnSlots`]) and the registry of running turns ([`RunningTurns`]) live here too: the
//! service takes a slot and stops turns through the registry; a turn frees its slot and leaves
//! the registry when it ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use atelier_agents::{DriverId, LineSplitter, McpAttachment, PlannedFile, TurnPlan, TurnRequest};
use atelier_fs::{FsError, Root};
use atelier_proto::{Door, ExitRecord};
use atelier_site_api::{Egress, SessionEvent, TurnState};
use tokio::sync::{watch, Notify};

use crate::agents_md::AGENTS_FILE;
use crate::drivers::AGENT_PATH;
use crate::git;
use crate::live_session::LiveSession;
use crate::metrics::{Metrics, Open};
use crate::reservations::Reservation;
use crate::runs::{RunItem, RunRefusal, RunSpec, RunTarget, Runner};
use crate::session_log::{self, LoggedEvent, SessionId, SessionLogError, SessionMeta};
use crate::sites::Sites;
use crate::turn_fault::{TurnEnd, TurnFault};
use atelier_layout::workspace::MCP_CONFIG_FILE;

/// The most of an agent's stderr kept for its `agent_output` event.
const STDERR_TAIL_BYTES: usize = 4096;
/// The longest stdout line a driver parses; a longer one is dropped and counted.
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// How long an agent may take to exit after its result (a CLI that hangs there would hold
/// the site until the turn's timeout).
const RESULT_GRACE: Duration = Duration::from_secs(5);
/// The largest brief read from `AGENTS.md` (the driver cuts what it passes on further).
const MAX_BRIEF_BYTES: u64 = 1024 * 1024;
/// The mode of a directory sited makes in a turn's stated directory: the turn reads it
/// through its group, nobody writes it but sited.
const STATED_DIR_MODE: u32 = 0o750;

/// What stopping a turn looks like from outside: the request, and the moment its run is gone.
#[derive(Debug)]
pub struct TurnControl {
    stop: watch::Sender<bool>,
    run_gone: watch::Sender<bool>,
}

impl TurnControl {
    /// A control for a turn not yet stopped.
    pub fn new() -> Arc<TurnControl> {
        Arc::new(TurnControl {
            stop: watch::channel(false).0,
            run_gone: watch::channel(false).0,
        })
    }

    /// Asks the turn to stop (idempotent).
    pub fn request_stop(&self) {
        self.stop.send_replace(true);
    }

    /// Whether a stop was asked for.
    pub fn stop_requested(&self) -> bool {
        *self.stop.borrow()
    }

    /// Waits until the turn's agent run has ended and is gone (or the turn never opened one).
    pub async fn run_gone(&self) {
        let mut gone = self.run_gone.subscribe();
        let _ = gone.wait_for(|gone| *gone).await;
    }

    fn mark_run_gone(&self) {
        self.run_gone.send_replace(true);
    }
}

/// What turns run with besides the sites and the runner. Its `Debug` shows no secret.
#[derive(Clone)]
pub struct TurnSettings {
    /// A turn's wall-clock limit.
    pub turn_timeout: Duration,
    /// The drivers' credentials, each for its own driver's child only.
    pub credentials: atelier_agents::DriverCredentials,
    /// The Publication API key, attached to the MCP server under `none` only.
    pub publication_api_key: Option<String>,
    /// The agent identity epoch resume tokens are stamped with.
    pub identity_epoch: i64,
    /// Where the model is, beyond the driver's default.
    pub endpoint: atelier_agents::ModelEndpoint,
}

impl std::fmt::Debug for TurnSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnSettings")
            .field("turn_timeout", &self.turn_timeout)
            .field("credentials", &self.credentials)
            .field(
                "publication_api_key",
                &atelier_agents::redacted(&self.publication_api_key),
            )
            .field("identity_epoch", &self.identity_epoch)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// The global turn slots: at most so many turns run at once in this process.
#[derive(Debug)]
pub struct TurnSlots {
    max: u32,
    taken: Arc<Mutex<u32>>,
}

impl TurnSlots {
    /// `max` slots, none taken.
    pub fn new(max: u32) -> Self {
        TurnSlots {
            max,
            taken: Arc::new(Mutex::new(0)),
        }
    }

    /// How many turns may run at once.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Takes a slot, or `None` when every one is taken.
    pub fn take(&self) -> Option<TurnSlot> {
        let mut n = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(TurnSlot {
            taken: Arc::clone(&self.taken),
        })
    }
}

/// One of the global turn slots; dropping it frees the slot.
#[derive(Debug)]
pub struct TurnSlot {
    taken: Arc<Mutex<u32>>,
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        let mut n = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
    }
}

/// The turns running in this process, by session: each one's control, and a signal whenever
/// one ends, for shutdown to wait on.
#[derive(Debug, Default)]
pub struct RunningTurns {
    controls: Mutex<HashMap<SessionId, Arc<TurnControl>>>,
    ended: Notify,
}

impl RunningTurns {
    /// Records the running turn of session `id`.
    pub fn insert(&self, id: SessionId, control: Arc<TurnControl>) {
        self.controls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, control);
    }

    /// The control of session `id`'s running turn, if it has one.
    pub fn control(&self, id: &SessionId) -> Option<Arc<TurnControl>> {
        self.controls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Forgets a finished turn's control and wakes anyone waiting for turns to end.
    pub fn forget(&self, id: &SessionId) {
        self.controls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        self.ended.notify_waiters();
    }

    /// Asks every running turn to stop.
    pub fn stop_all(&self) {
        let controls = self.controls.lock().unwrap_or_else(PoisonError::into_inner);
        for control in controls.values() {
            control.request_stop();
        }
    }

    /// Waits until no turn is running, at most `deadline`; returns whether none is.
    pub async fn wait_idle(&self, deadline: Duration) -> bool {
        let wait = async {
            loop {
                let ended = self.ended.notified();
                if self
                    .controls
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_empty()
                {
                    return;
                }
                ended.await;
            }
        };
        tokio::time::timeout(deadline, wait).await.is_ok()
    }
}

/// The pieces of the daemon a turn uses, handed to it by the session service that starts it.
#[derive(Debug, Clone)]
pub struct TurnServices {
    /// The site service: where the site's runs happen, its workspace, its git door and the
    /// session state its status reports.
    pub sites: Sites,
    /// The run seam.
    pub runner: Runner,
    /// What turns run with.
    pub settings: Arc<TurnSettings>,
    /// The daemon's metrics.
    pub metrics: Metrics,
    /// The running turns, this one among them until it ends.
    pub running: Arc<RunningTurns>,
}

impl TurnServices {
    /// Site `slug`'s workspace, its error as text. Blocking.
    fn workspace(&self, slug: &str) -> Result<Root, String> {
        self.sites.workspace(slug).map_err(|e| e.to_string())
    }
}

/// Everything one turn holds while it runs.
pub struct Turn {
    /// What it uses of the daemon.
    pub services: Arc<TurnServices>,
    /// The session's log and fan-out.
    pub session: Arc<LiveSession>,
    /// Its meta as it was when the turn was admitted.
    pub meta: SessionMeta,
    /// The prompt or follow-up message.
    pub prompt: String,
    /// The driver and its admitted binary.
    pub driver: DriverId,
    /// The binary.
    pub bin: PathBuf,
    /// The site's hold.
    pub reservation: Reservation,
    /// The global slot.
    pub slot: TurnSlot,
    /// Its place on the running-turns gauge, taken with the site's hold.
    pub running: Open,
    /// Stop and its acknowledgement.
    pub control: Arc<TurnControl>,
}

/// How the agent run ended.
enum Ending {
    Exit(ExitRecord),
    Lost(String),
    Stopped,
    TimedOut,
    /// The agent gave its result and then did not exit within [`RESULT_GRACE`]: it was
    /// stopped, and the turn ends on its result.
    HungAfterResult,
    /// The run was never opened.
    NotOpened(TurnFault),
}

impl Ending {
    /// Whether the agent had no say in how its turn ended (it never ran, or was stopped from
    /// outside), so a session it was resuming is still the one to resume.
    fn kept_session(&self) -> bool {
        matches!(
            self,
            Ending::NotOpened(_) | Ending::Stopped | Ending::TimedOut | Ending::Lost(_)
        )
    }
}

impl Turn {
    /// Runs the turn to its end. Never fails: every fault is an event in the log.
    pub async fn run(self) {
        let Turn {
            services,
            session,
            mut meta,
            prompt,
            driver,
            bin,
            reservation,
            slot,
            running,
            control,
        } = self;
        let turn = meta.turns + 1;
        let slug = session.slug().to_owned();
        let id = session.id().clone();
        let target = services.sites.config().run_target(&slug);
        let events = Events {
            session: Arc::clone(&session),
        };
        // A token minted under another identity (or before epochs existed) is not replayed:
        // the agent's own session state lived in the old identity's home.
        let epoch = services.settings.identity_epoch;
        let mut resume_token = meta.resume_token.clone();
        if resume_token.is_some() && meta.identity_epoch.unwrap_or(0) != epoch {
            resume_token = None;
            events
                .persist(SessionEvent::ResumeUnavailable {
                    reason: Some("agent identity migrated".to_owned()),
                })
                .await;
        }
        meta.identity_epoch = Some(epoch);
        events
            .persist(SessionEvent::TurnStart {
                turn,
                prompt: prompt.clone(),
            })
            .await;

        let mut fault: Option<TurnFault> = None;
        let mut last_token: Option<String> = None;
        let mut planned: Vec<PlannedFile> = Vec::new();
        let ending = match plan(
            &services,
            driver,
            &bin,
            &target,
            &prompt,
            resume_token.as_deref(),
        )
        .await
        {
            Err((fault, why)) => {
                tracing::warn!(session = %id, site = %slug, "turn setup failed: {why}");
                Ending::NotOpened(fault)
            }
            Ok(_) if control.stop_requested() => Ending::NotOpened(TurnFault::Interrupted),
            Ok((plan, stated_dir)) => {
                planned = plan.files.clone();
                let written = match write_stated(&stated_dir, &plan.stated).await {
                    Ok(()) => write_planned(&services, &slug, &plan.files).await,
                    Err(e) => Err(e),
                };
                match written {
                    Err(e) => {
                        tracing::warn!(session = %id, site = %slug, error = %e, "could not write the turn's files");
                        Ending::NotOpened(TurnFault::SetupFailed)
                    }
                    Ok(()) => {
                        let spec = RunSpec {
                            door: Door::Turn,
                            argv: plan.argv,
                            env: plan.env,
                            stdin: plan.stdin,
                        };
                        let parser = atelier_agents::line_parser(driver);
                        let lines = LineSplitter::new(MAX_LINE_BYTES).with_noise(parser.noise());
                        let mut relay = Relay {
                            events: &events,
                            parser,
                            lines,
                            stderr_tail: Vec::new(),
                            saw_result: false,
                            last_token: &mut last_token,
                        };
                        let ending = relay
                            .run(
                                &services.runner,
                                &target,
                                spec,
                                &control,
                                services.settings.turn_timeout,
                            )
                            .await;
                        let clean =
                            matches!(&ending, Ending::Exit(ExitRecord { code: Some(0), .. }));
                        relay.flush(clean).await;
                        relay.report_dropped_lines().await;
                        let saw_result = relay.saw_result;
                        let failed = relay.parser.failure().is_some();
                        if !saw_result {
                            if let Some(kept) = relay.parser.kept_after_failure() {
                                *relay.last_token = Some(kept.to_owned());
                            }
                        }
                        let tail = std::mem::take(&mut relay.stderr_tail);
                        drop(relay);
                        fault = report_ending(&events, &ending, saw_result, failed, &tail).await;
                        ending
                    }
                }
            }
        };
        if let Ending::NotOpened(refused) = &ending {
            events.persist(refused.event()).await;
            fault = Some(*refused);
        }
        // A turn that never ran, or was stopped before it named a session, leaves the one it
        // resumed: the next message goes on with it instead of starting the agent afresh.
        if last_token.is_none() && ending.kept_session() {
            last_token = resume_token.clone();
        }
        control.mark_run_gone();
        remove_planned(&services, &slug, &planned).await;

        // The git backstop and the commit, through the git door.
        let git = services.sites.git().clone();
        match git.changed_files(&target).await {
            Ok(files) if !files.is_empty() => {
                events.persist(SessionEvent::FileChange { files }).await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "could not list the turn's changed files")
            }
        }
        match services.workspace(&slug) {
            Ok(workspace) => {
                match git
                    .commit(&target, &workspace, &git::turn_message(id.as_str(), turn))
                    .await
                {
                    // The commit took every change, an earlier turn's uncommitted ones too:
                    // nothing is left for a boot to recover.
                    Ok(_) => meta.recovery_pending = false,
                    Err(e) => {
                        tracing::error!(session = %id, error = %e, "could not commit the turn; the next boot retries");
                        meta.recovery_pending = true;
                    }
                }
            }
            Err(e) => {
                tracing::error!(session = %id, error = %e, "could not open the workspace to commit");
                meta.recovery_pending = true;
            }
        }

        let ended = if matches!(ending, Ending::Stopped) || control.stop_requested() {
            TurnEnd::Interrupted
        } else if let Some(fault) = fault {
            TurnEnd::Error(fault)
        } else {
            TurnEnd::Idle
        };
        let state = ended.state();
        meta.turns = turn;
        meta.state = state.to_owned();
        meta.resume_token = last_token.clone();
        let meta_written = {
            let (services, slug, meta) = (Arc::clone(&services), slug.clone(), meta.clone());
            tokio::task::spawn_blocking(move || {
                let workspace = services.workspace(&slug)?;
                session_log::write_meta(&workspace, &meta).map_err(|e| e.to_string())
            })
            .await
        };
        match meta_written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(session = %id, error = %e, "could not write the session meta")
            }
            Err(e) => tracing::error!(session = %id, error = %e, "the meta task failed"),
        }
        // The site and slot are freed between the turn_end's write and its fan-out.
        let release = {
            let (services, slug, id) = (Arc::clone(&services), slug.clone(), id.clone());
            move || {
                services.sites.set_session_state(&slug, state, id.as_str());
                services.running.forget(&id);
                services.metrics.turn_ended(ended);
                drop((reservation, slot, running));
            }
        };
        let turn_end = SessionEvent::TurnEnd {
            state: TurnState::parse(state),
            resume_token: last_token.clone(),
        };
        events.end_turn(turn_end, release).await;
        tracing::info!(session = %id, site = %slug, turn, state, "turn ended");
    }
}

/// Appends events to the session log off the async workers, in order.
struct Events {
    session: Arc<LiveSession>,
}

impl Events {
    async fn persist(&self, event: SessionEvent) {
        let session = Arc::clone(&self.session);
        let written = tokio::task::spawn_blocking(move || session.append(event)).await;
        self.report(written);
    }

    /// Appends the turn's `turn_end`, freeing what the turn holds with `release` before any
    /// follower reads it ([`LiveSession::end_turn`]).
    async fn end_turn(&self, turn_end: SessionEvent, release: impl FnOnce() + Send + 'static) {
        let session = Arc::clone(&self.session);
        let written =
            tokio::task::spawn_blocking(move || session.end_turn(turn_end, release)).await;
        self.report(written);
    }

    fn report(
        &self,
        written: Result<Result<Arc<LoggedEvent>, SessionLogError>, tokio::task::JoinError>,
    ) {
        match written {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::error!(session = %self.session.id(), error = %e, "could not persist a session event")
            }
            Err(e) => {
                tracing::error!(session = %self.session.id(), error = %e, "the event task failed")
            }
        }
    }
}

/// The agent run's output turned into events.
struct Relay<'a> {
    events: &'a Events,
    parser: Box<dyn atelier_agents::LineParser>,
    lines: LineSplitter,
    stderr_tail: Vec<u8>,
    saw_result: bool,
    last_token: &'a mut Option<String>,
}

impl Relay<'_> {
    async fn run(
        &mut self,
        runner: &Runner,
        target: &RunTarget,
        spec: RunSpec,
        control: &TurnControl,
        timeout: Duration,
    ) -> Ending {
        let deadline = Instant::now() + timeout;
        let mut stop = control.stop.subscribe();
        let refused = |refusal: RunRefusal| {
            tracing::warn!(site = %target.slug, "the turn's run was refused: {refusal}");
            Ending::NotOpened(TurnFault::of_refusal(&refusal))
        };
        let opened = match runner.open_door(target, spec.door).await {
            Ok(opened) => opened,
            Err(refusal) => return refused(refusal),
        };
        // A stop that came while the unit was started (which may wait for a leftover run to
        // go) starts nothing: the agent has not been given its spec.
        if control.stop_requested() {
            opened.give_up().await;
            return Ending::NotOpened(TurnFault::Interrupted);
        }
        let mut run = match opened.start(spec).await {
            Ok(run) => run,
            Err(refusal) => return refused(refusal),
        };
        if runner.is_unconfined() {
            self.events
                .persist(SessionEvent::text(
                    "[atelier] This turn runs unconfined (agent confinement 'none', a development host): the agent runs as the daemon's own user with its network.",
                ))
                .await;
        }
        let mut exit_by: Option<Instant> = None;
        let ending = loop {
            tokio::select! {
                item = run.next() => match item {
                    RunItem::Stdout(bytes) => {
                        for line in self.lines.push(&bytes) {
                            self.parse(&line).await;
                        }
                        if self.saw_result && exit_by.is_none() {
                            exit_by = Some(Instant::now() + RESULT_GRACE);
                        }
                    }
                    RunItem::Stderr(bytes) => keep_tail(&mut self.stderr_tail, &bytes),
                    RunItem::Egress(decision) => self.events.persist(egress_event(&decision)).await,
                    RunItem::Exit(exit) => break Ending::Exit(exit),
                    RunItem::Lost(why) => break Ending::Lost(why),
                },
                () = stop_requested(&mut stop) => break Ending::Stopped,
                () = tokio::time::sleep_until(deadline.into()) => break Ending::TimedOut,
                () = until(exit_by) => break Ending::HungAfterResult,
            }
        };
        run.stop().await;
        // A stopped or timed-out run's last decisions are the session's too.
        for decision in run.take_decisions().await {
            self.events.persist(egress_event(&decision)).await;
        }
        ending
    }

    /// Says, once the run is over, how many output lines were too long to read: whatever they
    /// held (a tool call, a result) is missing from the session, and the user should know.
    async fn report_dropped_lines(&mut self) {
        let dropped = self.lines.dropped();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "the agent wrote lines over {MAX_LINE_BYTES} bytes; skipped"
            );
            let mib = MAX_LINE_BYTES / (1024 * 1024);
            let said = if dropped == 1 {
                format!(
                    "[atelier] A line of the agent's output was over {mib} MiB and was skipped: \
                     what it held is not in this session."
                )
            } else {
                format!(
                    "[atelier] {dropped} lines of the agent's output were over {mib} MiB and were \
                     skipped: what they held is not in this session."
                )
            };
            self.events.persist(SessionEvent::text(said)).await;
        }
    }

    async fn parse(&mut self, line: &str) {
        let events = self.parser.parse_line(line);
        self.persist_all(events).await;
    }

    async fn persist_all(&mut self, events: Vec<SessionEvent>) {
        for event in events {
            if let SessionEvent::Result { resume_token, .. } = &event {
                self.saw_result = true;
                if let Some(token) = resume_token {
                    *self.last_token = Some(token.clone());
                }
            }
            self.events.persist(event).await;
        }
    }

    /// The last partial line; and after a clean exit, what the driver knows only at the end.
    async fn flush(&mut self, clean_exit: bool) {
        if let Some(line) = self.lines.finish() {
            self.parse(&line).await;
        }
        if clean_exit {
            let events = self.parser.finish();
            self.persist_all(events).await;
        }
    }
}

/// A gate decision as the session shows it: a `text` event in the original's words, with the
/// decision's fields beside it for a client that reads them.
fn egress_event(decision: &atelier_proto::egress::Decision) -> SessionEvent {
    SessionEvent::Text {
        text: decision.line(),
        egress: Some(Egress {
            host: decision.host.clone(),
            port: decision.port,
            verdict: decision.verdict.as_str().to_owned(),
            reason: decision.reason.clone(),
        }),
    }
}

/// Resolves at `at`; never without one.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Resolves once a stop is asked for (the watch's guard never outlives this call).
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Writes the terminal events of an opened run; returns the fault it ended with, if any.
/// `failed`: the agent's own output said the turn failed although it exited 0.
async fn report_ending(
    events: &Events,
    ending: &Ending,
    saw_result: bool,
    failed: bool,
    tail: &[u8],
) -> Option<TurnFault> {
    let output = || {
        let text = String::from_utf8_lossy(tail).trim().to_owned();
        (!text.is_empty()).then(|| SessionEvent::AgentOutput {
            source: Some("stderr".to_owned()),
            text,
            truncated: tail.len() >= STDERR_TAIL_BYTES,
        })
    };
    // A result is the turn's one terminal event: however the run ends after it (an exit
    // status, a stop, the timeout, a hang), nothing is said against it.
    if saw_result && !matches!(ending, Ending::Exit(ExitRecord { code: Some(0), .. })) {
        tracing::info!("the agent's run ended after its result; the turn ends on the result");
        return None;
    }
    let fault = match ending {
        Ending::Exit(ExitRecord { code: Some(0), .. }) if failed && !saw_result => {
            TurnFault::AgentExited
        }
        Ending::Exit(ExitRecord { code: Some(0), .. }) => {
            if !saw_result {
                events
                    .persist(SessionEvent::Result {
                        ok: true,
                        resume_token: None,
                        cost_usd: None,
                        duration_ms: Some(0),
                    })
                    .await;
            }
            return None;
        }
        Ending::Exit(ExitRecord { code: Some(_), .. }) => {
            if let Some(output) = output() {
                events.persist(output).await;
            }
            TurnFault::AgentExited
        }
        Ending::Exit(ExitRecord { code: None, .. }) => {
            if let Some(output) = output() {
                events.persist(output).await;
            }
            TurnFault::AgentKilled
        }
        Ending::Lost(why) => {
            tracing::warn!("the turn's run ended without an exit record: {why}");
            TurnFault::UnitLost
        }
        Ending::Stopped => TurnFault::Interrupted,
        Ending::TimedOut => TurnFault::Timeout,
        // Only after a result, handled above.
        Ending::HungAfterResult | Ending::NotOpened(_) => return None,
    };
    events.persist(fault.event()).await;
    Some(fault)
}

fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    if tail.len() > STDERR_TAIL_BYTES {
        let cut = tail.len() - STDERR_TAIL_BYTES;
        tail.drain(..cut);
    }
}

async fn write_planned(
    services: &Arc<TurnServices>,
    slug: &str,
    files: &[PlannedFile],
) -> Result<(), String> {
    if files.is_empty() {
        return Ok(());
    }
    let (services, slug, files) = (Arc::clone(services), slug.to_owned(), files.to_vec());
    tokio::task::spawn_blocking(move || {
        let workspace = services.workspace(&slug)?;
        for file in &files {
            workspace
                .write_atomic(&file.path, &file.contents, file.mode)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
    .await
    .map_err(|e| e.to_string())?
}

async fn remove_planned(services: &Arc<TurnServices>, slug: &str, files: &[PlannedFile]) {
    if files.is_empty() {
        return;
    }
    let (services, slug, files) = (Arc::clone(services), slug.to_owned(), files.to_vec());
    let removed = tokio::task::spawn_blocking(move || -> Result<(), String> {
        let workspace = services.workspace(&slug)?;
        for file in &files {
            workspace
                .remove_file(&file.path)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
    .await;
    if !matches!(removed, Ok(Ok(()))) {
        tracing::error!("could not remove a turn's planned file (it may hold a key)");
    }
}

/// Writes the driver's configuration into the turn's stated directory, emptied first: it is
/// sited's alone, so what is there is what an earlier turn was told, never what a turn wrote.
async fn write_stated(dir: &Path, files: &[PlannedFile]) -> Result<(), String> {
    let (owned, files) = (dir.to_path_buf(), files.to_vec());
    tokio::task::spawn_blocking(move || -> Result<(), atelier_fs::FsError> {
        let root = atelier_fs::Root::open(&owned)?;
        for (name, _) in atelier_fs::tree::list_dir(&root, None)? {
            atelier_fs::tree::remove_tree(&root, &name)?;
        }
        for file in &files {
            if let Some(parent) = file.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                root.create_dir_all(parent, STATED_DIR_MODE)?;
            }
            root.write_atomic(&file.path, &file.contents, file.mode)?;
        }
        Ok(())
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("the turn's stated configuration in {}: {e}", dir.display()))
}

/// Plans the driver's run: the brief from `AGENTS.md` (bounded, a regular file, no link
/// followed), the MCP attachment of this confinement, the driver's argv, environment and files;
/// with the directory its stated files go to.
async fn plan(
    services: &Arc<TurnServices>,
    driver: DriverId,
    bin: &Path,
    target: &RunTarget,
    prompt: &str,
    resume_token: Option<&str>,
) -> Result<(TurnPlan, PathBuf), (TurnFault, String)> {
    let brief = {
        let (services, slug) = (Arc::clone(services), target.slug.clone());
        tokio::task::spawn_blocking(move || {
            let workspace = services.workspace(&slug)?;
            match workspace.read_limited(AGENTS_FILE, MAX_BRIEF_BYTES) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(FsError::NotFound { .. }) => Ok(None),
                Err(e) => Err(format!("reading {AGENTS_FILE}: {e}")),
            }
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|read| read)
        .map_err(|why| (TurnFault::SetupFailed, why))?
    };
    let agents = &services.settings;
    let mcp = if services.runner.is_unconfined() {
        McpAttachment::unconfined(
            &services.sites.config().publication_api_url,
            agents.publication_api_key.as_deref(),
        )
    } else {
        McpAttachment::confined()
    };
    let mcp_config_path = target.workspace.join(MCP_CONFIG_FILE);
    let dirs = services
        .runner
        .turn_dirs(&target.slug)
        .map_err(|refusal| (TurnFault::of_refusal(&refusal), refusal.to_string()))?;
    let request = TurnRequest {
        driver,
        bin,
        workspace: &target.workspace,
        prompt,
        resume_token,
        brief: brief.as_deref(),
        mcp: &mcp,
        mcp_config_path: &mcp_config_path,
        path_env: AGENT_PATH,
        credentials: &agents.credentials,
        proxied: services.runner.has_gate(Door::Turn),
        endpoint: &agents.endpoint,
        stated_dir: &dirs.stated,
        state_dir: &dirs.state,
    };
    let plan =
        atelier_agents::plan_turn(&request).map_err(|e| (TurnFault::SetupFailed, e.to_string()))?;
    Ok((plan, dirs.stated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_settings_show_no_secret() {
        let settings = TurnSettings {
            turn_timeout: Duration::from_secs(1),
            credentials: atelier_agents::DriverCredentials {
                anthropic_api_key: Some("sk-ant-canary".into()),
                atelier_api_key: Some("atelier-canary".into()),
                ..Default::default()
            },
            publication_api_key: Some("publication-canary".into()),
            identity_epoch: 0,
            endpoint: atelier_agents::ModelEndpoint::default(),
        };
        let shown = format!("{settings:?}");
        for secret in ["sk-ant-canary", "atelier-canary", "publication-canary"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("publication_api_key: Some(\"[redacted]\")"),
            "{shown}"
        );
    }
}
