//! The `none`-mode spawner: sited starts `atelier-shim --unconfined` itself, its stdin and
//! stdout one end of a socketpair, with the environment the door's unit would give it.
//!
//! This is the only place in sited that starts a process (a test in `tests/` enforces it).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use atelier_fs::Root;
use atelier_layout::services::{DOOR_ENV, GIT_DOOR_ENV, WORKDIR_ENV};
use atelier_proto::Door;
use tokio::net::UnixStream;

use super::{RunRefusal, RunTarget, TurnDirs};

/// The mode of an unconfined door's HOME: the daemon's own, nobody else's.
const HOME_MODE: u32 = 0o700;

/// Spawns the shim for unconfined runs.
#[derive(Debug, Clone)]
pub struct NoneSpawner {
    shim: PathBuf,
    homes: PathBuf,
}

impl NoneSpawner {
    /// Runs `shim` (an absolute path) with each site's door HOMEs under `homes`
    /// (`<agent state root>/unconfined`, created on first use).
    pub fn new(shim: impl Into<PathBuf>, homes: impl Into<PathBuf>) -> NoneSpawner {
        NoneSpawner {
            shim: shim.into(),
            homes: homes.into(),
        }
    }

    /// The shim binary.
    pub fn shim(&self) -> &Path {
        &self.shim
    }

    /// Starts the shim for one run through `door` of `target`'s site and returns sited's end
    /// of the connection and the shim process.
    pub(super) fn open(
        &self,
        target: &RunTarget,
        door: Door,
    ) -> Result<(UnixStream, Option<tokio::process::Child>), RunRefusal> {
        let unavailable =
            |what: &str, e: &dyn std::fmt::Display| RunRefusal::Unavailable(format!("{what}: {e}"));
        let mut env: Vec<(String, String)> = vec![
            (DOOR_ENV.to_owned(), door.as_str().to_owned()),
            (
                WORKDIR_ENV.to_owned(),
                target.workspace.to_string_lossy().into_owned(),
            ),
        ];
        match door {
            Door::Git => env.extend(
                GIT_DOOR_ENV
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            ),
            Door::Turn | Door::Build => {
                let home = self
                    .home(&target.slug, door)
                    .map_err(|e| unavailable("the door's HOME", &e))?;
                env.push(("HOME".to_owned(), home.to_string_lossy().into_owned()));
            }
        }
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|e| unavailable("a socketpair", &e))?;
        let theirs_out = theirs
            .try_clone()
            .map_err(|e| unavailable("a socketpair", &e))?;
        let shim = tokio::process::Command::new(&self.shim)
            .arg("--unconfined")
            .env_clear()
            .envs(env)
            .current_dir("/")
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::from(OwnedFd::from(theirs_out)))
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| unavailable(&format!("starting {}", self.shim.display()), &e))?;
        ours.set_nonblocking(true)
            .map_err(|e| unavailable("a socketpair", &e))?;
        let ours = UnixStream::from_std(ours).map_err(|e| unavailable("a socketpair", &e))?;
        Ok((ours, Some(shim)))
    }

    /// The turn HOME's `stated/` and `state/`, made on first use (the daemon's own: under
    /// `none` the agent runs as the daemon's user, so no uid keeps it out of either).
    pub(super) fn turn_dirs(&self, slug: &str) -> Result<TurnDirs, RunRefusal> {
        use atelier_layout::paths::{TURN_HOME_STATED_DIR, TURN_HOME_STATE_DIR};
        let unavailable = |e: atelier_fs::FsError| {
            RunRefusal::Unavailable(format!("the unconfined turn HOME: {e}"))
        };
        let home = self.home(slug, Door::Turn).map_err(unavailable)?;
        let root = Root::open(&home).map_err(unavailable)?;
        for dir in [TURN_HOME_STATED_DIR, TURN_HOME_STATE_DIR] {
            root.create_dir_all(dir, HOME_MODE).map_err(unavailable)?;
        }
        Ok(TurnDirs {
            stated: home.join(TURN_HOME_STATED_DIR),
            state: home.join(TURN_HOME_STATE_DIR),
        })
    }

    /// `<homes>/<slug>/<door>`, made on first use.
    fn home(&self, slug: &str, door: Door) -> Result<PathBuf, atelier_fs::FsError> {
        let homes = Root::open(&self.homes)?;
        let rel = Path::new(slug).join(door.as_str());
        homes.create_dir_all(&rel, HOME_MODE)?;
        Ok(self.homes.join(rel))
    }
}
