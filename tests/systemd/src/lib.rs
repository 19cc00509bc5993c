//! A real systemd as PID 1 for tests: boots `systemd-nspawn` on a tmpfs overlay of the host's
//! root, installs files into it, runs a script as a unit once the system is up, and returns its
//! output, exit status and the journal.
//!
//! Nothing on the host changes: the overlay's upper layer lives in a tmpfs that is unmounted
//! when the [`SystemdBox`] is dropped. A missing `systemd-nspawn` or a container that does not
//! boot is an error, never a skip: a test that cannot boot PID 1 has not tested anything.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How long a box may run before it is killed; boots take about a second.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// Where the box writes its results; bound read-write from the host.
const OUT_DIR: &str = "/atelier-box-out";

/// The unit that runs the test script once dbus and polkit are up.
const RUNNER_UNIT: &str = r#"[Unit]
Description=Atelier test script
Wants=dbus.service polkit.service
After=dbus.service polkit.service basic.target

[Service]
Type=oneshot
StandardOutput=append:/atelier-box-out/output
StandardError=append:/atelier-box-out/output
ExecStart=/bin/bash -c '/bin/bash /etc/atelier-box/script; echo $? > /atelier-box-out/status.tmp; mv /atelier-box-out/status.tmp /atelier-box-out/status'
ExecStopPost=-/bin/sh -c 'journalctl -b --no-pager -o short-monotonic > /atelier-box-out/journal 2>&1; systemctl --no-block poweroff'
"#;

/// Why a box could not run.
#[derive(Debug, thiserror::Error)]
pub enum BoxError {
    /// The harness needs root to mount and boot.
    #[error("the systemd tests need root (mounts and systemd-nspawn)")]
    NotRoot,
    /// `systemd-nspawn` is not installed.
    #[error("systemd-nspawn is missing: apt-get install systemd-container")]
    NspawnMissing,
    /// A test fixture the box needs is not installed.
    #[error("{0}")]
    MissingFixture(String),
    /// A file to install into the box does not exist.
    #[error("{0} does not exist (build the binaries first: cargo build --workspace --bins)")]
    MissingSource(PathBuf),
    /// A host command failed.
    #[error("{what} failed: {detail}")]
    Command {
        /// What was being done.
        what: String,
        /// Its output.
        detail: String,
    },
    /// The container ended without recording a result.
    #[error("the container ended without a result (nspawn: {nspawn_status}); boot log tail:\n{boot_log}")]
    NoResult {
        /// nspawn's exit status.
        nspawn_status: String,
        /// The last lines nspawn printed.
        boot_log: String,
    },
    /// File system work on the host failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> BoxError {
    let what = what.into();
    move |source| BoxError::Io { what, source }
}

/// A file to put into the box before it boots.
#[derive(Debug)]
enum Install {
    Copy {
        source: PathBuf,
        dest: String,
    },
    Write {
        dest: String,
        contents: Vec<u8>,
        mode: u32,
    },
}

/// A throw-away systemd container, configured and then booted once by [`SystemdBox::run`].
#[derive(Debug)]
pub struct SystemdBox {
    installs: Vec<Install>,
    timeout: Duration,
}

/// What a box run produced.
pub struct BoxRun {
    /// The script's exit status.
    pub status: i32,
    /// The script's stdout and stderr, interleaved.
    pub output: String,
    /// The whole journal of the boot.
    pub journal: String,
}

impl fmt::Debug for BoxRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "script exited {}\n--- output ---\n{}\n--- journal (last 120 lines) ---\n{}",
            self.status,
            self.output,
            self.journal_tail(120)
        )
    }
}

