//! A session's durable state in its workspace: the JSONL event log
//! (`.builder/sessions/<id>.jsonl`) and the `SessionMeta` file (`<id>.meta.json`).
//!
//! The workspace is writable by the site's agent identity, so every open walks from held
//! directory descriptors with `O_NOFOLLOW`, and a log file that is a link, not a regular file,
//! hard-linked or not ours is refused before a byte is written.

use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use atelier_fs::{FileKind, FsError, Root};
use bytes::Bytes;
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::dates::iso8601;

pub use atelier_layout::workspace::SESSIONS_DIR;
use atelier_layout::workspace::{
    BUILDER_DIR, BUILDER_DIR_MODE, PRIVATE_DIR_MODE as SESSIONS_DIR_MODE,
    PRIVATE_FILE_MODE as SESSION_FILE_MODE,
};
/// A meta file larger than this is not one the daemon wrote.
const MAX_META_BYTES: u64 = 64 * 1024;

pub use atelier_site_api::{SessionId, SessionSummary};

/// The log file of session `id`, below the workspace.
fn log_path(id: &SessionId) -> PathBuf {
    Path::new(SESSIONS_DIR).join(format!("{id}.jsonl"))
}

/// The meta file of session `id`, below the workspace.
fn meta_path(id: &SessionId) -> PathBuf {
    Path::new(SESSIONS_DIR).join(format!("{id}.meta.json"))
}

pub use atelier_site_api::{SessionEvent, StoredEvent};

/// One event as the log holds it: its `seq`, whether it ends a turn, and its line (without
/// the newline), which is already the SSE `data:` a follower is sent, so a replay copies bytes
/// rather than decoding and encoding every event again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    /// Monotonic per session, from 0, across turns.
    pub seq: u64,
    /// Whether this is a `turn_end`, the last event of a turn.
    pub turn_end: bool,
    /// The stored line, a `{"seq","ts","body"}` object.
    pub line: Bytes,
}

/// What a reader needs of a line: the whole line must be a `{"seq","ts","body"}` object whose
/// body has a string `type`; the rest of the body is passed on as written.
#[derive(Deserialize)]
struct LineHead<'a> {
    seq: u64,
    // Required to be a string, never read.
    #[serde(rename = "ts", borrow)]
    _ts: Cow<'a, str>,
    body: BodyHead,
}

#[derive(Deserialize)]
struct BodyHead {
    #[serde(rename = "type")]
    kind: Kind,
}

/// The one event type a reader tells apart from the others.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    TurnEnd,
    #[serde(other)]
    Other,
}

/// Reads one log line of `buffer` (the range `line`); `None` for a line that is not a whole
/// event.
fn logged(buffer: &Bytes, line: std::ops::Range<usize>) -> Option<LoggedEvent> {
    let head: LineHead<'_> = serde_json::from_slice(&buffer[line.clone()]).ok()?;
    Some(LoggedEvent {
        seq: head.seq,
        turn_end: matches!(head.body.kind, Kind::TurnEnd),
        line: buffer.slice(line),
    })
}

/// Why a log or meta operation failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum SessionLogError {
    /// The confined walk refused or failed (a planted link, a missing workspace, …).
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The meta could not be encoded or decoded.
    #[error("session meta: {0}")]
    Meta(String),
}

impl SessionLogError {
    /// Whether this is the confined walk refusing something planted (not a plain I/O failure).
    pub fn is_refusal(&self) -> bool {
        match self {
            SessionLogError::Fs(e) => e.is_refusal(),
            _ => false,
        }
    }
}

