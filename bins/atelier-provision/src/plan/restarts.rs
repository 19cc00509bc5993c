//! Restarts that follow what `apply` changed. sited reads its environment file, site table,
//! unit and credentials once, at start, and runs with the groups its user had then; a gate
//! reads its unit and its doors' plans once; each runs the binary that was installed when it
//! started (a package upgrade replaces it). A running daemon whose inputs changed after it
//! started (written by this plan, or by an earlier apply whose restart was deferred) is
//! restarted, so a site added to the declaration can run its first turn without a manual
//! step. A restart would cut off the runs the daemon serves (a turn's stream, a build's
//! tunnels), so while one is live the restart is deferred by name instead, and the plan keeps
//! deferring it (and `check` reports it) until an apply finds the runs ended.
//!
//! A host booted with systemd whose PID 1 could not say which daemons run and since when
//! (a failed `systemctl show`) proves nothing current: what the plan writes restarts its
//! daemons as usual, and every other daemon is deferred with that reason, so `check` reports
//! it instead of a clean host.
//!
//! While sited's restart is deferred it keeps holding every run's door to the units it was
//! built for. A changed door unit written then would have it refuse every new run of every
//! site as nonconformant until it restarts, so changed door units wait, named in the
//! deferral, for the apply that restarts sited, and are written in that same apply.

use std::collections::BTreeSet;
use std::path::PathBuf;

use atelier_layout::declaration::Site;
use atelier_layout::paths::Layout;
use atelier_layout::services;
use atelier_layout::{names, Door, SiteOrdinal};

use super::{argv, AccountStep, Action, Disposition, ExecStep, Phase, Planner};
use crate::host::ServiceState;

/// What a deferral names as live when systemd could not list the runs.
const LIVE_RUNS_UNKNOWN: &str = "(systemd could not list the live runs)";

/// Why a daemon none of whose inputs this plan writes is deferred when systemd could not say
/// whether it runs or since when: it may run with inputs an earlier apply changed.
const STATE_UNKNOWN: &str = "systemd could not say whether it runs or when it started, so \
                             whether it read what is declared is unknown";

/// One daemon the plan looks at.
struct Daemon {
    /// Its service unit.
    unit: String,
    /// The files it reads at start.
    inputs: Vec<PathBuf>,
    /// Whether the groups of the instance's service user matter (sited runs as it).
    runs_as_service_user: bool,
    /// The runs a restart would cut off: those of every site for sited, of its own site for a
    /// gate.
    serves: Vec<String>,
}

