//! The lab network: a "public" internet on this machine, made of two network namespaces the
//! test creates and removes.
//!
//! - `<name>-u` holds the upstreams: a veth end `up0` at 198.18.0.1/24 (RFC 2544, the range
//!   the gate counts as public only with `--allow-benchmark-range`), every server address of
//!   the test on it, and dnsmasq on 198.18.0.53 answering from the test's own records (and
//!   logging every query, which is how a test counts lookups).
//! - `<name>-g` holds the gate: the other veth end `gw0` at 198.18.0.2/24 and loopback, no
//!   default route, so nothing the gate dials can leave the lab.
//!
//! DNS is real: the gate runs under `ip netns exec`, in a mount namespace of its own where
//! `/etc/resolv.conf` names the lab's dnsmasq and `/etc/hosts` holds only localhost, and it
//! resolves through glibc's `getaddrinfo` exactly as in production. The servers are the test
//! process's own: a thread enters the upstream namespace with `setns(2)`, binds there, and
//! hands the listener to the lab's tokio runtime. A server the gate must never reach (on the
//! gate's loopback, say) is bound in the gate's namespace the same way.
//!
//! The gate is socket-activated by `systemd-socket-activate` (real `LISTEN_FDS`,
//! `LISTEN_FDNAMES` and `NOTIFY_SOCKET`), which starts it on the first connection; the lab makes
//! that connection and waits for `READY=1`. Besides each door's listener (and, on a turn door
//! with an MCP upstream, the relays' one, which the model relay shares), the gate gets a
//! decisions listener (`decisions.sock`), which a test subscribes to as sited does, and a
//! metrics listener (`metrics.sock`, named `metrics` as its own socket unit names it), which a
//! test scrapes. Everything is torn down on drop; namespaces a crashed earlier run left behind
//! are removed when the next lab starts.
//!
//! Two of its parts serve the tests of a gate outside the lab too: [`write_stamped_plan`] and
//! [`wait_for_log`].

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use atelier_layout::names::GATE_DECISIONS_SOCKET_FILE as DECISIONS_SOCKET_FILE;
use atelier_layout::names::METRICS_SOCKET_NAME;
use atelier_layout::stamp::{stamped, CommentStyle};
use atelier_proto::egress::{Decision, Subscribe};
use atelier_proto::Door;

/// How long anything in the lab may take to happen.
pub const WAIT: Duration = Duration::from_secs(20);

/// The gate side's address.
pub const GATE_ADDR: &str = "198.18.0.2";
/// The upstream side's own address.
pub const UPSTREAM_ADDR: &str = "198.18.0.1";
/// The lab resolver's address.
pub const RESOLVER_ADDR: &str = "198.18.0.53";

const IP: &str = "/usr/sbin/ip";
const DNSMASQ: &str = "/usr/sbin/dnsmasq";
const SOCKET_ACTIVATE: &str = "/usr/bin/systemd-socket-activate";
const SH: &str = "/bin/sh";
const NAME_PREFIX: &str = "atelier-lab-";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// One DNS record of the lab: a name and one address (repeat a name for several answers).
pub type Record<'a> = (&'a str, &'a str);

/// The two namespaces, the resolver and the runtime of the lab's servers.
pub struct Lab {
    name: String,
    /// The lab's scratch folder (resolver files, logs, sockets, plans, credentials).
    pub dir: tempfile::TempDir,
    dnsmasq: Option<Child>,
    /// Runs the lab's servers.
    pub runtime: tokio::runtime::Runtime,
}

fn run(args: &[&str]) {
    let output = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Writes the plan `body` to `path` as the provisioner does: pretty JSON with a final newline,
/// stamped for `instance`.
pub fn write_stamped_plan(path: &Path, instance: &str, body: &serde_json::Value) {
    let text = serde_json::to_string_pretty(body).unwrap() + "\n";
    std::fs::write(
        path,
        stamped(instance, "gate", CommentStyle::Slashes, text.as_bytes()),
    )
    .unwrap();
}

/// Waits until the gate's stderr, written to `log`, holds `needle`; the log on failure.
pub fn wait_for_log(log: &Path, needle: &str) {
    let read = || std::fs::read_to_string(log).unwrap_or_default();
    let deadline = Instant::now() + WAIT;
    while !read().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "the gate never logged {needle:?}:\n{}",
            read()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Refuses to go on without what the lab needs, naming the Debian package.
fn require(path: &str, package: &str) {
    assert!(
        Path::new(path).exists(),
        "the lab needs {path} (Debian package {package}); the lab tests never skip"
    );
}

/// Removes lab namespaces whose test process is gone.
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NAME_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new(IP).args(["netns", "del", &name]).output();
        }
    }
}

