//! atelier-isolation-probe: run as a door's program, it tries what a site's run must not be
//! able to do and prints one `case <name> <blocked|OPEN> <detail>` line per attempt (and
//! `control <name> <ok|FAILED> <detail>` lines that prove the attempts can succeed where
//! nothing confines them). It also holds shared objects for another site's run to look for,
//! listens in the host's namespaces for runs to try, and prints a monotonic timestamp first
//! thing for the start-latency benchmark.
//!
//! Usage errors exit 2; every attempt's outcome is printed, never an exit code.

use std::fs::{self, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use clap::{Parser, Subcommand};

/// How long a TCP connect may take before it counts as refused.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Try what a confined run must not do, or help another run try.
#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    command: Probe,
}

#[derive(Debug, Subcommand)]
enum Probe {
    /// Prints `started_ns=<CLOCK_MONOTONIC ns>` and exits: the program is running.
    Timestamp,
    /// The isolation matrix of a turn run: every case must print `blocked`.
    Matrix(Box<Matrix>),
    /// The git door's way out: every gate socket and forward must print `blocked`.
    GitDoor(GitDoor),
    /// The build door's hold on the repository: it reads the metadata, and writes none.
    BuildDoor {
        /// The workspace's `.git`.
        #[arg(long)]
        repository: PathBuf,
    },
    /// Another site's run: makes a `/dev/shm` file and a SysV shared memory segment, prints
    /// `pid=`, `held` and its own controls, then sleeps.
    Hold(Hold),
    /// Listens on a loopback TCP port and an abstract unix socket in the caller's network
    /// namespace, prints `listening`, and accepts until killed.
    Listen {
        /// The loopback TCP port.
        #[arg(long)]
        tcp_port: u16,
        /// The abstract socket's name (without the leading NUL).
        #[arg(long)]
        abstract_name: String,
    },
}

#[derive(Debug, clap::Args)]
struct Matrix {
    /// A TCP port the host listens on at 127.0.0.1.
    #[arg(long)]
    host_tcp_port: u16,
    /// An abstract unix socket the host listens on.
    #[arg(long)]
    host_abstract: String,
    /// sited's socket, as the host sees it.
    #[arg(long)]
    sited_socket: PathBuf,
    /// Another site's gate sockets, as the host sees them.
    #[arg(long, num_args = 1..)]
    other_gate: Vec<PathBuf>,
    /// Sockets under the host's /run.
    #[arg(long, num_args = 1..)]
    host_socket: Vec<PathBuf>,
    /// Sockets this run's own door binds in: the controls for the socket cases.
    #[arg(long, num_args = 1..)]
    own_socket: Vec<PathBuf>,
    /// Another site's workspace.
    #[arg(long)]
    other_workspace: PathBuf,
    /// This site's repository metadata (its workspace's `.git`), which a turn must not reach:
    /// a hook or a config written there would run in the git door.
    #[arg(long)]
    own_repository: PathBuf,
    /// sited's state in this site's workspace (`.builder`), which a run must not rename away
    /// to plant its own in its place.
    #[arg(long)]
    own_builder: PathBuf,
    /// Directories no door shows: the instance's configuration and another instance's (masked
    /// in the system view), the audit, a database's, the host's logs, the kernel's tunables,
    /// root's home.
    #[arg(long, num_args = 1..)]
    masked_dir: Vec<PathBuf>,
    /// The web server's vhosts, which name every site on the host with its domains.
    #[arg(long)]
    vhost_dir: PathBuf,
    /// systemd's units, where every door's unit names its site's workspace.
    #[arg(long)]
    unit_dir: PathBuf,
    /// The pid of another site's live run.
    #[arg(long)]
    other_pid: u32,
    /// A word in that run's command line.
    #[arg(long)]
    other_marker: String,
    /// A file name that run made in its /dev/shm.
    #[arg(long)]
    other_shm: String,
    /// The SysV IPC key that run made a segment with.
    #[arg(long)]
    other_ipc_key: i32,
    /// A setuid-root program that prints the effective uid (a planted copy of `id -u`).
    #[arg(long)]
    setuid: PathBuf,
    /// The forward the shim opened for this door, a loopback TCP control.
    #[arg(long)]
    own_forward_port: u16,
}

