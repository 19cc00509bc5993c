//! The program: spawned in the workdir with exactly the spec's environment plus the unit's
//! fixed keys, its output relayed as `O`/`E` frames with backpressure, its process group ended
//! with it, and its end reported in the `X` frame.
//!
//! The program's exit is watched with `waitid(WNOWAIT)`, which leaves it a zombie: its process
//! group id cannot be reused until the shim reaps it, so signalling the group after the exit
//! reaches only what the program left behind.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use atelier_proto::{ExitRecord, Frame, FrameKind, Spec};
use bytes::Bytes;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt as _};
use tokio::net::unix::pipe;
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::exit::ChildEnd;
use crate::settings::Settings;
use crate::{send, ShimError};

/// The largest chunk of output in one `O` or `E` frame.
const CHUNK: usize = FrameKind::Stdout.max_len(); // 64 KiB

/// After the program exited and its group was killed, how long its pipes may stay open: only a
/// process that left the group (a `setsid` daemon) still holds them, and its output is not the
/// run's. systemd's cgroup kill ends such a process once the shim exits.
const PIPE_DRAIN_GRACE: Duration = Duration::from_secs(2);

/// A run that reached its end and reported it in an `X` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// How the program ended.
    pub end: ChildEnd,
}

/// Spawns the spec's argv and relays it to the end; see the module documentation.
pub(crate) async fn run_child<R, W>(
    settings: &Settings,
    spec: &Spec,
    mut conn_in: R,
    mut conn_out: W,
) -> Result<Finished, ShimError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Installed before the spawn so a stop that arrives from here on reaches the program's
    // group; before this point the default action ends the shim, with nothing running.
    let mut sigterm = signal(SignalKind::terminate()).map_err(internal("the SIGTERM handler"))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(internal("the SIGINT handler"))?;

    let mut child = match command(settings, spec).spawn() {
        Ok(child) => child,
        Err(source) => {
            let exit = ExitRecord::exited(i32::from(crate::exit::SPAWN_FAILED));
            // The spawn failure is the run's story; a daemon gone meanwhile changes nothing.
            if let Ok(frame) = exit.to_frame() {
                let _ = send(&mut conn_out, &frame).await;
            }
            return Err(ShimError::Spawn {
                program: spec.argv.first().cloned().unwrap_or_default(),
                source,
            });
        }
    };
    let pid = Pid::from_child(&child);
    let exit_watch = tokio::task::spawn_blocking(move || wait_exited(pid));
    if let (Some(stdin), Some(text)) = (child.stdin.take(), &spec.stdin) {
        feed_stdin(OwnedFd::from(stdin), text.clone());
    }
    let mut program = Program {
        child,
        group: Group(pid),
        exit_watch: Some(exit_watch),
        stdout: None,
        stderr: None,
        end: None,
    };
    match take_pipes(&mut program.child) {
        Ok((stdout, stderr)) => {
            program.stdout = Some(stdout);
            program.stderr = Some(stderr);
        }
        Err(e) => {
            let why = internal("the program's pipes")(e);
            return Err(program.stop(why, Duration::ZERO).await);
        }
    }
    let end = program
        .relay(
            &mut conn_in,
            &mut conn_out,
            &mut sigterm,
            &mut sigint,
            settings.kill_grace,
        )
        .await?;
    let frame = end
        .record()
        .to_frame()
        .map_err(|e| ShimError::Internal(format!("encoding the exit record: {e}")))?;
    send(&mut conn_out, &frame).await?;
    Ok(Finished { end })
}

/// A started program and what the shim holds of it.
struct Program {
    child: Child,
    group: Group,
    /// The exit watch until it fired.
    exit_watch: Option<JoinHandle<io::Result<()>>>,
    /// Each pipe until it reached its end.
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    /// Set once the program was reaped.
    end: Option<ChildEnd>,
}

// === impl Program ===

impl Program {
    /// Relays output until the program has exited and both pipes ended; returns its end.
    async fn relay<R, W>(
        &mut self,
        conn_in: &mut R,
        conn_out: &mut W,
        sigterm: &mut SignalStream,
        sigint: &mut SignalStream,
        kill_grace: Duration,
    ) -> Result<ChildEnd, ShimError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut out_buf = vec![0u8; CHUNK];
        let mut err_buf = vec![0u8; CHUNK];
        let mut probe = [0u8; 1];
        let drain_deadline = tokio::time::sleep(NEVER);
        tokio::pin!(drain_deadline);