impl Lab {
    /// Creates the namespaces, puts every address of `records` (and each of `extra_addrs`) on
    /// the upstream side, and starts dnsmasq answering `records`.
    pub fn start(records: &[Record<'_>], extra_addrs: &[&str]) -> Lab {
        require(IP, "iproute2");
        require(DNSMASQ, "dnsmasq-base");
        require(SOCKET_ACTIVATE, "systemd");
        sweep_stale();
        let name = format!(
            "{NAME_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tempfile::tempdir().unwrap();
        // dnsmasq and the gate's mount namespace read files from here.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut lab = Lab {
            name,
            dir,
            dnsmasq: None,
            runtime,
        };
        let (g, u) = (lab.gate_ns(), lab.upstream_ns());
        run(&[IP, "netns", "add", &g]);
        run(&[IP, "netns", "add", &u]);
        run(&[IP, "-n", &g, "link", "set", "lo", "up"]);
        run(&[IP, "-n", &u, "link", "set", "lo", "up"]);
        run(&[
            IP, "-n", &g, "link", "add", "gw0", "type", "veth", "peer", "name", "up0", "netns", &u,
        ]);
        run(&[
            IP,
            "-n",
            &g,
            "addr",
            "add",
            &format!("{GATE_ADDR}/24"),
            "dev",
            "gw0",
        ]);
        run(&[
            IP,
            "-n",
            &u,
            "addr",
            "add",
            &format!("{UPSTREAM_ADDR}/24"),
            "dev",
            "up0",
        ]);
        let mut addrs: Vec<&str> = vec![RESOLVER_ADDR];
        addrs.extend(records.iter().map(|(_, addr)| *addr));
        addrs.extend(extra_addrs);
        addrs.sort();
        addrs.dedup();
        for addr in addrs {
            // Only lab addresses go on the upstream side; private answers stay unreachable.
            if addr.starts_with("198.18.0.") && addr != UPSTREAM_ADDR {
                run(&[
                    IP,
                    "-n",
                    &u,
                    "addr",
                    "add",
                    &format!("{addr}/24"),
                    "dev",
                    "up0",
                ]);
            }
        }
        run(&[IP, "-n", &g, "link", "set", "gw0", "up"]);
        run(&[IP, "-n", &u, "link", "set", "up0", "up"]);
        lab.start_resolver(records);
        lab
    }

    fn gate_ns(&self) -> String {
        format!("{}-g", self.name)
    }

    fn upstream_ns(&self) -> String {
        format!("{}-u", self.name)
    }

    /// A path in the lab's folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start_resolver(&mut self, records: &[Record<'_>]) {
        let hosts: String = records
            .iter()
            .map(|(name, addr)| format!("{addr} {name}\n"))
            .collect();
        std::fs::write(self.path("lab.hosts"), hosts).unwrap();
        let log = self.path("dnsmasq.log");
        let child = Command::new(IP)
            .args(["netns", "exec", &self.upstream_ns(), DNSMASQ])
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--log-queries",
                "--pid-file=",
                "--user=root",
                "--group=root",
            ])
            .arg(format!("--listen-address={RESOLVER_ADDR}"))
            .arg(format!("--addn-hosts={}", self.path("lab.hosts").display()))
            .arg(format!("--log-facility={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.dnsmasq = Some(child);
        let deadline = Instant::now() + WAIT;
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("lab.hosts")
        {
            assert!(Instant::now() < deadline, "dnsmasq did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::write(
            self.path("resolv.conf"),
            format!("nameserver {RESOLVER_ADDR}\noptions timeout:2 attempts:2\n"),
        )
        .unwrap();
        std::fs::write(self.path("hosts"), "127.0.0.1 localhost\n").unwrap();
    }

    /// How many queries of `kind` (`A`, `AAAA`) for `name` the resolver has answered.
    pub fn queries(&self, kind: &str, name: &str) -> usize {
        let log = std::fs::read_to_string(self.path("dnsmasq.log")).unwrap_or_default();
        let needle = format!("query[{kind}] {name} ");
        log.lines().filter(|line| line.contains(&needle)).count()
    }

    /// Runs `bind` on a thread inside the upstream namespace: what it binds lives there.
    pub fn in_upstream<T: Send>(&self, bind: impl FnOnce() -> T + Send) -> T {
        self.in_namespace(&self.upstream_ns(), bind)
    }

    /// Runs `bind` on a thread inside the gate's namespace, whose loopback is the gate's own.
    pub fn in_gate<T: Send>(&self, bind: impl FnOnce() -> T + Send) -> T {
        self.in_namespace(&self.gate_ns(), bind)
    }

    fn in_namespace<T: Send>(&self, ns: &str, bind: impl FnOnce() -> T + Send) -> T {
        let ns = File::open(format!("/run/netns/{ns}")).unwrap();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    rustix::thread::move_into_link_name_space(
                        ns.as_fd(),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                    .unwrap();
                    bind()
                })
                .join()
                .unwrap()
        })
    }

    /// A TCP listener on `addr:port` in the upstream namespace.
    pub fn listen(&self, addr: &str, port: u16) -> std::net::TcpListener {
        let at = format!("{addr}:{port}");
        self.in_upstream(|| std::net::TcpListener::bind(at).unwrap())
    }

    /// A TCP listener on `addr:port` in the gate's namespace (`127.0.0.1`, say): what a gate
    /// dialling an address it must not would reach.
    pub fn listen_gate_side(&self, addr: &str, port: u16) -> std::net::TcpListener {
        let at = format!("{addr}:{port}");
        self.in_gate(|| std::net::TcpListener::bind(at).unwrap())
    }

    /// Starts the real gate for `site` 1 of instance `lab`, serving `doors` (each a door name
    /// and its plan body), socket-activated; waits for READY. `env` is added to its
    /// environment (`ATELIER_DEPLOYMENT`, `CREDENTIALS_DIRECTORY`, ...).
    pub fn gate(&self, doors: &[GateDoor<'_>], args: &[&str], env: &[(&str, &str)]) -> Gate {
        let mut listeners = Vec::new();
        let mut names = Vec::new();
        let mut plan_args = Vec::new();
        for door in doors {
            let plan = self.write_plan(door);
            plan_args.push(format!("--plan={}={}", door.name, plan.display()));
            listeners.push(self.path(&format!("{}.sock", door.name)));
            names.push(door.name.to_owned());
            if door.mcp_upstream.is_some() {
                listeners.push(self.path("mcp.sock"));
                names.push("mcp".to_owned());
            }
        }
        // Last, so that the first listener, which the lab's first connection starts the gate
        // through, stays a door.
        listeners.push(self.path(DECISIONS_SOCKET_FILE));
        names.push("decisions".to_owned());
        listeners.push(self.path("metrics.sock"));
        names.push(METRICS_SOCKET_NAME.to_owned());
        let notify_path = self.path("notify");
        let _ = std::fs::remove_file(&notify_path);
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        notify.set_read_timeout(Some(WAIT)).unwrap();
        let log = self.path("gate.log");
        let mut command = Command::new(SOCKET_ACTIVATE);
        for listener in &listeners {
            command.arg(format!("--listen={}", listener.display()));
        }
        command
            .arg(format!("--fdname={}", names.join(":")))
            .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()));
        for (key, value) in env {
            command.arg(format!("--setenv={key}={value}"));
        }
        command
            .args([IP, "netns", "exec", &self.gate_ns(), SH, "-c"])
            .arg(
                "/usr/bin/mount --bind \"$1\" /etc/resolv.conf && \
                 /usr/bin/mount --bind \"$2\" /etc/hosts && shift 2 && exec \"$@\"",
            )
            .arg("sh")
            .arg(self.path("resolv.conf"))
            .arg(self.path("hosts"))
            .arg(env!("CARGO_BIN_EXE_atelier-gate"))
            .args(["--instance", "lab", "--site", "1"])
            .args(&plan_args)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap());
        let child = command.spawn().unwrap();
        let mut gate = Gate {
            child,
            log,
            sockets: listeners.clone(),
            ready: false,
        };
        let deadline = Instant::now() + WAIT;
        while !listeners.iter().all(|l| l.exists()) {
            assert!(Instant::now() < deadline, "the sockets never appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The first connection starts the gate; a host on no plan gets a 403 once it is up.
        // The file appears at bind(), a moment before listen(): retry a refused connect.
        let mut probe = loop {
            match UnixStream::connect(&listeners[0]) {
                Ok(stream) => break stream,
                Err(error) if Instant::now() < deadline => {
                    let _ = error;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(error) => panic!("the gate's socket refuses connections: {error}"),
            }
        };
        probe.set_read_timeout(Some(WAIT)).unwrap();
        probe
            .write_all(b"CONNECT activation-probe.example.com:443 HTTP/1.1\r\n\r\n")
            .unwrap();
        let mut datagram = [0u8; 512];
        gate.ready = match notify.recv(&mut datagram) {
            Ok(len) => String::from_utf8_lossy(&datagram[..len])
                .lines()
                .any(|line| line == "READY=1"),
            Err(_) => false,
        };
        let mut reply = Vec::new();
        let _ = probe.read_to_end(&mut reply);
        gate
    }

    fn write_plan(&self, door: &GateDoor<'_>) -> PathBuf {
        let mcp = door.mcp_upstream.map(|upstream| {
            serde_json::json!({ "upstream": upstream, "credential": door.mcp_credential })
        });
        let mut body = serde_json::json!({
            "version": 1, "instance": "lab", "site": 1, "door": door.name, "port": 443,
            "hosts": door.hosts, "mcp": mcp,
        });
        // Absent without one, as the provisioner renders a plan.
        if let Some(routes) = &door.model_routes {
            body["model"] = serde_json::json!({ "routes": routes });
        }
        let path = self.path(&format!("s1-{}.json", door.name));
        write_stamped_plan(&path, "lab", &body);
        path
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut child) = self.dnsmasq.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in [self.gate_ns(), self.upstream_ns()] {
            let _ = Command::new(IP).args(["netns", "del", &ns]).output();
        }
    }
}

