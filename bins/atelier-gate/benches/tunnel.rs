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
//!
//! Beside each transfer's speed, the CPU time of each stage per GiB: the client's thread, the
//! proxy's process (every thread of it, from `/proc`) and the sink's thread, each counting the
//! kernel's work on its behalf (on loopback a sender also does its receiver's TCP work). On a
//! machine with fewer cores than a relayed path has busy stages, the stages take turns and its
//! speed says little of the proxy; given a core each, a path runs as fast as its busiest stage
//! allows. So the busiest stage's cost against the direct path's estimates what the proxy
//! would reach on a larger machine: at a ratio r, about 1/r of direct, as far as a stage costs
//! the same with a core of its own. Also reported: the share of a transfer the proxy spent
//! ready to run but waiting for a CPU (its threads' waits summed, so a proxy whose threads
//! wait at once can pass 100 %), which is what sharing too few cores costs it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a benchmark's setup failing is the end of the benchmark"
)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
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
    /// The gate's and tinyproxy's process ids, for their CPU time.
    gate: u32,
    tinyproxy: u32,
    /// The sink's CPU time for each bulk transfer, as it ends.
    sink_cpu: Receiver<Duration>,
}

/// One bulk transfer over a path: its speed, each stage's CPU time, and how long the proxy
/// waited for a CPU while it could have run.
#[derive(Clone, Copy)]
struct Round {
    mb_per_s: f64,
    client: Duration,
    proxy: Sched,
    sink: Duration,
}

/// A thread's or a process's time on a CPU, and ready to run but waiting for one.
#[derive(Clone, Copy, Default)]
struct Sched {
    on_cpu: Duration,
    waiting: Duration,
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

/// The sink: one thread per connection. Each bulk transfer's CPU time goes to the receiver.
fn start_sink() -> Receiver<Duration> {
    let listener = TcpListener::bind(SINK_ADDR).unwrap();
    let (cpu, sink_cpu) = channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let cpu = cpu.clone();
            std::thread::spawn(move || {
                let _ = sink_connection(stream, &cpu);
            });
        }
    });
    sink_cpu
}

fn sink_connection(mut stream: TcpStream, cpu: &Sender<Duration>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut header = [0u8; 5];
    stream.read_exact(&mut header)?;
    let mut hello = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
    stream.read_exact(&mut hello)?;
    let mut command = [0u8; 1];
    stream.read_exact(&mut command)?;
    match command[0] {
        b'P' => stream.write_all(b"!")?,
        bulk => {
            let _ = cpu.send(bulk::serve(&mut stream, bulk)?);
        }
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

    /// One bulk transfer over `path` (`bulk::upload` or `bulk::download`), with the CPU time
    /// its client, proxy and sink spent on it.
    fn transfer(
        &self,
        path: Path_,
        bytes: u64,
        run: fn(&mut dyn Stream, u64) -> bulk::Transfer,
    ) -> Round {
        let mut stream = self.open(path);
        let proxy = match path {
            Path_::Direct => None,
            Path_::Gate => Some(self.gate),
            Path_::Tinyproxy => Some(self.tinyproxy),
        };
        let before = proxy.map(threads_sched);
        let transfer = run(&mut *stream, bytes);
        let proxy = proxy
            .zip(before)
            .map(|(pid, before)| sched_since(&before, &threads_sched(pid)))
            .unwrap_or_default();
        let sink = self
            .sink_cpu
            .recv_timeout(Duration::from_secs(30))
            .expect("the sink's CPU time for the transfer");
        Round {
            mb_per_s: transfer.mb_per_s,
            client: transfer.cpu,
            proxy,
            sink,
        }
    }
}

/// The scheduler's times so far for each thread of process `pid`, by thread id: the first two
/// fields of its `schedstat` in `/proc`, nanoseconds on a CPU and waiting on a run queue.
fn threads_sched(pid: u32) -> HashMap<u32, Sched> {
    let mut threads = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap();
        let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A thread that ended since the listing has nothing more to count.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let mut fields = stat
            .split_whitespace()
            .map(|f| Duration::from_nanos(f.parse().unwrap()));
        let (on_cpu, waiting) = (fields.next().unwrap(), fields.next().unwrap());
        threads.insert(tid, Sched { on_cpu, waiting });
    }
    threads
}

/// The times spent between two snapshots by the threads alive at the second: one that ended
/// in between (an earlier connection's, in tinyproxy) is not this transfer's.
fn sched_since(before: &HashMap<u32, Sched>, after: &HashMap<u32, Sched>) -> Sched {
    let mut since = Sched::default();
    for (tid, now) in after {
        let then = before.get(tid).copied().unwrap_or_default();
        since.on_cpu += now.on_cpu.saturating_sub(then.on_cpu);
        since.waiting += now.waiting.saturating_sub(then.waiting);
    }
    since
}

