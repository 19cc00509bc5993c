//! The agent drivers as sited runs them: which CLIs are configured, what `/health` says of
//! them, each binary's probe (its `--version` and `--help`, asked through the site's turn door
//! and cached per binary file), and a turn's plan from `atelier-agents`.
//!
//! sited starts nothing to find out about a CLI: `/health` reports a configured, executable
//! binary as available and a version once a probe has read one.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use atelier_agents::{DriverId, ProbeRefusal};
use atelier_proto::Door;

use crate::runs::{base_env, RunRefusal, RunSpec, RunTarget, Runner};

/// How long one probe question may take before the answer is "unproved".
const PROBE_DEADLINE: Duration = Duration::from_secs(10);
/// [`PROBE_DEADLINE`] for opencode: a single-file Bun binary of ~150 MB that opens (and on first use
/// creates and migrates) its database for every question, in a freshly started unit — seen
/// past 10 s once on a loaded 2-core CI host, where a refusal "unproved" only delays the turn.
const OPENCODE_PROBE_DEADLINE: Duration = Duration::from_secs(30);
/// How long the canary probe (four questions of opencode and the scratch tree) may take.
const CANARY_DEADLINE: Duration = Duration::from_secs(60);
/// The canary probe's scratch tree below the CLI's state.
const CANARY_SCRATCH: &str = "canary-probe";
/// The most of a probe's output read.
const PROBE_OUTPUT_LIMIT: usize = 1024 * 1024;
/// The `PATH` every agent run gets.
pub const AGENT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub use atelier_site_api::DriverAvailability;

/// Why a driver may not run a turn; each is a `confinement.*` refusal.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// The CLI is missing, not configured, or lacks a flag the turn needs; or (opencode) its
    /// database holds a console account.
    #[error("the {driver} driver cannot run a turn: {why}")]
    Unsupported {
        /// The driver.
        driver: &'static str,
        /// Why (for the log).
        why: String,
    },
    /// The probe could not finish; asked again next time.
    #[error("the {driver} CLI could not be probed: {why}")]
    Unproved {
        /// The driver.
        driver: &'static str,
        /// Why.
        why: String,
    },
    /// The run seam refused the probe.
    #[error(transparent)]
    Run(#[from] RunRefusal),
}

/// Identifies a binary's file, so a replaced binary is probed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

#[derive(Debug, Clone)]
struct Probe {
    file: FileId,
    answer: Result<String, String>,
}

/// The configured drivers and their probes; shared by every request.
#[derive(Debug, Clone)]
pub struct Drivers {
    inner: Arc<DriversState>,
}

#[derive(Debug)]
struct DriversState {
    bins: HashMap<DriverId, PathBuf>,
    default: DriverId,
    probes: Mutex<HashMap<PathBuf, Probe>>,
}

