//! The shim's added latency to a run's first byte: from the moment the spec is sent to the
//! moment the program's first `O` frame arrives, against spawning the same program directly
//! in this process and reading its first byte from a pipe. Both run here, one after the other,
//! on the same cores; the shim already said hello (its own start is reported apart).
//!
//! `cargo bench -p atelier-shim --bench spec_to_first_byte`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use atelier_proto::{encode, read_frame, Decoder, Door, FrameKind, Spec};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

const SHIM: &str = env!("CARGO_BIN_EXE_atelier-shim");
const RUNS: usize = 100;
const WARMUP: usize = 10;
const PROGRAM: &str = "/bin/echo";

/// One run through the shim: (shim start → hello, spec sent → first output byte).
async fn through_shim(workdir: &str) -> (Duration, Duration) {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_out = theirs.try_clone().unwrap();
    let started = Instant::now();
    let mut shim = Command::new(SHIM)
        .arg("--unconfined")
        .env_clear()
        .env("ATELIER_DOOR", "build")
        .env("ATELIER_UNIT_WORKDIR", workdir)
        .env("HOME", workdir)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .spawn()
        .unwrap();
    ours.set_nonblocking(true).unwrap();
    let (reader, mut writer) = UnixStream::from_std(ours).unwrap().into_split();
    let mut reader = BufReader::new(reader);
    let mut decoder = Decoder::new();
    let hello = read_frame(&mut reader, &mut decoder)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hello.kind, FrameKind::Hello);
    let to_hello = started.elapsed();

    let spec = Spec {
        v: 1,
        door: Door::Build,
        argv: vec![PROGRAM.into(), "x".into()],
        env: Default::default(),
        host_netns: "net:[1]".into(),
        stdin: None,
    };
    let bytes = encode(&spec.to_frame().unwrap()).unwrap();
    let sent = Instant::now();
    writer.write_all(&bytes).await.unwrap();
    let first = read_frame(&mut reader, &mut decoder)
        .await
        .unwrap()
        .unwrap();
    let to_first_byte = sent.elapsed();
    assert_eq!(first.kind, FrameKind::Stdout);
    while let Some(frame) = read_frame(&mut reader, &mut decoder).await.unwrap() {
        if frame.kind == FrameKind::Exit {
            break;
        }
    }
    assert!(shim.wait().unwrap().success());
    (to_hello, to_first_byte)
}

/// The same program spawned here: spawn → first byte on its stdout pipe.
fn direct(workdir: &str) -> Duration {
    let started = Instant::now();
    let mut child = Command::new(PROGRAM)
        .arg("x")
        .env_clear()
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut byte = [0u8; 1];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut byte)
        .unwrap();
    let elapsed = started.elapsed();
    assert!(child.wait().unwrap().success());
    elapsed
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let workdir = tempfile::tempdir().unwrap();
    let workdir = workdir.path().display().to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    for _ in 0..WARMUP {
        runtime.block_on(through_shim(&workdir));
        direct(&workdir);
    }
    let mut hello = Vec::with_capacity(RUNS);
    let mut shim = Vec::with_capacity(RUNS);
    let mut baseline = Vec::with_capacity(RUNS);
    // Interleaved, so drift in the machine's load hits both alike.
    for _ in 0..RUNS {
        let (to_hello, to_first) = runtime.block_on(through_shim(&workdir));
        hello.push(to_hello);
        shim.push(to_first);
        baseline.push(direct(&workdir));
    }
    for series in [&mut hello, &mut shim, &mut baseline] {
        series.sort();
    }
    println!("spec sent -> first byte, {RUNS} runs of {PROGRAM} (µs):");
    println!(
        "  direct spawn (baseline)   p50 {:8.0}  p95 {:8.0}",
        micros(percentile(&baseline, 0.5)),
        micros(percentile(&baseline, 0.95))
    );
    println!(
        "  through atelier-shim      p50 {:8.0}  p95 {:8.0}",
        micros(percentile(&shim, 0.5)),
        micros(percentile(&shim, 0.95))
    );
    println!(
        "  ratio shim / direct       p50 {:8.2}  p95 {:8.2}",
        micros(percentile(&shim, 0.5)) / micros(percentile(&baseline, 0.5)),
        micros(percentile(&shim, 0.95)) / micros(percentile(&baseline, 0.95))
    );
    println!(
        "shim start -> hello         p50 {:8.0}  p95 {:8.0}",
        micros(percentile(&hello, 0.5)),
        micros(percentile(&hello, 0.95))
    );
}
