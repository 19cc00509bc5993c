//! The door runs' shim: proves confinement, takes the spec, runs the argv, relays output as frames.
//!
//! systemd starts `atelier-shim` for every accepted connection to a door socket, with the
//! connection as stdin and stdout; under `AGENT_CONFINEMENT=none` sited starts
//! `atelier-shim --unconfined` itself over a socketpair. The conversation is always the same:
//! `H` hello → one `S` spec → `O`/`E` output → `X` exit record.
//!
//! Parts:
//! - [`settings`]: what the unit's environment states ([`Settings`]).
//! - [`spec`]: reading and checking the one spec.
//! - [`procfs`]: the pure parsers of `/proc/self/cgroup` and `/proc/self/net/dev`.
//! - [`netns`]: the proof that a private network namespace is in effect.
//! - [`forward`]: the loopback TCP → gate socket forwards.
//! - [`child`]: spawning the argv, relaying its output, ending its process group.
//! - [`exit`]: the exit-code contract and the child-status mapping.
//! - [`stdio`]: stdin and stdout as the async connection.
//! - [`fds`]: keeping inherited descriptors out of the child.

pub mod child;
pub mod exit;
pub mod fds;
pub mod forward;
pub mod netns;
pub mod procfs;
pub mod settings;
pub mod spec;
pub mod stdio;

use std::io;
use std::net::SocketAddr;

use atelier_proto::{write_frame, Decoder, Frame, FrameError, Hello};
use tokio::io::{AsyncRead, AsyncWrite};

pub use child::Finished;
pub use exit::ChildEnd;
pub use netns::NotInEffect;
pub use settings::{Confinement, Forward, Settings, TURN_DOOR_FIXED_ENV_KEYS};
pub use spec::SpecRefusal;

/// Why the shim stopped without a child's exit status to report. Each maps to one exit code
/// ([`ShimError::exit_code`]) and one stderr line ([`ShimError::stderr_line`]).
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The unit's environment does not say which door this is or where to run (exit 64).
    #[error("this unit states no door: {0}")]
    NoDoor(String),
    /// stdin or stdout is not a connection the shim can speak frames on (exit 64).
    #[error("stdin and stdout must be the connection to atelier-sited (a socket or a pipe): {0}")]
    NotAConnection(String),
    /// The spec was missing, malformed, doubled, for another door or set a fixed key (exit 65).
    #[error("refused — {0}")]
    BadSpec(#[from] SpecRefusal),
    /// The daemon sent bytes after the spec while the program ran; the run was stopped
    /// (exit 65).
    #[error("the daemon sent {0} bytes after the spec; the run was stopped")]
    BytesAfterSpec(usize),
    /// The private network namespace could not be proved (exit 78).
    #[error("network namespace not in effect: {0}")]
    NamespaceNotInEffect(#[from] NotInEffect),
    /// A forward's loopback port could not be bound (exit 71).
    #[error("cannot listen on {addr} for the {name} forward: {source}")]
    CannotListen {
        /// Which forward (`proxy` or `mcp`).
        name: &'static str,
        /// The address it binds.
        addr: SocketAddr,
        /// Why binding failed.
        #[source]
        source: io::Error,
    },
    /// The program could not be started; `X {code:127}` was sent (exit 127).
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// `argv[0]`.
        program: String,
        /// Why the spawn failed.
        #[source]
        source: io::Error,
    },
    /// The daemon closed the connection, or writing to it failed; the program, if started,
    /// was ended with its process group (exit 74).
    #[error("the connection to the daemon ended: {0}")]
    DaemonGone(String),
    /// Something the shim needs from the host failed (exit 70).
    #[error("internal failure: {0}")]
    Internal(String),
}

// === impl ShimError ===

impl ShimError {
    /// The process exit code this outcome is reported with.
    pub fn exit_code(&self) -> u8 {
        match self {
            ShimError::NoDoor(_) | ShimError::NotAConnection(_) => exit::NO_DOOR,
            ShimError::BadSpec(_) | ShimError::BytesAfterSpec(_) => exit::BAD_SPEC,
            ShimError::NamespaceNotInEffect(_) => exit::NAMESPACE_NOT_IN_EFFECT,
            ShimError::CannotListen { .. } => exit::CANNOT_LISTEN,
            ShimError::Spawn { .. } => exit::SPAWN_FAILED,
            ShimError::DaemonGone(_) => exit::DAEMON_GONE,
            ShimError::Internal(_) => exit::INTERNAL,
        }
    }