impl Drivers {
    /// The drivers whose binaries are `bins`, with `default` the instance's default.
    pub fn new(bins: impl IntoIterator<Item = (DriverId, PathBuf)>, default: DriverId) -> Drivers {
        Drivers {
            inner: Arc::new(DriversState {
                bins: bins.into_iter().collect(),
                default,
                probes: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The binary configured for `driver`.
    pub fn bin(&self, driver: DriverId) -> Option<&Path> {
        self.inner.bins.get(&driver).map(PathBuf::as_path)
    }

    /// Every driver the contract knows, in its order, as `/health` reports them: available
    /// when the binary is configured, is an executable file and no probe of this very file
    /// refused it.
    pub fn availability(&self) -> Vec<DriverAvailability> {
        DriverId::ALL
            .iter()
            .map(|&driver| {
                let (available, version) = match self.bin(driver) {
                    Some(bin) if is_executable_file(bin) => match self.cached(bin) {
                        Some(Err(_)) => (false, None),
                        Some(Ok(version)) => (true, Some(version)),
                        None => (true, None),
                    },
                    _ => (false, None),
                };
                DriverAvailability {
                    id: driver,
                    available,
                    version,
                    is_default: driver == self.inner.default,
                }
            })
            .collect()
    }

    fn cached(&self, bin: &Path) -> Option<Result<String, String>> {
        let file = file_id(bin)?;
        let probes = self
            .inner
            .probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        probes
            .get(bin)
            .filter(|probe| probe.file == file)
            .map(|probe| probe.answer.clone())
    }

    /// Admits `driver` for a turn of `target`'s site, which the caller holds: the binary must
    /// be configured, and its probe (cached per binary file) must find the version and every
    /// flag the turn uses; for opencode, the turn's database must hold no console account (asked
    /// every time: it is the turn's own state). Returns the binary.
    pub async fn admit(
        &self,
        runner: &Runner,
        target: &RunTarget,
        driver: DriverId,
    ) -> Result<PathBuf, AdmitError> {
        let unsupported = |why: String| AdmitError::Unsupported {
            driver: driver.as_str(),
            why,
        };
        let bin = self
            .bin(driver)
            .ok_or_else(|| unsupported("no binary is configured".to_owned()))?
            .to_path_buf();
        let file = file_id(&bin)
            .filter(|_| is_executable_file(&bin))
            .ok_or_else(|| unsupported(format!("{} is not an executable file", bin.display())))?;
        let answer = match self.cached(&bin) {
            Some(answer) => answer,
            None => {
                let answer = self.probe(runner, target, driver, &bin).await?;
                self.inner
                    .probes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(
                        bin.clone(),
                        Probe {
                            file,
                            answer: answer.clone(),
                        },
                    );
                answer
            }
        };
        answer.map_err(unsupported)?;
        if driver == DriverId::Opencode {
            let (stdout, _) = ask(
                runner,
                target,
                driver,
                atelier_agents::opencode_accounts_argv(&bin),
                question_deadline(driver),
            )
            .await?;
            atelier_agents::judge_opencode_accounts(&stdout)
                .map_err(|refusal| unsupported(describe(&refusal)))?;
        }
        Ok(bin)
    }

    /// Asks the binary its version and its help through the turn door, and for opencode runs
    /// the canary probe. `Ok(Err)` is a definitive refusal (cached); `Err` means nothing was
    /// proved.
    async fn probe(
        &self,
        runner: &Runner,
        target: &RunTarget,
        driver: DriverId,
        bin: &Path,
    ) -> Result<Result<String, String>, AdmitError> {
        // Some CLIs print their version (pi) or help (yargs) on stderr.
        let (stdout, stderr) = ask(
            runner,
            target,
            driver,
            atelier_agents::version_argv(driver, bin),
            question_deadline(driver),
        )
        .await?;
        let version = format!("{stdout}\n{stderr}");
        let version = match atelier_agents::judge_version(driver, &version) {
            Ok(version) => version,
            Err(refusal) => return Ok(Err(describe(&refusal))),
        };
        let (stdout, stderr) = ask(
            runner,
            target,
            driver,
            atelier_agents::help_argv(driver, bin),
            question_deadline(driver),
        )
        .await?;
        let help = format!("{stdout}\n{stderr}");
        if let Err(refusal) = atelier_agents::judge_help(driver, &help) {
            return Ok(Err(describe(&refusal)));
        }
        if driver == DriverId::Opencode {
            if let Err(refusal) = canary_probe(runner, target, bin).await? {
                return Ok(Err(describe(&refusal)));
            }
        }
        Ok(Ok(version))
    }
}

/// opencode's canary probe through the turn door, in a scratch tree under the CLI's state:
/// `Ok(Err)` names the source the turn's switches do not close (or that the control could not
/// see); a probe that did not finish is unproved.
async fn canary_probe(
    runner: &Runner,
    target: &RunTarget,
    bin: &Path,
) -> Result<Result<(), ProbeRefusal>, AdmitError> {
    let unproved = |why: String| AdmitError::Unproved {
        driver: DriverId::Opencode.as_str(),
        why,
    };
    let tokens = random_tokens().map_err(|e| unproved(format!("random tokens: {e}")))?;
    let probe = atelier_agents::CanaryProbe::new(tokens);
    let scratch = runner.turn_dirs(&target.slug)?.state.join(CANARY_SCRATCH);
    let (stdout, _) = ask(
        runner,
        target,
        DriverId::Opencode,
        probe.argv(bin, &scratch),
        CANARY_DEADLINE,
    )
    .await?;
    match probe.judge(&stdout) {
        Err(ProbeRefusal::CanaryUnproved(why)) => Err(unproved(why)),
        Err(refusal) => {
            tracing::warn!(site = %target.slug, bin = %bin.display(), "the opencode canary probe refused the binary: {refusal}");
            Ok(Err(refusal))
        }
        Ok(()) => {
            let sources: Vec<&str> = atelier_agents::canary::Source::ALL
                .iter()
                .map(|s| s.as_str())
                .collect();
            tracing::info!(site = %target.slug, bin = %bin.display(), "the opencode canary probe passed: the control saw a canary in each of {}; a turn's restriction saw none", sources.join(", "));
            Ok(Ok(()))
        }
    }
}

/// Four distinct random tokens, each a fresh random id.
fn random_tokens() -> std::io::Result<[String; 4]> {
    let mut tokens: [String; 4] = Default::default();
    for token in &mut tokens {
        *token = format!(
            "canary-{}",
            crate::session_log::SessionId::new_v4()?.as_str()
        );
    }
    Ok(tokens)
}

fn describe(refusal: &ProbeRefusal) -> String {
    refusal.to_string()
}

/// How long one question of `driver` (its version, its help, opencode's database) may take.
fn question_deadline(driver: DriverId) -> Duration {
    match driver {
        DriverId::Opencode => OPENCODE_PROBE_DEADLINE,
        DriverId::ClaudeCode | DriverId::Pi | DriverId::Atelier => PROBE_DEADLINE,
    }
}

/// Runs one probe question and returns what it printed: stdout and stderr.
async fn ask(
    runner: &Runner,
    target: &RunTarget,
    driver: DriverId,
    argv: Vec<String>,
    deadline: Duration,
) -> Result<(String, String), AdmitError> {
    let state = runner.turn_dirs(&target.slug)?.state;
    let mut env = base_env(AGENT_PATH);
    env.extend(atelier_agents::probe_env(driver, &state));
    let spec = RunSpec {
        door: Door::Turn,
        argv,
        env,
        stdin: None,
    };
    let output = runner
        .collect(target, spec, PROBE_OUTPUT_LIMIT, deadline)
        .await?;
    match output.end {
        Ok(_) => Ok((
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )),
        Err(why) => Err(AdmitError::Unproved {
            driver: driver.as_str(),
            why,
        }),
    }
}

fn file_id(bin: &Path) -> Option<FileId> {
    let meta = std::fs::metadata(bin).ok()?;
    Some(FileId {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime: meta.mtime(),
        mtime_nsec: meta.mtime_nsec(),
    })
}

fn is_executable_file(bin: &Path) -> bool {
    std::fs::metadata(bin)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
