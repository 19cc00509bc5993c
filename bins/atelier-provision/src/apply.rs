//! The dumb executor: runs a plan's actions in order, stops at the first failure and reports
//! every later action as not attempted. Nothing is rolled back; a second apply finishes the
//! job. Files are written atomically with their owner and mode through `atelier-fs`, below a
//! configurable host root (`/` in production).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use atelier_fs::{FsError, Root};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Serialize;

use crate::host::{read_accounts, under_root};
use crate::plan::{Action, Content, DirChange, Disposition, ExecStep};

/// Mode of a parent directory the plan did not name but a file needs (`/etc/polkit-1/rules.d`
/// on a host without polkit rules yet).
const PARENT_DIR_MODE: u32 = 0o755;

/// What became of one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It changed the host.
    Done,
    /// The host already matched at execution time; nothing was touched.
    Unchanged,
    /// It records an operator file still missing; nothing was written.
    Awaiting,
    /// A restart put off while the runs it would cut off are live; nothing was done.
    Deferred,
    /// It failed; the run stopped here.
    Failed,
    /// Not attempted, because an earlier action failed.
    Skipped,
}

/// One action's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionOutcome {
    /// The action, described in one line.
    pub action: String,
    /// What happened.
    pub status: Status,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an apply did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Every action's outcome, in order.
    pub outcomes: Vec<ActionOutcome>,
}

// === impl Report ===

impl Report {
    /// Whether an action failed.
    pub fn failed(&self) -> bool {
        self.outcomes.iter().any(|o| o.status == Status::Failed)
    }

    /// Whether an operator file is still missing.
    pub fn awaiting(&self) -> bool {
        self.outcomes.iter().any(|o| o.status == Status::Awaiting)
    }
}

/// Why one action failed.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("{0}")]
    Other(String),
}

/// What an apply tells its caller while it runs.
pub trait Watch {
    /// One action's outcome, as soon as it is known.
    fn completed(&mut self, outcome: &ActionOutcome);

    /// How often to be told about an action that makes the operator wait ([`waits`]), or
    /// `None` to be told nothing until it ends.
    fn pace(&self) -> Option<Duration> {
        None
    }

    /// A waiting action has been running for `elapsed`: told as it starts, then every
    /// [`Watch::pace`] until it ends (its outcome follows through [`Watch::completed`]).
    fn waiting(&mut self, _action: &Action, _elapsed: Duration) {}
}

/// A watch told only of outcomes.
struct Outcomes<'a>(&'a mut dyn FnMut(&ActionOutcome));

impl Watch for Outcomes<'_> {
    fn completed(&mut self, outcome: &ActionOutcome) {
        (self.0)(outcome);
    }
}

/// Executes `actions` in order below `root`, telling `completed` each outcome as it is known
/// (an operator watching a long apply sees each step as it ends, not all of them at the end).
pub fn apply(actions: &[Action], root: &Path, completed: &mut dyn FnMut(&ActionOutcome)) -> Report {
    apply_watched(actions, root, &mut Outcomes(completed))
}

/// Whether `action` may keep the operator waiting: it runs a command (systemd starting or
/// restarting units, the web server's test, an account tool) or hashes passwords.
pub fn waits(action: &Action) -> bool {
    match action {
        Action::Account { .. } | Action::Exec { .. } => true,
        Action::File { content, .. } => matches!(content, Content::Htpasswd(_)),
        _ => false,
    }
}

/// [`apply`], telling `watch` also how long each waiting action has been running.
pub fn apply_watched(actions: &[Action], root: &Path, watch: &mut dyn Watch) -> Report {
    let mut report = Report::default();
    let mut failed = false;
    for action in actions {
        let (status, error) = if failed {
            (
                Status::Skipped,
                Some("not attempted: an earlier action failed".into()),
            )
        } else {
            match execute_watched(action, root, watch) {
                Ok(status) => (status, None),
                Err(e) => {
                    failed = true;
                    let mut message = e.to_string();
                    if matches!(
                        action,
                        Action::Exec {
                            step: ExecStep::WebConfigtest,
                            ..
                        }
                    ) {
                        message.push_str("; NOTHING was reloaded");
                    }
                    (Status::Failed, Some(message))
                }
            }
        };
        let outcome = ActionOutcome {
            action: action.to_string(),
            status,
            error,
        };
        watch.completed(&outcome);
        report.outcomes.push(outcome);
    }
    report
}