/// Medians over a path's rounds one way: MB/s, each stage's CPU milliseconds per GiB, and the
/// share of the transfer the proxy waited for a CPU.
struct Summary {
    mb_per_s: f64,
    client: f64,
    proxy: f64,
    sink: f64,
    proxy_waiting: f64,
}

impl Summary {
    fn of(rounds: &[Round], bytes: u64) -> Self {
        let per_gib = |stage: fn(&Round) -> Duration| {
            bulk::median(
                rounds
                    .iter()
                    .map(|r| stage(r).as_secs_f64() * 1e3 * (1u64 << 30) as f64 / bytes as f64)
                    .collect(),
            )
        };
        Summary {
            mb_per_s: bulk::median(rounds.iter().map(|r| r.mb_per_s).collect()),
            client: per_gib(|r| r.client),
            proxy: per_gib(|r| r.proxy.on_cpu),
            sink: per_gib(|r| r.sink),
            proxy_waiting: bulk::median(
                rounds
                    .iter()
                    .map(|r| r.proxy.waiting.as_secs_f64() * r.mb_per_s * 1e6 / bytes as f64)
                    .collect(),
            ),
        }
    }

    fn busiest(&self) -> f64 {
        self.client.max(self.proxy).max(self.sink)
    }
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
    // systemd-socket-activate execs the gate in its own process once a connection comes.
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

    let sink_cpu = start_sink();
    let (gate, gate_socket) = start_gate(&dir, &gate_bin);
    let tinyproxy = start_tinyproxy(&dir, &tinyproxy_bin);
    let bench = Bench {
        hello: client_hello(),
        gate_socket,
        gate: gate.0.id(),
        tinyproxy: tinyproxy.0.id(),
        sink_cpu,
    };
    let paths = [Path_::Direct, Path_::Gate, Path_::Tinyproxy];
    // Warm-up: the gate starts on its first connection; every path's first tunnel is slow.
    for path in paths {
        for _ in 0..20 {
            bench.setup(path);
        }
    }
    let gate_comm = std::fs::read_to_string(format!("/proc/{}/comm", bench.gate)).unwrap();
    assert_eq!(
        gate_comm.trim(),
        "atelier-gate",
        "the gate's CPU time is its process's"
    );

    println!(
        "throughput, MB/s over {} MiB each way (median of {RUNS} rounds, paths interleaved)",
        bytes >> 20
    );
    // Rounds interleave the paths, so a slow spell of the machine falls on all of them alike.
    let mut down = vec![Vec::new(); paths.len()];
    let mut up = vec![Vec::new(); paths.len()];
    for _ in 0..RUNS {
        for (i, path) in paths.into_iter().enumerate() {
            down[i].push(bench.transfer(path, bytes, |s, b| bulk::download(s, b)));
            up[i].push(bench.transfer(path, bytes, |s, b| bulk::upload(s, b)));
        }
    }
    let down: Vec<Summary> = down.iter().map(|r| Summary::of(r, bytes)).collect();
    let up: Vec<Summary> = up.iter().map(|r| Summary::of(r, bytes)).collect();
    for (i, path) in paths.into_iter().enumerate() {
        println!(
            "  {:<10} download {:>9.1}  upload {:>9.1}",
            path.name(),
            down[i].mb_per_s,
            up[i].mb_per_s
        );
    }
    let (direct, gate, tiny) = (0, 1, 2);
    println!(
        "  gate / tinyproxy: download {:.2}x  upload {:.2}x   (goal >= 2x)",
        down[gate].mb_per_s / down[tiny].mb_per_s,
        up[gate].mb_per_s / up[tiny].mb_per_s
    );
    println!(
        "  gate / direct:    download {:.2}   upload {:.2}    (goal >= 0.90)",
        down[gate].mb_per_s / down[direct].mb_per_s,
        up[gate].mb_per_s / up[direct].mb_per_s
    );

    println!("cpu per GiB, ms: client / proxy / sink (median of {RUNS} rounds)");
    for (i, path) in paths.into_iter().enumerate() {
        let stages =
            |s: &Summary| format!("{:>5.0} / {:>5.0} / {:>5.0}", s.client, s.proxy, s.sink);
        println!(
            "  {:<10} download {}   upload {}",
            path.name(),
            stages(&down[i]),
            stages(&up[i])
        );
    }
    // With a core per stage, a path goes as fast as its busiest stage lets it.
    for (name, i) in [("gate", gate), ("tinyproxy", tiny)] {
        println!(
            "  {name} busiest stage / direct's: download {:.2}  upload {:.2}   \
             (with a core per stage, about 1/that of direct)",
            down[i].busiest() / down[direct].busiest(),
            up[i].busiest() / up[direct].busiest()
        );
    }
    for (name, i) in [("gate", gate), ("tinyproxy", tiny)] {
        println!(
            "  {name} ready but waiting for a CPU (threads summed): download {:.0} %  upload {:.0} % \
             of the transfer",
            down[i].proxy_waiting * 100.0,
            up[i].proxy_waiting * 100.0
        );
    }

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
