//! The confinement seam: every agent turn, build and git command sited starts is a [`Run`]
//! through one of a site's doors, spoken in frames (`H` → `S` → `O`/`E` → `X`).
//!
//! How the connection comes to exist is the mode's business: under `none` sited spawns
//! `atelier-shim --unconfined` over a socketpair ([`none`], the only code in sited that starts a
//! process); under systemd confinement it is one `connect()` to the door socket and PID 1 starts
//! the shim. Everything after the connection — the hello, the spec, the relay, the exit record
//! — is the same code, here.

mod decisions;
pub mod host;
mod none;
mod systemd;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use atelier_proto::{
    read_frame, write_frame, Decoder, Door, ExitRecord, FrameKind, Hello, Spec, PROTOCOL_VERSION,
};
use atelier_site_api::Reason;
use bytes::Bytes;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

pub use decisions::Decisions;
pub use none::NoneSpawner;
pub use systemd::{DoorSettings, SystemdDoors};

/// How long the shim has to say hello once the connection exists. PID 1 starting a fully
/// sandboxed unit takes about 100 ms; a shim that has not spoken after this never will.
const HELLO_DEADLINE: Duration = Duration::from_secs(10);

/// How long a stopped run's shim may take to kill its program and exit (it gives the program
/// 5 s between SIGTERM and SIGKILL) before sited kills the shim itself.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// Why a run could not be opened; each is a `confinement.*` refusal the engine knows.
#[derive(Debug, thiserror::Error)]
pub enum RunRefusal {
    /// sited is shutting down and starts nothing new.
    #[error("the daemon is stopping; no new run is started")]
    DaemonStopping,
    /// The host cannot run anything for this site (the shim could not be started, the
    /// confinement mode is not available here).
    #[error("confinement unavailable: {0}")]
    Unavailable(String),
    /// The site has no identity: it is not among the declared sites the provisioner made.
    #[error("site '{0}' has no agent identity; declare it and run atelier-provision apply")]
    IdentityMissing(String),
    /// A run of the site would not die; nothing runs until PID 1 reports it gone.
    #[error(
        "a run of site '{slug}' ({unit}) would not die; the site is quarantined until it is gone"
    )]
    Quarantined {
        /// The site.
        slug: String,
        /// The unit that lives on.
        unit: String,
    },
    /// What the door's unit would be given differs from what Atelier renders (seen by sited
    /// itself, before PID 1 is asked).
    #[error("{0}")]
    Nonconformant(String),
    /// PID 1 could not be asked, refused, or answered with a unit other than the rendered one;
    /// which refusal it is follows from the error.
    #[error(transparent)]
    Pid1(#[from] atelier_systemd::Error),
    /// The door's unit never said hello, or said something else.
    #[error("the {door} door refused the run: {detail}")]
    UnitRefused {
        /// The door.
        door: Door,
        /// What went wrong (for the log).
        detail: String,
    },
}

impl RunRefusal {
    /// The machine reason the refusal answers with (as a problem, or as a turn's fault).
    pub fn reason(&self) -> Reason {
        match self {
            RunRefusal::DaemonStopping => Reason::ConfinementDaemonStopping,
            RunRefusal::Unavailable(_) => Reason::ConfinementUnavailable,
            RunRefusal::UnitRefused { .. } => Reason::ConfinementUnitRefused,
            RunRefusal::IdentityMissing(_) => Reason::ConfinementIdentityMissing,
            RunRefusal::Quarantined { .. } => Reason::ConfinementIdentityQuarantined,
            RunRefusal::Nonconformant(_) => Reason::ConfinementUnitNonconformant,
            RunRefusal::Pid1(error) => error.reason().refusal(),
        }
    }
}

/// What a run runs: the program, its complete environment and the door it goes through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// The door.
    pub door: Door,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The program's whole environment; the door adds only what its unit fixes (HOME, git's
    /// configuration).
    pub env: BTreeMap<String, String>,
    /// What the program reads on stdin (else `/dev/null`).
    pub stdin: Option<String>,
}