fn io_error(op: &'static str, path: &Path, errno: Errno) -> FsError {
    FsError::Io {
        op,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

/// The append side of a session's log. One writer per session; its caller serializes appends.
#[derive(Debug)]
pub struct SessionLog {
    file: File,
    path: PathBuf,
    next_seq: u64,
    /// The length of the file's whole lines: where the next line starts, and what an append
    /// that fails is cut back to.
    len: u64,
    /// A failed append could not be cut back, so the file may end inside a line (and a seq
    /// may be in it): the next append starts a line of its own and its length is read again.
    torn: bool,
}

impl SessionLog {
    /// Opens (creating if needed) the log of `id` in `workspace`, seeding the next `seq` from
    /// the highest valid one in the file.
    ///
    /// Creates `.builder/` (0710) and `.builder/sessions/` (0700) when missing but never the
    /// workspace itself. A last line cut short by a crash mid-append is left in place and
    /// terminated, so it stays one skipped line and the next event starts a line of its own.
    pub fn open(workspace: &Root, id: &SessionId) -> Result<SessionLog, SessionLogError> {
        workspace.create_own_dir_all(BUILDER_DIR, BUILDER_DIR_MODE)?;
        workspace.create_dir_all(SESSIONS_DIR, SESSIONS_DIR_MODE)?;
        let path = log_path(id);
        let mut file = workspace.open_append(&path, SESSION_FILE_MODE)?;
        let (max_seq, mut len, ends_cleanly) = scan(&mut file, &path)?;
        if !ends_cleanly {
            file.write_all(b"\n").map_err(|e| FsError::Io {
                op: "terminate the last line of",
                path: path.clone(),
                source: e,
            })?;
            len += 1;
        }
        Ok(SessionLog {
            file,
            path,
            next_seq: max_seq.map_or(0, |s| s + 1),
            len,
            torn: false,
        })
    }

    /// The `seq` the next append gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Appends `event` with the next `seq` as one `write(2)` of one whole line.
    ///
    /// The line reaches the kernel before this returns, so a reader (and a restart after the
    /// daemon is killed) sees it; a `turn_end` is also synced to the disk, which makes every
    /// finished turn durable against a power loss at the cost of one sync per turn.
    ///
    /// An append that fails (a full disk, a failed sync) is cut back to the last whole line,
    /// so the log is as before and the `seq` is not spent: a torn half-line would otherwise
    /// swallow the next event, and a line that reached the file must not share its `seq`.
    pub fn append(&mut self, event: SessionEvent) -> Result<LoggedEvent, SessionLogError> {
        self.append_with(event, |file, bytes| file.write_all(bytes))
    }

    /// [`SessionLog::append`] with the write itself given, so a test can make it fail.
    fn append_with(
        &mut self,
        event: SessionEvent,
        write: impl FnOnce(&mut File, &[u8]) -> std::io::Result<()>,
    ) -> Result<LoggedEvent, SessionLogError> {
        let turn_end = event.is_turn_end();
        let event = StoredEvent {
            seq: self.next_seq,
            ts: iso8601(SystemTime::now()),
            body: event,
        };
        let mut bytes = Vec::new();
        if self.torn {
            self.len = self.file.metadata().map_err(|e| self.io("stat", e))?.len();
            bytes.push(b'\n');
        }
        let line_start = bytes.len();
        serde_json::to_writer(&mut bytes, &event)
            .map_err(|e| SessionLogError::Meta(e.to_string()))?;
        bytes.push(b'\n');
        let written = write(&mut self.file, &bytes)
            .map_err(|e| self.io("append to", e))
            .and_then(|()| match turn_end {
                true => self.file.sync_data().map_err(|e| self.io("sync", e)),
                false => Ok(()),
            });
        if let Err(e) = written {
            self.cut_back();
            return Err(e.into());
        }
        self.len += bytes.len() as u64;
        self.torn = false;
        self.next_seq += 1;
        bytes.pop();
        Ok(LoggedEvent {
            seq: event.seq,
            turn_end,
            line: Bytes::from(bytes).slice(line_start..),
        })
    }

    /// Takes the file back to its last whole line after a failed append. When even that
    /// fails, what was written stays: the next append starts a new line and a new `seq`.
    fn cut_back(&mut self) {
        if let Err(e) = self.file.set_len(self.len) {
            tracing::error!(
                path = %self.path.display(),
                error = %e,
                "could not cut a failed append out of a session log"
            );
            self.torn = true;
            self.next_seq += 1;
        }
    }

    fn io(&self, op: &'static str, source: std::io::Error) -> FsError {
        FsError::Io {
            op,
            path: self.path.clone(),
            source,
        }
    }
}

/// The highest valid `seq` in the file, its length, and whether it ends with a newline (or is
/// empty).
fn scan(file: &mut File, path: &Path) -> Result<(Option<u64>, u64, bool), FsError> {
    file.seek(SeekFrom::Start(0)).map_err(|e| FsError::Io {
        op: "read",
        path: path.to_path_buf(),
        source: e,
    })?;
    let buffer = read_all(&mut *file, path)?;
    let mut max = None;
    let mut ends_cleanly = true;
    for_each_line(&buffer, |line, terminated| {
        ends_cleanly = terminated;
        if let Some(event) = logged(&buffer, line) {
            max = max.max(Some(event.seq));
        }
    });
    Ok((max, buffer.len() as u64, ends_cleanly))
}

/// The whole file, from where it is.
fn read_all(mut file: impl Read, path: &Path) -> Result<Bytes, FsError> {
    let mut buffer = Vec::new();
    file.read_to_end(&mut buffer).map_err(|e| FsError::Io {
        op: "read",
        path: path.to_path_buf(),
        source: e,
    })?;
    Ok(Bytes::from(buffer))
}

/// Calls `each` with the range of every line of `buffer` (without its newline) and whether it
/// was terminated; a line that is not a valid event is the caller's to skip.
fn for_each_line(buffer: &[u8], mut each: impl FnMut(std::ops::Range<usize>, bool)) {
    let mut start = 0;
    while start < buffer.len() {
        match buffer[start..].iter().position(|&b| b == b'\n') {
            Some(len) => {
                each(start..start + len, true);
                start += len + 1;
            }
            None => {
                each(start..buffer.len(), false);
                return;
            }
        }
    }
}

/// Every valid event of `id`'s log with `seq > after`, in file order. A line that is not a
/// valid event is skipped and logged; an absent log (or sessions directory) is empty. A
/// planted link or foreign file is refused.
///
/// A read racing an append can see a torn line in the middle of the file (measured: a line
/// that crosses a page boundary read back with part of it still zero), which looks exactly
/// like a corrupt line and would be a gap. So a read that met a bad line is repeated a few
/// times, and only a line that stays bad is skipped.
pub fn read_events(
    workspace: &Root,
    id: &SessionId,
    after: i64,
) -> Result<Vec<LoggedEvent>, SessionLogError> {
    const ATTEMPTS: u32 = 4;
    let mut attempt = 1;
    loop {
        let (events, bad_lines) = read_events_once(workspace, id, after)?;
        if bad_lines.is_empty() || attempt == ATTEMPTS {
            for line in bad_lines {
                tracing::warn!(session = %id, line, "skipping a log line that is not a valid event");
            }
            return Ok(events);
        }
        attempt += 1;
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The most of a log's end [`last_event_ends_turn`] reads: the last events of a turn are short
/// (a result, a file list, the end), and a text longer than this leaves the answer unknown.
const TAIL_BYTES: u64 = 64 * 1024;

/// Whether the last whole event of `id`'s log is a `turn_end` (`Some(true)` for a log with no
/// event, which has no turn to end); `None` when the end of the log holds no whole event.
/// Reads only the log's end.
pub fn last_event_ends_turn(workspace: &Root, id: &SessionId) -> Result<Option<bool>, FsError> {
    let Some((tail, skipped)) = workspace.read_own_tail(log_path(id), TAIL_BYTES)? else {
        return Ok(Some(true));
    };
    let buffer = Bytes::from(tail);
    let mut last = None;
    for_each_line(&buffer, |line, terminated| {
        if terminated {
            if let Some(event) = logged(&buffer, line) {
                last = Some(event.turn_end);
            }
        }
    });
    // Read from its start, a log without a whole event has no turn to end.
    Ok(last.or((skipped == 0).then_some(true)))
}

/// One pass over the log: the events after `after` and the numbers of the bad lines.
fn read_events_once(
    workspace: &Root,
    id: &SessionId,
    after: i64,
) -> Result<(Vec<LoggedEvent>, Vec<usize>), SessionLogError> {
    let path = log_path(id);
    let file = match workspace.open_read(&path) {
        Ok(file) => file,
        Err(FsError::NotFound { .. }) => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&file).map_err(|e| io_error("stat", &path, e))?;
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(FsError::NotOwned { path }.into());
    }
    let buffer = read_all(file, &path)?;
    let mut events = Vec::new();
    let mut bad_lines = Vec::new();
    let mut number = 0usize;
    for_each_line(&buffer, |line, terminated| {
        number += 1;
        let empty = line.is_empty();
        match logged(&buffer, line) {
            Some(event) if i128::from(event.seq) > i128::from(after) => events.push(event),
            Some(_) => {}
            None if empty => {}
            // An unterminated last line is an append in progress (or cut by a crash): the
            // live fan-out or the next read has it, so it is no reason to read again.
            None if !terminated => {}
            None => bad_lines.push(number),
        }
    });
    Ok((events, bad_lines))
}

/// `SessionMeta`, written tmp+rename and pretty-printed with a trailing newline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The session.
    pub session_id: String,
    /// Its site.
    pub slug: String,
    /// The agent driver its turns run.
    pub driver: String,
    /// When it started (ISO-8601).
    pub started_at: String,
    /// Turns run so far.
    pub turns: u32,
    /// `idle|running|interrupted|error`.
    pub state: String,
    /// The driver's native resume token.
    pub resume_token: Option<String>,
    /// The identity epoch the token was minted under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_epoch: Option<i64>,
    /// A commit refused at shutdown, to be made by the next boot's sweep.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovery_pending: bool,
}

impl From<SessionMeta> for SessionSummary {
    fn from(meta: SessionMeta) -> Self {
        SessionSummary {
            session_id: meta.session_id,
            started_at: meta.started_at,
            turns: meta.turns,
            state: meta.state,
        }
    }
}

/// Writes `meta` atomically (0600) through the confined writer.
pub fn write_meta(workspace: &Root, meta: &SessionMeta) -> Result<(), SessionLogError> {
    let id = SessionId::parse(&meta.session_id)
        .ok_or_else(|| SessionLogError::Meta(format!("bad session id {}", meta.session_id)))?;
    workspace.create_own_dir_all(BUILDER_DIR, BUILDER_DIR_MODE)?;
    workspace.create_dir_all(SESSIONS_DIR, SESSIONS_DIR_MODE)?;
    let mut bytes =
        serde_json::to_vec_pretty(meta).map_err(|e| SessionLogError::Meta(e.to_string()))?;
    bytes.push(b'\n');
    workspace.write_atomic(meta_path(&id), &bytes, SESSION_FILE_MODE)?;
    Ok(())
}

/// Reads `id`'s meta in site `slug`'s workspace: `None` when absent, or when its content names
/// another session or site than its location (the agent can write there, so a copied meta must
/// not pass for another session's). A planted link is refused.
pub fn read_meta(
    workspace: &Root,
    slug: &str,
    id: &SessionId,
) -> Result<Option<SessionMeta>, SessionLogError> {
    let path = meta_path(id);
    let file = match workspace.open_read(&path) {
        Ok(file) => file,
        Err(FsError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&file).map_err(|e| io_error("stat", &path, e))?;
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(FsError::NotOwned { path }.into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_META_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| FsError::Io {
            op: "read",
            path: path.clone(),
            source: e,
        })?;
    let meta: SessionMeta =
        serde_json::from_slice(&bytes).map_err(|e| SessionLogError::Meta(e.to_string()))?;
    Ok((meta.slug == slug && meta.session_id == id.as_str()).then_some(meta))
}

/// Every readable meta of site `slug`, newest `started_at` first; an unreadable or planted one
/// is logged and left out.
pub fn list_metas(workspace: &Root, slug: &str) -> Result<Vec<SessionMeta>, SessionLogError> {
    let entries = match atelier_fs::tree::list_dir(workspace, Some(Path::new(SESSIONS_DIR))) {
        Ok(entries) => entries,
        Err(FsError::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut metas: Vec<SessionMeta> = entries
        .into_iter()
        .filter(|(_, kind)| *kind == FileKind::File)
        .filter_map(|(name, _)| SessionId::parse(name.to_str()?.strip_suffix(".meta.json")?))
        .filter_map(|id| match read_meta(workspace, slug, &id) {
            Ok(meta) => meta,
            Err(e) => {
                tracing::warn!(site = %slug, session = %id, error = %e, "skipping a session meta");
                None
            }
        })
        .collect();
    metas.sort_by(|a, b| b.started_at.cmp(&a.started_at));
    Ok(metas)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(i: u64) -> SessionEvent {
        SessionEvent::text(i.to_string())
    }

    fn idle_end() -> SessionEvent {
        SessionEvent::TurnEnd {
            state: atelier_site_api::TurnState::Idle,
            resume_token: None,
        }
    }

    fn workspace() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("site")).unwrap();
        let root = Root::open(dir.path().join("site")).unwrap();
        (dir, root)
    }

    #[test]
    fn the_last_whole_event_tells_whether_the_turn_ended() {
        let (_dir, ws) = workspace();
        let id = SessionId::new_v4().unwrap();
        assert_eq!(
            last_event_ends_turn(&ws, &id).unwrap(),
            Some(true),
            "no log"
        );
        let mut log = SessionLog::open(&ws, &id).unwrap();
        assert_eq!(last_event_ends_turn(&ws, &id).unwrap(), Some(true), "empty");
        log.append(text(0)).unwrap();
        assert_eq!(last_event_ends_turn(&ws, &id).unwrap(), Some(false));
        log.append(idle_end()).unwrap();
        assert_eq!(last_event_ends_turn(&ws, &id).unwrap(), Some(true));
        // A line cut by a crash after the end is no event.
        let path = ws.path().join(log_path(&id));
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, br#"{"seq":2,"ts":"t","bo"#).unwrap();
        assert_eq!(last_event_ends_turn(&ws, &id).unwrap(), Some(true));
        // An end longer ago than the tail reads is not guessed.
        std::io::Write::write_all(&mut file, &vec![b'x'; 70 * 1024]).unwrap();
        assert_eq!(last_event_ends_turn(&ws, &id).unwrap(), None);
    }

    #[test]
    fn session_ids_are_lowercase_uuids_only() {
        let id = SessionId::new_v4().unwrap();
        assert_eq!(SessionId::parse(id.as_str()), Some(id.clone()));
        assert_eq!(id.as_str().as_bytes()[14], b'4');
        for bad in [
            "",
            "../../etc/passwd",
            "0123456789abcdef",
            "01234567-89ab-cdef-0123-456789ABCDEF",
            "01234567-89ab-cdef-0123-456789abcdef0",
            "01234567-89ab-cdef-0123/456789abcdef",
            "01234567-89ab-cdef-0123-456789abcde%",
        ] {
            assert_eq!(SessionId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn seq_is_monotonic_and_continues_after_a_reopen() {
        let (_dir, ws) = workspace();
        let id = SessionId::new_v4().unwrap();
        let mut log = SessionLog::open(&ws, &id).unwrap();
        for i in 0..3 {
            assert_eq!(log.append(text(i)).unwrap().seq, i);
        }
        // A body without a `type` cannot be appended (the type says so); read, it is no event.
        let line = Bytes::from_static(br#"{"seq":3,"ts":"t","body":{"text":"no type"}}"#);
        assert!(logged(&line, 0..line.len()).is_none());
        drop(log);
        let mut log = SessionLog::open(&ws, &id).unwrap();
        assert_eq!(log.append(idle_end()).unwrap().seq, 3);
        let seqs: Vec<u64> = read_events(&ws, &id, 0)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(read_events(&ws, &id, -1).unwrap().len(), 4);
        let mode = std::fs::metadata(ws.path().join(log_path(&id))).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
    }

    #[test]
    fn meta_round_trips_and_a_mislocated_one_is_absent() {
        let (_dir, ws) = workspace();
        let id = SessionId::new_v4().unwrap();
        let meta = SessionMeta {
            session_id: id.to_string(),
            slug: "museum".into(),
            driver: "claude_code".into(),
            started_at: "2026-01-01T00:00:00.000Z".into(),
            turns: 0,
            state: "running".into(),
            resume_token: None,
            identity_epoch: Some(1),
            recovery_pending: false,
        };
        write_meta(&ws, &meta).unwrap();
        assert_eq!(read_meta(&ws, "museum", &id).unwrap(), Some(meta.clone()));
        assert_eq!(read_meta(&ws, "other", &id).unwrap(), None);
        let text = std::fs::read_to_string(ws.path().join(meta_path(&id))).unwrap();
        assert!(
            text.ends_with("}\n") && !text.contains("recovery_pending"),
            "{text}"
        );
        assert_eq!(list_metas(&ws, "museum").unwrap(), vec![meta]);
    }

    #[test]
    fn a_cut_last_line_is_skipped_and_the_next_append_continues_the_seq() {
        let (_dir, ws) = workspace();
        let id = SessionId::new_v4().unwrap();
        let mut log = SessionLog::open(&ws, &id).unwrap();
        for i in 0..3 {
            log.append(text(i)).unwrap();
        }
        drop(log);
        // A crash mid-append leaves half a line without its newline, and a bad line in the
        // middle of a log (an old writer's bug) must not hide the ones after it.
        let file = ws.path().join(log_path(&id));
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.insert_str(0, "not json\n{\"seq\":99,\"ts\":\"x\",\"body\":{}}\n");
        text.push_str(r#"{"seq":3,"ts":"2026-01-01T00:00:00.000Z","bo"#);
        std::fs::write(&file, text).unwrap();

        let mut log = SessionLog::open(&ws, &id).unwrap();
        assert_eq!(log.next_seq(), 3);
        assert_eq!(log.append(idle_end()).unwrap().seq, 3);
        let events = read_events(&ws, &id, -1).unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        assert!(events[3].turn_end);
        // The cut line stays a line of its own; the new event did not glue onto it.
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("\"bo\n{\"seq\":3"), "{text}");
    }

    /// A write that gets the first `keep` bytes out through `file`, then fails as a full
    /// disk does.
    fn full_after(file: &mut File, bytes: &[u8], keep: usize) -> std::io::Result<()> {
        file.write_all(&bytes[..keep])?;
        Err(Errno::NOSPC.into())
    }

    #[test]
    fn a_failed_append_is_cut_back_and_spends_no_seq() {
        let (_dir, ws) = workspace();
        let id = SessionId::new_v4().unwrap();
        let mut log = SessionLog::open(&ws, &id).unwrap();
        for i in 0..2 {
            log.append(text(i)).unwrap();
        }
        let file = ws.path().join(log_path(&id));
        let before = std::fs::read(&file).unwrap();
        let half = |file: &mut File, bytes: &[u8]| full_after(file, bytes, bytes.len() / 2);
        let err = log.append_with(text(2), half).unwrap_err();
        assert!(err.to_string().contains("append to"), "{err}");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            before,
            "the torn half-line stays"
        );
        assert_eq!(log.next_seq(), 2);
        assert_eq!(log.append(idle_end()).unwrap().seq, 2);
        let seqs: Vec<u64> = read_events(&ws, &id, -1)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [0, 1, 2]);
        // A reopen agrees with the writer about where the file ends.
        drop(log);
        assert_eq!(SessionLog::open(&ws, &id).unwrap().next_seq(), 3);
    }

    #[test]
    fn a_failed_append_that_cannot_be_cut_back_neither_swallows_the_next_nor_shares_its_seq() {
        let (_dir, ws) = workspace();
        let id = SessionId::new_v4().unwrap();
        let mut log = SessionLog::open(&ws, &id).unwrap();
        log.append(text(0)).unwrap();
        // A descriptor opened for reading cannot be truncated: the cut-back fails.
        let file = ws.path().join(log_path(&id));
        let appender = std::mem::replace(&mut log.file, File::open(&file).unwrap());
        let mut side = appender.try_clone().unwrap();
        // The whole line is written but its newline is not: it is a valid event once the
        // next append ends its line, so its seq must not be given again.
        let whole_but_unterminated =
            |_: &mut File, bytes: &[u8]| full_after(&mut side, bytes, bytes.len() - 1);
        log.append_with(text(1), whole_but_unterminated)
            .unwrap_err();
        log.file = appender;
        assert_eq!(log.append(idle_end()).unwrap().seq, 2);
        let events = read_events(&ws, &id, -1).unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [0, 1, 2]);
        assert!(events[2].turn_end);
        drop(log);
        let mut log = SessionLog::open(&ws, &id).unwrap();
        assert_eq!(log.next_seq(), 3);
        // And a half-line (no valid event) stays one skipped line.
        let appender = std::mem::replace(&mut log.file, File::open(&file).unwrap());
        let mut side = appender.try_clone().unwrap();
        let half = |_: &mut File, bytes: &[u8]| full_after(&mut side, bytes, bytes.len() / 2);
        log.append_with(text(3), half).unwrap_err();
        log.file = appender;
        assert_eq!(log.append(text(4)).unwrap().seq, 4);
        let seqs: Vec<u64> = read_events(&ws, &id, 2)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [4]);
    }

    #[test]
    fn planted_links_at_the_log_or_its_directory_are_refused_and_change_nothing() {
        let (dir, ws) = workspace();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "keep\n").unwrap();
        let id = SessionId::new_v4().unwrap();
        std::fs::create_dir_all(ws.path().join(SESSIONS_DIR)).unwrap();
        let log = ws.path().join(log_path(&id));

        std::os::unix::fs::symlink(&outside, &log).unwrap();
        let err = SessionLog::open(&ws, &id).unwrap_err();
        assert!(err.is_refusal(), "{err}");
        let err = read_events(&ws, &id, -1).unwrap_err();
        assert!(err.is_refusal(), "{err}");
        std::fs::remove_file(&log).unwrap();

        std::fs::hard_link(&outside, &log).unwrap();
        let err = SessionLog::open(&ws, &id).unwrap_err();
        assert!(
            matches!(err, SessionLogError::Fs(FsError::HardLinkRefused { .. })),
            "{err}"
        );
        std::fs::remove_file(&log).unwrap();

        std::fs::remove_dir(ws.path().join(SESSIONS_DIR)).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, ws.path().join(SESSIONS_DIR)).unwrap();
        let err = SessionLog::open(&ws, &id).unwrap_err();
        assert!(err.is_refusal(), "{err}");
        assert!(list_metas(&ws, "site").is_err());

        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep\n");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
