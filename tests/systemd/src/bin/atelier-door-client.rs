//! atelier-door-client: speaks a door's frames the way sited does (`H` → `S` → `O`/`E` → `X`)
//! so a test can run a program through a real door unit, through a shim it starts by hand, or
//! time either against a baseline.
//!
//! `run` and `shim` relay the program's stdout to stdout and its stderr to stderr, then print
//! `door_unit=<the hello's unit>` (to stderr) and, last on stdout, `door_exit=<code>`,
//! `door_exit=signal:<name>` or `door_exit=lost:<why>`; `shim` adds `shim_exit=<code>`.
//! `bench` prints one `bench <mode> ...` line. Usage errors exit 2, a failed conversation 1.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use atelier_proto::{
    read_frame, write_frame, Decoder, Door, ExitRecord, Frame, FrameKind, Hello, Spec,
    PROTOCOL_VERSION,
};
use atelier_systemd::Systemd;
use clap::{Parser, Subcommand, ValueEnum};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite, BufReader};
use tokio::net::UnixStream;

/// How long any one step of a conversation may take.
const STEP_DEADLINE: Duration = Duration::from_secs(60);

/// A door's socket triggers at most 20 runs in 2 s (`TriggerLimitBurst=`); the benchmark keeps
/// its connects this far apart so the limit never decides a number.
const BENCH_PACING: Duration = Duration::from_millis(120);