/// Where a run happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTarget {
    /// The site.
    pub slug: String,
    /// Its workspace, the program's working directory.
    pub workspace: PathBuf,
}

/// Where a turn's agent CLI finds the daemon's statement of its configuration and keeps its
/// own state, as the CLI sees them (the same paths sited writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnDirs {
    /// Written by sited before each turn, read-only to the turn.
    pub stated: PathBuf,
    /// The CLI's own writable state (its sessions).
    pub state: PathBuf,
}

/// One thing a run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunItem {
    /// Bytes the program wrote to stdout.
    Stdout(Bytes),
    /// Bytes the program wrote to stderr.
    Stderr(Bytes),
    /// What the site's gate decided about a request of the program. All of a run's come
    /// before its [`Exit`](Self::Exit) or [`Lost`](Self::Lost).
    Egress(atelier_proto::egress::Decision),
    /// The program ended; nothing follows.
    Exit(ExitRecord),
    /// The connection ended, or broke the protocol, without an exit record: a failed run,
    /// never a success. Nothing follows.
    Lost(String),
}

/// How a run ended, for runs whose output is collected whole (git).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    /// Everything the program wrote to stdout, up to the collection limit.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr, up to the collection limit.
    pub stderr: Vec<u8>,
    /// The exit record, or why there is none.
    pub end: Result<ExitRecord, String>,
}

/// The mode runs are opened in.
#[derive(Debug)]
pub enum Mode {
    /// `AGENT_CONFINEMENT=none`: sited spawns the shim itself.
    None(NoneSpawner),
    /// `AGENT_CONFINEMENT=systemd_scope`: PID 1 starts the shim on a door socket connect.
    Systemd(SystemdDoors),
}

/// Opens runs; one per daemon.
#[derive(Debug, Clone)]
pub struct Runner {
    inner: Arc<RunnerState>,
}

#[derive(Debug)]
struct RunnerState {
    mode: Mode,
    host_netns: String,
    stopping: AtomicBool,
}

impl Runner {
    /// A runner in `mode`. Reads sited's own network namespace identity, which every spec
    /// carries so the shim can prove its own differs.
    pub fn new(mode: Mode) -> std::io::Result<Runner> {
        let host_netns = std::fs::read_link("/proc/self/ns/net")?
            .to_string_lossy()
            .into_owned();
        Ok(Runner {
            inner: Arc::new(RunnerState {
                mode,
                host_netns,
                stopping: AtomicBool::new(false),
            }),
        })
    }

