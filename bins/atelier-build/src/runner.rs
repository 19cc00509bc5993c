//! Running a plan: each step as argv (no shell) in the workspace, in its own process group,
//! with its deadline; its output relayed as `O`/`E` frames; its whole process tree gone before
//! the next step starts; then the output proved and the result sent as a `T` frame.
//!
//! Why a step's processes cannot outlive it: the step leads a new process group, and the whole
//! group is sent SIGKILL when the step's deadline passes, when atelier-build is told to stop,
//! and also when the step exits on its own (a build must not leave a watcher running into the
//! next step or the promote). A descendant that left the group (`setsid`) is caught because
//! atelier-build is a child subreaper (`PR_SET_CHILD_SUBREAPER`): every orphaned descendant is
//! re-parented to it, and after each step every child it still has is killed and reaped. In the
//! build door PID 1's `KillMode=control-group` is the outer bound of the same promise.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use atelier_proto::build::{BuildFailure, BuildPlan, VerifiedOutput};
use atelier_proto::{write_frame, BuildEvent, BuildStep, Frame, FrameKind, StepOutcome};
use rustix::process::{Pid, Signal, WaitOptions};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::output::verify_output;
use crate::scripts;

/// How long the pipes of a step may stay open after its process tree was killed; only
/// something outside the tree (a descriptor passed over a socket) can hold them that long.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Rounds of the leftover sweep: each kills every child atelier-build still has and reaps it,
/// and a dying process's own children are re-parented to us for the next round.
const SWEEP_ROUNDS: usize = 200;

/// Pause between sweep rounds that still found something.
const SWEEP_PAUSE: Duration = Duration::from_millis(5);

/// The stream atelier-build writes: frames to its stdout, remembering a broken stream so the
/// build stops at the next step instead of running blind.
struct Sink<W> {
    out: W,
    broken: bool,
}

impl<W: AsyncWrite + Unpin> Sink<W> {
    async fn frame(&mut self, frame: &Frame) {
        if !self.broken && write_frame(&mut self.out, frame).await.is_err() {
            self.broken = true;
        }
    }

    async fn event(&mut self, event: BuildEvent) {
        match event.to_frame() {
            Ok(frame) => self.frame(&frame).await,
            // Only an over-cap argv can fail here; the stream then lacks the event, and the
            // terminal event still tells the outcome.
            Err(_) => self.note("an event did not fit in a frame").await,
        }
    }

    /// atelier-build's own line for the log, sent as stderr output.
    async fn note(&mut self, line: impl AsRef<str>) {
        let mut text = format!("atelier-build: {}\n", line.as_ref());
        text.truncate(FrameKind::Stderr.max_len());
        self.frame(&Frame::stderr(text)).await;
    }

    async fn refuse(&mut self, failure: BuildFailure) -> BuildFailure {
        self.event(BuildEvent::Refused {
            reason: failure.as_str().into_owned(),
        })
        .await;
        failure
    }
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepEnd {
    Ok,
    Failed,
    TimedOut,
    Interrupted,
}

/// Runs `plan` in `workspace`, writing the frame stream to `out`, and returns the verified
/// output or the failure (already sent as a `refused` event).
pub async fn run<W>(
    plan: &BuildPlan,
    workspace: &Path,
    out: W,
) -> Result<VerifiedOutput, BuildFailure>
where
    W: AsyncWrite + Unpin,
{
    let mut sink = Sink { out, broken: false };
    if let Err(e) = plan.validate() {
        sink.note(e.to_string()).await;
        return Err(sink.refuse(BuildFailure::BuildError).await);
    }
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        // The process group still bounds a step; only a `setsid` escapee would be missed.
        sink.note(format!("cannot become a child subreaper: {e}"))
            .await;
    }
    let mut stop = Stop::install();
    let steps = [
        (BuildStep::Install, &plan.install, plan.install_timeout_ms),
        (BuildStep::Build, &plan.build, plan.build_timeout_ms),
    ];
    for (step, argv, timeout_ms) in steps {
        if argv.is_empty() {
            continue;
        }
        let argv = scripts::step_argv(argv, plan.lifecycle_scripts);
        let env = scripts::step_env(plan.lifecycle_scripts);
        let timeout = Duration::from_millis(timeout_ms);
        let end = run_step(&mut sink, &mut stop, step, &argv, env, timeout, workspace).await;
        let failure = match end {
            StepEnd::Ok => None,
            StepEnd::Failed => Some(BuildFailure::failed(step)),
            StepEnd::TimedOut => Some(BuildFailure::timed_out(step)),
            StepEnd::Interrupted => Some(BuildFailure::Interrupted),
        };
        if let Some(failure) = failure {
            return Err(sink.refuse(failure).await);
        }
        if sink.broken {
            return Err(BuildFailure::BuildError);
        }
    }
    match verify_output(workspace, &plan.output) {
        Ok(verified) => {
            sink.event(BuildEvent::OutputVerified {
                output: plan.output.clone(),
                files: verified.files,
                bytes: verified.bytes,
            })
            .await;
            if sink.broken {
                return Err(BuildFailure::BuildError);
            }
            Ok(verified)
        }
        Err(refusal) => {
            sink.note(&refusal.detail).await;
            Err(sink.refuse(refusal.failure).await)
        }
    }
}