#[derive(Debug, clap::Args)]
struct GitDoor {
    /// Gate sockets: the paths bound into the other doors and the host's.
    #[arg(long, num_args = 1..)]
    gate_socket: Vec<PathBuf>,
    /// The loopback ports the other doors forward to the gate.
    #[arg(long, num_args = 1..)]
    forward_port: Vec<u16>,
}

#[derive(Debug, clap::Args)]
struct Hold {
    /// The word the matrix looks for in this run's command line.
    #[arg(long)]
    marker: String,
    /// The file name to make in /dev/shm.
    #[arg(long)]
    shm: String,
    /// The SysV IPC key to make a segment with.
    #[arg(long)]
    ipc_key: i32,
    /// How long to hold, at most.
    #[arg(long, default_value_t = 120)]
    seconds: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Probe::Timestamp => {
            // First, before anything else runs: this is the instant the benchmark measures.
            let now = monotonic_ns();
            println!("started_ns={now}");
        }
        Probe::Matrix(matrix) => run_matrix(&matrix),
        Probe::GitDoor(git) => run_git_door(&git),
        Probe::BuildDoor { repository } => run_build_door(&repository),
        Probe::Hold(hold) => run_hold(&hold),
        Probe::Listen {
            tcp_port,
            abstract_name,
        } => {
            if let Err(e) = listen(tcp_port, &abstract_name) {
                eprintln!("listen: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let _ = io::stdout().flush();
    ExitCode::SUCCESS
}

/// CLOCK_MONOTONIC in nanoseconds; the clock every process of the machine shares.
fn monotonic_ns() -> u128 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u128::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
        + u128::try_from(now.tv_nsec).unwrap_or(0)
}

/// What one attempt found.
enum Outcome {
    /// The run could not do it; the detail says what stopped it.
    Blocked(String),
    /// The run did it.
    Open(String),
}

fn case(name: &str, outcome: Outcome) {
    match outcome {
        Outcome::Blocked(detail) => println!("case {name} blocked {}", one_line(&detail)),
        Outcome::Open(detail) => println!("case {name} OPEN {}", one_line(&detail)),
    }
}

fn control(name: &str, worked: Result<String, String>) {
    match worked {
        Ok(detail) => println!("control {name} ok {}", one_line(&detail)),
        Err(detail) => println!("control {name} FAILED {}", one_line(&detail)),
    }
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// Every path in `paths` refused a connection; the first one that accepts makes the case open.
fn connect_none(paths: &[PathBuf]) -> Outcome {
    let mut refusals = Vec::new();
    for path in paths {
        match UnixStream::connect(path) {
            Ok(_) => return Outcome::Open(format!("connected to {}", path.display())),
            Err(e) => refusals.push(format!("{}: {e}", path.display())),
        }
    }
    Outcome::Blocked(refusals.join("; "))
}

fn connect_tcp(port: u16) -> Outcome {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(_) => Outcome::Open(format!("connected to {addr}")),
        Err(e) => Outcome::Blocked(format!("{addr}: {e}")),
    }
}

fn connect_abstract(name: &str) -> Outcome {
    let connected = UnixAddr::from_abstract_name(name.as_bytes())
        .and_then(|addr| UnixStream::connect_addr(&addr));
    match connected {
        Ok(_) => Outcome::Open(format!("connected to @{name}")),
        Err(e) => Outcome::Blocked(format!("@{name}: {e}")),
    }
}

fn run_matrix(m: &Matrix) {
    let euid = rustix::process::geteuid().as_raw();
    println!("uid={euid}");

    case("host_loopback_tcp", connect_tcp(m.host_tcp_port));
    control(
        "own_forward_tcp",
        outcome_ok(connect_tcp(m.own_forward_port)),
    );
    case("host_abstract_socket", connect_abstract(&m.host_abstract));
    case(
        "sited_socket",
        connect_none(std::slice::from_ref(&m.sited_socket)),
    );
    case("other_site_gate_socket", connect_none(&m.other_gate));
    case(
        "host_run_sockets",
        host_run_sockets(&m.host_socket, &m.own_socket),
    );
    for own in &m.own_socket {
        control(
            "own_gate_socket",
            outcome_ok(connect_none(std::slice::from_ref(own))),
        );
    }

    case("other_site_workspace_write", write_into(&m.other_workspace));
    case(
        "other_site_workspace_read",
        read_from(&m.other_workspace, "site.json"),
    );
    case(
        "own_repository_metadata",
        read_from(&m.own_repository, "HEAD"),
    );
    control("own_workspace_write", own_workspace_write());
    case("builder_rename", rename_away(&m.own_builder));

    case(
        "other_site_process",
        other_process(m.other_pid, &m.other_marker),
    );
    control("own_process_visible", own_process_visible());

    case("other_site_shm_file", shm_file(&m.other_shm));
    case("other_site_sysv_ipc", sysv_segment(m.other_ipc_key));

    case("setuid_binary", setuid(&m.setuid));
    control("no_new_privs", no_new_privs());
    case("host_sysfs", host_sysfs());
    case("masked_dirs", none_listed(&m.masked_dir));
    case("web_server_vhosts", listing(&m.vhost_dir));
    case("unit_files", listing(&m.unit_dir));
}

fn run_git_door(g: &GitDoor) {
    case("git_door_gate_socket", connect_none(&g.gate_socket));
    for port in &g.forward_port {
        case("git_door_gate_forward", connect_tcp(*port));
    }
}

/// A build runs what the turn wrote (its steps, its scripts): were the repository writable
/// there, a turn could rewrite the history or plant a config the git door runs, through a build.
fn run_build_door(repository: &Path) {
    control(
        "build_repository_read",
        fs::read(repository.join("HEAD"))
            .map(|head| format!("read {} bytes of HEAD", head.len()))
            .map_err(|e| format!("HEAD: {e}")),
    );
    case(
        "build_repository_write",
        match plant(repository, b"") {
            Ok(planted) => {
                let _ = fs::remove_file(&planted);
                Outcome::Open(format!("created {}", planted.display()))
            }
            Err(refused) => Outcome::Blocked(refused),
        },
    );
}

/// Creates a file of this probe's own in `dir` holding `body`: its path, or why it could not.
fn plant(dir: &Path, body: &[u8]) -> Result<PathBuf, String> {
    let fresh = dir.join(format!("isolation-probe-{}", std::process::id()));
    match OpenOptions::new().write(true).create_new(true).open(&fresh) {
        Ok(mut file) => {
            let _ = file.write_all(body);
            Ok(fresh)
        }
        Err(e) => Err(format!("{}: {e}", fresh.display())),
    }
}

/// A control passes when the attempt succeeded.
fn outcome_ok(outcome: Outcome) -> Result<String, String> {
    match outcome {
        Outcome::Open(detail) => Ok(detail),
        Outcome::Blocked(detail) => Err(detail),
    }
}

/// The named host sockets all refuse, and no socket is found anywhere under this run's /run
/// but the ones its own door binds in.
fn host_run_sockets(named: &[PathBuf], own: &[PathBuf]) -> Outcome {
    if let Outcome::Open(detail) = connect_none(named) {
        return Outcome::Open(detail);
    }
    let mut found = Vec::new();
    sockets_under(Path::new("/run"), &mut found);
    let foreign: Vec<PathBuf> = found.into_iter().filter(|p| !own.contains(p)).collect();
    for path in &foreign {
        if UnixStream::connect(path).is_ok() {
            return Outcome::Open(format!("connected to {}", path.display()));
        }
    }
    let seen: Vec<String> = foreign.iter().map(|p| p.display().to_string()).collect();
    Outcome::Blocked(format!(
        "{} named sockets refused; other sockets under /run: [{}]",
        named.len(),
        seen.join(", ")
    ))
}

/// Where sysfs names what a run has no business knowing: every unit's cgroup on the host
/// and the host's network interfaces.
const SYSFS_TREES: [&str; 2] = ["/sys/fs/cgroup", "/sys/class/net"];

/// None of [`SYSFS_TREES`] lists anything.
fn host_sysfs() -> Outcome {
    let trees: Vec<PathBuf> = SYSFS_TREES.iter().map(PathBuf::from).collect();
    none_listed(&trees)
}

/// Each of `dirs` cannot be listed, or lists nothing.
fn none_listed(dirs: &[PathBuf]) -> Outcome {
    let mut refusals = Vec::new();
    for dir in dirs {
        match listing(dir) {
            Outcome::Open(detail) => return Outcome::Open(detail),
            Outcome::Blocked(detail) => refusals.push(detail),
        }
    }
    Outcome::Blocked(refusals.join("; "))
}

/// Open when `dir` lists anything; blocked when it cannot be listed or is empty.
fn listing(dir: &Path) -> Outcome {
    match fs::read_dir(dir) {
        Ok(entries) => {
            let names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if names.is_empty() {
                Outcome::Blocked(format!("{} is empty", dir.display()))
            } else {
                Outcome::Open(format!("{} lists {}", dir.display(), names.join(", ")))
            }
        }
        Err(e) => Outcome::Blocked(format!("{}: {e}", dir.display())),
    }
}

fn sockets_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_socket() {
            found.push(entry.path());
        } else if kind.is_dir() {
            sockets_under(&entry.path(), found);
        }
    }
}