/// Talk to a door the way atelier-sited does.
#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One run through a door socket.
    Run {
        /// The door's socket.
        #[arg(long)]
        socket: PathBuf,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// One run through a shim this command starts itself, its stdin and stdout a socketpair,
    /// with exactly the environment given (as a unit or sited's `none` mode would).
    Shim {
        /// The shim binary.
        #[arg(long)]
        shim: PathBuf,
        /// Start it with `--unconfined`, as sited's `none` mode does.
        #[arg(long)]
        unconfined: bool,
        /// The shim's environment, KEY=VALUE (repeatable).
        #[arg(long = "shim-env", value_parser = key_value)]
        shim_env: Vec<(String, String)>,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// Times `connect()` (or, unconfined, the shim's spawn) to the program's first line,
    /// which must be `started_ns=<CLOCK_MONOTONIC ns>` (atelier-isolation-probe timestamp).
    Bench {
        /// door: frames through a door socket; twin: the socket's program IS the probe, its
        /// output raw; bare: the same through a unit without the door's sandbox; none: a shim
        /// spawned unconfined over a socketpair.
        #[arg(long, value_enum)]
        mode: BenchMode,
        /// The socket (door, twin, bare).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// The socket unit, whose connections must be gone before the next round (door, twin,
        /// bare).
        #[arg(long)]
        socket_unit: Option<String>,
        /// The shim (none).
        #[arg(long)]
        shim: Option<PathBuf>,
        /// The shim's environment, KEY=VALUE (none).
        #[arg(long = "shim-env", value_parser = key_value)]
        shim_env: Vec<(String, String)>,
        /// How many runs.
        #[arg(long, default_value_t = 100)]
        rounds: usize,
        #[command(flatten)]
        spec: SpecArgs,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BenchMode {
    Door,
    Twin,
    Bare,
    None,
}

#[derive(Debug, Clone, clap::Args)]
struct SpecArgs {
    /// The door the spec is for.
    #[arg(long, value_parser = parse_door, default_value = "turn")]
    door: Door,
    /// The program's environment, KEY=VALUE (repeatable); PATH is /usr/bin:/bin unless given.
    #[arg(long = "env", value_parser = key_value)]
    env: Vec<(String, String)>,
    /// Send the spec as given, without the checks a sender makes (to test the shim's own).
    #[arg(long)]
    unchecked: bool,
    /// The network namespace identity to send instead of this process's own.
    #[arg(long)]
    host_netns: Option<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    argv: Vec<String>,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

fn parse_door(text: &str) -> Result<Door, String> {
    text.parse::<Door>().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("atelier-door-client: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("atelier-door-client: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run { socket, spec } => {
            let stream = UnixStream::connect(&socket)
                .await
                .with_context(|| format!("connecting to {}", socket.display()))?;
            let (reader, writer) = stream.into_split();
            let end = converse(BufReader::new(reader), writer, &spec, Relay::Print).await?;
            println!("door_exit={}", end.describe());
        }
        Command::Shim {
            shim,
            unconfined,
            shim_env,
            spec,
        } => {
            let (stream, mut child) = spawn_shim(&shim, unconfined, &shim_env)?;
            let (reader, writer) = stream.into_split();
            let end = converse(BufReader::new(reader), writer, &spec, Relay::Print).await?;
            let status = tokio::time::timeout(STEP_DEADLINE, child.wait())
                .await
                .context("the shim did not exit")??;
            println!("door_exit={}", end.describe());
            println!(
                "shim_exit={}",
                status
                    .code()
                    .map_or_else(|| format!("signal {status}"), |c| c.to_string())
            );
        }
        Command::Bench {
            mode,
            socket,
            socket_unit,
            shim,
            shim_env,
            rounds,
            spec,
        } => {
            let target = match mode {
                BenchMode::Door | BenchMode::Twin | BenchMode::Bare => Target::Socket {
                    path: socket.context("--socket is required for door, twin and bare")?,
                    unit: socket_unit
                        .context("--socket-unit is required for door, twin and bare")?,
                    systemd: Systemd::system().await?,
                    raw: mode != BenchMode::Door,
                },
                BenchMode::None => Target::Unconfined {
                    shim: shim.context("--shim is required for none")?,
                    env: shim_env,
                },
            };
            bench(mode, &target, rounds, &spec).await?;
        }
    }
    Ok(())
}

/// How a conversation ended.
enum End {
    Exit(ExitRecord),
    Lost(String),
}

// === impl End ===

impl End {
    fn describe(&self) -> String {
        match self {
            End::Exit(ExitRecord {
                code: Some(code), ..
            }) => code.to_string(),
            End::Exit(ExitRecord {
                signal: Some(signal),
                ..
            }) => format!("signal:{signal}"),
            End::Exit(_) => "lost:an exit record with neither code nor signal".to_owned(),
            End::Lost(why) => format!("lost:{why}"),
        }
    }
}

/// What to do with the program's output.
enum Relay<'a> {
    /// Write stdout and stderr through.
    Print,
    /// Keep stdout in the buffer (the benchmark reads its first line).
    Keep(&'a mut Vec<u8>),
}

/// The spec frame for `args`, checked as sited checks it unless `unchecked`.
fn spec_frame(args: &SpecArgs) -> anyhow::Result<Frame> {
    let mut env = BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]);
    env.extend(args.env.iter().cloned());
    let host_netns = match &args.host_netns {
        Some(identity) => identity.clone(),
        None => std::fs::read_link("/proc/self/ns/net")
            .context("reading this process's network namespace")?
            .to_string_lossy()
            .into_owned(),
    };
    let spec = Spec {
        v: PROTOCOL_VERSION,
        door: args.door,
        argv: args.argv.clone(),
        env,
        host_netns,
        stdin: None,
    };
    if args.unchecked {
        Ok(Frame::new(FrameKind::Spec, serde_json::to_vec(&spec)?))
    } else {
        Ok(spec.to_frame()?)
    }
}

/// Hello, spec, output, exit record; the hello's unit goes to stderr as `door_unit=`.
async fn converse<R, W>(
    mut reader: R,
    mut writer: W,
    args: &SpecArgs,
    mut relay: Relay<'_>,
) -> anyhow::Result<End>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut decoder = Decoder::new();
    let hello = tokio::time::timeout(STEP_DEADLINE, read_frame(&mut reader, &mut decoder))
        .await
        .context("no hello in time")??
        .context("the connection ended before the hello")?;
    let hello = Hello::from_frame(&hello).context("the first frame is not a hello")?;
    if hello.door != args.door {
        bail!("the unit serves the {} door, not {}", hello.door, args.door);
    }
    if matches!(relay, Relay::Print) {
        eprintln!("door_unit={}", hello.unit);
    }
    write_frame(&mut writer, &spec_frame(args)?)
        .await
        .context("sending the spec")?;
    loop {
        let frame = match tokio::time::timeout(STEP_DEADLINE, read_frame(&mut reader, &mut decoder))
            .await
            .context("no frame in time")?
        {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                return Ok(End::Lost(
                    "the connection ended without an exit record".to_owned(),
                ))
            }
            Err(e) => return Ok(End::Lost(format!("the connection broke: {e}"))),
        };
        match (frame.kind, &mut relay) {
            (FrameKind::Stdout, Relay::Print) => {
                let mut out = std::io::stdout().lock();
                out.write_all(&frame.payload)?;
                out.flush()?;
            }
            (FrameKind::Stdout, Relay::Keep(buffer)) => buffer.extend_from_slice(&frame.payload),
            (FrameKind::Stderr, Relay::Print) => std::io::stderr().write_all(&frame.payload)?,
            (FrameKind::Stderr, Relay::Keep(_)) => {}
            (FrameKind::Exit, _) => {
                return Ok(match ExitRecord::from_frame(&frame) {
                    Ok(exit) => End::Exit(exit),
                    Err(e) => End::Lost(format!("a malformed exit record: {e}")),
                })
            }
            (other, _) => return Ok(End::Lost(format!("an unexpected {other} frame"))),
        }
    }
}