impl Planner<'_> {
    /// Restarts every running daemon whose inputs changed since it started, or defers it by
    /// name while the runs it serves are live.
    pub(super) fn restarts(&mut self, written: &BTreeSet<PathBuf>) {
        let mut restart = Vec::new();
        let sited = names::sited_service_unit(self.input.layout.instance());
        for daemon in daemons(self.input.layout, &self.input.sites()) {
            let Some(why) = self.stale(&daemon, written) else {
                if self.state_unknown(&daemon) {
                    // Not restarted blind (it may be current, and a restart cuts off what it
                    // serves), but not taken for current either: `check` reports it.
                    self.actions.push(Action::DeferRestart {
                        unit: daemon.unit,
                        because: STATE_UNKNOWN.to_owned(),
                        live: Vec::new(),
                        held: Vec::new(),
                    });
                }
                continue;
            };
            let live = self.live_runs_of(&daemon);
            if live.is_empty() {
                restart.push(daemon.unit);
            } else {
                let held = if daemon.unit == sited {
                    std::mem::take(&mut self.held_door_units)
                } else {
                    Vec::new()
                };
                self.actions.push(Action::DeferRestart {
                    unit: daemon.unit,
                    because: why,
                    live,
                    held,
                });
            }
        }
        if !restart.is_empty() {
            // try-restart: a daemon that stopped meanwhile reads the new inputs when it is
            // next started by its socket.
            let mut command = argv(&["systemctl", "try-restart"]);
            command.extend(restart);
            self.actions.push(Action::Exec {
                step: ExecStep::RestartServices,
                argv: command,
            });
        }
    }

    /// Leaves out of the plan every rewrite of a door unit of a declared site while sited's
    /// restart is to be deferred (see the module's note); [`Planner::restarts`] names them.
    pub(super) fn hold_back_door_units(&mut self, written: &mut BTreeSet<PathBuf>) {
        let layout = self.input.layout;
        let sites = self.input.sites();
        let sited_unit = names::sited_service_unit(layout.instance());
        let Some(sited) = daemons(layout, &sites)
            .into_iter()
            .find(|d| d.unit == sited_unit)
        else {
            return;
        };
        if self.stale(&sited, written).is_none() || self.live_runs_of(&sited).is_empty() {
            return;
        }
        let inst = layout.instance();
        let doors: BTreeSet<PathBuf> = sites
            .iter()
            .flat_map(|&(k, _)| Door::ALL.into_iter().map(move |door| (k, door)))
            .flat_map(|(k, door)| names::door_unit_files(inst, k, door))
            .map(|unit| layout.unit_path(&unit))
            .collect();
        let mut held = Vec::new();
        self.actions.retain(|action| match action {
            Action::File {
                phase: Phase::Artifact,
                disposition: Disposition::Rewrite,
                path,
                ..
            } if doors.contains(path) => {
                held.push(path.clone());
                false
            }
            _ => true,
        });
        for path in &held {
            written.remove(path);
        }
        self.held_door_units = held;
    }

    /// The live runs a restart of `daemon` would cut off; when systemd could not list them,
    /// a placeholder that says so, as any run it serves may be live.
    fn live_runs_of(&self, daemon: &Daemon) -> Vec<String> {
        if self.input.host.live_runs_unknown && !daemon.serves.is_empty() {
            return vec![LIVE_RUNS_UNKNOWN.to_owned()];
        }
        self.input
            .host
            .live_runs
            .iter()
            .filter(|run| {
                daemon
                    .serves
                    .iter()
                    .any(|stem| names::is_door_run(run, stem))
            })
            .cloned()
            .collect()
    }

    /// Whether systemd could not say how `daemon` runs.
    fn state_unknown(&self, daemon: &Daemon) -> bool {
        let host = self.input.host;
        host.services_unknown && !host.services.contains_key(&daemon.unit)
    }

    /// Why a running `daemon` must restart, or `None` if it runs with what is declared. One
    /// whose state systemd could not give is taken to be running since an unknown time: what
    /// this plan writes restarts it (`try-restart` leaves a stopped one stopped).
    fn stale(&self, daemon: &Daemon, written: &BTreeSet<PathBuf>) -> Option<String> {
        let unknown = ServiceState::default();
        let state = match self.input.host.services.get(&daemon.unit) {
            Some(state) => state,
            None if self.state_unknown(daemon) => &unknown,
            None => return None,
        };
        let mut why = Vec::new();
        for input in &daemon.inputs {
            let changed_now = written.contains(input);
            let changed_since = match (self.observed(input), state.started_ns) {
                (Some(seen), Some(started)) => seen.changed_ns > started,
                _ => false,
            };
            if changed_now || changed_since {
                why.push(input.display().to_string());
            }
        }
        if daemon.runs_as_service_user && self.memberships_changed(state.groups.as_ref()) {
            why.push("the service user's groups".to_owned());
        }
        (!why.is_empty()).then(|| format!("changed since it started: {}", why.join(", ")))
    }

    /// Whether the service user gains a group in this plan, or its groups differ from those
    /// its running process has.
    fn memberships_changed(&self, running: Option<&BTreeSet<u32>>) -> bool {
        let user = self.input.layout.service_user();
        let planned = self.actions.iter().any(|a| {
            matches!(a, Action::Account { step: AccountStep::AddMember, argv, .. }
                if argv.get(2) == Some(&user))
        });
        let accounts = &self.input.host.accounts;
        let declared = accounts.user(&user).map(|entry| {
            let mut gids: BTreeSet<u32> = accounts
                .groups
                .iter()
                .filter(|g| g.members.contains(&user))
                .map(|g| g.gid)
                .collect();
            gids.insert(entry.gid);
            gids
        });
        let differs = match (running, declared) {
            (Some(running), Some(declared)) => {
                let primary = accounts.user(&user).map(|u| u.gid);
                let mut running = running.clone();
                running.extend(primary);
                running != declared
            }
            _ => false,
        };
        planned || differs
    }
}

