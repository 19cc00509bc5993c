//! Tunnel throughput and setup latency of the gate, side by side with tinyproxy (CONNECT on
//! loopback) and a direct connection as the ceiling, all against one sink, in one process.
//!
//! Run by `scripts/bench-gate`, which makes a network namespace with the sink's address
//! 198.18.0.10 on its loopback, binds a hosts file naming it `sink.example.com`, and runs this
//! inside with `BENCH_DIR`, `GATE_BIN` and `TINYPROXY_BIN` set. Both proxies resolve the sink
//! through the same hosts file; the gate checks a real ClientHello first, so every path sends
//! that same hello before its payload.
//!
//! The sink speaks a small protocol after the hello: `P` → one byte back (setup latency); `D`
//! + u64 → that many bytes back (download); `U` + u64 + that many bytes → a u64 ack (upload).
//!
//! Measured: MB/s over `BENCH_BYTES` (default 1 GiB) each way, the median of seven rounds, and
//! connect-to-first-byte latency p50/p99 over `BENCH_TUNNELS` (default 2,000) tunnels per path,
//! opened one after another. The paths take turns (a round of each, a tunnel of each), so a
//! slow spell of a shared machine falls on all of them alike. Reported as ratios against
//! tinyproxy and the direct path.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a benchmark's setup failing is the end of the benchmark"
)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_layout::stamp::{stamped, CommentStyle};
use atelier_test_support::bulk;

const SINK_ADDR: &str = "198.18.0.10:443";
const SINK_HOST: &str = "sink.example.com";
const TINYPROXY_ADDR: &str = "127.0.0.1:8888";
const RUNS: usize = 7;

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path_ {
    Direct,
    Gate,
    Tinyproxy,
}

impl Path_ {
    fn name(self) -> &'static str {
        match self {
            Path_::Direct => "direct",
            Path_::Gate => "gate",
            Path_::Tinyproxy => "tinyproxy",
        }
    }
}

struct Bench {
    hello: Vec<u8>,
    gate_socket: PathBuf,
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| {
        eprintln!("{key} is not set: run scripts/bench-gate, which sets up the bench's namespace");
        std::process::exit(2)
    })
}

fn env_number(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A real ClientHello for the sink's name, from rustls.
fn client_hello() -> Vec<u8> {
    #[allow(
        deprecated,
        reason = "the lab's TLS needs no post-quantum key exchange, and ring is the provider the workspace builds; rustls deprecates ring's provider for lacking it"
    )]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(SINK_HOST).unwrap();
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    while connection.wants_write() {
        connection.write_tls(&mut hello).unwrap();
    }
    hello
}

/// The sink: one thread per connection.
fn start_sink() {
    let listener = TcpListener::bind(SINK_ADDR).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = sink_connection(stream);
            });
        }
    });
}

fn sink_connection(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut header = [0u8; 5];
    stream.read_exact(&mut header)?;
    let mut hello = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
    stream.read_exact(&mut hello)?;
    let mut command = [0u8; 1];
    stream.read_exact(&mut command)?;
    match command[0] {
        b'P' => stream.write_all(b"!")?,
        bulk => atelier_test_support::bulk::serve(&mut stream, bulk)?,
    }
    // Wait for the client to close, so the tunnel's teardown is not part of the next one.
    let _ = stream.read(&mut command);
    Ok(())
}

fn read_head(stream: &mut dyn Stream) {
    // Read as a client library does, a buffer at a time: nothing follows the head until the
    // client sends its hello, so a read cannot take bytes past it.
    let mut head = Vec::new();
    let mut buffer = [0u8; 512];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "the proxy closed before its reply's head ended");
        head.extend_from_slice(&buffer[..n]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
}

impl Bench {
    /// A tunnel to the sink over `path`, the hello sent.
    fn open(&self, path: Path_) -> Box<dyn Stream> {
        let connect = format!("CONNECT {SINK_HOST}:443 HTTP/1.1\r\nHost: {SINK_HOST}:443\r\n\r\n");
        let mut stream: Box<dyn Stream> = match path {
            Path_::Direct => {
                let stream = TcpStream::connect(SINK_ADDR).unwrap();
                stream.set_nodelay(true).unwrap();
                Box::new(stream)
            }
            Path_::Gate => {
                let mut stream = UnixStream::connect(&self.gate_socket).unwrap();
                // As the door's shim does for its end of the unix leg.
                atelier_relay::widen_send_buffer(&stream);
                stream.write_all(connect.as_bytes()).unwrap();
                read_head(&mut stream);
                Box::new(stream)
            }
            Path_::Tinyproxy => {
                let mut stream = TcpStream::connect(TINYPROXY_ADDR).unwrap();
                stream.set_nodelay(true).unwrap();
                stream.write_all(connect.as_bytes()).unwrap();
                read_head(&mut stream);
                Box::new(stream)
            }
        };
        stream.write_all(&self.hello).unwrap();
        stream
    }

