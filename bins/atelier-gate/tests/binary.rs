//! The built binary, socket-activated by `systemd-socket-activate` with named listeners and
//! stamped plan files: READY is sent, each door serves its own plan, the decisions socket is
//! optional and streams a run's decisions, a head cut off by its deadline is logged as the
//! bytes received, a bad plan stops the gate before READY.

use std::io::{Read, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use atelier_layout::names::GATE_DECISIONS_SOCKET_FILE as DECISIONS_SOCKET_FILE;
use atelier_proto::egress::{Decision, Subscribe, Verdict};
use atelier_proto::Door;

use crate::support;

const GATE: &str = env!("CARGO_BIN_EXE_atelier-gate");
const WAIT: Duration = Duration::from_secs(20);

fn write_plan(dir: &Path, door: &str, hosts: &[&str]) -> PathBuf {
    let body = serde_json::json!({
        "version": 1, "instance": "example", "site": 1, "door": door, "port": 443,
        "hosts": hosts, "mcp": null,
    });
    let path = dir.join(format!("s1-{door}.json"));
    support::lab::write_stamped_plan(&path, "example", &body);
    path
}

struct Gate {
    child: Child,
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `request` to the door at `socket`; everything the gate answers before closing.
fn exchange(socket: &Path, request: &[u8]) -> Vec<u8> {
    let mut client = UnixStream::connect(socket).unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    client.write_all(request).unwrap();
    let mut reply = Vec::new();
    client.read_to_end(&mut reply).unwrap();
    reply
}

const FORBIDDEN: &[u8] =
    b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// A gate with its two doors, as its unit starts it: `systemd-socket-activate` passes
/// `turn.sock` and `build.sock` (named after their doors), the decisions socket when asked
/// for, and a notify socket; stderr goes to `gate.log`. All of it in one scratch folder.
struct TwoDoors {
    _gate: Gate,
    turn: PathBuf,
    build: PathBuf,
    decisions: PathBuf,
    notify: UnixDatagram,
    log: PathBuf,
}

impl TwoDoors {
    /// Starts the gate with `turn_hosts` on the turn door's plan and an empty build plan,
    /// passing the decisions socket if `with_decisions`; returns once every socket passed is
    /// bound.
    fn start(dir: &Path, turn_hosts: &[&str], with_decisions: bool) -> TwoDoors {
        let turn_plan = write_plan(dir, "turn", turn_hosts);
        let build_plan = write_plan(dir, "build", &[]);
        let notify_path = dir.join("notify");
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        notify.set_read_timeout(Some(WAIT)).unwrap();
        let turn = dir.join("turn.sock");
        let build = dir.join("build.sock");
        let decisions = dir.join(DECISIONS_SOCKET_FILE);
        let log = dir.join("gate.log");
        let mut listeners = vec![&turn, &build];
        if with_decisions {
            listeners.push(&decisions);
        }
        let names = ["turn", "build", "decisions"][..listeners.len()].join(":");
        let child = Command::new("systemd-socket-activate")
            .args(
                listeners
                    .iter()
                    .map(|path| format!("--listen={}", path.display())),
            )
            .arg(format!("--fdname={names}"))
            .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
            .args([GATE, "--instance", "example", "--site", "1"])
            .arg(format!("--plan=turn={}", turn_plan.display()))
            .arg(format!("--plan=build={}", build_plan.display()))
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let gate = Gate { child };
        for listener in listeners {
            wait_for(listener);
        }
        TwoDoors {
            _gate: gate,
            turn,
            build,
            decisions,
            notify,
            log,
        }
    }

    /// Everything the gate wrote to stderr so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

#[test]
fn a_socket_activated_gate_signals_ready_and_serves_each_door_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let gate = TwoDoors::start(dir.path(), &["api.example.com"], false);
    let (turn, build) = (&gate.turn, &gate.build);

    // The first connection starts the gate; it is served once the gate is up.
    let first = exchange(turn, b"CONNECT other.example.com:443 HTTP/1.1\r\n\r\n");
    assert_eq!(first, FORBIDDEN);
    let mut datagram = [0u8; 512];
    let len = gate.notify.recv(&mut datagram).unwrap();
    let message = String::from_utf8_lossy(&datagram[..len]);
    assert!(message.lines().any(|line| line == "READY=1"), "{message}");

    assert_eq!(
        exchange(turn, b"GET / HTTP/1.1\r\n\r\n"),
        b"HTTP/1.1 405 Method Not Allowed\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    // The build door's plan is empty: the turn door's host is not on it.
    assert_eq!(
        exchange(build, b"CONNECT api.example.com:443 HTTP/1.1\r\n\r\n"),
        FORBIDDEN
    );
    // No decisions socket was passed: the gate serves without one, and says so.
    let log = gate.log();
    assert!(
        log.contains("no decisions.sock was passed: decisions go to the journal only"),
        "{log}"
    );
}

/// The gate's own head deadline (its default; the binary has no knob for it).
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

const REQUEST_TIMEOUT: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// Sends `parts` to the door at `socket` a little apart, never finishing the head; the reply
/// and how long after connecting it came.
fn slow_head(socket: &Path, parts: &[&[u8]]) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut client = UnixStream::connect(socket).unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    for part in parts {
        client.write_all(part).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    let mut reply = Vec::new();
    client.read_to_end(&mut reply).unwrap();
    (reply, started.elapsed())
}

#[test]
fn a_head_cut_off_by_its_timeout_is_logged_as_the_bytes_received() {
    let dir = tempfile::tempdir().unwrap();
    let gate = TwoDoors::start(dir.path(), &["api.example.com"], false);
    // Two slow clients at once, so one deadline's wait covers both: the head the issue's
    // reader saw cut off after the port's colon, and one with bytes no journal line may hold.
    let cases: [(&str, &[&[u8]], &str); 2] = [
        (
            "cut off after the port's colon",
            &[b"CONNECT ", b"api.exa", b"mple.com:"],
            "api.example.com:",
        ),
        (
            "control bytes and a bare line feed",
            &[b"CONNECT ", b"a\x1b[2J", b"\x00b\x07\nc"],
            "a?[2J?b??c",
        ),
    ];
    std::thread::scope(|scope| {
        let clients: Vec<_> = cases
            .iter()
            .map(|(what, parts, _)| (what, scope.spawn(|| slow_head(&gate.turn, parts))))
            .collect();
        for (what, client) in clients {
            let (reply, after) = client.join().unwrap();
            assert_eq!(reply, REQUEST_TIMEOUT, "{what}");
            assert!(after >= HEAD_TIMEOUT, "{what}: answered after {after:?}");
        }
    });

    let log = gate.log();
    let timed_out: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("reason=head_timeout"))
        .collect();
    assert_eq!(timed_out.len(), cases.len(), "{log}");
    for (what, _, host) in cases {
        let line = timed_out
            .iter()
            .find(|line| line.contains(&format!("[egress] refused CONNECT {host} — head_timeout")))
            .unwrap_or_else(|| panic!("{what}: no line for {host:?} in\n{log}"));
        assert!(
            line.ends_with(&format!(
                "door=turn host={host} verdict=refused reason=head_timeout"
            )),
            "{what}: {line}"
        );
    }
    assert!(
        !log.chars().any(|c| c.is_control() && c != '\n'),
        "no control character reaches the log: {log:?}"
    );
}

#[test]
fn a_subscription_that_starts_the_gate_has_every_decision_of_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let gate = TwoDoors::start(dir.path(), &["api.example.com"], true);
    let (turn, build, decisions) = (&gate.turn, &gate.build, &gate.decisions);

    // As sited does before a build: the subscription is the gate's first connection; it
    // records once the gate is up and has read the line, which the gate logs.
    let mut subscriber = connect_when_listening(decisions);
    subscriber.set_read_timeout(Some(WAIT)).unwrap();
    let line = Subscribe::new(Door::Build).to_line().unwrap();
    subscriber.write_all(line.as_bytes()).unwrap();
    assert_eq!(
        support::lab::read_line(&mut subscriber),
        line,
        "the gate confirms by echoing the line"
    );

    // The run: two refusals on the build door, one of them twice, and one on the turn door.
    for request in [
        &b"CONNECT pkgs.registry.test:443 HTTP/1.1\r\n\r\n"[..],
        b"CONNECT pkgs.registry.test:443 HTTP/1.1\r\n\r\n",
        b"CONNECT pkgs.registry.test:80 HTTP/1.1\r\n\r\n",
    ] {
        assert_eq!(exchange(build, request), FORBIDDEN);
    }
    assert_eq!(
        exchange(turn, b"CONNECT other.example.com:443 HTTP/1.1\r\n\r\n"),
        FORBIDDEN
    );
    // The program has exited: sited half-closes and reads to the end.
    subscriber.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    subscriber.read_to_end(&mut rest).unwrap();
    let got: Vec<Decision> = rest
        .split_inclusive(|&byte| byte == b'\n')
        .map(|line| Decision::parse_line(line).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            Decision::new(
                Door::Build,
                "pkgs.registry.test",
                Some(443),
                Verdict::Refused,
                "not_in_plan"
            ),
            Decision::new(
                Door::Build,
                "pkgs.registry.test:80",
                None,
                Verdict::Refused,
                "port_not_allowed"
            ),
        ]
    );
}