/// The service units of the daemons a plan may restart: sited's, each site's gate's, chatd's.
pub fn daemon_units(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Vec<String> {
    daemons(layout, sites).into_iter().map(|d| d.unit).collect()
}

/// Every file a daemon reads at start, for the observer.
pub fn daemon_inputs(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Vec<PathBuf> {
    daemons(layout, sites)
        .into_iter()
        .flat_map(|d| d.inputs)
        .collect()
}

/// The stems of every declared site's doors (`atelier-<inst>-s<k>-<door>`), whose running
/// instances are the live runs.
pub fn run_stems(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Vec<String> {
    sites
        .iter()
        .flat_map(|&(k, _)| site_run_stems(layout, k))
        .collect()
}

/// Site `k`'s door stems.
fn site_run_stems(layout: &Layout<'_>, k: SiteOrdinal) -> Vec<String> {
    Door::ALL
        .into_iter()
        .map(|door| names::door_unit_stem(layout.instance(), k, door))
        .collect()
}

/// sited, then each site's gate, then the chat runtime when one is declared.
fn daemons(layout: &Layout<'_>, sites: &[(SiteOrdinal, &Site)]) -> Vec<Daemon> {
    let inst = layout.instance();
    let sited_unit = names::sited_service_unit(inst);
    let mut sited_inputs = vec![
        layout.bin_path(services::SITED_BINARY),
        layout.env_file(),
        layout.site_table_path(),
        layout.unit_path(&sited_unit),
    ];
    sited_inputs.extend(layout.sited_credential_sources().into_values());
    let mut daemons = vec![Daemon {
        unit: sited_unit,
        inputs: sited_inputs,
        runs_as_service_user: true,
        serves: run_stems(layout, sites),
    }];
    for &(k, _) in sites {
        let unit = names::gate_service_unit(inst, k);
        let mut inputs = vec![
            layout.bin_path(services::GATE_BINARY),
            layout.unit_path(&unit),
        ];
        inputs.extend(
            Door::ALL
                .into_iter()
                .filter_map(|door| layout.gate_plan_path(k, door)),
        );
        // Read once at start: a changed key reaches the relays only through a restart.
        inputs.extend(layout.gate_credential_sources().into_values());
        daemons.push(Daemon {
            unit,
            inputs,
            runs_as_service_user: false,
            serves: site_run_stems(layout, k),
        });
    }
    if layout.declaration().chat.is_some() {
        // chatd drains its turns when stopped; it serves no door run.
        let unit = names::chatd_service_unit(inst);
        let mut inputs = vec![
            layout.bin_path(services::CHATD_BINARY),
            layout.unit_path(&unit),
        ];
        inputs.extend(layout.chatd_credential_sources().into_values());
        daemons.push(Daemon {
            unit,
            inputs,
            runs_as_service_user: false,
            serves: Vec::new(),
        });
    }
    daemons
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use atelier_layout::paths::Layout;
    use atelier_layout::{names, Door, SiteOrdinal};

    use crate::artifact::{Artifact, ArtifactKind, CommentStyle};
    use crate::host::ServiceState;
    use crate::plan::tests::{argvs, Fixture};
    use crate::plan::Action;

    const SITED: &str = "atelier-sited@example.service";
    const GATE_1: &str = "atelier-example-s1-gate.service";
    const GATE_2: &str = "atelier-example-s2-gate.service";
    const CHATD: &str = "atelier-chatd@example.service";

    /// A fixture whose artifacts include sited's env file (naming `slugs`) and site 1's turn
    /// plan (listing `hosts`), converged, with sited and site 1's gate running since after
    /// every file was written.
    fn running(slugs: &[&str], hosts: &str) -> Fixture {
        let mut f = Fixture::new(slugs);
        declare_inputs(&mut f, hosts);
        f.converge();
        for unit in [SITED, GATE_1] {
            let state = ServiceState {
                started_ns: Some(100),
                groups: None,
            };
            f.host.services.insert(unit.to_owned(), state);
        }
        f
    }

    fn declare_inputs(f: &mut Fixture, hosts: &str) {
        let layout = Layout::new(&f.decl);
        let slugs: Vec<&str> = f.decl.sites.iter().map(|s| s.slug.as_str()).collect();
        let k1 = SiteOrdinal::new(1).unwrap();
        let artifact = |path, kind, body: String| {
            Artifact::new(
                path,
                "example",
                kind,
                CommentStyle::Hash,
                ("root", "root", 0o644),
                &body,
            )
        };
        f.extra_artifacts = vec![
            artifact(
                layout.env_file(),
                ArtifactKind::Env,
                format!("ATELIER_SITES={}\n", slugs.join(",")),
            ),
            artifact(
                layout.gate_plan_path(k1, Door::Turn).unwrap(),
                ArtifactKind::Gate,
                format!("{{\"hosts\":[{hosts}]}}\n"),
            ),
        ];
    }

    fn live(unit: &str) -> String {
        format!("{unit}@3-00000000-0000-0000-0000-000000000000.service")
    }

    #[test]
    fn a_daemon_that_is_not_running_or_has_read_everything_is_left_alone() {
        let mut f = running(&["blog"], "\"a.example\"");
        assert_eq!(argvs(&f.plan().unwrap()), Vec::<String>::new());
        f.host.services.clear();
        f.redeclare(&["blog", "shop"]);
        declare_inputs(&mut f, "\"a.example\"");
        let plan = argvs(&f.plan().unwrap());
        assert!(
            !plan.iter().any(|a| a.contains("restart atelier-")),
            "nothing runs, so nothing restarts: {plan:?}"
        );
    }

    #[test]
    fn a_site_added_to_the_declaration_restarts_the_running_sited_after_its_env_is_written() {
        let mut f = running(&["blog"], "\"a.example\"");
        f.redeclare(&["blog", "shop"]);
        declare_inputs(&mut f, "\"a.example\"");
        let argvs = argvs(&f.plan().unwrap());
        let at = |command: &str| argvs.iter().position(|a| a.starts_with(command));
        let restart = at("systemctl try-restart atelier-sited@example.service");
        assert!(restart.is_some(), "{argvs:?}");
        assert!(at("gpasswd -a atelier-example") < restart, "{argvs:?}");
        assert!(at("systemctl daemon-reload") < restart, "{argvs:?}");
        assert!(at("systemctl enable --now") < restart, "{argvs:?}");
    }

    /// A failed `systemctl list-units` is no proof that nothing runs: the restarts that could
    /// cut a run off are deferred, named, rather than made under a turn.
    #[test]
    fn restarts_wait_while_systemd_cannot_list_the_live_runs() {
        let mut f = running(&["blog"], "\"a.example\"");
        f.redeclare(&["blog", "shop"]);
        declare_inputs(&mut f, "\"a.example\"");
        f.host.live_runs_unknown = true;
        let plan = f.plan().unwrap();
        assert!(
            !argvs(&plan).iter().any(|a| a.contains(SITED)),
            "no restart of sited: {plan:#?}"
        );
        let deferred = plan.iter().find_map(|a| match a {
            Action::DeferRestart { unit, live, .. } if unit == SITED => Some(live.clone()),
            _ => None,
        });
        assert_eq!(deferred, Some(vec![super::LIVE_RUNS_UNKNOWN.to_owned()]));
    }

    /// A failed `systemctl show` is no proof that the daemons read what is declared: what the
    /// plan writes restarts them, and the others are reported, not taken for current.
    #[test]
    fn daemons_systemd_cannot_describe_are_restarted_for_what_is_written_and_reported_otherwise() {
        let mut f = running(&["blog", "shop"], "\"a.example\"");
        f.host.services.clear();
        f.host.services_unknown = true;
        let plan = f.plan().unwrap();
        let deferred: Vec<(&str, &str)> = plan
            .iter()
            .filter_map(|a| match a {
                Action::DeferRestart {
                    unit,
                    because,
                    live,
                    ..
                } if live.is_empty() => Some((unit.as_str(), because.as_str())),
                _ => None,
            })
            .collect();
        let units: Vec<&str> = deferred.iter().map(|(unit, _)| *unit).collect();
        assert_eq!(units, [SITED, GATE_1, GATE_2, CHATD], "{plan:#?}");
        assert!(deferred.iter().all(|(_, why)| *why == super::STATE_UNKNOWN));
        assert_eq!(
            argvs(&plan),
            Vec::<String>::new(),
            "nothing restarted blind"
        );
        assert!(plan[0]
            .to_string()
            .ends_with("apply again once systemd answers"));
        // A changed gate plan restarts its gate (try-restart leaves a stopped one stopped);
        // the daemons whose inputs are unchanged stay reported.
        declare_inputs(&mut f, "\"a.example\",\"b.example\"");
        let plan = f.plan().unwrap();
        assert_eq!(argvs(&plan), [format!("systemctl try-restart {GATE_1}")]);
        let deferred: Vec<&str> = plan
            .iter()
            .filter_map(|a| match a {
                Action::DeferRestart { unit, .. } => Some(unit.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deferred, [SITED, GATE_2, CHATD]);
        // A host that answers again is judged as usual.
        f.host.services_unknown = false;
        assert!(!f
            .plan()
            .unwrap()
            .iter()
            .any(|a| matches!(a, Action::DeferRestart { .. })));
    }

    #[test]
    fn a_changed_plan_restarts_its_gate_only() {
        let mut f = running(&["blog", "shop"], "\"a.example\"");
        declare_inputs(&mut f, "\"a.example\",\"b.example\"");
        let argvs = argvs(&f.plan().unwrap());
        assert_eq!(
            argvs,
            ["systemctl try-restart atelier-example-s1-gate.service"]
        );
    }

    #[test]
    fn a_restart_under_live_runs_is_deferred_by_name_and_planned_again_until_they_end() {
        let mut f = running(&["blog", "shop"], "\"a.example\"");
        f.redeclare(&["blog", "shop", "news"]);
        declare_inputs(&mut f, "\"a.example\",\"b.example\"");
        let inst = Layout::new(&f.decl).instance().clone();
        let k = |n| SiteOrdinal::new(n).unwrap();
        // A build of site 2 is live: sited serves it, site 1's gate does not.
        let build = live(&names::door_unit_stem(&inst, k(2), Door::Build));
        f.host.live_runs = vec![build.clone()];
        let plan = f.plan().unwrap();
        let deferred: Vec<&Action> = plan
            .iter()
            .filter(|a| matches!(a, Action::DeferRestart { .. }))
            .collect();
        assert_eq!(deferred.len(), 1, "{plan:#?}");
        let Action::DeferRestart {
            unit,
            because,
            live,
            held,
        } = deferred[0]
        else {
            unreachable!()
        };
        assert_eq!(unit, SITED);
        assert!(because.contains("/etc/atelier/example/env"), "{because}");
        assert_eq!(live, std::slice::from_ref(&build));
        assert!(held.is_empty(), "no door unit changed: {held:?}");
        assert!(!deferred[0].changes_host());
        assert_eq!(
            deferred[0].holdback(),
            Some(crate::plan::Holdback::DeferredRestart)
        );
        assert!(
            argvs(&plan).contains(&format!("systemctl try-restart {GATE_1}")),
            "site 1's gate serves no live run: {plan:#?}"
        );
        // Applied, but sited still runs with what it read before: the next plan defers it
        // again, and once the build ended restarts it.
        f.simulate(&plan);
        let env = Layout::new(&f.decl).env_file();
        f.host.entries.get_mut(&env).unwrap().changed_ns = 200;
        f.host.services.get_mut(GATE_1).unwrap().started_ns = Some(300);
        let again = f.plan().unwrap();
        assert!(
            matches!(again.as_slice(), [Action::DeferRestart { unit, .. }] if unit == SITED),
            "{again:#?}"
        );
        f.host.live_runs.clear();
        assert_eq!(
            argvs(&f.plan().unwrap()),
            [format!("systemctl try-restart {SITED}")]
        );
    }

    #[test]
    fn changed_door_units_wait_for_a_deferred_sited_and_are_written_with_its_restart() {
        let mut f = running(&["blog", "shop"], "\"a.example\"");
        let layout = Layout::new(&f.decl);
        let inst = layout.instance().clone();
        let k = |n| SiteOrdinal::new(n).unwrap();
        // An upgrade: sited's binary is newer than its process, and the door units it renders
        // differ from those on the host (the fixture's sites' turn sockets).
        let sited_bin = layout.bin_path(atelier_layout::services::SITED_BINARY);
        let mut seen = f.host.entries.values().next().unwrap().clone();
        seen.changed_ns = 150;
        f.host.entries.insert(sited_bin, seen);
        let doors: Vec<PathBuf> = [k(1), k(2)]
            .map(|k| layout.unit_path(&names::door_socket_unit(&inst, k, Door::Turn)))
            .to_vec();
        for door in &doors {
            let old = Artifact::new(
                door.clone(),
                "example",
                ArtifactKind::AgentUnits,
                CommentStyle::Hash,
                ("root", "root", 0o644),
                "[Socket]\n# the previous version\n",
            );
            f.host.entries.get_mut(door).unwrap().content = Some(old.bytes);
        }
        let written = |plan: &[Action]| -> Vec<PathBuf> {
            plan.iter()
                .filter_map(|a| match a {
                    Action::File { path, .. } if doors.contains(path) => Some(path.clone()),
                    _ => None,
                })
                .collect()
        };
        // A turn of site 2 is live: sited's restart waits, and so do both sites' door units.
        let turn = live(&names::door_unit_stem(&inst, k(2), Door::Turn));
        f.host.live_runs = vec![turn];
        let plan = f.plan().unwrap();
        assert_eq!(written(&plan), Vec::<PathBuf>::new(), "{plan:#?}");
        assert!(
            !argvs(&plan).iter().any(|a| a.contains("daemon-reload")),
            "nothing for PID 1 to load: {plan:#?}"
        );
        let deferral = plan
            .iter()
            .find(|a| matches!(a, Action::DeferRestart { unit, .. } if unit == SITED))
            .unwrap_or_else(|| panic!("sited's restart is deferred: {plan:#?}"));
        let Action::DeferRestart { held, .. } = deferral else {
            unreachable!()
        };
        assert_eq!(held, &doors);
        let line = deferral.to_string();
        assert!(
            line.contains("door units held back until it restarts: ")
                && line.contains(&doors[0].display().to_string()),
            "{line}"
        );
        // The run ended: the same apply writes the door units, has PID 1 load them and then
        // restarts sited, which checks runs against them from then on.
        f.host.live_runs.clear();
        let plan = f.plan().unwrap();
        assert_eq!(written(&plan), doors, "{plan:#?}");
        let argvs = argvs(&plan);
        let at = |command: &str| argvs.iter().position(|a| a.starts_with(command));
        let restart = at(&format!("systemctl try-restart {SITED}"));
        assert!(restart.is_some(), "{argvs:?}");
        assert!(at("systemctl daemon-reload") < restart, "{argvs:?}");
    }

    /// A package's binaries keep the modification time of its build, before a daemon that
    /// started since: what dpkg's install changed is the file's change time.
    #[test]
    fn an_upgraded_binary_restarts_the_daemons_that_run_it() {
        let mut f = running(&["blog"], "\"a.example\"");
        let layout = Layout::new(&f.decl);
        let gate = layout.bin_path(atelier_layout::services::GATE_BINARY);
        let mut seen = f.host.entries.values().next().unwrap().clone();
        (seen.mtime_ns, seen.changed_ns) = (50, 50);
        f.host.entries.insert(gate.clone(), seen.clone());
        assert_eq!(argvs(&f.plan().unwrap()), Vec::<String>::new());
        seen.changed_ns = 150;
        f.host.entries.insert(gate, seen);
        assert_eq!(
            argvs(&f.plan().unwrap()),
            [format!("systemctl try-restart {GATE_1}")]
        );
    }

    #[test]
    fn sited_restarts_when_its_user_s_groups_differ_from_its_process_s() {
        let mut f = running(&["blog"], "\"a.example\"");
        let user = f.host.accounts.user("atelier-example").unwrap().clone();
        let mut groups: BTreeSet<u32> = f
            .host
            .accounts
            .groups
            .iter()
            .filter(|g| g.members.contains(&user.name))
            .map(|g| g.gid)
            .collect();
        groups.insert(user.gid);
        f.host.services.get_mut(SITED).unwrap().groups = Some(groups.clone());
        assert_eq!(argvs(&f.plan().unwrap()), Vec::<String>::new());
        let newest = *groups.iter().next_back().unwrap();
        groups.remove(&newest);
        f.host.services.get_mut(SITED).unwrap().groups = Some(groups);
        assert_eq!(
            argvs(&f.plan().unwrap()),
            [format!("systemctl try-restart {SITED}")]
        );
    }
}
