//! The audit log: one compact JSON line per mutation with its actor, appended to
//! `<AUDIT_DIR>/audit.jsonl`, and `GET /v1/audit` reading it back newest first.
//!
//! The file is read from its end backwards, a block at a time, until the page is full, so the
//! default page costs the same however long the log has grown. A file that reaches its segment
//! size is renamed to `audit.jsonl.<n>` (`n` counting up) at that append, and a read goes on
//! into the segments, newest first: rotation never drops an entry.
//!
//! A failed append is logged loudly and never fails the request it records: the mutation has
//! happened, and refusing to answer would only hide that from the engine.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use atelier_fs::{FsError, Root};

use serde_json::Value;

use crate::actor::Actor;
use crate::dates::iso8601;

pub use atelier_layout::paths::AUDIT_FILE;
use atelier_layout::paths::{audit_segment_file, audit_segment_number};

/// The audit file's mode: the daemon's alone.
const AUDIT_FILE_MODE: u32 = 0o600;
pub use atelier_site_api::limits::{
    DEFAULT_AUDIT_LIMIT as DEFAULT_LIMIT, MAX_AUDIT_LIMIT as MAX_LIMIT,
};

pub use atelier_site_api::AuditEntry;

/// The size at which the audit file becomes a segment and a new file is begun.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// How much of a file one step of a backwards read takes.
const READ_BLOCK: u64 = 64 * 1024;

/// The audit log of one instance.
#[derive(Debug, Clone)]
pub struct Audit {
    dir: PathBuf,
    /// Appends (and the rotation that may follow one) are serialized so two lines never
    /// interleave and no line lands in a file being renamed.
    lock: Arc<Mutex<()>>,
    segment_bytes: u64,
}

impl Audit {
    /// The log in `dir` (the instance's audit root).
    pub fn new(dir: impl Into<PathBuf>) -> Audit {
        Audit::with_segment_bytes(dir, SEGMENT_BYTES)
    }

    /// The log in `dir`, rotated when its file reaches `segment_bytes`.
    pub fn with_segment_bytes(dir: impl Into<PathBuf>, segment_bytes: u64) -> Audit {
        Audit {
            dir: dir.into(),
            lock: Arc::new(Mutex::new(())),
            segment_bytes,
        }
    }

