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
//! as MB/s and as ratios against `direct`. The sink speaks `U` + u64 + that many bytes → a u64
//! ack (upload), or `D` + u64 → that many bytes (download).
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
use std::time::Instant;

use atelier_relay::Mode;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::runtime::Runtime;

const CHUNK: usize = 1024 * 1024; // 1 MiB
const RUNS: usize = 7;

#[derive(Clone, Copy)]
enum Way {
    Up,
    Down,
}

/// One connection at the sink: the command, then the bytes.
fn sink(mut stream: impl Read + Write) {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header).unwrap();
    let mut left = u64::from_be_bytes(header[1..].try_into().unwrap());
    let mut buffer = vec![0x5au8; CHUNK];
    match header[0] {
        b'U' => {
            while left > 0 {
                let want = left.min(CHUNK as u64) as usize;
                let n = stream.read(&mut buffer[..want]).unwrap();
                assert!(n > 0, "the upload ended early");
                left -= n as u64;
            }
            stream.write_all(&header[1..]).unwrap();
        }
        b'D' => {
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                stream.write_all(&buffer[..n]).unwrap();
                left -= n as u64;
            }
        }
        other => panic!("unknown command {other}"),
    }
    // Until the client closes, so a connection's teardown is not part of the next one.
    let _ = stream.read(&mut header);
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

/// MB/s of `bytes` over `stream`, one way, until the sink has them all (upload) or the client
/// has (download).
fn measure(mut stream: std::net::TcpStream, way: Way, bytes: u64) -> f64 {
    stream.set_nodelay(true).unwrap();
    let mut buffer = vec![0xa5u8; CHUNK];
    let start = Instant::now();
    let command = match way {
        Way::Up => b'U',
        Way::Down => b'D',
    };
    let mut header = vec![command];
    header.extend_from_slice(&bytes.to_be_bytes());
    stream.write_all(&header).unwrap();
    let mut left = bytes;
    match way {
        Way::Up => {
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                stream.write_all(&buffer[..n]).unwrap();
                left -= n as u64;
            }
            let mut ack = [0u8; 8];
            stream.read_exact(&mut ack).unwrap();
            assert_eq!(u64::from_be_bytes(ack), bytes);
        }
        Way::Down => {
            while left > 0 {
                let want = left.min(CHUNK as u64) as usize;
                let n = stream.read(&mut buffer[..want]).unwrap();
                assert!(n > 0, "the download ended early");
                left -= n as u64;
            }
        }
    }
    bytes as f64 / 1e6 / start.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
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
        for way in [Way::Up, Way::Down] {
            measure(std::net::TcpStream::connect(addr).unwrap(), way, 1 << 24);
        }
    }
    println!(
        "throughput, MB/s over {} MiB each way (median of {RUNS} rounds, paths interleaved)",
        bytes >> 20
    );
    let mut up = vec![Vec::new(); paths.len()];
    let mut down = vec![Vec::new(); paths.len()];
    for _ in 0..RUNS {
        for (i, (_, addr)) in paths.into_iter().enumerate() {
            up[i].push(measure(
                std::net::TcpStream::connect(addr).unwrap(),
                Way::Up,
                bytes,
            ));
            down[i].push(measure(
                std::net::TcpStream::connect(addr).unwrap(),
                Way::Down,
                bytes,
            ));
        }
    }
    let up: Vec<f64> = up.into_iter().map(median).collect();
    let down: Vec<f64> = down.into_iter().map(median).collect();
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
