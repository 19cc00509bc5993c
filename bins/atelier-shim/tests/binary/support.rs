//! Starting the real shim binary over a socketpair and speaking real frames to it.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use atelier_proto::{encode, read_frame, Decoder, ExitRecord, Frame, FrameError, FrameKind};
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// The binary under test.
pub const SHIM: &str = env!("CARGO_BIN_EXE_atelier-shim");

/// How long any one frame may take before the test fails instead of hanging.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(20);

/// The `PATH` the wrappers (`unshare`, `bash`, `ip`, `perl`) are found on.
pub const TOOL_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// The test process's own network namespace identity (the "daemon's").
pub fn own_netns() -> String {
    std::fs::read_link("/proc/self/ns/net")
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// How a shim is started.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The shim's whole environment.
    pub env: BTreeMap<String, String>,
    /// `--unconfined`.
    pub unconfined: bool,
    /// A bash script run before the shim, which it must `exec "$@"` to start it; the shim's
    /// command line follows as `$@`. Run under `unshare --net` when `private_netns`.
    pub wrapper: Option<String>,
    /// Start the wrapper in a fresh network namespace.
    pub private_netns: bool,
}

impl Launch {
    /// An unconfined shim on `door` with workdir `workdir` and a HOME.
    pub fn unconfined(door: &str, workdir: &Path) -> Launch {
        Launch {
            env: base_env(door, workdir),
            unconfined: true,
            wrapper: None,
            private_netns: false,
        }
    }

    /// A confined shim on `door` in a fresh network namespace whose loopback is up.
    pub fn in_private_netns(door: &str, workdir: &Path) -> Launch {
        Launch {
            env: base_env(door, workdir),
            unconfined: false,
            wrapper: Some(r#"ip link set lo up && exec "$@""#.to_owned()),
            private_netns: true,
        }
    }

    /// Sets (or replaces) one variable of the shim's environment.
    pub fn with_env(mut self, key: &str, value: &str) -> Launch {
        self.env.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Removes one variable of the shim's environment.
    pub fn without_env(mut self, key: &str) -> Launch {
        self.env.remove(key);
        self
    }

    /// Starts the shim; the test holds the other end of its stdin/stdout.
    pub fn start(&self) -> Shim {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let theirs_out = theirs.try_clone().unwrap();
        let mut shim_args: Vec<String> = vec![SHIM.to_owned()];
        if self.unconfined {
            shim_args.push("--unconfined".to_owned());
        }
        let mut command = match (&self.wrapper, self.private_netns) {
            (None, false) => Command::new(&shim_args[0]),
            (wrapper, private) => {
                let script = wrapper.clone().unwrap_or_else(|| r#"exec "$@""#.to_owned());
                let mut command = if private {
                    let mut c = Command::new("unshare");
                    c.args(["--net", "bash"]);
                    c
                } else {
                    Command::new("bash")
                };
                command.args(["-c", &script, "wrapper"]);
                command.arg(&shim_args[0]);
                command
            }
        };
        command.args(&shim_args[1..]);
        let child = command
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::from(OwnedFd::from(theirs_out)))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        ours.set_nonblocking(true).unwrap();
        let (reader, writer) = UnixStream::from_std(ours).unwrap().into_split();
        Shim {
            child: Some(child),
            reader: Some(BufReader::new(reader)),
            writer: Some(writer),
            decoder: Decoder::new(),
        }
    }
}

/// The environment a door unit gives the shim, plus PATH for the wrappers.
fn base_env(door: &str, workdir: &Path) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("ATELIER_DOOR".to_owned(), door.to_owned()),
        (
            "ATELIER_UNIT_WORKDIR".to_owned(),
            workdir.display().to_string(),
        ),
        (
            "HOME".to_owned(),
            workdir.join("home").display().to_string(),
        ),
        ("PATH".to_owned(), TOOL_PATH.to_owned()),
    ])
}

/// A spec for `door` running `argv` with `env`, as JSON.
pub fn spec_json(door: &str, argv: &[&str], env: &[(&str, &str)], host_netns: &str) -> Value {
    let env: serde_json::Map<String, Value> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({"v": 1, "door": door, "argv": argv, "env": env, "hostNetns": host_netns})
}

/// A spec frame carrying `value`.
pub fn spec_frame(value: &Value) -> Frame {
    Frame::new(FrameKind::Spec, serde_json::to_vec(value).unwrap())
}

/// A started shim and the test's end of its connection.
pub struct Shim {
    child: Option<std::process::Child>,
    reader: Option<BufReader<OwnedReadHalf>>,
    writer: Option<OwnedWriteHalf>,
    decoder: Decoder,
}