impl BoxRun {
    /// The last `lines` lines of the journal.
    pub fn journal_tail(&self, lines: usize) -> String {
        let all: Vec<&str> = self.journal.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Journal lines that mention `needle`.
    pub fn journal_lines(&self, needle: &str) -> Vec<&str> {
        self.journal
            .lines()
            .filter(|l| l.contains(needle))
            .collect()
    }

    /// Panics with the output and the journal tail unless the script exited 0.
    #[track_caller]
    pub fn assert_success(&self) {
        assert!(self.status == 0, "{self:?}");
    }

    /// The value of `KEY=value` on its own line of the output, if the script printed one.
    pub fn fact(&self, key: &str) -> Option<&str> {
        let prefix = format!("{key}=");
        self.output
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
    }
}

impl SystemdBox {
    /// A box that will run as root with the host's root file system as its lower layer.
    pub fn new() -> Self {
        Self {
            installs: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Copies a host file or directory to `dest` inside the box.
    pub fn copy(mut self, source: impl Into<PathBuf>, dest: impl Into<String>) -> Self {
        self.installs.push(Install::Copy {
            source: source.into(),
            dest: dest.into(),
        });
        self
    }

    /// Writes `contents` to `dest` inside the box with `mode`.
    pub fn write(
        mut self,
        dest: impl Into<String>,
        contents: impl Into<Vec<u8>>,
        mode: u32,
    ) -> Self {
        self.installs.push(Install::Write {
            dest: dest.into(),
            contents: contents.into(),
            mode,
        });
        self
    }

    /// Copies the freshly built Atelier binaries `names` from `bins` to where the Debian package
    /// installs them (the layout's default `bin_dir`), which is where every rendered unit and
    /// sited's env file expect them.
    pub fn install_binaries(mut self, bins: &Path, names: &[&str]) -> Self {
        for name in names {
            self = self.copy(
                bins.join(name),
                format!("{}/{name}", atelier_layout::paths::BIN_DIR),
            );
        }
        self
    }

    /// Copies the repository's site templates to where the Debian package installs them (the
    /// layout's default `templates_dir`).
    pub fn install_templates(self) -> Self {
        self.copy(
            repo_root().join("templates"),
            atelier_layout::paths::TEMPLATES_DIR,
        )
    }

    /// Sets how long the whole run may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Boots the box, runs `script` with bash as a oneshot unit once the system is up, powers
    /// off and reports.
    pub fn run(self, script: &str) -> Result<BoxRun, BoxError> {
        preflight()?;
        // One box at a time on this machine, across test threads and test processes: a box
        // shares the host's network, so two at once would fight over the same ports (each
        // box's nginx on :80) and lab addresses.
        let _one_box = one_box_on_this_machine()?;
        let scratch = Scratch::mount()?;
        let root = scratch.root();
        // nspawn populates /dev itself and refuses a non-empty one.
        empty_dir(&root.join("dev"))?;
        for install in &self.installs {
            install.apply(&root)?;
        }
        write_file(
            &root.join("etc/atelier-box/script"),
            script.as_bytes(),
            0o755,
        )?;
        write_file(
            &root.join("etc/systemd/system/atelier-box.service"),
            RUNNER_UNIT.as_bytes(),
            0o644,
        )?;
        fs::create_dir_all(root.join(OUT_DIR.trim_start_matches('/')))
            .map_err(io_err("creating the result mount point"))?;

        let out = scratch.path.join("out");
        let machine = format!("atelier-box-{}-{}", std::process::id(), next_box_number());
        // The box's container gets cgroups of its own (see BoxCgroup): the shell joins them,
        // then becomes nspawn.
        let cgroup = BoxCgroup::create(&machine);
        let nspawn = Command::new("sh")
            .arg("-c")
            .arg(JOIN_AND_EXEC)
            .arg("sh")
            .env("ATELIER_BOX_CGROUPS", cgroup.procs_files())
            .arg("timeout")
            .arg("--kill-after=10")
            .arg(self.timeout.as_secs().to_string())
            .arg("systemd-nspawn")
            .arg("-D")
            .arg(&root)
            .arg(format!("--machine={machine}"))
            .args(["--register=no", "--keep-unit", "-q", "--capability=all"])
            // nspawn's own seccomp filter refuses bpf(2), without which the box's PID 1 cannot
            // load a unit's IP firewall and runs it with none: every `IPAddressDeny=` would be
            // ignored here while a host's systemd enforces it.
            .arg("--system-call-filter=bpf")
            .arg(format!("--bind={}:{OUT_DIR}", out.display()))
            .args(agents_bind())
            .args([
                "-b",
                "--",
                "systemd.unit=atelier-box.service",
                "systemd.firstboot=off",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(io_err("running systemd-nspawn"))?;
        drop(cgroup);

        let read = |name: &str| fs::read_to_string(out.join(name)).unwrap_or_default();
        let status = read("status");
        let Ok(status) = status.trim().parse::<i32>() else {
            let log = String::from_utf8_lossy(&nspawn.stdout).into_owned()
                + &String::from_utf8_lossy(&nspawn.stderr);
            let tail: Vec<&str> = log.lines().collect();
            return Err(BoxError::NoResult {
                nspawn_status: nspawn.status.to_string(),
                boot_log: tail[tail.len().saturating_sub(30)..].join("\n"),
            });
        };
        Ok(BoxRun {
            status,
            output: read("output"),
            journal: read("journal"),
        })
    }
}

impl Default for SystemdBox {
    fn default() -> Self {
        Self::new()
    }
}

impl Install {
    fn apply(&self, root: &Path) -> Result<(), BoxError> {
        match self {
            Install::Copy { source, dest } => {
                if !source.exists() {
                    return Err(BoxError::MissingSource(source.clone()));
                }
                let target = root.join(dest.trim_start_matches('/'));
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent).map_err(io_err(format!("creating {dest}")))?;
                }
                run_host(
                    Command::new("cp").arg("-a").arg(source).arg(&target),
                    &format!("copying {} to {dest}", source.display()),
                )
            }
            Install::Write {
                dest,
                contents,
                mode,
            } => write_file(&root.join(dest.trim_start_matches('/')), contents, *mode),
        }
    }
}

/// Where the machine-wide box lock lives.
const BOX_LOCK: &str = "/run/lock/atelier-systemd-box.lock";

/// Takes the machine-wide box lock, waiting for a box another thread or process runs; it is
/// released when the returned file is dropped (or the process dies).
fn one_box_on_this_machine() -> Result<fs::File, BoxError> {
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(BOX_LOCK)
        .map_err(io_err("opening the box lock"))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(std::io::Error::from)
        .map_err(io_err("taking the box lock"))?;
    Ok(lock)
}

/// Joins each `cgroup.procs` file named in `$ATELIER_BOX_CGROUPS` (a failure is said and
/// the box runs where it is), then runs its arguments.
const JOIN_AND_EXEC: &str = r#"for procs in $ATELIER_BOX_CGROUPS; do
  echo $$ > "$procs" || echo "atelier-box: could not join $procs" >&2
done
exec "$@""#;

/// The cgroups a box's nspawn runs in: a child of this process's own cgroup, named after the
/// box, in each hierarchy the container's systemd writes (the named `systemd` v1 hierarchy and
/// the unified one). nspawn places a container below the cgroup it is started in; started from
/// the same cgroup, every box's container had the same `payload` tree, so the units of one
/// name in two boxes (two at once, or one box and what is left of the box before it) were one
/// cgroup, shown by two boxes' `sleep`s listed in one `cgroup.procs`. Whatever removed such a
/// cgroup under a box's systemd made it fail to join it ("Failed to join unit cgroup … No such
/// file or directory"). Removed, bottom up, when dropped.
struct BoxCgroup {
    dirs: Vec<PathBuf>,
}

impl BoxCgroup {
    /// Makes the box's cgroups; a hierarchy where that fails is left out (the box then shares
    /// that one, as before).
    fn create(name: &str) -> Self {
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let unified = if Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
            "/sys/fs/cgroup/unified"
        } else {
            "/sys/fs/cgroup"
        };
        let dirs = own
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                let mount = match controllers {
                    "name=systemd" => "/sys/fs/cgroup/systemd",
                    "" => unified,
                    _ => return None,
                };
                let dir = Path::new(mount)
                    .join(path.trim_start_matches('/'))
                    .join(name);
                match fs::create_dir(&dir) {
                    Ok(()) => Some(dir),
                    Err(e) => {
                        eprintln!(
                            "atelier-box: no cgroup of its own at {}: {e}",
                            dir.display()
                        );
                        None
                    }
                }
            })
            .collect();
        Self { dirs }
    }

