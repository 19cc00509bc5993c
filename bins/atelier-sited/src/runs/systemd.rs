//! systemd confinement: a run is one `connect()` to the site's door socket, and PID 1 starts
//! the shim as the site's identity, in its own network namespace, with only that site's gate
//! sockets bound in. Nothing here starts a process; everything asked of PID 1 goes over D-Bus.
//!
//! Before the connect: PID 1 is new enough, the site's doors are idle (a leftover run is
//! stopped, and one that will not die quarantines the site until PID 1 reports it dead), and
//! what PID 1 LOADED for the door's socket, target and service is what Atelier renders — a
//! directive systemd ignored or a drop-in changed refuses the run, naming the property. After
//! the run: the site is free only once PID 1 reports the run's unit gone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_layout::names::{self, InstanceName, SiteOrdinal};
use atelier_proto::Door;
use atelier_systemd::{door_expectations, DoorFacts, Error as SystemdError, Signal, Systemd};
use tokio::net::UnixStream;
use tokio::sync::OnceCell;

use super::{Decisions, RunRefusal, RunTarget, TurnDirs};

/// How long a leftover or finished run may take to be gone before the site is quarantined.
const GONE_DEADLINE: Duration = Duration::from_secs(20);

/// What the door units of an instance were rendered from, as sited's settings state them.
#[derive(Debug, Clone)]
pub struct DoorSettings {
    /// The instance.
    pub instance: InstanceName,
    /// The declared sites' ordinals.
    pub identities: BTreeMap<String, SiteOrdinal>,
    /// The workspaces' root.
    pub sites_root: PathBuf,
    /// The agents' state root.
    pub agents_root: PathBuf,
    /// The instance's config directory (the site table's).
    pub config_dir: PathBuf,
    /// The shim the door units run.
    pub shim: PathBuf,
    /// Each door's ceiling in milliseconds: turn, build, git.
    pub ceilings_ms: [u64; 3],
}

/// The door sockets of one instance's declared sites, and PID 1 behind them.
#[derive(Debug, Clone)]
pub struct SystemdDoors {
    settings: Arc<DoorSettings>,
    bus: Arc<OnceCell<(Systemd, u32)>>,
}

impl SystemdDoors {
    /// The doors of the instance in `settings`.
    pub fn new(settings: DoorSettings) -> SystemdDoors {
        SystemdDoors {
            settings: Arc::new(settings),
            bus: Arc::new(OnceCell::new()),
        }
    }

    /// Site `slug`'s ordinal, or the refusal naming the missing identity.
    pub fn ordinal(&self, slug: &str) -> Result<SiteOrdinal, RunRefusal> {
        self.settings
            .identities
            .get(slug)
            .copied()
            .ok_or_else(|| RunRefusal::IdentityMissing(slug.to_owned()))
    }

    /// Site `slug`'s turn HOME's `stated/` and `state/`, bound into its turn unit at the same
    /// paths.
    pub(super) fn turn_dirs(&self, slug: &str) -> Result<TurnDirs, RunRefusal> {
        use atelier_layout::paths::{turn_home, turn_stated_dir, TURN_HOME_STATE_DIR};
        let k = self.ordinal(slug)?;
        let root = &self.settings.agents_root;
        Ok(TurnDirs {
            stated: turn_stated_dir(root, k),
            state: turn_home(root, k).join(TURN_HOME_STATE_DIR),
        })
    }

    /// PID 1 on the system bus and its release, checked against the floor once.
    async fn bus(&self) -> Result<&Systemd, RunRefusal> {
        let (systemd, _) = self
            .bus
            .get_or_try_init(|| async {
                let systemd = Systemd::system().await?;
                let version = systemd
                    .require_version(atelier_layout::paths::SYSTEMD_FLOOR)
                    .await?;
                Ok::<_, SystemdError>((systemd, version))
            })
            .await?;
        Ok(systemd)
    }

    fn version(&self) -> u32 {
        self.bus.get().map_or(0, |(_, v)| *v)
    }