fn write_into(workspace: &Path) -> Outcome {
    let created = match plant(workspace, b"written by another site\n") {
        Ok(fresh) => return Outcome::Open(format!("created {}", fresh.display())),
        Err(refused) => refused,
    };
    let existing = workspace.join("site.json");
    match OpenOptions::new().append(true).open(&existing) {
        Ok(_) => Outcome::Open(format!("opened {} for writing", existing.display())),
        Err(e) => Outcome::Blocked(format!("{created}; {}: {e}", existing.display())),
    }
}

/// Neither `dir`'s listing nor its `file` can be read.
fn read_from(dir: &Path, file: &str) -> Outcome {
    let listed = match listing(dir) {
        Outcome::Open(detail) => return Outcome::Open(detail),
        Outcome::Blocked(detail) => detail,
    };
    let path = dir.join(file);
    match fs::read(&path) {
        Ok(bytes) => Outcome::Open(format!("read {} bytes of {}", bytes.len(), path.display())),
        Err(e) => Outcome::Blocked(format!("{listed}; {}: {e}", path.display())),
    }
}

/// `dir` cannot be renamed away (a run that could would plant its own in its place); one
/// that could is renamed back at once.
fn rename_away(dir: &Path) -> Outcome {
    let away = PathBuf::from(format!("{}-probe-{}", dir.display(), std::process::id()));
    match fs::rename(dir, &away) {
        Ok(()) => {
            let back = fs::rename(&away, dir).map_err(|e| format!("; renaming it back: {e}"));
            Outcome::Open(format!(
                "renamed {} to {}{}",
                dir.display(),
                away.display(),
                back.err().unwrap_or_default()
            ))
        }
        Err(e) => Outcome::Blocked(format!("{}: {e}", dir.display())),
    }
}

