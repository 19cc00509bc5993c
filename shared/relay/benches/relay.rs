//! Bulk throughput through the relays a door's connection crosses, against a direct TCP
//! connection as the ceiling, in one process on loopback (no root, no namespace):
//!
//! - `direct`: the client's TCP connection straight to a TCP sink;
//! - `forward`: the shim's loopback forward, TCP from the client relayed to a unix sink (the
//!   gate's socket), on a current-thread runtime as in the shim;
//! - `forward, before`: the same with `tokio::io::copy_bidirectional`, which the shim used
//!   until this crate moved its bytes;
//! - `chain`: the whole way out of a door, the shim's forward into a unix socket and a
//!   gate-side relay from it to a TCP sink, the gate's side on a multi-thread runtime as in
//!   the gate; `chain, before` with the shim's old copy.
//!
//! A forward's sink is a unix socket, whose receiving end costs less than TCP's, so `forward`
//! can pass `direct`; `chain` is what a program in a door gets against a direct connection.
//!
//! Each path moves `BENCH_BYTES` (default 1 GiB) each way, the median of seven rounds; the
//! paths take turns, so a slow spell of a shared machine falls on all of them alike. Reported
//! as MB/s and as ratios against `direct`. Client and sink speak the test support's bulk
//! protocol.
//!
//! `cargo bench -p atelier-relay --bench relay`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs,
    reason = "a benchmark's setup failing is the end of the benchmark"
)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use atelier_relay::Mode;
use atelier_test_support::bulk;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::runtime::Runtime;

const RUNS: usize = 7;

/// One connection at the sink: a bulk command, then until the client closes, so a
/// connection's teardown is not part of the next one.
fn sink(mut stream: impl Read + Write) {
    let mut command = [0u8; 1];
    stream.read_exact(&mut command).unwrap();
    bulk::serve(&mut stream, command[0]).unwrap();
    let _ = stream.read(&mut command);
}

fn tcp_sink() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            stream.set_nodelay(true).unwrap();
            std::thread::spawn(move || sink(stream));
        }
    });
    addr
}

fn unix_sink(path: &Path) {
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            // As the gate does for its end of the unix leg.
            atelier_relay::widen_send_buffer(&stream);
            std::thread::spawn(move || sink(stream));
        }
    });
}

/// The shim's forward: each TCP connection relayed to a fresh connection to `target`.
async fn forward(listener: TcpListener, target: PathBuf, before: bool) {
    loop {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let target = target.clone();
        tokio::spawn(async move {
            let mut unix = UnixStream::connect(&target).await.unwrap();
            atelier_relay::widen_send_buffer(&unix);
            if before {
                let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
            } else {
                let _ = atelier_relay::run(&unix, &tcp, Mode::Measured, &()).await;
            }
        });
    }
}

/// The gate's side: each unix connection relayed to a fresh TCP connection to `target`.
async fn gate(listener: UnixListener, target: SocketAddr) {
    loop {
        let (unix, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let tcp = TcpStream::connect(target).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            atelier_relay::widen_send_buffer(&unix);
            let _ = atelier_relay::run(&unix, &tcp, Mode::Measured, &()).await;
        });
    }
}

/// A TCP listener served on its own thread's current-thread runtime, as the shim's forwards.
fn spawn_forward(target: PathBuf, before: bool) -> SocketAddr {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            sender.send(listener.local_addr().unwrap()).unwrap();
            forward(listener, target, before).await;
        });
    });
    receiver.recv().unwrap()
}

fn connect(addr: SocketAddr) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

fn main() {
    let bytes = std::env::var("BENCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64 << 30);
    let dir = std::env::temp_dir().join(format!("atelier-relay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let direct = tcp_sink();
    let unix_target = dir.join("sink.sock");
    unix_sink(&unix_target);
    let forward = spawn_forward(unix_target.clone(), false);
    let before = spawn_forward(unix_target, true);
    let gate_socket = dir.join("gate.sock");
    let gate_runtime: Runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = gate_runtime.block_on(async { UnixListener::bind(&gate_socket).unwrap() });
    gate_runtime.spawn(gate(listener, direct));
    let chain = spawn_forward(gate_socket.clone(), false);
    let chain_before = spawn_forward(gate_socket, true);

    let paths = [
        ("direct", direct),
        ("forward", forward),
        ("forward, before", before),
        ("chain", chain),
        ("chain, before", chain_before),
    ];
    // Warm-up: every path's first connection pays for its thread and buffers.
    for (_, addr) in paths {
        bulk::upload(&mut connect(addr), 1 << 24);
        bulk::download(&mut connect(addr), 1 << 24);
    }
    println!(
        "throughput, MB/s over {} MiB each way (median of {RUNS} rounds, paths interleaved)",
        bytes >> 20
    );
    let mut up = vec![Vec::new(); paths.len()];
    let mut down = vec![Vec::new(); paths.len()];
    for _ in 0..RUNS {
        for (i, (_, addr)) in paths.into_iter().enumerate() {
            up[i].push(bulk::upload(&mut connect(addr), bytes).mb_per_s);
            down[i].push(bulk::download(&mut connect(addr), bytes).mb_per_s);
        }
    }
    let up: Vec<f64> = up.into_iter().map(bulk::median).collect();
    let down: Vec<f64> = down.into_iter().map(bulk::median).collect();
    for (i, (name, _)) in paths.into_iter().enumerate() {
        println!(
            "  {name:<16} upload {:>8.1} ({:.2} of direct)  download {:>8.1} ({:.2} of direct)",
            up[i],
            up[i] / up[0],
            down[i],
            down[i] / down[0]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
