//! `remove`: decommission an instance without destroying anything that is not provably ours.
//! A pure [`removal_plan`] and a dumb [`apply_removal`]: units are stopped, only files whose
//! stamp names this instance are unlinked, marked trees are archived by rename beside
//! themselves, and every identity is locked, never deleted. A site that production may be
//! serving stops it first ([`published_refusals`]): removal takes every vhost down, so the
//! operator says so with `--purge-published`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use atelier_fs::Root;
use atelier_layout::names;
use atelier_layout::paths::{Layout, Surface};
use serde::Serialize;

use crate::apply::Status;
use crate::artifact::{parse_stamp, Artifact, ArtifactKind};
use crate::host::{self, HostState, ObservedKind};
use crate::identities::{self, LedgerIdentity, NOLOGIN};
use crate::owed::Owed;
use crate::plan::{enabling_link, marker_path, Refusal, RetiredSteps};
use crate::verify::{SurfaceProof, Unproved};

/// One step of a removal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum RemoveAction {
    /// A command; `tolerate` means its failure does not stop the removal (it still fails
    /// the removal's exit status).
    Exec {
        /// The command.
        argv: Vec<String>,
        /// Whether a failure is only reported.
        tolerate: bool,
    },
    /// Unlink a file whose stamp names this instance.
    Unlink {
        /// Host path.
        path: PathBuf,
    },
    /// Re-own a marked tree root:root 0700 and rename it beside itself.
    Archive {
        /// Host path.
        from: PathBuf,
        /// Where it goes (same directory).
        to: PathBuf,
    },
    /// Something that stays, and why.
    Left {
        /// Host path.
        path: PathBuf,
        /// Why it is not touched.
        reason: &'static str,
    },
}

impl fmt::Display for RemoveAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoveAction::Exec { argv, tolerate } => {
                write!(f, "run {}", argv.join(" "))?;
                if *tolerate {
                    f.write_str(" (failure tolerated)")?;
                }
                Ok(())
            }
            RemoveAction::Unlink { path } => write!(f, "unlink {}", path.display()),
            RemoveAction::Archive { from, to } => {
                write!(f, "archive {} -> {}", from.display(), to.display())
            }
            RemoveAction::Left { path, reason } => {
                write!(f, "leave {} ({reason})", path.display())
            }
        }
    }
}

/// The refusals of a removal without `--purge-published`: one per site whose production link
/// may serve something, as `verify` proved it. Only a store with nothing published, or a link
/// that leads nowhere, serves nothing; anything else (a release, an empty one, a link out of
/// the store, a directory in the link's place) is somebody's production.
pub fn published_refusals(proofs: &[SurfaceProof]) -> Vec<Refusal> {
    proofs
        .iter()
        .filter(|p| p.surface == Surface::Prod)
        .filter_map(|p| {
            let serving = match (&p.release, &p.problem) {
                (Some(release), _) => format!("serves release {release}"),
                (None, None | Some(Unproved::LinkMissing | Unproved::TargetMissing(_))) => {
                    return None
                }
                (None, Some(problem)) => format!("may serve something: {problem}"),
            };
            Some(Refusal {
                subject: p.slug.clone(),
                reason: "site_published",
                message: format!(
                    "production of {} ({}) {serving}; removal takes it offline \
                     (--purge-published to remove anyway)",
                    p.slug,
                    p.link.display()
                ),
            })
        })
        .collect()
}