/// Connects to `socket`, retrying while it is bound but not yet listening.
fn connect_when_listening(socket: &Path) -> UnixStream {
    let deadline = Instant::now() + WAIT;
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return stream,
            Err(error) => {
                assert!(Instant::now() < deadline, "{}: {error}", socket.display());
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

#[test]
fn an_edited_plan_stops_the_gate_before_ready() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), "turn", &["api.example.com"]);
    let edited = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("api.example.com", "evil.example.com");
    std::fs::write(&plan, edited).unwrap();
    let output = Command::new(GATE)
        .args(["--instance", "example", "--site", "1"])
        .arg(format!("--plan=turn={}", plan.display()))
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("loading the turn plan"), "{stderr}");
}

#[test]
fn the_benchmark_flag_is_refused_before_ready_unless_the_deployment_is_development() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), "turn", &["api.example.com"]);
    let cases: [(&str, Option<&str>, &str); 3] = [
        (
            "the default deployment",
            None,
            "benchmark_range_in_production",
        ),
        (
            "production, said",
            Some("production"),
            "benchmark_range_in_production",
        ),
        (
            "an unknown deployment",
            Some("staging"),
            "unknown deployment \"staging\"",
        ),
    ];
    for (what, deployment, reason) in cases {
        let notify_path = dir.path().join("notify");
        let _ = std::fs::remove_file(&notify_path);
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        notify.set_nonblocking(true).unwrap();
        let mut command = Command::new(GATE);
        command
            .args([
                "--instance",
                "example",
                "--site",
                "1",
                "--allow-benchmark-range",
            ])
            .arg(format!("--plan=turn={}", plan.display()))
            .env("NOTIFY_SOCKET", &notify_path)
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("ATELIER_DEPLOYMENT");
        if let Some(deployment) = deployment {
            command.env("ATELIER_DEPLOYMENT", deployment);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success(), "{what}");
        if reason == "benchmark_range_in_production" {
            assert_eq!(output.status.code(), Some(78), "{what}: EX_CONFIG");
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(reason), "{what}: {stderr}");
        let mut datagram = [0u8; 512];
        assert!(
            notify.recv(&mut datagram).is_err(),
            "{what}: no READY was sent"
        );
    }
}