    /// Admission, asked before a request holds the site or answers: PID 1 is new enough, the
    /// site's identity, the shim and a turn's HOME are what the provisioner made, and the door
    /// PID 1 loaded is the rendered one. Nothing is stopped or started: a run of the site
    /// that is live now is the hold's to refuse. [`open`](Self::open) asks it all again.
    pub(super) async fn admit(&self, slug: &str, door: Door) -> Result<(), RunRefusal> {
        let k = self.ordinal(slug)?;
        self.bus().await?;
        self.host_checks(k, door)?;
        self.conform(slug, k, door).await
    }

    /// The host checks, the site idle and its door as rendered, the subscription to the
    /// gate's decisions for a door with a way out, then one `connect()` to the door's socket,
    /// never retried.
    pub(super) async fn open(
        &self,
        target: &RunTarget,
        door: Door,
    ) -> Result<(UnixStream, Option<Decisions>), RunRefusal> {
        let k = self.ordinal(&target.slug)?;
        self.host_checks(k, door)?;
        self.ensure_idle(&target.slug, k).await?;
        self.conform(&target.slug, k, door).await?;
        // Before the connect: the program must not make a decision nobody is listening for.
        let decisions = if door.has_way_out() {
            let path =
                atelier_layout::paths::gate_decisions_socket_path(&self.settings.instance, k);
            let decisions = Decisions::subscribe(&path, door)
                .await
                .map_err(|why| RunRefusal::Unavailable(format!("the site's gate: {why}")))?;
            Some(decisions)
        } else {
            None
        };
        let path = atelier_layout::paths::door_socket_path(&self.settings.instance, k, door);
        let stream = UnixStream::connect(&path)
            .await
            .map_err(|e| RunRefusal::UnitRefused {
                door,
                detail: format!("connecting to {}: {e}", path.display()),
            })?;
        // The instant a run begins for PID 1 (the agent benchmark times from this line).
        tracing::debug!(site = %target.slug, door = door.as_str(), "connected to the door");
        Ok((stream, decisions))
    }