    /// Records one mutation. Blocking: one `write(2)` (and a rename when the file is full).
    pub fn record(&self, actor: &Actor, action: &str, site: Option<&str>, detail: Value) {
        let entry = AuditEntry {
            ts: iso8601(SystemTime::now()),
            actor: actor.clone(),
            action: action.to_owned(),
            site: site.map(str::to_owned),
            detail,
        };
        let line = match serde_json::to_string(&entry) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "[audit] FAILED to encode an audit line");
                return;
            }
        };
        tracing::info!(target: "audit", "[audit] {line}");
        let _serial = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = self.append(&line) {
            tracing::error!(error = %e, "[audit] FAILED to persist audit line — investigate: {line}");
        }
    }

    fn append(&self, line: &str) -> Result<(), FsError> {
        let root = Root::open(&self.dir)?;
        let mut file = root.open_append(AUDIT_FILE, AUDIT_FILE_MODE)?;
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        let io = |op, source| FsError::Io {
            op,
            path: self.dir.join(AUDIT_FILE),
            source,
        };
        file.write_all(&bytes).map_err(|e| io("append to", e))?;
        let size = file.metadata().map_err(|e| io("stat", e))?.len();
        if size >= self.segment_bytes {
            // The line is in; a failed rename only leaves the file growing, and is retried at
            // the next append.
            if let Err(e) = rotate(&root) {
                tracing::error!(error = %e, "[audit] could not rotate the audit file");
            }
        }
        Ok(())
    }

    /// Proves the log can be appended to (the boot preflight's write probe): opens it for
    /// appending, creating it, and writes nothing.
    pub fn probe(&self) -> Result<(), FsError> {
        Root::open(&self.dir)?.open_append(AUDIT_FILE, AUDIT_FILE_MODE)?;
        Ok(())
    }

    /// Entries newest first, only `site`'s when given, at most `limit` (clamped to
    /// `1..=MAX_LIMIT`). Blank and corrupt lines are skipped; an absent file is empty.
    /// Blocking.
    pub fn read(&self, site: Option<&str>, limit: usize) -> Result<Vec<AuditEntry>, FsError> {
        let limit = limit.clamp(1, MAX_LIMIT);
        let root = Root::open(&self.dir)?;
        // The current file first, then the segments newest first. A segment renamed from the
        // file opened a moment ago is the same file, and is read once.
        let mut names = vec![AUDIT_FILE.to_owned()];
        names.extend(segments(&root)?.into_iter().map(|(_, name)| name));
        let mut seen = HashSet::new();
        let mut entries = Vec::new();
        for name in names {
            let file = match root.open_read(&name) {
                Ok(file) => file,
                Err(FsError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            let path = self.dir.join(&name);
            let meta = file.metadata().map_err(|source| FsError::Io {
                op: "stat",
                path: path.clone(),
                source,
            })?;
            if !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            let full = lines_backwards(&file, meta.len(), &path, |line| {
                let Ok(entry) = serde_json::from_slice::<AuditEntry>(line) else {
                    return ControlFlow::Continue(());
                };
                if site.is_none() || entry.site.as_deref() == site {
                    entries.push(entry);
                }
                if entries.len() >= limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            if full.is_break() {
                break;
            }
        }
        Ok(entries)
    }
}

/// The segments in the audit directory, newest (highest number) first.
fn segments(root: &Root) -> Result<Vec<(u64, String)>, FsError> {
    let mut found: Vec<(u64, String)> = atelier_fs::tree::list_dir(root, None)?
        .into_iter()
        .filter_map(|(name, _)| {
            let name = name.into_string().ok()?;
            Some((audit_segment_number(&name)?, name))
        })
        .collect();
    found.sort_unstable_by_key(|segment| std::cmp::Reverse(segment.0));
    Ok(found)
}

/// Renames the audit file to the next segment number.
fn rotate(root: &Root) -> Result<(), FsError> {
    let next = segments(root)?.first().map_or(1, |(n, _)| n + 1);
    root.rename_file(AUDIT_FILE, audit_segment_file(next))
}

/// Calls `each` with the lines of the first `len` bytes of `file`, last line first, a block
/// at a time from the end, until it breaks.
fn lines_backwards(
    file: &File,
    len: u64,
    path: &Path,
    mut each: impl FnMut(&[u8]) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, FsError> {
    let mut pos = len;
    // The start of a line whose beginning lies before `pos`.
    let mut head: Vec<u8> = Vec::new();
    while pos > 0 {
        let start = pos.saturating_sub(READ_BLOCK);
        let mut chunk = vec![0u8; usize::try_from(pos - start).unwrap_or(0)];
        file.read_exact_at(&mut chunk, start)
            .map_err(|source| FsError::Io {
                op: "read",
                path: path.to_path_buf(),
                source,
            })?;
        chunk.extend_from_slice(&head);
        pos = start;
        let mut end = chunk.len();
        while let Some(newline) = chunk[..end].iter().rposition(|&b| b == b'\n') {
            let line = &chunk[newline + 1..end];
            if !line.is_empty() && each(line).is_break() {
                return Ok(ControlFlow::Break(()));
            }
            end = newline;
        }
        chunk.truncate(end);
        head = chunk;
    }
    if !head.is_empty() {
        return Ok(each(&head));
    }
    Ok(ControlFlow::Continue(()))
}

/// Parses `limit` as JavaScript's `Number()` did: absent → the default, non-finite → refused;
/// a fraction is floored and the result clamped.
pub fn parse_limit(value: Option<&str>) -> Result<usize, String> {
    let Some(value) = value else {
        return Ok(DEFAULT_LIMIT);
    };
    let value = value.trim();
    let number: f64 = if value.is_empty() {
        0.0
    } else {
        value
            .parse()
            .map_err(|_| "limit must be a number".to_owned())?
    };
    if !number.is_finite() {
        return Err("limit must be a number".to_owned());
    }
    Ok(number.floor().clamp(1.0, MAX_LIMIT as f64) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(id: i64) -> Actor {
        Actor {
            user_id: id,
            username: format!("user_{id}"),
        }
    }

    #[test]
    fn appends_and_reads_newest_first_with_filter_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::new(dir.path());
        assert!(audit.read(None, 10).unwrap().is_empty(), "absent file");
        audit.record(
            &actor(1),
            "create_site",
            Some("a"),
            serde_json::json!({"x": 1}),
        );
        audit.record(&actor(2), "create_site", Some("b"), serde_json::json!({}));
        audit.record(&actor(1), "session_start", Some("a"), serde_json::json!({}));
        // A torn or foreign line is skipped, not fatal.
        let path = dir.path().join(AUDIT_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{not json\n\n");
        std::fs::write(&path, text).unwrap();
        audit.record(&actor(3), "delete_site", Some("b"), serde_json::json!({}));

        let all = audit.read(None, 100).unwrap();
        let actions: Vec<_> = all.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(
            actions,
            ["delete_site", "session_start", "create_site", "create_site"]
        );
        let only_a = audit.read(Some("a"), 100).unwrap();
        assert_eq!(only_a.len(), 2);
        assert!(only_a.iter().all(|e| e.site.as_deref() == Some("a")));
        assert_eq!(audit.read(None, 1).unwrap().len(), 1);
        assert_eq!(audit.read(None, 0).unwrap().len(), 1, "limit clamps to 1");
        assert_eq!(all[0].actor, actor(3));
    }

    #[test]
    fn limit_parses_like_the_original() {
        let cases: [(Option<&str>, Result<usize, ()>); 8] = [
            (None, Ok(DEFAULT_LIMIT)),
            (Some("5"), Ok(5)),
            (Some("2.7"), Ok(2)),
            (Some("0"), Ok(1)),
            (Some("-3"), Ok(1)),
            (Some("5000"), Ok(MAX_LIMIT)),
            (Some("ten"), Err(())),
            (Some("Infinity"), Err(())),
        ];
        for (input, want) in cases {
            assert_eq!(parse_limit(input).map_err(|_| ()), want, "{input:?}");
        }
    }

    #[test]
    fn a_planted_link_is_refused_and_nothing_is_written_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("victim");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(AUDIT_FILE)).unwrap();
        let audit = Audit::new(dir.path());
        audit.record(&actor(1), "create_site", None, Value::Null);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        assert!(audit.read(None, 10).is_err());
    }

    #[test]
    fn rotation_keeps_every_entry_and_reads_go_on_into_the_segments() {
        let dir = tempfile::tempdir().unwrap();
        // About three entries a file.
        let audit = Audit::with_segment_bytes(dir.path(), 300);
        for n in 0..40_i64 {
            let site = if n % 2 == 0 { "even" } else { "odd" };
            audit.record(&actor(n), "build", Some(site), serde_json::json!({"n": n}));
        }
        let segments = segments(&Root::open(dir.path()).unwrap()).unwrap();
        assert!(segments.len() >= 10, "{segments:?}");
        let numbers: Vec<u64> = segments.iter().map(|(n, _)| *n).collect();
        let mut sorted = numbers.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(numbers, sorted, "newest first");

        let all = audit.read(None, MAX_LIMIT).unwrap();
        let ids: Vec<i64> = all.iter().map(|e| e.actor.user_id).collect();
        assert_eq!(
            ids,
            (0..40).rev().collect::<Vec<_>>(),
            "every entry, newest first"
        );
        let page: Vec<i64> = audit
            .read(None, 5)
            .unwrap()
            .iter()
            .map(|e| e.actor.user_id)
            .collect();
        assert_eq!(page, [39, 38, 37, 36, 35]);
        let odd: Vec<i64> = audit
            .read(Some("odd"), 4)
            .unwrap()
            .iter()
            .map(|e| e.actor.user_id)
            .collect();
        assert_eq!(odd, [39, 37, 35, 33]);
    }

    #[test]
    fn lines_are_read_backwards_across_blocks_and_a_torn_tail_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let long = "x".repeat(usize::try_from(READ_BLOCK).unwrap() + 10);
        let text = format!("first\n{long}\n\nthird\ntorn");
        std::fs::write(&path, &text).unwrap();
        let file = File::open(&path).unwrap();
        let mut seen = Vec::new();
        let flow = lines_backwards(&file, text.len() as u64, &path, |line| {
            seen.push(String::from_utf8(line.to_vec()).unwrap());
            ControlFlow::Continue(())
        })
        .unwrap();
        assert!(flow.is_continue());
        assert_eq!(seen, ["torn", "third", long.as_str(), "first"]);
    }
}