/// The reloads a removal's `actions` owe until they ran: recorded before the first action, so a
/// removal that stops half way leaves them for the next `remove` (or `apply`).
pub fn owed_by(actions: &[RemoveAction]) -> Owed {
    let runs = |words: &[&str]| {
        actions.iter().any(|action| {
            matches!(action, RemoveAction::Exec { argv, .. } if argv.starts_with(&self::argv(words)))
        })
    };
    Owed {
        daemon_reload: runs(&["systemctl", "daemon-reload"]),
        web_reload: runs(&["systemctl", "try-reload-or-restart"]),
        ..Owed::default()
    }
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// Plans the removal of the instance. `artifacts` are what the declaration renders (their paths
/// are where ours would be); `removed` are the identities of sites no longer declared, whose
/// units and files an apply would have taken off (the declaration was changed, and `remove`
/// run without an apply between); `stamp` is the UTC instant `YYYYMMDDTHHMMSSZ` every archive
/// of this run is named with.
pub fn removal_plan(
    layout: &Layout<'_>,
    artifacts: &[Artifact],
    removed: &[LedgerIdentity],
    host: &HostState,
    stamp: &str,
) -> Result<Vec<RemoveAction>, Refusal> {
    let inst = layout.instance();
    let mut out = Vec::new();
    let ledger = identities::ledger(layout.declaration(), &host.accounts).map_err(|e| Refusal {
        subject: "ledger".into(),
        reason: "identity_ledger",
        message: e.to_string(),
    })?;

    let retired: Vec<RetiredSteps> = removed
        .iter()
        .map(|id| RetiredSteps::of(layout, id, &host.entries, artifacts))
        .collect();

    // Stop first, so nothing runs while its files go.
    let mut units = vec![
        names::sited_socket_unit(inst),
        names::sited_service_unit(inst),
    ];
    if layout.declaration().chat.is_some() {
        units.push(names::chatd_service_unit(inst));
    }
    units.extend(
        artifacts
            .iter()
            .filter(|a| {
                a.path
                    .extension()
                    .is_some_and(|e| e == "socket" || e == "timer")
            })
            .filter_map(|a| a.path.file_name())
            .map(|n| n.to_string_lossy().into_owned()),
    );
    units.extend(
        retired
            .iter()
            .flat_map(|steps| steps.sockets.iter().cloned()),
    );
    // Only units whose file is on the host: systemctl refuses the whole command, disabling and
    // stopping nothing, when one of the units it names has no file (a site or a chat block
    // declared but never applied).
    // Each once: sited's socket is also among the rendered sockets.
    let mut named = std::collections::BTreeSet::new();
    units.retain(|unit| {
        host.entries.contains_key(&layout.unit_path(unit)) && named.insert(unit.clone())
    });
    if !units.is_empty() {
        let mut disable = argv(&["systemctl", "disable", "--now"]);
        disable.extend(units);
        out.push(RemoveAction::Exec {
            argv: disable,
            tolerate: true,
        });
    }
    // Every run of every rendered template, by whole stem: a prefix glob could match another
    // instance's units.
    let mut stop = argv(&["systemctl", "stop"]);
    stop.extend(
        artifacts
            .iter()
            .filter_map(|a| a.path.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .filter_map(|n| {
                n.strip_suffix("@.service")
                    .map(|stem| format!("{stem}@*.service"))
            }),
    );
    stop.extend(retired.iter().flat_map(|steps| steps.stop.iter().cloned()));
    if stop.len() > 2 {
        out.push(RemoveAction::Exec {
            argv: stop,
            tolerate: true,
        });
    }

    // The polkit rule first (the grant narrows before anything else), then the rest.
    let mut ordered: Vec<&Artifact> = artifacts.iter().collect();
    ordered.sort_by_key(|a| a.kind != ArtifactKind::AgentAuthorization);
    let mut unit_gone = false;
    let mut vhost_gone = false;
    for artifact in ordered {
        let path = &artifact.path;
        let Some(seen) = host.entries.get(path) else {
            continue;
        };
        let ours = seen.kind == ObservedKind::File
            && seen
                .content
                .as_deref()
                .and_then(parse_stamp)
                .is_some_and(|s| s.instance == inst.as_str());
        if !ours {
            out.push(RemoveAction::Left {
                path: path.clone(),
                reason: "not stamped for this instance",
            });
            continue;
        }
        if let Some(link) = enabling_link_of(layout, artifact, host) {
            out.push(RemoveAction::Unlink { path: link });
        }
        unit_gone |= path.parent() == Some(layout.unit_dir().as_path());
        vhost_gone |= matches!(
            artifact.kind,
            ArtifactKind::NginxVhost | ArtifactKind::ApacheVhost
        );
        out.push(RemoveAction::Unlink { path: path.clone() });
    }
    for steps in retired {
        vhost_gone |= steps.vhost_gone;
        for path in steps.links.into_iter().chain(steps.files) {
            unit_gone |= path.parent() == Some(layout.unit_dir().as_path());
            out.push(RemoveAction::Unlink { path });
        }
    }
    // A reload an earlier removal (or apply) owes is taken too: a removal whose web server
    // test failed after the vhosts were unlinked finds nothing left to unlink when run again.
    if unit_gone || host.owed.daemon_reload {
        out.push(RemoveAction::Exec {
            argv: argv(&["systemctl", "daemon-reload"]),
            tolerate: true,
        });
    }
    if (vhost_gone || host.owed.web_reload) && host.web_server_present {
        let server = layout.declaration().web.server;
        out.push(RemoveAction::Exec {
            argv: host::web_configtest_argv(server),
            tolerate: false,
        });
        out.push(RemoveAction::Exec {
            argv: argv(&["systemctl", "try-reload-or-restart", host::web_unit(server)]),
            tolerate: false,
        });
    }

    // Marked trees are archived beside themselves; anything unmarked stays.
    let mut roots = vec![layout.sites_root(), layout.audit_root()];
    roots.extend(
        layout
            .declaration()
            .sites
            .iter()
            .map(|s| layout.webspace(s)),
    );
    let want = format!("{inst}\n");
    for root in roots {
        let Some(seen) = host.entries.get(&root) else {
            continue;
        };
        let marked = host
            .entries
            .get(&marker_path(&root))
            .and_then(|m| m.content.as_deref())
            == Some(want.as_bytes());
        if seen.kind != ObservedKind::Dir || !marked {
            out.push(RemoveAction::Left {
                path: root,
                reason: "its marker does not name this instance",
            });
            continue;
        }
        let mut name = root.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".retired-{stamp}"));
        let to = root.with_file_name(name);
        out.push(RemoveAction::Archive { from: root, to });
    }
    let mut credentials = layout.credential_sources();
    credentials.extend(layout.chatd_credential_sources());
    for path in credentials.into_values() {
        if host.entries.contains_key(&path) {
            out.push(RemoveAction::Left {
                path,
                reason: "credentials are the operator's",
            });
        }
    }

    // Locked, never deleted: uids are never freed, so nothing can inherit a site's files.
    let svc = layout.service_user();
    if host.accounts.user(&svc).is_some() {
        out.push(RemoveAction::Exec {
            argv: argv(&["usermod", "--lock", "--shell", NOLOGIN, &svc]),
            tolerate: true,
        });
    }
    for id in ledger.iter().filter(|id| !id.retired) {
        out.push(RemoveAction::Exec {
            argv: argv(&[
                "usermod",
                "--lock",
                "--expiredate",
                "1",
                "--shell",
                NOLOGIN,
                &id.name,
            ]),
            tolerate: true,
        });
    }
    Ok(out)
}

