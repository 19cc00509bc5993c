//! What the end-to-end tests share: the workspace's binaries, an instance rendered by the real
//! provisioner and served by sited's real binary ([`instance`]), a recording proxy in front of
//! sited's socket ([`proxy`]), and the helpers that drive turns and builds through
//! `atelier-site-client` ([`journey`]). The real nginx on the rendered vhosts comes from
//! `atelier-test-support`.

pub mod instance;
pub mod journey;
pub mod proxy;

use std::path::Path;
use std::time::{Duration, Instant};

pub use atelier_test_support::workspace::{bin as workspace_bin, templates_dir};

/// How long any one wait of a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// Polls `probe` every 20 ms until it returns `Some`, failing the test with `what` after
/// [`WAIT`].
pub async fn poll<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs git in `workspace` without any ambient configuration and returns its stdout.
pub fn git(workspace: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(workspace)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", "/nonexistent")
        .output()
        .expect("running git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("git's output is UTF-8")
}

/// Processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

/// What a run of the atelierctl binary printed and how it exited.
#[derive(Debug)]
pub struct Ctl {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ctl {
    /// The one line of JSON `--json` printed.
    pub fn json(&self) -> serde_json::Value {
        assert_eq!(self.code, 0, "atelierctl failed: {self:?}");
        assert_eq!(
            self.stdout.lines().count(),
            1,
            "--json prints one line: {self:?}"
        );
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

/// Runs the atelierctl binary with exactly `args`, in an empty environment, off the async
/// workers.
pub async fn ctl(args: Vec<String>) -> Ctl {
    let bin = workspace_bin("atelierctl");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args(&args)
            .env_clear()
            .output()
            .expect("running atelierctl")
    })
    .await
    .expect("the atelierctl runner");
    Ctl {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}
