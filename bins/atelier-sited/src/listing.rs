//! The site list kept in memory while nothing it was read from has changed.
//!
//! Building the list reads every workspace's manifest and latest build record, the site table
//! (and checks its stamp) and every preproduction link: tens of files for a handful of sites,
//! on every `GET /v1/sites` an engine polls. Each directory those reads go through is watched
//! ([`atelier_fs::watch`]) before it is read, so a list is served again only while none of them
//! has changed since; a change made before a request (by sited itself, the provisioner, a
//! build door, an agent) is always seen by that request, never served stale. A site's session
//! is not part of what is kept: it is filled in from the [`SessionBoard`] on every request,
//! and the answer's bytes are made again when the board has changed.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use atelier_fs::watch::Changes;
use atelier_fs::Root;
use atelier_site_api::DataList;
use bytes::Bytes;

use crate::sites::{SessionState, SiteStatus};

/// Each site's live or last session in this process, and how many times they changed.
#[derive(Debug, Default)]
pub struct SessionBoard {
    states: HashMap<String, SessionState>,
    generation: u64,
}

// === impl SessionBoard ===

impl SessionBoard {
    /// Records site `slug`'s session.
    pub fn set(&mut self, slug: &str, session: SessionState) {
        self.states.insert(slug.to_owned(), session);
        self.generation += 1;
    }

    /// Forgets site `slug`'s session (the site was deleted: one created again under its slug
    /// starts with none).
    pub fn forget(&mut self, slug: &str) {
        if self.states.remove(slug).is_some() {
            self.generation += 1;
        }
    }

    /// Site `slug`'s session; a site without one is idle.
    pub fn session(&self, slug: &str) -> SessionState {
        self.states.get(slug).cloned().unwrap_or(SessionState {
            state: "idle".to_owned(),
            session_id: None,
        })
    }

    /// Sets each site's session to its current one.
    fn fill(&self, sites: &mut [SiteStatus]) {
        for site in sites {
            site.session = self.session(&site.manifest.slug);
        }
    }
}

/// The last list built and what it was read from.
#[derive(Debug, Default)]
pub struct Listing {
    kept: Mutex<Option<Kept>>,
}

#[derive(Debug)]
struct Kept {
    changes: Changes,
    sites: Vec<SiteStatus>,
    /// The list's answer body and the session board's generation it was made at.
    body: Option<(u64, Bytes)>,
}

// === impl Listing ===

impl Listing {
    /// The kept list with each site's session as `board` says, if nothing it was read from
    /// has changed since.
    pub fn fresh(&self, board: &Mutex<SessionBoard>) -> Option<Vec<SiteStatus>> {
        let mut sites = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let kept = kept.as_mut()?;
            if kept.changes.seen() {
                return None;
            }
            kept.sites.clone()
        };
        board
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fill(&mut sites);
        Some(sites)
    }

    /// The answer body of the kept list (`{"data": [...]}`) with each site's session as
    /// `board` says, if nothing it was read from has changed since: made once per change of
    /// the sessions, then the same bytes.
    pub fn fresh_body(&self, board: &Mutex<SessionBoard>) -> Option<Bytes> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = kept.as_mut()?;
        if kept.changes.seen() {
            return None;
        }
        let board = board.lock().unwrap_or_else(PoisonError::into_inner);
        match &kept.body {
            Some((generation, body)) if *generation == board.generation => Some(body.clone()),
            _ => {
                let mut sites = kept.sites.clone();
                board.fill(&mut sites);
                let body = Bytes::from(serde_json::to_vec(&DataList { data: sites }).ok()?);
                kept.body = Some((board.generation, body.clone()));
                Some(body)
            }
        }
    }

    /// Keeps `sites`, read under `watched`'s watches; a list read without every watch in place
    /// is not kept.
    pub fn keep(&self, watched: Watched, sites: &[SiteStatus]) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        *kept = watched.changes.map(|changes| Kept {
            changes,
            sites: sites.to_vec(),
            body: None,
        });
    }
}

/// The watches of one build of the list. A watch the kernel refuses (the per-user limit)
/// leaves the list unkept: correct, only read again next time.
#[derive(Debug)]
pub struct Watched {
    changes: Option<Changes>,
}

// === impl Watched ===

impl Watched {
    /// Reads that keep nothing: no watch is added.
    pub fn none() -> Watched {
        Watched { changes: None }
    }

    /// No watch yet.
    pub fn start() -> Watched {
        let changes = Changes::new()
            .inspect_err(|e| tracing::debug!("the site list is not kept: {e}"))
            .ok();
        Watched { changes }
    }

    /// Watches `dir`; called before anything below it is read.
    pub fn watch(&mut self, dir: &Root) {
        self.add(dir, None);
    }

    /// Watches `dir` for what happens to its entries `names` (and to itself); called before
    /// any of them is read.
    pub fn watch_entries(&mut self, dir: &Root, names: &[&OsStr]) {
        self.add(dir, Some(names));
    }

    fn add(&mut self, dir: &Root, names: Option<&[&OsStr]>) {
        if let Some(changes) = &mut self.changes {
            let added = match names {
                Some(names) => changes.watch_entries(dir, names),
                None => changes.watch(dir),
            };
            if let Err(e) = added {
                tracing::debug!(dir = %dir.path().display(), "the site list is not kept: {e}");
                self.changes = None;
            }
        }
    }

    /// Watches the directories along `rel` from `dir`, each for the entry that leads on (the
    /// path's next name), and the last one for every entry: what a read of the directory at
    /// `rel` goes through.
    pub fn watch_down(&mut self, dir: &Root, rel: &Path) {
        let names: Vec<&OsStr> = rel.iter().collect();
        let Some(first) = names.first() else {
            return self.watch(dir);
        };
        self.watch_entries(dir, &[first]);
        let mut at = PathBuf::new();
        for (depth, name) in names.iter().enumerate() {
            at.push(name);
            let Ok(below) = dir.open_dir(&at) else {
                // What does not exist yet appears as an entry of the last one watched.
                return;
            };
            match names.get(depth + 1) {
                Some(next) => self.watch_entries(&below, &[next]),
                None => self.watch(&below),
            }
        }
    }
}