/// One door the lab's gate serves.
pub struct GateDoor<'a> {
    /// `turn` or `build`.
    pub name: &'a str,
    /// The plan's hosts.
    pub hosts: &'a [&'a str],
    /// The MCP relay's upstream, on the turn door.
    pub mcp_upstream: Option<&'a str>,
    /// The credential the relay adds.
    pub mcp_credential: Option<&'a str>,
    /// The model relay's routes (the plan's `model.routes`), beside the MCP relay on the turn
    /// door; none for a door without a model relay.
    pub model_routes: Option<serde_json::Value>,
}

impl<'a> GateDoor<'a> {
    /// A CONNECT-only door.
    pub fn connect(name: &'a str, hosts: &'a [&'a str]) -> GateDoor<'a> {
        GateDoor {
            name,
            hosts,
            mcp_upstream: None,
            mcp_credential: None,
            model_routes: None,
        }
    }
}

/// The gate process (killed on drop) and its log.
pub struct Gate {
    child: Child,
    log: PathBuf,
    /// The listeners, in the order given (each door, then `mcp` after the turn door, then
    /// `decisions`, then `metrics`).
    pub sockets: Vec<PathBuf>,
    /// Whether the gate sent `READY=1`.
    pub ready: bool,
}

impl Gate {
    /// The listener for `name` (`turn`, `build`, `mcp`, `decisions` or `metrics`).
    pub fn socket(&self, name: &str) -> &Path {
        self.sockets
            .iter()
            .find(|s| {
                s.file_name()
                    .is_some_and(|f| f == format!("{name}.sock").as_str())
            })
            .unwrap()
    }

    /// Subscribes to `door`'s decisions as sited does; returns once the gate has confirmed
    /// (echoed the line): it records for the subscription from then on.
    pub fn subscribe(&self, door: Door) -> Subscriber {
        let mut stream = UnixStream::connect(self.socket("decisions")).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let line = Subscribe::new(door).to_line().unwrap();
        stream.write_all(line.as_bytes()).unwrap();
        assert_eq!(read_line(&mut stream), line, "the gate confirms by echoing");
        Subscriber { stream }
    }

    /// Everything the gate wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log holds `needle`; the log on failure.
    pub fn wait_for_log(&self, needle: &str) {
        wait_for_log(&self.log, needle);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A subscriber of the gate's decisions socket.
pub struct Subscriber {
    stream: UnixStream,
}

impl Subscriber {
    /// Half-closes, as sited does when the run's program has exited; every decision the gate
    /// then writes before it closes.
    pub fn finish(mut self) -> Vec<Decision> {
        self.stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        self.stream.read_to_end(&mut rest).unwrap();
        rest.split_inclusive(|&byte| byte == b'\n')
            .map(|line| Decision::parse_line(line).unwrap())
            .collect()
    }
}

/// One line read from `stream`, its `\n` included; a byte at a time, so nothing after it is
/// consumed.
pub fn read_line(stream: &mut UnixStream) -> String {
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        let mut byte = [0u8; 1];
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "the stream ended inside a line"
        );
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}
