//! The follow-up steps an apply owes the host: `daemon-reload` after a unit file changed,
//! `systemd-tmpfiles --create` after its file changed, a socket's restart after its unit
//! changed, the web server's test and reload after its configuration changed.
//!
//! The plan takes each of them because the same plan writes the file that calls for it. An
//! apply that wrote the files and then stopped short (a failed config test, a failed enable,
//! Ctrl-C, a crash) left files the next plan finds already right, and the step was never taken:
//! nginx kept serving the old vhosts, systemd the old units. So apply writes what its plan owes
//! to a marker before it acts and, once done, what is still owed; the next plan takes every
//! step the marker names. The marker (`atelier_layout::paths::provision_owed_path`) lives
//! below `/run`: a boot reloads systemd and the web server and runs tmpfiles anyway, so nothing
//! is owed across one.

use std::collections::BTreeSet;
use std::path::Path;

use atelier_fs::{FsError, Root};
use atelier_layout::paths::provision_owed_path;
use atelier_layout::InstanceName;
use serde::Serialize;

use crate::apply::{self, ActionOutcome, Report, Status, Watch};
use crate::plan::{Action, ExecStep};

/// The largest marker read; a larger one is not one apply wrote.
pub const MAX_OWED_BYTES: u64 = 64 * 1024;

/// The markers' directory's mode: root's alone.
pub(crate) const MARKER_DIR_MODE: u32 = 0o700;

/// A marker's mode.
pub(crate) const MARKER_MODE: u32 = 0o600;

/// Executes `actions` below `root` as [`apply::apply_watched`] does, with what they owe
/// recorded in instance `inst`'s marker before the first of them runs (so a run that stops half
/// way, killed or failed, leaves its steps owed) and, once they ran, what is still owed.
pub fn apply_owing(
    actions: &[Action],
    root: &Path,
    inst: &InstanceName,
    watch: &mut dyn Watch,
) -> Result<Report, FsError> {
    Owed::of_plan(actions).record(root, inst)?;
    let report = apply::apply_watched(actions, root, watch);
    Owed::after(actions, &report.outcomes).record(root, inst)?;
    Ok(report)
}

/// The follow-up steps owed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Owed {
    /// `systemctl daemon-reload`.
    pub daemon_reload: bool,
    /// `systemd-tmpfiles --create` of the instance's file.
    pub tmpfiles: bool,
    /// The web server's configuration test, then its reload.
    pub web_reload: bool,
    /// The socket units to restart.
    pub sockets: BTreeSet<String>,
}

impl Owed {
    /// Every step there is, for a marker that cannot be read as one: a reload too many costs
    /// nothing, one too few keeps the host on its old configuration. Sockets cannot be named
    /// from nothing, and a restart too many would drop their queued connections.
    pub fn everything() -> Owed {
        Owed {
            daemon_reload: true,
            tmpfiles: true,
            web_reload: true,
            sockets: BTreeSet::new(),
        }
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        *self == Owed::default()
    }

    /// The follow-up steps `actions` take.
    pub fn of_plan(actions: &[Action]) -> Owed {
        let mut owed = Owed::default();
        for action in actions {
            let Action::Exec { step, argv } = action else {
                continue;
            };
            match step {
                ExecStep::DaemonReload => owed.daemon_reload = true,
                ExecStep::TmpfilesCreate => owed.tmpfiles = true,
                ExecStep::WebReload => owed.web_reload = true,
                ExecStep::RestartSockets => owed.sockets.extend(units(argv)),
                _ => {}
            }
        }
        owed
    }

    /// What is still owed once `actions` ran with `outcomes`: each step that succeeded is paid.
    pub fn after(actions: &[Action], outcomes: &[ActionOutcome]) -> Owed {
        let mut owed = Owed::of_plan(actions);
        for (action, outcome) in actions.iter().zip(outcomes) {
            let Action::Exec { step, argv } = action else {
                continue;
            };
            if !matches!(outcome.status, Status::Done | Status::Unchanged) {
                continue;
            }
            match step {
                ExecStep::DaemonReload => owed.daemon_reload = false,
                ExecStep::TmpfilesCreate => owed.tmpfiles = false,
                ExecStep::WebReload => owed.web_reload = false,
                ExecStep::RestartSockets => {
                    for unit in units(argv) {
                        owed.sockets.remove(&unit);
                    }
                }
                _ => {}
            }
        }
        owed
    }