    /// The site's identity is exactly what the provisioner made, the shim is root's and
    /// writable by no one else, and a turn's HOME has the provisioner's shape; read afresh for
    /// every run.
    fn host_checks(&self, k: SiteOrdinal, door: Door) -> Result<(), RunRefusal> {
        let inst = &self.settings.instance;
        let identity = names::site_identity(inst, k);
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map_err(|e| RunRefusal::Unavailable(format!("reading {path}: {e}")))
        };
        let passwd = atelier_layout::accounts::parse_passwd(&read("/etc/passwd")?);
        let groups = atelier_layout::accounts::parse_group(&read("/etc/group")?);
        super::host::check_identity(
            &passwd,
            &groups,
            &identity,
            &names::service_group(inst),
            &names::service_user(inst),
        )
        .map_err(RunRefusal::Unavailable)?;
        super::host::check_root_owned(&self.settings.shim).map_err(RunRefusal::Unavailable)?;
        if door == Door::Turn {
            let uid = passwd
                .iter()
                .find(|entry| entry.name == identity)
                .map(|entry| entry.uid)
                .ok_or_else(|| {
                    RunRefusal::Unavailable(format!("{identity} is not in /etc/passwd"))
                })?;
            if let Some(home) =
                atelier_layout::paths::agent_home(&self.settings.agents_root, k, Door::Turn)
            {
                let daemon = rustix::process::geteuid().as_raw();
                super::host::check_turn_home(&home, uid, daemon)
                    .map_err(|why| RunRefusal::Nonconformant(format!("the turn HOME: {why}")))?;
            }
        }
        Ok(())
    }

    /// PID 1 reports no run of the site's doors alive, counting a stopped unit with processes
    /// left in its cgroup as alive; a leftover is stopped and waited for, and one that will not
    /// die quarantines the site.
    pub async fn ensure_idle(&self, slug: &str, k: SiteOrdinal) -> Result<(), RunRefusal> {
        let systemd = self.bus().await?;
        let patterns: Vec<String> = Door::ALL
            .iter()
            .map(|&d| {
                format!(
                    "{}*.service",
                    names::door_service_instance_stem(&self.settings.instance, k, d)
                )
            })
            .collect();
        let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
        let live: Vec<String> = systemd
            .live_units(&patterns)
            .await?
            .into_iter()
            .map(|u| u.name)
            .collect();
        for unit in &live {
            tracing::warn!(site = %slug, unit, "stopping a leftover run of the site");
            if let Err(e) = systemd.stop(unit).await {
                tracing::warn!(site = %slug, unit, error = %e, "stopping the leftover failed");
            }
        }
        let deadline = Instant::now() + GONE_DEADLINE;
        for unit in &live {
            if let Err(e) = systemd.wait_gone(unit, deadline).await {
                return Err(self.quarantine(slug, unit, e).await);
            }
        }
        Ok(())
    }

    async fn quarantine(&self, slug: &str, unit: &str, error: SystemdError) -> RunRefusal {
        // Every later run of the site asks PID 1 again, so the quarantine lasts exactly as long
        // as the unit does.
        tracing::error!(site = %slug, unit, error = %error, "a run of the site will not die; the site is quarantined until PID 1 reports it gone");
        if let Ok(systemd) = self.bus().await {
            let _ = systemd.kill(unit, Signal::KILL).await;
        }
        RunRefusal::Quarantined {
            slug: slug.to_owned(),
            unit: unit.to_owned(),
        }
    }

    /// The door's socket, target and service as PID 1 loaded them equal what Atelier renders.
    async fn conform(&self, slug: &str, k: SiteOrdinal, door: Door) -> Result<(), RunRefusal> {
        let systemd = self.bus().await?;
        let s = &self.settings;
        let facts = DoorFacts {
            instance: s.instance.clone(),
            site: k,
            slug: slug.to_owned(),
            door,
            sites_root: s.sites_root.clone(),
            agents_root: s.agents_root.clone(),
            config_dir: s.config_dir.clone(),
            shim: s.shim.clone(),
            ceiling_ms: s.ceilings_ms[door_index(door)],
            systemd_version: self.version(),
        };
        // Read at once and judged in order: the refusal is the one a unit-by-unit check gives.
        systemd
            .conform_door(&door_expectations(&facts))
            .await
            .map_err(RunRefusal::from)
    }

    /// After a run: returns once PID 1 reports the run's unit gone; a unit that will not go
    /// is killed and its site quarantined.
    pub(super) async fn wait_gone(&self, slug: &str, unit: &str) {
        let Ok(systemd) = self.bus().await else {
            return;
        };
        if let Err(e) = systemd
            .wait_gone(unit, Instant::now() + GONE_DEADLINE)
            .await
        {
            let _ = self.quarantine(slug, unit, e).await;
        }
    }

    /// After boot, in the background: every declared site's doors are asked what a run's
    /// admission asks, and each refusal is logged at error priority, so a door that no longer
    /// conforms (a drop-in, a group given to an identity, a systemd upgraded past what apply
    /// rendered) is in the journal from the start, not only at its first run. Returns how many
    /// doors refused.
    pub async fn boot_check(&self) -> usize {
        let mut refused = 0;
        for (slug, _) in self.settings.identities.clone() {
            for door in Door::ALL {
                if let Err(refusal) = self.admit(&slug, door).await {
                    tracing::error!(
                        site = %slug,
                        door = door.as_str(),
                        "boot check: {refusal}; every {} run of the site is refused until this \
                         is mended",
                        door.as_str()
                    );
                    refused += 1;
                }
            }
        }
        refused
    }

    /// Boot reconciliation: every declared site's leftover runs are stopped before sited
    /// listens; a site whose leftover will not die stays quarantined.
    pub async fn reconcile(&self) -> usize {
        let mut quarantined = 0;
        for (slug, k) in self.settings.identities.clone() {
            match self.ensure_idle(&slug, k).await {
                Ok(()) => {}
                Err(e) => {
                    tracing::error!(site = %slug, "boot reconciliation: {e}");
                    quarantined += 1;
                }
            }
        }
        quarantined
    }
}

fn door_index(door: Door) -> usize {
    match door {
        Door::Turn => 0,
        Door::Build => 1,
        Door::Git => 2,
    }
}