fn own_workspace_write() -> Result<String, String> {
    let path = Path::new(".isolation-probe-control");
    fs::write(path, b"control\n").map_err(|e| format!("{}: {e}", path.display()))?;
    fs::remove_file(path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    Ok("wrote and removed a file in the working directory".to_owned())
}

fn other_process(pid: u32, marker: &str) -> Outcome {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if proc_dir.exists() {
        return Outcome::Open(format!("{} exists", proc_dir.display()));
    }
    let Ok(entries) = fs::read_dir("/proc") else {
        return Outcome::Blocked("/proc cannot be listed".to_owned());
    };
    // This probe's own command line names the marker too.
    let own = std::process::id().to_string();
    let mut visible = 0;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy() == own.as_str() {
            continue;
        }
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        visible += 1;
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            return Outcome::Open(format!(
                "/proc/{} runs {marker}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    Outcome::Blocked(format!(
        "/proc/{pid} absent; {visible} processes visible, none running {marker}"
    ))
}

fn own_process_visible() -> Result<String, String> {
    let own = format!("/proc/{}", std::process::id());
    if Path::new(&own).exists() {
        Ok(format!("{own} exists"))
    } else {
        Err(format!("{own} is missing"))
    }
}

/// The kernel's no_new_privs bit is set on this process: the door sets it without an explicit
/// `NoNewPrivileges=` (a non-root unit with a system call filter and no capabilities).
fn no_new_privs() -> Result<String, String> {
    let status = fs::read_to_string("/proc/self/status").map_err(|e| format!("status: {e}"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("NoNewPrivs:"))
        .ok_or("no NoNewPrivs line")?;
    if line.split_whitespace().nth(1) == Some("1") {
        Ok(line.to_owned())
    } else {
        Err(line.to_owned())
    }
}

fn shm_file(name: &str) -> Outcome {
    let path = Path::new("/dev/shm").join(name);
    match fs::metadata(&path) {
        Ok(_) => Outcome::Open(format!("{} exists", path.display())),
        Err(e) => Outcome::Blocked(format!("{}: {e}", path.display())),
    }
}

fn sysv_segment(key: i32) -> Outcome {
    match sysv::lookup(key) {
        Ok(id) => Outcome::Open(format!("key {key:#x} is segment {id}")),
        Err(e) => Outcome::Blocked(format!("key {key:#x}: {e}")),
    }
}

fn setuid(program: &Path) -> Outcome {
    let output = Command::new(program)
        .arg("-u")
        .stdin(Stdio::null())
        .output();
    match output {
        Err(e) => Outcome::Blocked(format!("{}: {e}", program.display())),
        Ok(out) => {
            let euid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if euid == "0" {
                Outcome::Open(format!("{} ran with effective uid 0", program.display()))
            } else {
                Outcome::Blocked(format!(
                    "{} ran with effective uid {euid:?} ({})",
                    program.display(),
                    out.status
                ))
            }
        }
    }
}

fn run_hold(h: &Hold) {
    println!("pid={}", std::process::id());
    let shm = Path::new("/dev/shm").join(&h.shm);
    control(
        "hold_shm_file",
        fs::write(&shm, b"shared\n")
            .and_then(|()| fs::metadata(&shm).map(|_| ()))
            .map(|()| format!("{} made", shm.display()))
            .map_err(|e| format!("{}: {e}", shm.display())),
    );
    control(
        "hold_sysv_ipc",
        sysv::create(h.ipc_key)
            .and_then(|_| sysv::lookup(h.ipc_key))
            .map(|id| format!("key {:#x} is segment {id}", h.ipc_key))
            .map_err(|e| format!("key {:#x}: {e}", h.ipc_key)),
    );
    println!("held {}", h.marker);
    let _ = io::stdout().flush();
    std::thread::sleep(Duration::from_secs(h.seconds));
}

fn listen(tcp_port: u16, abstract_name: &str) -> io::Result<()> {
    let tcp = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], tcp_port)))?;
    let addr = UnixAddr::from_abstract_name(abstract_name.as_bytes())?;
    let unix = UnixListener::bind_addr(&addr)?;
    std::thread::spawn(move || {
        for mut conn in unix.incoming().flatten() {
            let _ = conn.write_all(b"host abstract socket\n");
        }
    });
    println!("listening");
    io::stdout().flush()?;
    for conn in tcp.incoming() {
        let mut conn = conn?;
        let _ = conn.write_all(b"host loopback service\n");
        let mut sink = [0u8; 64];
        let _ = conn.read(&mut sink);
    }
    Ok(())
}

/// SysV shared memory by key. No crate of the workspace wraps `shmget`, so these are the two
/// libc calls, neither of which takes a pointer.
mod sysv {
    use std::io;

    /// The id of the segment with `key` in this run's IPC namespace.
    pub fn lookup(key: i32) -> io::Result<i32> {
        shmget(key, 0, 0)
    }

    /// Makes a one-page segment with `key` that every user may use: only a separate IPC
    /// namespace, not its mode, keeps another site's run from finding it.
    pub fn create(key: i32) -> io::Result<i32> {
        shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o666)
    }

    #[allow(unsafe_code)]
    fn shmget(key: i32, size: usize, flags: i32) -> io::Result<i32> {
        // SAFETY: shmget takes only integers and returns an id or -1; no memory is shared
        // with the kernel and nothing is attached.
        let id = unsafe { libc::shmget(key, size, flags) };
        if id < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(id)
        }
    }
}