/// Executes `action`; one that [`waits`] runs on a thread of its own when `watch` keeps pace,
/// so that `watch` hears of it while it runs.
fn execute_watched(
    action: &Action,
    root: &Path,
    watch: &mut dyn Watch,
) -> Result<Status, StepError> {
    let Some(pace) = watch.pace().filter(|_| waits(action)) else {
        return execute(action, root);
    };
    let started = Instant::now();
    std::thread::scope(|scope| {
        let (done, result) = mpsc::channel();
        scope.spawn(move || {
            // The receiver outlives the thread: the scope joins it first.
            let _ = done.send(execute(action, root));
        });
        loop {
            watch.waiting(action, started.elapsed());
            match result.recv_timeout(pace) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(StepError::Other("the step ended without a result".into()))
                }
            }
        }
    })
}

fn execute(action: &Action, root: &Path) -> Result<Status, StepError> {
    match action {
        Action::Account { argv, .. } | Action::Exec { argv, .. } => run(argv),
        Action::DeferRestart { .. } => Ok(Status::Deferred),
        Action::Dir {
            path,
            owner,
            group,
            mode,
            changes,
        } => {
            let host = Root::open(root)?;
            let rel = relative(path)?;
            if changes.contains(&DirChange::Create) {
                if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
                    host.create_dir_all(parent, PARENT_DIR_MODE)?;
                }
                host.create_dir_all(&rel, *mode)?;
            }
            let (uid, gid) = ids(root, owner, group)?;
            host.set_owner_and_mode(&rel, uid, gid, *mode)?;
            Ok(Status::Done)
        }
        Action::File {
            path,
            disposition,
            content,
            owner,
            group,
            mode,
            ..
        } => write_file(root, path, *disposition, content, (owner, group, *mode)),
        Action::Unlink { path } => {
            let (dir, name) = parent_and_name(path)?;
            let parent = Root::open(under_root(root, dir))?;
            Ok(if parent.remove_file(name)? {
                Status::Done
            } else {
                Status::Unchanged
            })
        }
        Action::Archive { from, to } => {
            let real_to = under_root(root, to);
            if std::fs::symlink_metadata(&real_to).is_ok() {
                return Err(StepError::Other(format!("{} already exists", to.display())));
            }
            let (dir, name) = parent_and_name(from)?;
            match Root::open(under_root(root, dir))?.set_owner_and_mode(name, 0, 0, 0o700) {
                Ok(_) => {}
                Err(FsError::NotFound { .. }) => return Ok(Status::Unchanged),
                Err(e) => return Err(e.into()),
            }
            std::fs::rename(under_root(root, from), &real_to)
                .map_err(|e| StepError::Other(format!("archive {}: {e}", from.display())))?;
            Ok(Status::Done)
        }
        Action::Symlink {
            path,
            target,
            owner,
            group,
            ..
        } => {
            let real = under_root(root, path);
            if std::fs::symlink_metadata(&real).is_ok() {
                return Ok(Status::Unchanged);
            }
            let (uid, gid) = ids(root, owner, group)?;
            let host = Root::open(root)?;
            let rel = relative(path)?;
            if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
                host.create_dir_all(parent, PARENT_DIR_MODE)?;
            }
            std::os::unix::fs::symlink(target, &real)
                .and_then(|()| std::os::unix::fs::lchown(&real, Some(uid), Some(gid)))
                .map_err(|e| StepError::Other(format!("link {}: {e}", path.display())))?;
            Ok(Status::Done)
        }
    }
}