    /// Reads a marker; [`Owed::everything`] for one that is not as [`Owed::render`] writes.
    pub fn parse(text: &str) -> Owed {
        let mut owed = Owed::default();
        for line in text.lines() {
            match line.split_once(' ') {
                None if line == "daemon-reload" => owed.daemon_reload = true,
                None if line == "tmpfiles-create" => owed.tmpfiles = true,
                None if line == "web-reload" => owed.web_reload = true,
                Some(("restart-socket", unit)) if is_socket_unit(unit) => {
                    owed.sockets.insert(unit.to_owned());
                }
                _ => return Owed::everything(),
            }
        }
        owed
    }

    /// Records what is owed in `inst`'s marker below `root`, atomically (a kill mid-write
    /// leaves the marker before it), or removes the marker when nothing is.
    pub fn record(&self, root: &Path, inst: &InstanceName) -> Result<(), FsError> {
        let host = Root::open(root)?;
        let path = provision_owed_path(inst);
        let rel = path.strip_prefix("/").unwrap_or(&path);
        if self.is_empty() {
            return host.remove_file(rel).map(|_| ());
        }
        if let Some(dir) = rel.parent() {
            host.create_dir_all(dir, MARKER_DIR_MODE)?;
        }
        host.write_atomic(rel, self.render().as_bytes(), MARKER_MODE)
            .map(|_| ())
    }

    /// The marker's text: one step a line.
    pub fn render(&self) -> String {
        let mut text = String::new();
        for (owed, line) in [
            (self.daemon_reload, "daemon-reload"),
            (self.tmpfiles, "tmpfiles-create"),
            (self.web_reload, "web-reload"),
        ] {
            if owed {
                text.push_str(line);
                text.push('\n');
            }
        }
        for unit in &self.sockets {
            text.push_str("restart-socket ");
            text.push_str(unit);
            text.push('\n');
        }
        text
    }
}

/// The unit names of a `systemctl <verb> <unit>…` command.
fn units(argv: &[String]) -> impl Iterator<Item = String> + '_ {
    argv.iter().skip(2).cloned()
}