/// Everything a run sent after the hello.
#[derive(Debug, Default)]
pub struct Transcript {
    /// Every frame in order, the exit record included.
    pub frames: Vec<Frame>,
    /// The `O` payloads concatenated.
    pub stdout: Vec<u8>,
    /// The `E` payloads concatenated.
    pub stderr: Vec<u8>,
    /// The exit record, if one came.
    pub exit: Option<ExitRecord>,
}

/// How the shim process ended.
#[derive(Debug)]
pub struct Ended {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it wrote to stderr.
    pub stderr: String,
}

impl Ended {
    /// The exit code (panics on a signal).
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("the shim died by a signal: {:?}", self.status))
    }

    /// stderr as lines.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }
}

impl Shim {
    /// The shim's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The next frame, `None` at the end of the connection. A shim that exits with bytes of
    /// ours unread ends the connection with a reset, which is an end like any other.
    pub async fn frame(&mut self) -> Option<Frame> {
        let read = tokio::time::timeout(
            FRAME_DEADLINE,
            read_frame(self.reader.as_mut().unwrap(), &mut self.decoder),
        )
        .await
        .expect("no frame within the deadline");
        match read {
            Ok(frame) => frame,
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("the shim sent something that is not frames: {e}"),
        }
    }

    /// Reads the hello and returns its JSON.
    pub async fn hello(&mut self) -> Value {
        let frame = self.frame().await.expect("no hello");
        assert_eq!(frame.kind, FrameKind::Hello, "first frame");
        serde_json::from_slice(&frame.payload).unwrap()
    }

    /// Writes raw bytes to the shim.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let writer = self.writer.as_mut().unwrap();
        writer.write_all(bytes).await.unwrap();
        writer.flush().await.unwrap();
    }

    /// Sends one frame.
    pub async fn send(&mut self, frame: &Frame) {
        self.send_raw(&encode(frame).unwrap()).await;
    }

    /// Sends a spec.
    pub async fn send_spec(&mut self, spec: &Value) {
        self.send(&spec_frame(spec)).await;
    }

    /// Reads frames until the exit record or the end of the connection.
    pub async fn transcript(&mut self) -> Transcript {
        let mut transcript = Transcript::default();
        while let Some(frame) = self.frame().await {
            match frame.kind {
                FrameKind::Stdout => transcript.stdout.extend_from_slice(&frame.payload),
                FrameKind::Stderr => transcript.stderr.extend_from_slice(&frame.payload),
                FrameKind::Exit => {
                    transcript.exit = Some(ExitRecord::from_frame(&frame).unwrap());
                    transcript.frames.push(frame);
                    break;
                }
                other => panic!("unexpected {other} frame"),
            }
            transcript.frames.push(frame);
        }
        transcript
    }

    /// Half-closes the test's writing side: the shim reads end of stream.
    pub async fn close_write(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            writer.shutdown().await.unwrap();
        }
    }

    /// Closes the test's end of the connection entirely and waits for the shim to exit.
    pub fn hang_up_and_wait(mut self) -> Ended {
        self.writer = None;
        self.reader = None;
        wait(self.child.take().unwrap())
    }

    /// Closes the test's end of the connection entirely without waiting.
    pub fn hang_up(&mut self) {
        self.writer = None;
        self.reader = None;
    }

    /// Waits for the shim to exit, keeping the connection open.
    pub fn wait(mut self) -> Ended {
        wait(self.child.take().unwrap())
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        // A failed assertion must not leave a shim (and its program) running.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait(child: std::process::Child) -> Ended {
    let output = child.wait_with_output().unwrap();
    Ended {
        status: output.status,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Returns true if and only if process `pid` is gone or a zombie (dead, not yet reaped by
/// whoever inherited it).
pub fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            // pid (comm) state ...; comm may contain spaces, so split after the last ')'.
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            state.is_some_and(|rest| rest.starts_with('Z') || rest.starts_with('X'))
        }
    }
}

/// Polls `condition` every 20 ms for up to `limit`; returns whether it became true.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}

/// A scratch directory with a workdir inside, removed at the end of the test.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A new scratch directory with `work/` and `work/home/`.
    pub fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work/home")).unwrap();
        Scratch { dir }
    }

    /// The workdir.
    pub fn workdir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// A path in the scratch directory (outside the workdir).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// `n` bytes of deterministic, incompressible-looking data (xorshift).
pub fn pseudo_random(n: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}
