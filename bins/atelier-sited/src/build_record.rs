//! A build's record, `.builder/builds/<id>.json`: its shape, and reading and writing it. The
//! build service writes it; the site service shows the newest in the site's status.

use std::path::{Path, PathBuf};

use atelier_fs::{FsError, Root};
use atelier_layout::workspace::PRIVATE_FILE_MODE;
use atelier_releases::ReleaseId;

/// Build records and logs, below a workspace.
pub const BUILDS_DIR: &str = ".builder/builds";
/// A build record larger than this is not one sited wrote.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

pub use atelier_site_api::{BuildOutcome, BuildRecord};

/// Why a build record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// There is no record of that id.
    #[error("no such build record")]
    Missing,
    /// The record could not be read or written.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The record is not one sited wrote: it does not parse, or names another build.
    #[error("the build record is corrupt")]
    Corrupt,
}

/// Build `id`'s record in `workspace`. Blocking.
pub fn read(workspace: &Root, id: &str) -> Result<BuildRecord, RecordError> {
    let bytes = workspace
        .read_own_limited(record_path(id), MAX_RECORD_BYTES)?
        .ok_or(RecordError::Missing)?;
    let record: BuildRecord = serde_json::from_slice(&bytes).map_err(|_| RecordError::Corrupt)?;
    if record.id != id {
        return Err(RecordError::Corrupt);
    }
    Ok(record)
}

/// Writes `record` into `workspace`, replacing the one of its id. Blocking.
pub fn write(workspace: &Root, record: &BuildRecord) -> Result<(), RecordError> {
    let mut bytes = serde_json::to_vec_pretty(record).map_err(|_| RecordError::Corrupt)?;
    bytes.push(b'\n');
    workspace.write_atomic(record_path(&record.id), &bytes, PRIVATE_FILE_MODE)?;
    Ok(())
}

/// The newest build record in `workspace` (ids sort chronologically), if any. Blocking.
pub fn latest(workspace: &Root) -> Option<BuildRecord> {
    let names = atelier_fs::tree::list_dir(workspace, Some(Path::new(BUILDS_DIR))).ok()?;
    let newest = names
        .into_iter()
        .filter_map(|(name, _)| name.to_str()?.strip_suffix(".json").map(str::to_owned))
        .filter(|id| ReleaseId::parse(id).is_ok())
        .max()?;
    read(workspace, &newest).ok()
}

fn record_path(id: &str) -> PathBuf {
    Path::new(BUILDS_DIR).join(format!("{id}.json"))
}