/// The enabling link of a vhost, if one stands there pointing at it.
fn enabling_link_of(layout: &Layout<'_>, artifact: &Artifact, host: &HostState) -> Option<PathBuf> {
    let (link, target) = enabling_link(layout, artifact)?;
    let seen = host.entries.get(&link)?;
    let points_here = seen.link_target.as_ref() == Some(&target)
        || seen.link_target.as_ref() == Some(&artifact.path);
    (seen.kind == ObservedKind::Symlink && points_here).then_some(link)
}

/// One removal step's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoveOutcome {
    /// The step, in one line.
    pub action: String,
    /// What happened.
    pub status: Status,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Executes a removal below `root`; stops at the first untolerated failure.
pub fn apply_removal(actions: &[RemoveAction], root: &Path) -> Vec<RemoveOutcome> {
    let mut out = Vec::new();
    let mut stopped = false;
    for action in actions {
        let (status, error) = if stopped {
            (Status::Skipped, None)
        } else {
            match execute(action, root) {
                Ok(status) => (status, None),
                Err(e) => {
                    let tolerated = matches!(action, RemoveAction::Exec { tolerate: true, .. });
                    stopped = !tolerated;
                    (Status::Failed, Some(e))
                }
            }
        };
        out.push(RemoveOutcome {
            action: action.to_string(),
            status,
            error,
        });
    }
    out
}