    /// Connect to first byte back, one tunnel.
    fn setup(&self, path: Path_) -> Duration {
        let start = Instant::now();
        let mut stream = self.open(path);
        stream.write_all(b"P").unwrap();
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).unwrap();
        start.elapsed()
    }

    /// MB/s of `bytes` from the sink to the client.
    fn download(&self, path: Path_, bytes: u64) -> f64 {
        bulk::download(&mut *self.open(path), bytes)
    }

    /// MB/s of `bytes` from the client to the sink, until the sink's ack.
    fn upload(&self, path: Path_, bytes: u64) -> f64 {
        bulk::upload(&mut *self.open(path), bytes)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_gate(dir: &Path, gate_bin: &str) -> (Proc, PathBuf) {
    let body = serde_json::json!({
        "version": 1, "instance": "bench", "site": 1, "door": "turn", "port": 443,
        "hosts": [SINK_HOST], "mcp": null,
    });
    let text = serde_json::to_string_pretty(&body).unwrap() + "\n";
    let plan = dir.join("s1-turn.json");
    std::fs::write(
        &plan,
        stamped("bench", "gate", CommentStyle::Slashes, text.as_bytes()),
    )
    .unwrap();
    let socket = dir.join("turn.sock");
    let child = Command::new("systemd-socket-activate")
        .arg(format!("--listen={}", socket.display()))
        .arg("--fdname=turn")
        .arg("--setenv=ATELIER_DEPLOYMENT=development")
        .args([gate_bin, "--instance", "bench", "--site", "1"])
        .arg(format!("--plan=turn={}", plan.display()))
        .arg("--allow-benchmark-range")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("gate.log")).unwrap())
        .spawn()
        .unwrap();
    let proc = Proc(child);
    wait_until("the gate's socket", || UnixStream::connect(&socket).is_ok());
    (proc, socket)
}

fn start_tinyproxy(dir: &Path, tinyproxy_bin: &str) -> Proc {
    let conf = dir.join("tinyproxy.conf");
    std::fs::write(
        &conf,
        "Port 8888\nListen 127.0.0.1\nTimeout 600\nMaxClients 512\nConnectPort 443\n\
         Allow 127.0.0.1\nDisableViaHeader Yes\nLogLevel Critical\n",
    )
    .unwrap();
    let child = Command::new(tinyproxy_bin)
        .args(["-d", "-c"])
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("tinyproxy.log")).unwrap())
        .spawn()
        .unwrap();
    let proc = Proc(child);
    wait_until("tinyproxy", || TcpStream::connect(TINYPROXY_ADDR).is_ok());
    proc
}

fn main() {
    let dir = PathBuf::from(env("BENCH_DIR"));
    let gate_bin = env("GATE_BIN");
    let tinyproxy_bin = env("TINYPROXY_BIN");
    let bytes = env_number("BENCH_BYTES", 1 << 30);
    let tunnels = env_number("BENCH_TUNNELS", 2000) as usize;

    start_sink();
    let (_gate, gate_socket) = start_gate(&dir, &gate_bin);
    let _tinyproxy = start_tinyproxy(&dir, &tinyproxy_bin);
    let bench = Bench {
        hello: client_hello(),
        gate_socket,
    };
    let paths = [Path_::Direct, Path_::Gate, Path_::Tinyproxy];
    // Warm-up: the gate starts on its first connection; every path's first tunnel is slow.
    for path in paths {
        for _ in 0..20 {
            bench.setup(path);
        }
    }

    println!(
        "throughput, MB/s over {} MiB each way (median of {RUNS} rounds, paths interleaved)",
        bytes >> 20
    );
    // Rounds interleave the paths, so a slow spell of the machine falls on all of them alike.
    let mut down = vec![Vec::new(); paths.len()];
    let mut up = vec![Vec::new(); paths.len()];
    for _ in 0..RUNS {
        for (i, path) in paths.into_iter().enumerate() {
            down[i].push(bench.download(path, bytes));
            up[i].push(bench.upload(path, bytes));
        }
    }
    let down: Vec<f64> = down.into_iter().map(median).collect();
    let up: Vec<f64> = up.into_iter().map(median).collect();
    for (i, path) in paths.into_iter().enumerate() {
        println!(
            "  {:<10} download {:>9.1}  upload {:>9.1}",
            path.name(),
            down[i],
            up[i]
        );
    }
    let (direct, gate, tiny) = (0, 1, 2);
    println!(
        "  gate / tinyproxy: download {:.2}x  upload {:.2}x   (goal >= 2x)",
        down[gate] / down[tiny],
        up[gate] / up[tiny]
    );
    println!(
        "  gate / direct:    download {:.2}   upload {:.2}    (goal >= 0.90)",
        down[gate] / down[direct],
        up[gate] / up[direct]
    );

    println!("setup, connect to first byte back, over {tunnels} tunnels per path, interleaved");
    let mut samples = vec![Vec::with_capacity(tunnels); paths.len()];
    for _ in 0..tunnels {
        for (i, path) in paths.into_iter().enumerate() {
            samples[i].push(bench.setup(path));
        }
    }
    let mut p99s = Vec::new();
    for (path, mut samples) in paths.into_iter().zip(samples) {
        samples.sort();
        let (p50, p99) = (percentile(&samples, 0.50), percentile(&samples, 0.99));
        println!(
            "  {:<10} p50 {:>7.1} us  p99 {:>7.1} us",
            path.name(),
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
        p99s.push(p99);
    }
    println!(
        "  gate p99 / tinyproxy p99: {:.2}   (goal <= 0.80)",
        p99s[gate].as_secs_f64() / p99s[tiny].as_secs_f64()
    );
}