    /// The one line the shim writes to stderr for this outcome (no newline inside).
    pub fn stderr_line(&self) -> String {
        let line = match self {
            ShimError::NamespaceNotInEffect(why) => {
                format!("[confinement] network namespace not in effect: {why}")
            }
            ShimError::BadSpec(_)
            | ShimError::NoDoor(_)
            | ShimError::NotAConnection(_)
            | ShimError::CannotListen { .. } => {
                format!("[confinement] shim: {self}. Nothing was run.")
            }
            ShimError::Spawn { .. }
            | ShimError::BytesAfterSpec(_)
            | ShimError::DaemonGone(_)
            | ShimError::Internal(_) => format!("[confinement] shim: {self}."),
        };
        one_line(&line)
    }
}

/// `text` with every line break replaced by a space: the stderr contract is one line.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// Runs the whole conversation over `conn_in`/`conn_out`: hello, spec, proofs, forwards, the
/// program, its output, its exit record.
///
/// Returns [`Finished`] only after the `X` frame was written; every other end is a
/// [`ShimError`]. Spawns the forwards' tasks on the current tokio runtime.
pub async fn run<R, W>(settings: &Settings, conn_in: R, conn_out: W) -> Result<Finished, ShimError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut conn_in = conn_in;
    let mut conn_out = conn_out;
    let hello = Hello::new(settings.door, settings.unit.clone())
        .to_frame()
        .map_err(|e| ShimError::Internal(format!("encoding the hello: {e}")))?;
    send(&mut conn_out, &hello).await?;

    let mut decoder = Decoder::new();
    let spec = spec::read_spec(&mut conn_in, &mut decoder, settings).await?;

    // Held until the run ends: dropping them stops the forwards.
    let _forwards = match &settings.confinement {
        Confinement::Confined { forwards } => {
            netns::prove(&spec.host_netns)?;
            forward::Forwards::bind(forwards)?
        }
        Confinement::Unconfined => forward::Forwards::none(),
    };

    spec::ensure_nothing_after_spec(&mut conn_in).await?;
    child::run_child(settings, &spec, conn_in, conn_out).await
}

/// Writes one frame to the daemon; a failure means the daemon is gone.
pub(crate) async fn send<W>(conn_out: &mut W, frame: &Frame) -> Result<(), ShimError>
where
    W: AsyncWrite + Unpin,
{
    write_frame(conn_out, frame).await.map_err(|e| match e {
        FrameError::Io(io) => {
            ShimError::DaemonGone(format!("writing a {} frame: {io}", frame.kind))
        }
        other => ShimError::Internal(format!("encoding a {} frame: {other}", frame.kind)),
    })
}

/// The binary's whole life after argument parsing: keeps inherited descriptors from the child,
/// reads the unit's settings, takes stdin/stdout as the connection and runs the conversation.
/// Returns the exit code; every refusal has written its one stderr line.
pub fn run_on_stdio(unconfined: bool) -> u8 {
    match run_on_stdio_inner(unconfined) {
        Ok(finished) => finished.end.exit_code(),
        Err(error) => {
            report(&error);
            error.exit_code()
        }
    }
}

fn run_on_stdio_inner(unconfined: bool) -> Result<Finished, ShimError> {
    fds::keep_inherited_fds_from_children()
        .map_err(|e| ShimError::Internal(format!("marking inherited descriptors: {e}")))?;
    let settings = Settings::load(unconfined)?;
    // The agent runs as this process's user: unless this process is not dumpable, the agent
    // could open its memory (/proc/<pid>/mem), its descriptors (/proc/<pid>/fd) or trace it,
    // and so speak for the shim to sited. Its own execve makes the agent dumpable again.
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| ShimError::Internal(format!("making the shim not dumpable: {e}")))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ShimError::Internal(format!("starting the runtime: {e}")))?;
    let outcome = runtime.block_on(async {
        let (conn_in, conn_out) = stdio::connection()?;
        run(&settings, conn_in, conn_out).await
    });
    // The forwards' tasks may still be relaying; nothing of theirs outlives the run.
    runtime.shutdown_background();
    outcome
}

/// Writes the error's one line to stderr.
fn report(error: &ShimError) {
    use std::io::Write as _;
    // stderr is the journal (or sited's log); if it is gone there is nowhere left to say so.
    let _ = writeln!(io::stderr().lock(), "{}", error.stderr_line());
}

#[cfg(test)]
mod tests;