fn write_file(
    root: &Path,
    path: &Path,
    disposition: Disposition,
    content: &Content,
    (owner, group, mode): (&str, &str, u32),
) -> Result<Status, StepError> {
    if disposition == Disposition::Awaiting {
        return Ok(Status::Awaiting);
    }
    let host = Root::open(root)?;
    let rel = relative(path)?;
    let (uid, gid) = ids(root, owner, group)?;
    if disposition == Disposition::Metadata {
        return Ok(match host.set_owner_and_mode(&rel, uid, gid, mode)? {
            atelier_fs::Outcome::Changed => Status::Done,
            atelier_fs::Outcome::Unchanged => Status::Unchanged,
        });
    }
    if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        host.create_dir_all(parent, PARENT_DIR_MODE)?;
    }
    let bytes = match content {
        Content::Literal(bytes) => bytes.clone(),
        Content::Random(n) => {
            // A credential is never overwritten, even if it appeared since the plan was made.
            match host.metadata(&rel) {
                Ok(_) => return Ok(Status::Unchanged),
                Err(FsError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            // Unpadded URL-safe base64: it survives a URL, a header and a file name, and
            // chatd's key reader takes it besides the standard alphabet.
            let mut token = URL_SAFE_NO_PAD.encode(random_bytes(*n)?).into_bytes();
            token.push(b'\n');
            token
        }
        Content::Htpasswd(users) => htpasswd(root, users)?,
        Content::ChatProxyAuth(token) => chat_proxy_auth(root, token)?,
        Content::Operator | Content::Existing => {
            return Err(StepError::Other(format!(
                "{}: nothing to write for a {disposition:?} action",
                path.display()
            )))
        }
    };
    Ok(
        match host.write_atomic_owned(&rel, &bytes, mode, uid, gid)? {
            atelier_fs::Outcome::Changed => Status::Done,
            atelier_fs::Outcome::Unchanged => Status::Unchanged,
        },
    )
}

fn parent_and_name(path: &Path) -> Result<(&Path, &std::ffi::OsStr), StepError> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((dir, name)),
        _ => Err(StepError::Other(format!(
            "{} has no parent",
            path.display()
        ))),
    }
}

/// A host path as a path relative to the host root.
fn relative(path: &Path) -> Result<PathBuf, StepError> {
    path.strip_prefix("/")
        .map(Path::to_path_buf)
        .map_err(|_| StepError::Other(format!("{} is not absolute", path.display())))
}

/// Resolves names at execution time: the plan's own identity phase may have just created them.
fn ids(root: &Path, owner: &str, group: &str) -> Result<(u32, u32), StepError> {
    let accounts = read_accounts(root).map_err(|e| StepError::Other(e.to_string()))?;
    let uid = accounts
        .user(owner)
        .map(|u| u.uid)
        .ok_or_else(|| StepError::Other(format!("no user {owner}")))?;
    let gid = accounts
        .group(group)
        .map(|g| g.gid)
        .ok_or_else(|| StepError::Other(format!("no group {group}")))?;
    Ok((uid, gid))
}

fn run(argv: &[String]) -> Result<Status, StepError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(StepError::Other("empty command".into()));
    };
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| StepError::Other(format!("{}: {e}", argv.join(" "))))?;
    if out.status.success() {
        Ok(Status::Done)
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(StepError::Other(format!(
            "{} exited with {}: {}",
            argv.join(" "),
            out.status,
            stderr.trim()
        )))
    }
}

/// The shortest service token chatd accepts.
const MIN_CHATD_TOKEN: usize = 32;