/// Whether `unit` is a socket unit's name as the plan writes them.
fn is_socket_unit(unit: &str) -> bool {
    unit.ends_with(".socket")
        && unit
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"@._:-".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(step: ExecStep, argv: &[&str]) -> Action {
        Action::Exec {
            step,
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    fn outcome(status: Status) -> ActionOutcome {
        ActionOutcome {
            action: String::new(),
            status,
            error: None,
        }
    }

    #[test]
    fn a_plan_owes_its_follow_ups_until_each_succeeds() {
        let actions = [
            exec(ExecStep::DaemonReload, &["systemctl", "daemon-reload"]),
            exec(
                ExecStep::RestartSockets,
                &["systemctl", "restart", "a.socket", "b.socket"],
            ),
            exec(
                ExecStep::EnableSockets,
                &["systemctl", "enable", "c.socket"],
            ),
            exec(ExecStep::WebConfigtest, &["nginx", "-t"]),
            exec(
                ExecStep::WebReload,
                &["systemctl", "try-reload-or-restart", "nginx.service"],
            ),
        ];
        let all = Owed::of_plan(&actions);
        assert_eq!(
            all.render(),
            "daemon-reload\nweb-reload\nrestart-socket a.socket\nrestart-socket b.socket\n"
        );
        // The config test failed: the reload and what followed it are still owed.
        let failed = [
            outcome(Status::Done),
            outcome(Status::Done),
            outcome(Status::Done),
            outcome(Status::Failed),
            outcome(Status::Skipped),
        ];
        assert_eq!(Owed::after(&actions, &failed).render(), "web-reload\n");
        let done = [Status::Done; 5].map(outcome);
        assert!(Owed::after(&actions, &done).is_empty());
        // Killed before anything ran: everything is owed.
        assert_eq!(Owed::after(&actions, &[]), all);
    }

    struct Quiet;

    impl Watch for Quiet {
        fn completed(&mut self, _outcome: &ActionOutcome) {}
    }

    /// An apply whose reload fails leaves it owed, and the next run that reloads pays it: the
    /// marker is there before the first step runs, and gone once nothing is owed.
    #[test]
    fn the_marker_holds_what_an_apply_owes_from_before_it_acts_until_it_is_paid() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let inst = InstanceName::new("example").unwrap();
        let marker = crate::host::under_root(root, &provision_owed_path(&inst));
        let marker_shown = marker.display().to_string();
        let run = |actions: &[Action]| apply_owing(actions, root, &inst, &mut Quiet).unwrap();
        let command = |step, argv: &[&str]| exec(step, argv);
        // The first step finds the marker already written.
        let report = run(&[
            command(
                ExecStep::RestartServices,
                &["grep", "-qx", "web-reload", &marker_shown],
            ),
            command(ExecStep::DaemonReload, &["true"]),
            command(ExecStep::WebConfigtest, &["false"]),
            command(ExecStep::WebReload, &["true"]),
        ]);
        let statuses: Vec<Status> = report.outcomes.iter().map(|o| o.status).collect();
        assert_eq!(
            statuses,
            [Status::Done, Status::Done, Status::Failed, Status::Skipped]
        );
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "web-reload\n");
        assert_eq!(crate::host::read_owed(root, &inst).render(), "web-reload\n");
        let mode = std::fs::metadata(&marker).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );

        run(&[
            command(ExecStep::WebConfigtest, &["true"]),
            command(ExecStep::WebReload, &["true"]),
        ]);
        assert!(!marker.exists());
        assert!(crate::host::read_owed(root, &inst).is_empty());
    }

    #[test]
    fn an_unreadable_marker_owes_every_reload() {
        let tmp = tempfile::tempdir().unwrap();
        let inst = InstanceName::new("example").unwrap();
        let marker = crate::host::under_root(tmp.path(), &provision_owed_path(&inst));
        std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
        std::fs::create_dir(&marker).unwrap();
        assert_eq!(
            crate::host::read_owed(tmp.path(), &inst),
            Owed::everything()
        );
        std::fs::remove_dir(&marker).unwrap();
        std::fs::write(&marker, vec![b'x'; 70 * 1024]).unwrap();
        assert_eq!(
            crate::host::read_owed(tmp.path(), &inst),
            Owed::everything()
        );
    }

    #[test]
    fn marker_table() {
        let sockets = |units: &[&str]| units.iter().map(|u| (*u).to_owned()).collect();
        for (name, text, owed) in [
            ("empty", "", Owed::default()),
            (
                "every step",
                "daemon-reload\ntmpfiles-create\nweb-reload\nrestart-socket atelier-sited@x.socket\n",
                Owed {
                    daemon_reload: true,
                    tmpfiles: true,
                    web_reload: true,
                    sockets: sockets(&["atelier-sited@x.socket"]),
                },
            ),
            (
                "one step",
                "web-reload\n",
                Owed {
                    web_reload: true,
                    ..Owed::default()
                },
            ),
            ("an unknown step", "reboot\n", Owed::everything()),
            (
                "not a socket",
                "restart-socket nginx.service\n",
                Owed::everything(),
            ),
            (
                "a socket with a space",
                "restart-socket a b.socket\n",
                Owed::everything(),
            ),
            ("a step with trailing words", "web-reload now\n", Owed::everything()),
            ("binary", "\u{0}\u{1}", Owed::everything()),
        ] {
            let parsed = Owed::parse(text);
            assert_eq!(parsed, owed, "{name}");
            if owed != Owed::everything() {
                assert_eq!(parsed.render(), text, "{name}: written back as read");
            }
        }
    }
}
