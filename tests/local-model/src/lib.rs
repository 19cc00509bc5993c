//! TEST HARNESS: a real model server for one test — llama.cpp's OpenAI-compatible server
//! (llama-cpp-python) serving SmolLM2-135M-Instruct on a loopback port, installed in a cache
//! outside the checkout by `scripts/local-model install`, ready once `/v1/models` answers, and
//! stopped by its process id when the test drops it.
//!
//! A missing install is an error that says how to install, never a skip: the tests that use
//! this harness are meant to fail when the server cannot be built or started.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

/// How long a server may take to load the model and answer `/v1/models`.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a stopped server may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Ports can be taken between choosing one and the server binding it: tries before giving up.
const START_ATTEMPTS: usize = 3;

/// Why a server could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The venv or the model is not where `scripts/local-model install` puts them.
    NotInstalled(PathBuf),
    /// The server process could not be spawned, or exited, or never became ready.
    Failed {
        /// What went wrong.
        what: String,
        /// The server's own log, for the failure message.
        log: String,
    },
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NotInstalled(path) => write!(
                f,
                "the local model server is not installed ({} is missing); run: bash scripts/local-model install",
                path.display()
            ),
            StartError::Failed { what, log } => {
                write!(f, "the local model server {what}; its log:\n{log}")
            }
        }
    }
}

impl std::error::Error for StartError {}

/// Where `scripts/local-model install` put the server and the model.
#[derive(Clone, Debug)]
pub struct Install {
    /// The venv's python, which has `llama_cpp.server`.
    pub python: PathBuf,
    /// The SmolLM2-135M-Instruct GGUF.
    pub model: PathBuf,
}

impl Install {
    /// The install `scripts/local-model` made (it alone knows where), if it is complete.
    pub fn find() -> Result<Install, StartError> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/local-model");
        let listed = std::process::Command::new("bash")
            .arg(&script)
            .arg("paths")
            .output()
            .map_err(|_| StartError::NotInstalled(script.clone()))?;
        // The script lists an install only once its completion stamp is there.
        if !listed.status.success() {
            return Err(StartError::NotInstalled(script));
        }
        let listed = String::from_utf8_lossy(&listed.stdout);
        let path_of = |key: &str| {
            listed
                .lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
                .map(PathBuf::from)
                .ok_or_else(|| StartError::NotInstalled(script.clone()))
        };
        let install = Install {
            python: path_of("python")?,
            model: path_of("model")?,
        };
        for path in [&install.python, &install.model] {
            if !path.exists() {
                return Err(StartError::NotInstalled(path.clone()));
            }
        }
        Ok(install)
    }
}

/// A running server, stopped (SIGTERM, then SIGKILL) by its process id when dropped.
pub struct LocalModel {
    /// `http://127.0.0.1:<port>`, without `/v1`.
    pub base_url: String,
    /// The model id `/v1/models` lists.
    pub model_id: String,
    port: u16,
    child: Child,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl LocalModel {
    /// Starts a server on a free loopback port and waits until `/v1/models` lists its model.
    pub async fn start() -> Result<LocalModel, StartError> {
        let install = Install::find()?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port().map_err(|e| StartError::Failed {
                what: format!("got no free port: {e}"),
                log: String::new(),
            })?;
            match Self::start_once(&install, port).await {
                Ok(server) => return Ok(server),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| StartError::Failed {
            what: "was never tried".to_owned(),
            log: String::new(),
        }))
    }

    /// Starts a server on `port` (a restart where a killed one listened, say).
    pub async fn start_on_port(port: u16) -> Result<LocalModel, StartError> {
        Self::start_once(&Install::find()?, port).await
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    async fn start_once(install: &Install, port: u16) -> Result<LocalModel, StartError> {
        let failed = |what: String| StartError::Failed {
            what,
            log: String::new(),
        };
        let log_dir = tempfile::Builder::new()
            .prefix("atelier-local-model-")
            .tempdir()
            .map_err(|e| failed(format!("got no log directory: {e}")))?;
        let log = log_dir.path().join("server.log");
        let log_file =
            std::fs::File::create(&log).map_err(|e| failed(format!("got no log file: {e}")))?;
        let stderr = log_file
            .try_clone()
            .map_err(|e| failed(format!("got no log file: {e}")))?;
        let child = Command::new(&install.python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(&install.model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--n_ctx", "2048"])
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(stderr)
            .spawn()
            .map_err(|e| failed(format!("could not be spawned: {e}")))?;
        let mut server = LocalModel {
            base_url: format!("http://127.0.0.1:{port}"),
            model_id: String::new(),
            port,
            child,
            log,
            _log_dir: log_dir,
        };
        match server.wait_ready().await {
            Ok(model_id) => {
                server.model_id = model_id;
                Ok(server)
            }
            Err(what) => Err(StartError::Failed {
                what,
                log: server.log_text(),
            }),
        }
    }

    async fn wait_ready(&mut self) -> Result<String, String> {
        let client = reqwest::Client::new();
        let url = format!("{}/v1/models", self.base_url);
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited before it was ready ({status})"));
            }
            if let Ok(response) = client.get(&url).send().await {
                if response.status().is_success() {
                    let listed: serde_json::Value = response
                        .json()
                        .await
                        .map_err(|e| format!("answered /v1/models with no JSON: {e}"))?;
                    return listed
                        .pointer("/data/0/id")
                        .and_then(serde_json::Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| format!("listed no model: {listed}"));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("was not ready within {READY_TIMEOUT:?}"))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server with SIGKILL, as a crash would, and waits until it is gone.
    pub fn kill_9(&mut self) {
        self.signal(Signal::KILL);
        let _ = self.child.wait();
    }

    /// What the server has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: Signal) {
        let pid = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw);
        if let Some(pid) = pid {
            let _ = kill_process(pid, signal);
        }
    }
}

impl Drop for LocalModel {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        self.signal(Signal::TERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill_9();
    }
}

/// A loopback port free at the time of asking.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