        loop {
            if let (Some(end), None, None) = (self.end, &self.stdout, &self.stderr) {
                return Ok(end);
            }
            let frame = tokio::select! {
                read = read_some(&mut self.stdout, &mut out_buf) => {
                    read.map(|n| Frame::stdout(Bytes::copy_from_slice(&out_buf[..n])))
                }
                read = read_some(&mut self.stderr, &mut err_buf) => {
                    read.map(|n| Frame::stderr(Bytes::copy_from_slice(&err_buf[..n])))
                }
                waited = watch_exit(&mut self.exit_watch) => {
                    // What the program left in its group goes with it (under systemd the
                    // unit's cgroup would catch it; unconfined nothing else would).
                    self.group.signal(Signal::KILL);
                    self.end = Some(reap(&mut self.child, waited)?);
                    drain_deadline.as_mut().reset(Instant::now() + PIPE_DRAIN_GRACE);
                    None
                }
                read = conn_in.read(&mut probe) => {
                    let why = match read {
                        Ok(0) => ShimError::DaemonGone("it closed the connection".to_owned()),
                        Ok(n) => ShimError::BytesAfterSpec(n),
                        Err(e) => ShimError::DaemonGone(format!("reading the connection: {e}")),
                    };
                    return Err(self.stop(why, kill_grace).await);
                }
                Some(()) = sigterm.recv() => {
                    self.group.signal(Signal::TERM);
                    None
                }
                Some(()) = sigint.recv() => {
                    self.group.signal(Signal::INT);
                    None
                }
                () = &mut drain_deadline, if self.end.is_some() => {
                    // Only a process outside the group still holds a pipe.
                    self.stdout = None;
                    self.stderr = None;
                    None
                }
            };
            if let Some(frame) = frame {
                if let Err(why) = send(conn_out, &frame).await {
                    return Err(self.stop(why, kill_grace).await);
                }
            }
        }
    }

    /// Ends the run early: SIGTERM the program's group, SIGKILL it after `grace`, kill what
    /// is left, reap. Output meanwhile is read and dropped, so a program blocked writing can
    /// still act on the signal. Returns `why` for the caller to report.
    async fn stop(&mut self, why: ShimError, grace: Duration) -> ShimError {
        if self.end.is_some() {
            // Reaped already, and its group killed then.
            return why;
        }
        self.group.signal(Signal::TERM);
        let mut out_scratch = vec![0u8; CHUNK];
        let mut err_scratch = vec![0u8; CHUNK];
        let kill_at = tokio::time::sleep(grace);
        tokio::pin!(kill_at);
        let waited = loop {
            tokio::select! {
                waited = watch_exit(&mut self.exit_watch) => break waited,
                () = &mut kill_at => {
                    self.group.signal(Signal::KILL);
                    kill_at.as_mut().reset(Instant::now() + NEVER);
                }
                _ = read_some(&mut self.stdout, &mut out_scratch) => {}
                _ = read_some(&mut self.stderr, &mut err_scratch) => {}
            }
        };
        self.group.signal(Signal::KILL);
        match reap(&mut self.child, waited) {
            Ok(end) => {
                self.end = Some(end);
                why
            }
            Err(e) => e,
        }
    }
}

/// A deadline that does not come (a day), for timers armed later.
const NEVER: Duration = Duration::from_secs(86_400);

/// Waits for the exit watch to fire, once; afterwards never completes.
async fn watch_exit(
    watch: &mut Option<JoinHandle<io::Result<()>>>,
) -> Result<io::Result<()>, tokio::task::JoinError> {
    let Some(handle) = watch.as_mut() else {
        return std::future::pending().await;
    };
    let waited = handle.await;
    *watch = None;
    waited
}

/// The program's command: argv, workdir, exactly the spec's environment with the unit's fixed
/// keys over it, stdin a pipe when the spec gives it text (else `/dev/null`), output pipes, its
/// own process group.
fn command(settings: &Settings, spec: &Spec) -> Command {
    let (program, args) = match spec.argv.split_first() {
        Some((program, args)) => (program.as_str(), args),
        None => ("", &[][..]),
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&spec.env)
        .envs(settings.unit_env.iter().map(|(k, v)| (k, v)))
        .current_dir(&settings.workdir)
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    command
}

/// Writes `text` to the program's stdin, then closes it (end of file), beside the relay: a
/// program that reads its stdin late, or never, blocks no one. A program that exits or closes
/// its stdin unread ends the write; that is the program's business, not a failure of the run.
fn feed_stdin(stdin: OwnedFd, text: String) {
    tokio::spawn(async move {
        if let Ok(mut pipe) = pipe::Sender::from_owned_fd(stdin) {
            let _unread = pipe.write_all(text.as_bytes()).await;
        }
    });
}

fn take_pipes(child: &mut Child) -> io::Result<(pipe::Receiver, pipe::Receiver)> {
    let missing = || io::Error::other("the program's pipe was not created");
    let stdout = OwnedFd::from(child.stdout.take().ok_or_else(missing)?);
    let stderr = OwnedFd::from(child.stderr.take().ok_or_else(missing)?);
    Ok((
        pipe::Receiver::from_owned_fd(stdout)?,
        pipe::Receiver::from_owned_fd(stderr)?,
    ))
}

/// Reads from an open pipe; `None` and the pipe closed at its end (or on an error). A closed
/// pipe never completes, so `select!` keeps waiting on the others.
async fn read_some(pipe: &mut Option<pipe::Receiver>, buf: &mut [u8]) -> Option<usize> {
    let Some(open) = pipe.as_mut() else {
        return std::future::pending().await;
    };
    match open.read(buf).await {
        Ok(n) if n > 0 => Some(n),
        Ok(_) | Err(_) => {
            *pipe = None;
            None
        }
    }
}

/// Blocks until the program has exited, leaving it unreaped.
fn wait_exited(pid: Pid) -> io::Result<()> {
    loop {
        match rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reaps the exited program and reads its end.
fn reap(
    child: &mut Child,
    waited: Result<io::Result<()>, tokio::task::JoinError>,
) -> Result<ChildEnd, ShimError> {
    waited
        .map_err(|e| ShimError::Internal(format!("watching the program: {e}")))?
        .map_err(internal("watching the program"))?;
    let status = child.wait().map_err(internal("reaping the program"))?;
    ChildEnd::from_status(status)
        .ok_or_else(|| ShimError::Internal(format!("the program's status {status} is no end")))
}

/// The program's process group (its id is the program's pid).
#[derive(Debug, Clone, Copy)]
struct Group(Pid);

// === impl Group ===

impl Group {
    /// Sends `signal` to every process in the group. A group already empty is the goal, not
    /// an error; any other failure leaves nothing better to do than carry on.
    fn signal(self, signal: Signal) {
        let _ = rustix::process::kill_process_group(self.0, signal);
    }
}

fn internal(what: &'static str) -> impl Fn(io::Error) -> ShimError {
    move |e| ShimError::Internal(format!("{what}: {e}"))
}
