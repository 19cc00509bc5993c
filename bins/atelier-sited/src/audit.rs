//! The audit log: one compact JSON line per mutation with its actor, appended to
//! `<AUDIT_DIR>/audit.jsonl`, and `GET /v1/audit` reading it back newest first.
//!
//! A failed append is logged loudly and never fails the request it records: the mutation has
//! happened, and refusing to answer would only hide that from the engine.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use atelier_fs::{FsError, Root};

use serde_json::Value;

use crate::actor::Actor;
use crate::dates::iso8601;

pub use atelier_layout::paths::AUDIT_FILE;

/// The audit file's mode: the daemon's alone.
const AUDIT_FILE_MODE: u32 = 0o600;
pub use atelier_site_api::limits::{
    DEFAULT_AUDIT_LIMIT as DEFAULT_LIMIT, MAX_AUDIT_LIMIT as MAX_LIMIT,
};

pub use atelier_site_api::AuditEntry;

/// The audit log of one instance.
#[derive(Debug, Clone)]
pub struct Audit {
    dir: PathBuf,
    /// Appends are serialized so two lines never interleave.
    lock: Arc<Mutex<()>>,
}

impl Audit {
    /// The log in `dir` (the instance's audit root).
    pub fn new(dir: impl Into<PathBuf>) -> Audit {
        Audit {
            dir: dir.into(),
            lock: Arc::new(Mutex::new(())),
        }
    }

    /// Records one mutation. Blocking: one `write(2)`.
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
        file.write_all(&bytes).map_err(|source| FsError::Io {
            op: "append to",
            path: self.dir.join(AUDIT_FILE),
            source,
        })
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
        let file = match root.open_read(AUDIT_FILE) {
            Ok(file) => file,
            Err(FsError::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut entries: Vec<AuditEntry> = BufReader::new(file)
            .split(b'\n')
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_slice::<AuditEntry>(&line).ok())
            .filter(|entry| site.is_none() || entry.site.as_deref() == site)
            .collect();
        entries.reverse();
        entries.truncate(limit);
        Ok(entries)
    }
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
}