async fn run_step<W: AsyncWrite + Unpin>(
    sink: &mut Sink<W>,
    stop: &mut Stop,
    step: BuildStep,
    argv: &[String],
    env: &[(&str, &str)],
    timeout: Duration,
    workspace: &Path,
) -> StepEnd {
    let started = Instant::now();
    sink.event(BuildEvent::StepStarted {
        step,
        argv: argv.to_vec(),
    })
    .await;
    let finished = |outcome: StepOutcome, code: Option<i32>| BuildEvent::StepFinished {
        step,
        outcome,
        code,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    let Some((program, args)) = argv.split_first() else {
        return StepEnd::Ok;
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(env.iter().copied())
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            sink.note(format!("cannot start {program}: {e}")).await;
            sink.event(finished(StepOutcome::Failed, None)).await;
            return StepEnd::Failed;
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let mut out_buf = vec![0u8; FrameKind::Stdout.max_len()];
    let mut err_buf = vec![0u8; FrameKind::Stderr.max_len()];
    let deadline = started + timeout;
    let mut status: Option<std::io::Result<ExitStatus>> = None;
    let mut drain_until = None;
    let mut end = StepEnd::Ok;
    loop {
        if status.is_some() && stdout.is_none() && stderr.is_none() {
            break;
        }
        let waiting = status.is_none();
        tokio::select! {
            read = read_some(&mut stdout, &mut out_buf) => match read {
                Ok(n) if n > 0 => sink.frame(&Frame::stdout(out_buf[..n].to_vec())).await,
                _ => stdout = None,
            },
            read = read_some(&mut stderr, &mut err_buf) => match read {
                Ok(n) if n > 0 => sink.frame(&Frame::stderr(err_buf[..n].to_vec())).await,
                _ => stderr = None,
            },
            exited = child.wait(), if waiting => {
                status = Some(exited);
                kill_group(group);
                sweep_children();
                drain_until = Some(Instant::now() + DRAIN_GRACE);
            },
            () = tokio::time::sleep_until(deadline), if waiting && end == StepEnd::Ok => {
                end = StepEnd::TimedOut;
                kill_group(group);
            },
            () = stop.recv(), if waiting && end == StepEnd::Ok => {
                end = StepEnd::Interrupted;
                sink.note("told to stop; killing the step").await;
                kill_group(group);
            },
            () = sleep_until_some(drain_until) => {
                sink.note("the step's output stayed open after its processes were gone").await;
                break;
            },
        }
    }
    let status = status.and_then(Result::ok);
    let code = status.and_then(|s| s.code());
    match end {
        StepEnd::TimedOut => {
            sink.note(format!(
                "{program} passed its deadline of {} ms",
                timeout.as_millis()
            ))
            .await;
            sink.event(finished(StepOutcome::TimedOut, code)).await;
        }
        StepEnd::Interrupted => sink.event(finished(StepOutcome::Failed, code)).await,
        StepEnd::Ok | StepEnd::Failed => {
            if status.is_some_and(|s| s.success()) {
                sink.event(finished(StepOutcome::Ok, code)).await;
            } else {
                end = StepEnd::Failed;
                let how = match (code, status) {
                    (Some(code), _) => format!("exited with code {code}"),
                    (None, Some(status)) => format!("ended by {status}"),
                    (None, None) => "could not be waited for".to_owned(),
                };
                sink.note(format!("{program} {how}")).await;
                sink.event(finished(StepOutcome::Failed, code)).await;
            }
        }
    }
    end
}

/// Reads from `pipe`, or waits forever once it is closed (so `select!` skips it).
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Sends SIGKILL to the step's process group; a group already gone is no error.
fn kill_group(group: Option<Pid>) {
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
    }
}

/// Kills and reaps every child this process still has: the orphaned descendants of a step,
/// re-parented here because atelier-build is a child subreaper. Called only after the step
/// itself was reaped, so nothing found here is a process tokio waits for.
fn sweep_children() {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    for _ in 0..SWEEP_ROUNDS {
        let children = children_of(me);
        if children.is_empty() {
            return;
        }
        for pid in &children {
            if let Some(pid) = Pid::from_raw(*pid) {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
        for pid in children {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
            }
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
}

/// The pids whose parent is `parent`, read from `/proc/<pid>/stat` (the field after the
/// parenthesised command name, which may itself hold spaces and parentheses).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = after.split_whitespace();
            let _state = fields.next();
            fields.next().and_then(|ppid| ppid.parse::<i32>().ok()) == Some(parent)
        })
        .collect()
}

/// The signals that tell atelier-build to stop: SIGTERM (the shim, PID 1), SIGINT, SIGHUP.
struct Stop {
    terminate: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
    hangup: Option<tokio::signal::unix::Signal>,
}

impl Stop {
    /// Listens for the stop signals; one that cannot be listened for is simply not heard.
    fn install() -> Stop {
        Stop {
            terminate: signal(SignalKind::terminate()).ok(),
            interrupt: signal(SignalKind::interrupt()).ok(),
            hangup: signal(SignalKind::hangup()).ok(),
        }
    }

    /// Returns when any stop signal arrives.
    async fn recv(&mut self) {
        tokio::select! {
            () = recv_signal(&mut self.terminate) => {},
            () = recv_signal(&mut self.interrupt) => {},
            () = recv_signal(&mut self.hangup) => {},
        }
    }
}

async fn recv_signal(signal: &mut Option<tokio::signal::unix::Signal>) {
    if let Some(listener) = signal {
        if listener.recv().await.is_some() {
            return;
        }
    }
    // Not listening, or the runtime's signal driver is gone: never a stop.
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_read_from_proc() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let kids = children_of(me);
        assert!(kids.contains(&(child.id() as i32)), "{kids:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!children_of(me).contains(&(child.id() as i32)));
    }
}