/// The web server's include for chatd's service token, from the credential `token`. The token
/// lands inside a quoted nginx directive, so only base64 text is taken (a minted token always
/// is); a refusal never shows it.
fn chat_proxy_auth(root: &Path, token: &Path) -> Result<Vec<u8>, StepError> {
    let bytes = std::fs::read(under_root(root, token))
        .map_err(|e| StepError::Other(format!("{}: {e}", token.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim_end_matches('\n');
    let base64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '/' | '=');
    if text.len() < MIN_CHATD_TOKEN || !text.chars().all(base64) {
        return Err(StepError::Other(format!(
            "{}: chatd's service token must be base64 text of at least {MIN_CHATD_TOKEN} \
             characters (delete it and apply again to mint one)",
            token.display()
        )));
    }
    Ok(crate::render::chat::proxy_auth_include(text).into_bytes())
}

/// The bcrypt cost of preproduction passwords.
const BCRYPT_COST: &str = "12";

/// `name:$2y$…` lines for `users`, hashed by `htpasswd -niB` with the password on its stdin
/// (never on a command line). The password is its file minus one trailing newline.
fn htpasswd(root: &Path, users: &[(String, PathBuf)]) -> Result<Vec<u8>, StepError> {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut out = Vec::new();
    for (name, file) in users {
        let mut password = std::fs::read(under_root(root, file))
            .map_err(|e| StepError::Other(format!("{}: {e}", file.display())))?;
        if password.last() == Some(&b'\n') {
            password.pop();
        }
        let mut child = Command::new("htpasswd")
            .args(["-niB", "-C", BCRYPT_COST, name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StepError::Other(format!("htpasswd (apache2-utils) is needed: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&password)
                .map_err(|e| StepError::Other(format!("htpasswd: {e}")))?;
        }
        let done = child
            .wait_with_output()
            .map_err(|e| StepError::Other(format!("htpasswd: {e}")))?;
        let line = String::from_utf8_lossy(&done.stdout);
        let line = line.trim();
        if !done.status.success() || !line.starts_with(&format!("{name}:$2")) {
            return Err(StepError::Other(format!("htpasswd failed for {name}")));
        }
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

fn random_bytes(n: usize) -> Result<Vec<u8>, StepError> {
    let mut bytes = vec![0; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| StepError::Other(format!("read /dev/urandom: {e}")))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;
    use crate::plan::Phase;

    /// A host root whose account files name the test's own user as `me`.
    fn host_root() -> (tempfile::TempDir, u32, u32) {
        let tmp = tempfile::tempdir().unwrap();
        let me = std::fs::metadata("/proc/self").unwrap();
        let (uid, gid) = (me.uid(), me.gid());
        std::fs::create_dir_all(tmp.path().join("etc")).unwrap();
        std::fs::write(
            tmp.path().join("etc/passwd"),
            format!("me:x:{uid}:{gid}::/:/bin/sh\n"),
        )
        .unwrap();
        std::fs::write(tmp.path().join("etc/group"), format!("mine:x:{gid}:\n")).unwrap();
        (tmp, uid, gid)
    }

    fn file(path: &str, disposition: Disposition, content: Content, mode: u32) -> Action {
        Action::File {
            phase: Phase::Artifact,
            path: path.into(),
            disposition,
            drift: None,
            content,
            owner: "me".into(),
            group: "mine".into(),
            mode,
        }
    }

    #[test]
    fn writes_dirs_and_files_with_owner_and_mode_and_stops_at_the_first_failure() {
        let (tmp, uid, gid) = host_root();
        let actions = vec![
            Action::Dir {
                path: "/srv/www/site".into(),
                owner: "me".into(),
                group: "mine".into(),
                mode: 0o2750,
                changes: vec![DirChange::Create],
            },
            file(
                "/srv/www/site/.marker",
                Disposition::Create,
                Content::Literal(b"x\n".to_vec()),
                0o644,
            ),
            file(
                "/etc/atelier/t/credentials/SERVICE_TOKEN",
                Disposition::Create,
                Content::Random(32),
                0o600,
            ),
            file(
                "/etc/atelier/t/credentials/KEY",
                Disposition::Awaiting,
                Content::Operator,
                0o600,
            ),
            Action::Exec {
                step: ExecStep::WebConfigtest,
                argv: vec!["false".into()],
            },
            file(
                "/etc/never",
                Disposition::Create,
                Content::Literal(b"no".to_vec()),
                0o644,
            ),
        ];
        let mut told = Vec::new();
        let report = apply(&actions, tmp.path(), &mut |o| told.push(o.clone()));
        assert_eq!(
            told, report.outcomes,
            "each outcome is told as it is known, in order"
        );
        let statuses: Vec<Status> = report.outcomes.iter().map(|o| o.status).collect();
        assert_eq!(
            statuses,
            [
                Status::Done,
                Status::Done,
                Status::Done,
                Status::Awaiting,
                Status::Failed,
                Status::Skipped
            ]
        );
        assert!(report.outcomes[4]
            .error
            .as_deref()
            .unwrap()
            .contains("NOTHING was reloaded"));
        let site = std::fs::metadata(tmp.path().join("srv/www/site")).unwrap();
        assert_eq!(site.permissions().mode() & 0o7777, 0o2750);
        assert_eq!((site.uid(), site.gid()), (uid, gid));
        // The ancestor the plan did not name is a plain 0755 directory.
        let parent = std::fs::metadata(tmp.path().join("srv/www")).unwrap();
        assert_eq!(parent.permissions().mode() & 0o7777, 0o755);
        let token =
            std::fs::read_to_string(tmp.path().join("etc/atelier/t/credentials/SERVICE_TOKEN"))
                .unwrap();
        assert_eq!(
            token.len(),
            44,
            "43 base64url characters and a newline: {token:?}"
        );
        let text = token.strip_suffix('\n').unwrap();
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "only the URL-safe alphabet, unpadded: {token:?}"
        );
        assert_eq!(URL_SAFE_NO_PAD.decode(text).unwrap().len(), 32);
        assert!(!tmp.path().join("etc/atelier/t/credentials/KEY").exists());
        assert!(!tmp.path().join("etc/never").exists());

        // A minted credential is never overwritten.
        let again = apply(&actions[2..3], tmp.path(), &mut |_| {});
        assert_eq!(again.outcomes[0].status, Status::Unchanged);
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("etc/atelier/t/credentials/SERVICE_TOKEN"))
                .unwrap(),
            token
        );
    }

    /// Remembers what an apply told it, at a pace of `pace`.
    struct Told {
        pace: Option<Duration>,
        waiting: Vec<(String, Duration)>,
        completed: Vec<Status>,
    }

    impl Watch for Told {
        fn completed(&mut self, outcome: &ActionOutcome) {
            self.completed.push(outcome.status);
        }

        fn pace(&self) -> Option<Duration> {
            self.pace
        }

        fn waiting(&mut self, action: &Action, elapsed: Duration) {
            self.waiting.push((action.to_string(), elapsed));
        }
    }

    #[test]
    fn a_waiting_action_is_told_while_it_runs_and_only_when_asked() {
        let actions = vec![
            Action::Exec {
                step: ExecStep::DaemonReload,
                argv: vec!["sleep".into(), "0.35".into()],
            },
            file(
                "/etc/quick",
                Disposition::Create,
                Content::Literal(b"q".to_vec()),
                0o644,
            ),
        ];
        let cases = [
            ("kept pace with", Some(Duration::from_millis(100)), 3),
            ("not asked", None, 0),
        ];
        for (name, pace, at_least) in cases {
            let (tmp, _, _) = host_root();
            let mut told = Told {
                pace,
                waiting: Vec::new(),
                completed: Vec::new(),
            };
            let report = apply_watched(&actions, tmp.path(), &mut told);
            assert_eq!(told.completed, [Status::Done, Status::Done], "{name}");
            assert_eq!(report.outcomes.len(), 2, "{name}");
            assert!(told.waiting.len() >= at_least, "{name}: {:?}", told.waiting);
            assert!(
                told.waiting
                    .iter()
                    .all(|(a, _)| a == "service  run sleep 0.35"),
                "{name}: only the command waits: {:?}",
                told.waiting
            );
            assert!(
                told.waiting.windows(2).all(|w| w[0].1 <= w[1].1),
                "{name}: elapsed only grows"
            );
        }
        assert!(waits(&actions[0]) && !waits(&actions[1]));
    }

    #[test]
    fn metadata_actions_fix_mode_without_touching_bytes() {
        let (tmp, _, _) = host_root();
        std::fs::write(tmp.path().join("etc/f"), b"keep").unwrap();
        std::fs::set_permissions(
            tmp.path().join("etc/f"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let report = apply(
            &[file(
                "/etc/f",
                Disposition::Metadata,
                Content::Existing,
                0o640,
            )],
            tmp.path(),
            &mut |_| {},
        );
        assert_eq!(report.outcomes[0].status, Status::Done, "{report:?}");
        assert_eq!(std::fs::read(tmp.path().join("etc/f")).unwrap(), b"keep");
        let mode = std::fs::metadata(tmp.path().join("etc/f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o640);
    }

    #[test]
    fn htpasswd_hashes_each_password_file_with_bcrypt() {
        let (tmp, _, _) = host_root();
        std::fs::write(tmp.path().join("etc/pw"), b"s3cret-pass\n").unwrap();
        let action = file(
            "/etc/preprod.htpasswd",
            Disposition::Create,
            Content::Htpasswd(vec![("preview".into(), "/etc/pw".into())]),
            0o640,
        );
        let report = apply(&[action], tmp.path(), &mut |_| {});
        assert_eq!(report.outcomes[0].status, Status::Done, "{report:?}");
        let written = tmp.path().join("etc/preprod.htpasswd");
        let text = std::fs::read_to_string(&written).unwrap();
        assert!(text.starts_with("preview:$2y$12$"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
        // The trailing newline is not part of the password.
        let verified = Command::new("htpasswd")
            .arg("-vb")
            .arg(&written)
            .args(["preview", "s3cret-pass"])
            .output()
            .unwrap();
        assert!(verified.status.success(), "{verified:?}");
    }

    #[test]
    fn an_unknown_owner_fails_by_name() {
        let (tmp, _, _) = host_root();
        let mut action = file(
            "/etc/g",
            Disposition::Create,
            Content::Literal(b"g".to_vec()),
            0o644,
        );
        if let Action::File { owner, .. } = &mut action {
            *owner = "nobody-here".into();
        }
        let report = apply(&[action], tmp.path(), &mut |_| {});
        assert!(report.failed());
        assert!(report.outcomes[0]
            .error
            .as_deref()
            .unwrap()
            .contains("no user nobody-here"));
    }
}