/// Starts `shim` with exactly `env`, its stdin and stdout one end of a socketpair.
fn spawn_shim(
    shim: &PathBuf,
    unconfined: bool,
    env: &[(String, String)],
) -> anyhow::Result<(UnixStream, tokio::process::Child)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().context("a socketpair")?;
    let theirs_out = theirs.try_clone().context("a socketpair")?;
    let mut command = tokio::process::Command::new(shim);
    if unconfined {
        command.arg("--unconfined");
    }
    let child = command
        .env_clear()
        .envs(env.iter().cloned())
        .current_dir("/")
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", shim.display()))?;
    ours.set_nonblocking(true).context("a socketpair")?;
    Ok((UnixStream::from_std(ours)?, child))
}

/// Where a benchmark round's run happens.
enum Target {
    Socket {
        path: PathBuf,
        unit: String,
        systemd: Systemd,
        raw: bool,
    },
    Unconfined {
        shim: PathBuf,
        env: Vec<(String, String)>,
    },
}

/// CLOCK_MONOTONIC in nanoseconds, the clock the probe prints.
fn monotonic_ns() -> u128 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u128::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
        + u128::try_from(now.tv_nsec).unwrap_or(0)
}

/// The probe's `started_ns=` from the first line of `output`.
fn started_ns(output: &[u8]) -> anyhow::Result<u128> {
    let text = String::from_utf8_lossy(output);
    let first = text.lines().next().unwrap_or_default();
    first
        .strip_prefix("started_ns=")
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("the program's first line is {first:?}, not started_ns=<ns>"))
}

async fn bench(
    mode: BenchMode,
    target: &Target,
    rounds: usize,
    spec: &SpecArgs,
) -> anyhow::Result<()> {
    let mut latencies = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let paced = Instant::now() + BENCH_PACING;
        latencies.push(one_round(target, spec).await?);
        tokio::time::sleep_until(paced.into()).await;
    }
    latencies.sort_unstable();
    let at = |q: usize| latencies[(latencies.len() * q / 100).min(latencies.len() - 1)] / 1000;
    println!(
        "bench {} rounds={} p50_us={} p95_us={} min_us={} max_us={}",
        match mode {
            BenchMode::Door => "door",
            BenchMode::Twin => "twin",
            BenchMode::Bare => "bare",
            BenchMode::None => "none",
        },
        latencies.len(),
        at(50),
        at(95),
        latencies.first().map_or(0, |n| n / 1000),
        latencies.last().map_or(0, |n| n / 1000),
    );
    Ok(())
}

/// One run: nanoseconds from the connect (or spawn) to the program's own first instant.
async fn one_round(target: &Target, spec: &SpecArgs) -> anyhow::Result<u128> {
    let mut output = Vec::new();
    let before = monotonic_ns();
    match target {
        Target::Socket {
            path,
            unit,
            systemd,
            raw,
        } => {
            let stream = UnixStream::connect(path)
                .await
                .with_context(|| format!("connecting to {}", path.display()))?;
            if *raw {
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                tokio::time::timeout(STEP_DEADLINE, reader.read_line(&mut line))
                    .await
                    .context("no output in time")??;
                output.extend_from_slice(line.as_bytes());
                let mut rest = Vec::new();
                tokio::time::timeout(STEP_DEADLINE, reader.read_to_end(&mut rest))
                    .await
                    .context("the program did not end")??;
            } else {
                let (reader, writer) = stream.into_split();
                let end = converse(
                    BufReader::new(reader),
                    writer,
                    spec,
                    Relay::Keep(&mut output),
                )
                .await?;
                if let End::Lost(why) = end {
                    bail!("a run was lost: {why}");
                }
            }
            wait_no_connections(systemd, unit).await?;
        }
        Target::Unconfined { shim, env } => {
            let (stream, mut child) = spawn_shim(shim, true, env)?;
            let (reader, writer) = stream.into_split();
            let end = converse(
                BufReader::new(reader),
                writer,
                spec,
                Relay::Keep(&mut output),
            )
            .await?;
            if let End::Lost(why) = end {
                bail!("a run was lost: {why}");
            }
            tokio::time::timeout(STEP_DEADLINE, child.wait())
                .await
                .context("the shim did not exit")??;
        }
    }
    let started = started_ns(&output)?;
    started
        .checked_sub(before)
        .context("the program started before the connect: not the same clock")
}

/// Until PID 1 reports no connection of `unit` open: the run's unit is gone and the socket
/// takes the next one.
async fn wait_no_connections(systemd: &Systemd, unit: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_DEADLINE;
    while systemd.socket_connections(unit).await? > 0 {
        if Instant::now() > deadline {
            bail!("{unit} still has a connection");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}