    /// From now on every [`open`](Self::open) is refused with `confinement.daemon_stopping`.
    pub fn refuse_new_runs(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether runs are still opened.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::SeqCst)
    }

    /// The systemd doors, under systemd confinement.
    pub fn systemd_doors(&self) -> Option<&SystemdDoors> {
        match &self.inner.mode {
            Mode::Systemd(doors) => Some(doors),
            Mode::None(_) => None,
        }
    }

    /// Whether runs are unconfined (their turns announce it).
    pub fn is_unconfined(&self) -> bool {
        matches!(self.inner.mode, Mode::None(_))
    }

    /// Whether a run through `door` has its site's gate behind the shim's loopback forward,
    /// so its program is given the proxy environment: every door with a way out under systemd;
    /// nothing under `none`, where no gate listens.
    pub fn has_gate(&self, door: Door) -> bool {
        matches!(self.inner.mode, Mode::Systemd(_)) && door.has_way_out()
    }

    /// Where a turn of `slug` finds the daemon's statement and keeps its state: the turn HOME's
    /// `stated/` and `state/` under systemd (the provisioner made them), the unconfined HOME's
    /// under `none` (made on first use).
    pub fn turn_dirs(&self, slug: &str) -> Result<TurnDirs, RunRefusal> {
        match &self.inner.mode {
            Mode::None(spawner) => spawner.turn_dirs(slug),
            Mode::Systemd(doors) => doors.turn_dirs(slug),
        }
    }

    /// Confinement admission for a run of `target` through `door`, before the request that
    /// wants it holds the site: a refusal here is the request's 503, and nothing was made.
    /// Under `none` only a stopping daemon refuses; [`open`](Self::open) asks again.
    pub async fn admit(&self, target: &RunTarget, door: Door) -> Result<(), RunRefusal> {
        if self.is_stopping() {
            return Err(RunRefusal::DaemonStopping);
        }
        match &self.inner.mode {
            Mode::None(_) => Ok(()),
            Mode::Systemd(doors) => doors.admit(&target.slug, door).await,
        }
    }

    /// Opens one run: the connection, the hello (which must name `spec.door`), then the spec.
    /// Never retried: a refusal is the answer.
    pub async fn open(&self, target: &RunTarget, spec: RunSpec) -> Result<Run, RunRefusal> {
        self.open_door(target, spec.door).await?.start(spec).await
    }

    /// The first half of [`open`](Self::open): the connection and the hello of `door`'s unit,
    /// which then waits for its spec. Until [`Opened::start`] nothing of the caller's runs, so a
    /// caller told to stop meanwhile (the unit's start may wait for a leftover run to go) can
    /// give the run up having started nothing.
    pub async fn open_door(&self, target: &RunTarget, door: Door) -> Result<Opened, RunRefusal> {
        if self.is_stopping() {
            return Err(RunRefusal::DaemonStopping);
        }
        let (stream, shim, doors, decisions) = match &self.inner.mode {
            Mode::None(spawner) => {
                let (stream, shim) = spawner.open(target, door)?;
                (stream, shim, None, None)
            }
            Mode::Systemd(doors) => {
                let (stream, decisions) = doors.open(target, door).await?;
                (stream, None, Some(doors.clone()), decisions)
            }
        };
        let refused = |detail: String| RunRefusal::UnitRefused { door, detail };
        let (reader, writer) = stream.into_split();
        let mut run = Run {
            reader: Some(BufReader::new(reader)),
            writer: Some(writer),
            decoder: Decoder::new(),
            shim,
            unit: None,
            ended: false,
            decisions,
            pending_end: None,
        };
        let hello = match tokio::time::timeout(HELLO_DEADLINE, run.read_hello()).await {
            Ok(Ok(hello)) => hello,
            Ok(Err(detail)) => {
                run.stop().await;
                return Err(refused(detail));
            }
            Err(_) => {
                run.stop().await;
                return Err(refused(format!(
                    "no hello within {} s",
                    HELLO_DEADLINE.as_secs()
                )));
            }
        };
        if hello.door != door {
            run.stop().await;
            return Err(refused(format!("the unit serves the {} door", hello.door)));
        }
        tracing::debug!(site = %target.slug, %door, unit = %hello.unit, "run opened");
        run.unit = doors.map(|doors| (doors, target.slug.clone(), hello.unit.clone()));
        Ok(Opened {
            run,
            door,
            host_netns: self.inner.host_netns.clone(),
        })
    }

    /// Opens a run and collects its whole output (at most `limit` bytes of each stream; the
    /// rest is dropped), ending it at `deadline`.
    pub async fn collect(
        &self,
        target: &RunTarget,
        spec: RunSpec,
        limit: usize,
        deadline: Duration,
    ) -> Result<RunOutput, RunRefusal> {
        let mut run = self.open(target, spec).await?;
        let mut output = RunOutput {
            stdout: Vec::new(),
            stderr: Vec::new(),
            end: Err(String::new()),
        };
        let collected = tokio::time::timeout(deadline, async {
            loop {
                match run.next().await {
                    RunItem::Stdout(bytes) => keep(&mut output.stdout, &bytes, limit),
                    RunItem::Stderr(bytes) => keep(&mut output.stderr, &bytes, limit),
                    RunItem::Egress(_) => {}
                    RunItem::Exit(exit) => return Ok(exit),
                    RunItem::Lost(why) => return Err(why),
                }
            }
        })
        .await;
        output.end = match collected {
            Ok(end) => end,
            Err(_) => Err(format!("timed out after {} ms", deadline.as_millis())),
        };
        run.stop().await;
        Ok(output)
    }
}