    /// The `cgroup.procs` files to join, separated by spaces.
    fn procs_files(&self) -> String {
        self.dirs
            .iter()
            .map(|dir| dir.join("cgroup.procs").display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Drop for BoxCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            remove_cgroup_tree(dir);
        }
    }
}

/// Removes a cgroup and the cgroups below it, deepest first; what is still busy stays.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

/// The tmpfs that holds the overlay's upper layer, the merged root and the result folder.
struct Scratch {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Scratch {
    fn mount() -> Result<Self, BoxError> {
        let dir = tempfile::Builder::new()
            .prefix("atelier-box.")
            .tempdir()
            .map_err(io_err("creating the box directory"))?;
        let path = dir.path().to_path_buf();
        run_host(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", "mode=0755", "tmpfs"])
                .arg(&path),
            "mounting the box tmpfs",
        )?;
        let scratch = Self { path, _dir: dir };
        for sub in ["upper", "work", "root", "out"] {
            fs::create_dir(scratch.path.join(sub)).map_err(io_err("preparing the overlay"))?;
        }
        let options = format!(
            "lowerdir=/,upperdir={},workdir={}",
            scratch.path.join("upper").display(),
            scratch.path.join("work").display()
        );
        run_host(
            Command::new("mount")
                .args(["-t", "overlay", "overlay", "-o", &options])
                .arg(scratch.root()),
            "mounting the overlay of /",
        )?;
        Ok(scratch)
    }