fn execute(action: &RemoveAction, root: &Path) -> Result<Status, String> {
    match action {
        RemoveAction::Exec { argv, .. } => {
            let Some((program, args)) = argv.split_first() else {
                return Err("empty command".into());
            };
            let out = Command::new(program)
                .args(args)
                .output()
                .map_err(|e| format!("{}: {e}", argv.join(" ")))?;
            if out.status.success() {
                Ok(Status::Done)
            } else {
                Err(format!(
                    "{} exited with {}: {}",
                    argv.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        }
        RemoveAction::Unlink { path } => {
            let (dir, name) = split(path)?;
            let parent = Root::open(host::under_root(root, dir)).map_err(|e| e.to_string())?;
            match parent.remove_file(name) {
                Ok(true) => Ok(Status::Done),
                Ok(false) => Ok(Status::Unchanged),
                Err(e) => Err(e.to_string()),
            }
        }
        RemoveAction::Archive { from, to } => {
            let (dir, name) = split(from)?;
            let real_to = host::under_root(root, to);
            if std::fs::symlink_metadata(&real_to).is_ok() {
                return Err(format!("{} already exists", to.display()));
            }
            let parent = Root::open(host::under_root(root, dir)).map_err(|e| e.to_string())?;
            match parent.set_owner_and_mode(name, 0, 0, 0o700) {
                Ok(_) => {}
                Err(atelier_fs::FsError::NotFound { .. }) => return Ok(Status::Unchanged),
                Err(e) => return Err(e.to_string()),
            }
            std::fs::rename(host::under_root(root, from), &real_to)
                .map_err(|e| format!("rename {}: {e}", from.display()))?;
            Ok(Status::Done)
        }
        RemoveAction::Left { .. } => Ok(Status::Unchanged),
    }
}

fn split(path: &Path) -> Result<(&Path, &std::ffi::OsStr), String> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((dir, name)),
        _ => Err(format!("{} has no parent", path.display())),
    }
}

/// `YYYYMMDDTHHMMSSZ` for `secs` since the epoch (UTC); a time past the year 9999 is written
/// as one late in that year.
pub fn utc_stamp(secs: u64) -> String {
    let at = i64::try_from(secs)
        .ok()
        .and_then(|secs| jiff::Timestamp::from_second(secs).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    let t = jiff::tz::TimeZone::UTC.to_datetime(at);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::artifact::CommentStyle;
    use crate::host::Observed;
    use crate::identities::{Accounts, PasswdEntry, ShadowEntry};

    /// Which production proofs stop a removal without `--purge-published`.
    #[test]
    fn a_removal_waits_for_purge_while_production_may_serve() {
        let proof = |surface, release: Option<&str>, problem| SurfaceProof {
            slug: "blog".into(),
            surface,
            link: "/srv/www/blog.example.org/web".into(),
            release: release.map(str::to_owned),
            problem,
        };
        let cases = [
            ("nothing published", proof(Surface::Prod, None, None), None),
            (
                "no link",
                proof(Surface::Prod, None, Some(Unproved::LinkMissing)),
                None,
            ),
            (
                "a link to nothing",
                proof(
                    Surface::Prod,
                    None,
                    Some(Unproved::TargetMissing("/x".into())),
                ),
                None,
            ),
            (
                "a release",
                proof(Surface::Prod, Some("r1"), None),
                Some("serves release r1"),
            ),
            (
                "an empty release",
                proof(
                    Surface::Prod,
                    None,
                    Some(Unproved::EmptyRelease("r1".into())),
                ),
                Some("may serve something: release r1 holds no bytes"),
            ),
            (
                "a link out of its store",
                proof(
                    Surface::Prod,
                    None,
                    Some(Unproved::OutsideStore("/srv".into())),
                ),
                Some("may serve something: it points outside its store: /srv"),
            ),
            (
                "a directory in the link's place",
                proof(Surface::Prod, None, Some(Unproved::NotASymlink)),
                Some("may serve something: the served path is not a symlink"),
            ),
            (
                "preproduction only",
                proof(Surface::Preprod, Some("r1"), None),
                None,
            ),
        ];
        for (name, proof, want) in cases {
            let refusals = published_refusals(std::slice::from_ref(&proof));
            match want {
                None => assert!(refusals.is_empty(), "{name}: {refusals:?}"),
                Some(serving) => {
                    assert_eq!(refusals.len(), 1, "{name}");
                    let refusal = &refusals[0];
                    assert_eq!(
                        (refusal.subject.as_str(), refusal.reason),
                        ("blog", "site_published"),
                        "{name}"
                    );
                    assert!(refusal.message.contains(serving), "{name}: {refusal}");
                    assert!(refusal.message.contains("--purge-published"), "{name}");
                }
            }
        }
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_stamp(1_796_230_069), "20261202T164749Z");
    }

    fn file(content: Vec<u8>) -> Observed {
        Observed {
            kind: ObservedKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            empty: None,
            link_target: None,
            resolved: None,
            content: Some(content),
            mtime_ns: 0,
            changed_ns: 0,
        }
    }

    #[test]
    fn only_our_stamped_files_go_marked_trees_are_archived_and_identities_locked() {
        let decl = crate::test_support::declaration(&["blog"]);
        let layout = Layout::new(&decl);
        let unit = |name: &str, inst: &str| {
            Artifact::new(
                layout.unit_path(name),
                inst,
                ArtifactKind::AgentUnits,
                CommentStyle::Hash,
                ("root", "root", 0o644),
                "[Socket]\n",
            )
        };
        let ours = unit("atelier-example-s1-turn.socket", "example");
        let foreign = unit("atelier-example-s1-git.socket", "other");
        let absent = unit("atelier-example-s1-build.socket", "example");
        let mut entries = BTreeMap::new();
        entries.insert(ours.path.clone(), file(ours.bytes.clone()));
        entries.insert(foreign.path.clone(), file(foreign.bytes.clone()));
        let sites_root = layout.sites_root();
        let mut dir = file(vec![]);
        dir.kind = ObservedKind::Dir;
        dir.content = None;
        entries.insert(sites_root.clone(), dir.clone());
        entries.insert(marker_path(&sites_root), file(b"example\n".to_vec()));
        let audit = layout.audit_root();
        entries.insert(audit.clone(), dir);
        entries.insert(marker_path(&audit), file(b"other\n".to_vec()));
        let id = |name: &str, uid| PasswdEntry {
            name: name.into(),
            uid,
            gid: 900,
            gecos: identities::gecos("blog"),
            home: "/nonexistent".into(),
            shell: NOLOGIN.into(),
        };
        let host = HostState {
            accounts: Accounts {
                passwd: vec![id("atelier-example", 900), id("atelier-a-example_1", 901)],
                groups: vec![],
                shadow: Some(vec![ShadowEntry {
                    name: "atelier-a-example_1".into(),
                    expire: None,
                }]),
            },
            entries,
            systemd_version: Some(252),
            web_server_present: false,
            ..HostState::default()
        };
        let plan = removal_plan(
            &layout,
            &[ours.clone(), foreign.clone(), absent],
            &[],
            &host,
            "20261202T000000Z",
        )
        .unwrap();
        let text: Vec<String> = plan.iter().map(ToString::to_string).collect();
        let text = text.join("\n");
        // Only the units whose file is on the host are disabled: one without a file would make
        // systemctl refuse the whole command.
        assert!(
            text.starts_with(
                "run systemctl disable --now atelier-example-s1-turn.socket \
                 atelier-example-s1-git.socket (failure tolerated)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("unlink {}", ours.path.display())),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "leave {} (not stamped for this instance)",
                foreign.path.display()
            )),
            "{text}"
        );
        assert!(!text.contains("s1-build.socket\n"), "{text}");
        assert!(text.contains("archive /var/lib/atelier/example/sites -> /var/lib/atelier/example/sites.retired-20261202T000000Z"), "{text}");
        assert!(
            text.contains(
                "leave /srv/atelier_audit/example (its marker does not name this instance)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "run usermod --lock --expiredate 1 --shell /usr/sbin/nologin atelier-a-example_1"
            ),
            "{text}"
        );
        assert!(text.contains("run systemctl daemon-reload"), "{text}");
        assert!(
            !text.contains("userdel") && !text.contains("groupdel"),
            "{text}"
        );
    }

    /// A removal run again after its web server's test failed (its vhosts already unlinked)
    /// still tests and reloads the web server, and reloads PID 1, as the first run owed.
    #[test]
    fn a_removal_takes_the_reloads_an_earlier_one_owes() {
        let decl = crate::test_support::declaration(&["blog"]);
        let layout = Layout::new(&decl);
        let owing = |owed: Owed| HostState {
            owed,
            web_server_present: true,
            systemd_version: Some(252),
            ..HostState::default()
        };
        let plan = |host: &HostState| {
            removal_plan(&layout, &[], &[], host, "20261202T000000Z")
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        };
        let none = plan(&owing(Owed::default()));
        assert!(
            !none.contains("daemon-reload") && !none.contains("reload-or-restart"),
            "{none}"
        );
        let both = owing(Owed {
            daemon_reload: true,
            web_reload: true,
            ..Owed::default()
        });
        let text = plan(&both);
        assert!(text.contains("run systemctl daemon-reload"), "{text}");
        assert!(text.contains("run nginx -t"), "{text}");
        assert!(
            text.contains("run systemctl try-reload-or-restart nginx.service"),
            "{text}"
        );
        let actions = removal_plan(&layout, &[], &[], &both, "20261202T000000Z").unwrap();
        assert_eq!(
            owed_by(&actions),
            Owed {
                daemon_reload: true,
                web_reload: true,
                ..Owed::default()
            }
        );
    }

    /// A site taken out of the declaration, and `remove` run without an apply between: its
    /// gate and doors are stopped and its stamped files unlinked with the rest.
    #[test]
    fn a_site_no_longer_declared_but_still_applied_is_removed_too() {
        let decl = crate::test_support::declaration(&["blog"]);
        let layout = Layout::new(&decl);
        let inst = layout.instance();
        let shop = LedgerIdentity {
            k: atelier_layout::SiteOrdinal::new(2).unwrap(),
            name: "atelier-a-example_2".into(),
            slug: Some("shop".into()),
            retired: false,
        };
        let stamped = |path: PathBuf| {
            let bytes = Artifact::new(
                path.clone(),
                "example",
                ArtifactKind::AgentUnits,
                CommentStyle::Hash,
                ("root", "root", 0o644),
                "x\n",
            )
            .bytes;
            (path, file(bytes))
        };
        let socket = names::gate_socket_unit(inst, shop.k);
        let gate = layout.unit_path(&socket);
        let (vhost, link) = crate::plan::site_vhosts(&layout, "shop")
            .into_iter()
            .next()
            .unwrap();
        let link = link.unwrap();
        let mut entries: BTreeMap<PathBuf, Observed> =
            [stamped(gate.clone()), stamped(vhost.clone())]
                .into_iter()
                .collect();
        let mut pointing = file(vec![]);
        pointing.kind = ObservedKind::Symlink;
        pointing.content = None;
        pointing.link_target = Some(vhost.clone());
        entries.insert(link.clone(), pointing);
        let host = HostState {
            entries,
            systemd_version: Some(252),
            web_server_present: true,
            ..HostState::default()
        };
        let text = removal_plan(&layout, &[], &[shop], &host, "20261202T000000Z")
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            text.contains(&format!("run systemctl disable --now {socket}")),
            "{text}"
        );
        let stop = text
            .lines()
            .find(|line| line.starts_with("run systemctl stop "))
            .unwrap_or_default();
        assert!(
            stop.contains(" atelier-example-s2-turn@*.service")
                && stop.contains(" atelier-example-s2-gate.service"),
            "{text}"
        );
        for path in [&gate, &vhost, &link] {
            assert!(
                text.contains(&format!("unlink {}", path.display())),
                "{text}"
            );
        }
        assert!(text.contains("run systemctl daemon-reload"), "{text}");
        assert!(
            text.contains("run systemctl try-reload-or-restart nginx.service"),
            "{text}"
        );
    }

    #[test]
    fn archive_and_unlink_run_below_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("srv/ws/sub")).unwrap();
        std::fs::write(tmp.path().join("srv/unit"), b"x").unwrap();
        let actions = [
            RemoveAction::Unlink {
                path: "/srv/unit".into(),
            },
            RemoveAction::Archive {
                from: "/srv/ws".into(),
                to: "/srv/ws.retired-1".into(),
            },
            RemoveAction::Exec {
                argv: vec!["false".into()],
                tolerate: true,
            },
            RemoveAction::Exec {
                argv: vec!["false".into()],
                tolerate: false,
            },
            RemoveAction::Unlink {
                path: "/srv/never".into(),
            },
        ];
        let out = apply_removal(&actions, tmp.path());
        let statuses: Vec<Status> = out.iter().map(|o| o.status).collect();
        assert_eq!(
            statuses,
            [
                Status::Done,
                Status::Done,
                Status::Failed,
                Status::Failed,
                Status::Skipped
            ]
        );
        assert!(!tmp.path().join("srv/unit").exists());
        assert!(tmp.path().join("srv/ws.retired-1/sub").is_dir());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(tmp.path().join("srv/ws.retired-1"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o700);
    }
}