fn keep(buffer: &mut Vec<u8>, bytes: &[u8], limit: usize) {
    let room = limit.saturating_sub(buffer.len());
    buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

/// A run whose unit said hello and waits for its spec: nothing of the caller's runs yet.
#[derive(Debug)]
pub struct Opened {
    run: Run,
    door: Door,
    host_netns: String,
}

impl Opened {
    /// Sends the spec: from here the program runs.
    pub async fn start(self, spec: RunSpec) -> Result<Run, RunRefusal> {
        let Opened {
            mut run,
            door,
            host_netns,
        } = self;
        let refused = |detail: String| RunRefusal::UnitRefused { door, detail };
        if spec.door != door {
            run.stop().await;
            return Err(refused(format!("a spec for the {} door", spec.door)));
        }
        let spec = Spec {
            v: PROTOCOL_VERSION,
            door,
            argv: spec.argv,
            env: spec.env,
            host_netns,
            stdin: spec.stdin,
        };
        if let Err(e) = run.send_spec(&spec).await {
            run.stop().await;
            return Err(refused(format!("sending the spec: {e}")));
        }
        Ok(run)
    }

    /// Ends the run without starting anything, and waits until it is gone.
    pub async fn give_up(mut self) {
        self.run.stop().await;
    }
}

/// One open run. Dropping it closes the connection, which makes the shim end the program;
/// [`stop`](Self::stop) does the same and waits until the run is gone.
#[derive(Debug)]
pub struct Run {
    reader: Option<BufReader<OwnedReadHalf>>,
    writer: Option<OwnedWriteHalf>,
    decoder: Decoder,
    /// The shim process under `none`; under systemd PID 1 owns it.
    shim: Option<tokio::process::Child>,
    /// Under systemd: the doors, the site and the run's unit, which must be gone before the
    /// site is free.
    unit: Option<(SystemdDoors, String, String)>,
    ended: bool,
    /// The gate's decisions about this run (doors with a way out, under systemd).
    decisions: Option<Decisions>,
    /// The run's end, held back until the gate has handed over the rest of its decisions.
    pending_end: Option<RunItem>,
}

impl Run {
    async fn read_hello(&mut self) -> Result<Hello, String> {
        let reader = self.reader.as_mut().ok_or("the connection is closed")?;
        match read_frame(reader, &mut self.decoder).await {
            Ok(Some(frame)) if frame.kind == FrameKind::Hello => {
                Hello::from_frame(&frame).map_err(|e| format!("bad hello: {e}"))
            }
            Ok(Some(frame)) => Err(format!("a {:?} frame before the hello", frame.kind)),
            Ok(None) => Err("the connection closed before the hello".to_owned()),
            Err(e) => Err(format!("reading the hello: {e}")),
        }
    }

    async fn send_spec(&mut self, spec: &Spec) -> Result<(), String> {
        let frame = spec.to_frame().map_err(|e| e.to_string())?;
        let writer = self.writer.as_mut().ok_or("the connection is closed")?;
        write_frame(writer, &frame).await.map_err(|e| e.to_string())
    }

    /// The next thing the run reports. After an [`RunItem::Exit`] or [`RunItem::Lost`] every
    /// call answers `Lost`. Cancel safe: a dropped call loses no bytes.
    pub async fn next(&mut self) -> RunItem {
        loop {
            if let Some(end) = self.pending_end.take() {
                return match self.drain_decision().await {
                    Some(decision) => {
                        self.pending_end = Some(end);
                        RunItem::Egress(decision)
                    }
                    None => end,
                };
            }
            let Some(reader) = self.reader.as_mut().filter(|_| !self.ended) else {
                return RunItem::Lost("the run has ended".to_owned());
            };
            let item = match self.decisions.as_mut() {
                Some(decisions) => tokio::select! {
                    frame = read_frame(reader, &mut self.decoder) => Self::item(frame),
                    decision = decisions.next() => match decision {
                        Some(decision) => return RunItem::Egress(decision),
                        None => {
                            // The gate went away mid-run: its later decisions are lost, the
                            // run itself goes on.
                            tracing::warn!("the gate closed its decision stream during a run");
                            self.decisions = None;
                            continue;
                        }
                    },
                },
                None => Self::item(read_frame(reader, &mut self.decoder).await),
            };
            if matches!(item, RunItem::Exit(_) | RunItem::Lost(_)) {
                self.ended = true;
                if let Some(decisions) = self.decisions.as_mut() {
                    decisions.finish().await;
                    self.pending_end = Some(item);
                    continue;
                }
            }
            return item;
        }
    }

    /// The next of the decisions the gate still holds for this ended run; `None` when it has
    /// sent them all (or fails to within [`decisions::DRAIN_DEADLINE`]).
    async fn drain_decision(&mut self) -> Option<atelier_proto::egress::Decision> {
        let decisions = self.decisions.as_mut()?;
        match tokio::time::timeout(decisions::DRAIN_DEADLINE, decisions.next()).await {
            Ok(Some(decision)) => Some(decision),
            Ok(None) => {
                self.decisions = None;
                None
            }
            Err(_) => {
                tracing::warn!("the gate did not finish its decision stream after the run");
                self.decisions = None;
                None
            }
        }
    }

    fn item(frame: Result<Option<atelier_proto::Frame>, atelier_proto::FrameError>) -> RunItem {
        match frame {
            Ok(Some(frame)) => match frame.kind {
                FrameKind::Stdout => RunItem::Stdout(frame.payload),
                FrameKind::Stderr => RunItem::Stderr(frame.payload),
                FrameKind::Exit => match ExitRecord::from_frame(&frame) {
                    Ok(exit) => RunItem::Exit(exit),
                    Err(e) => RunItem::Lost(format!("a malformed exit record: {e}")),
                },
                other => RunItem::Lost(format!("an unexpected {other:?} frame")),
            },
            Ok(None) => RunItem::Lost("the run's connection ended without an exit record".into()),
            Err(e) => RunItem::Lost(format!("the run's connection broke: {e}")),
        }
    }

    /// The gate decisions of a run its caller stopped following before its end (a deadline, a
    /// stop): the subscription is ended and what the gate holds for it is handed over. Empty for
    /// a run followed to its end, whose decisions all came before its end.
    pub async fn take_decisions(&mut self) -> Vec<atelier_proto::egress::Decision> {
        let Some(decisions) = self.decisions.as_mut() else {
            return Vec::new();
        };
        decisions.finish().await;
        let mut taken = Vec::new();
        while let Some(decision) = self.drain_decision().await {
            taken.push(decision);
        }
        taken
    }

    /// Ends the run (closing the connection makes the shim stop the program) and waits until
    /// it is gone: only then may the site be given to anything else.
    pub async fn stop(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            let _ = writer.shutdown().await;
        }
        self.ended = true;
        // The read half goes too, or a shim blocked writing output would never see the end.
        self.reader = None;
        self.reap().await;
    }

    async fn reap(&mut self) {
        if let Some((doors, slug, unit)) = self.unit.take() {
            doors.wait_gone(&slug, &unit).await;
        }
        if let Some(mut shim) = self.shim.take() {
            if tokio::time::timeout(STOP_DEADLINE, shim.wait())
                .await
                .is_err()
            {
                tracing::warn!("a stopped run's shim did not exit; killing it");
                let _ = shim.kill().await;
            }
        }
    }
}

/// The environment every door's program gets, whatever it runs: a fixed `PATH` and the C
/// locale. Drivers and git add their own keys to it.
pub fn base_env(path: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PATH".to_owned(), path.to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("LC_ALL".to_owned(), "C.UTF-8".to_owned()),
    ])
}