    fn root(&self) -> PathBuf {
        self.path.join("root")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Lazy unmounts: a process nspawn left behind must not keep the host's tmpfs alive.
        for target in [self.root(), self.path.clone()] {
            let _ = Command::new("umount").arg("-l").arg(target).status();
        }
    }
}

fn preflight() -> Result<(), BoxError> {
    if !running_as_root() {
        return Err(BoxError::NotRoot);
    }
    let found = Command::new("systemd-nspawn")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(BoxError::NspawnMissing)
    }
}

/// True when the effective user is root, read from `/proc` so the harness needs no libc calls.
fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

fn next_box_number() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn empty_dir(dir: &Path) -> Result<(), BoxError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("reading the box's /dev")(e)),
    };
    for entry in entries {
        let path = entry.map_err(io_err("reading the box's /dev"))?.path();
        let removed = if path.is_dir() && !path.is_symlink() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_err(format!("emptying {}", path.display())))?;
    }
    Ok(())
}

fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), BoxError> {
    let what = format!("writing {}", path.display());
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_err(what.clone()))?;
    }
    fs::write(path, contents).map_err(io_err(what.clone()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err(what))
}

fn run_host(command: &mut Command, what: &str) -> Result<(), BoxError> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(what.to_owned()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BoxError::Command {
            what: what.to_owned(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// The folder that holds the workspace's freshly built binaries (`target/debug` for a test
/// binary in `target/debug/deps`).
pub fn built_binaries_dir() -> Result<PathBuf, BoxError> {
    let exe = std::env::current_exe().map_err(io_err("locating the test binary"))?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| BoxError::MissingSource(exe.clone()))
}

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where every box shows the agent CLIs' cache (`scripts/agents`), read-only: under `/opt`, as
/// an operator's install would be, since a door shows the host's `/usr`, `/etc` and `/opt` only.
pub const AGENTS_IN_BOX: &str = "/opt/atelier-agents";

/// The agent CLIs' cache on this machine (`$ATELIER_CACHE/agents`, as `scripts/agents` has it).
fn agents_cache() -> PathBuf {
    std::env::var_os("ATELIER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/atelier"))
        .join("agents")
}

/// nspawn's read-only bind of the agents' cache at [`AGENTS_IN_BOX`], when there is a cache.
fn agents_bind() -> Vec<String> {
    let cache = agents_cache();
    if cache.is_dir() {
        vec![format!("--bind-ro={}:{AGENTS_IN_BOX}", cache.display())]
    } else {
        Vec::new()
    }
}

/// The real agent CLI `name` (`claude`, `opencode`, `pi`) that `scripts/agents install` put in
/// its cache (outside the checkout, keyed by its pin), as this machine sees it. A test that runs
/// it fails when it is missing; it never skips.
pub fn real_agent_on_host(name: &str) -> Result<PathBuf, String> {
    let output = Command::new("bash")
        .arg(repo_root().join("scripts/agents"))
        .args(["path", name])
        .output()
        .map_err(|e| format!("running scripts/agents: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "the real {name} is not installed; run: bash scripts/agents install ({})",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// [`real_agent_on_host`] as a box sees it, under [`AGENTS_IN_BOX`].
pub fn real_agent(name: &str) -> Result<String, String> {
    let host = real_agent_on_host(name)?;
    let cache = agents_cache();
    let inside = host.strip_prefix(&cache).map_err(|_| {
        format!(
            "{} is not in the agents' cache {}",
            host.display(),
            cache.display()
        )
    })?;
    Ok(Path::new(AGENTS_IN_BOX).join(inside).display().to_string())
}

/// The real Claude Code (see [`real_agent`]).
pub fn real_claude() -> Result<String, String> {
    real_agent("claude")
}

/// Where a journey box gets Atelier from.
#[derive(Debug, Clone)]
pub enum Atelier {
    /// The freshly built binaries and the repository's templates, copied to where the package
    /// installs them.
    Built,
    /// A Debian package, copied in as [`PACKAGE_IN_BOX`] for the script to install: nothing of
    /// Atelier is copied by hand.
    Package(PathBuf),
}

/// Where a box holds the package of [`Atelier::Package`].
pub const PACKAGE_IN_BOX: &str = "/root/atelier.deb";

/// Where `deploy/demo/journey.sh` reads the example declaration, the operator's setup and is
/// itself, inside a journey box.
pub const JOURNEY_IN_BOX: &str = "/root/journey.sh";

/// The Atelier binaries the demo's journey runs.
const JOURNEY_BINARIES: [&str; 7] = [
    "atelier-provision",
    "atelier-sited",
    "atelier-shim",
    "atelier-gate",
    "atelier-build",
    "atelierctl",
    "atelier-chatd",
];

/// A box ready for `deploy/demo/journey.sh` (at [`JOURNEY_IN_BOX`]): Atelier from `atelier`,
/// the example declaration and the operator's setup where the journey reads them, and its
/// TEST FIXTURES, which no package holds: the real Claude Code where the example declaration
/// says it is, the lab model standing in for its provider, and the CMS stand-in (the routes
/// chatd serves, and the Publication API the turn door's relay reaches).
pub fn journey_box(atelier: Atelier) -> Result<SystemdBox, BoxError> {
    let bins = built_binaries_dir()?;
    let claude = real_agent_on_host("claude").map_err(BoxError::MissingFixture)?;
    let sandbox = match atelier {
        Atelier::Built => SystemdBox::new()
            .install_binaries(&bins, &JOURNEY_BINARIES)
            .install_templates(),
        Atelier::Package(deb) => SystemdBox::new().copy(deb, PACKAGE_IN_BOX),
    };
    Ok(sandbox
        .timeout(Duration::from_secs(300))
        .copy(claude, "/usr/local/bin/claude")
        .copy(
            bins.join("atelier-lab-model"),
            "/usr/local/bin/atelier-lab-model",
        )
        .copy(
            bins.join("atelier-lab-cms"),
            "/usr/local/bin/atelier-lab-cms",
        )
        .copy(
            repo_root().join("deploy/examples/instance.json"),
            "/root/instance.example.json",
        )
        .copy(
            repo_root().join("deploy/examples/operator-setup.sh"),
            "/root/operator-setup.sh",
        )
        .copy(repo_root().join("deploy/demo/journey.sh"), JOURNEY_IN_BOX))
}
