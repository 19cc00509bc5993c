//! A session this process has touched: its log writer and the fan-out of what is appended to
//! the clients following it live. The session service opens one and follows it; a running
//! turn appends to it.

use std::sync::{Arc, Mutex, PoisonError};

use atelier_fs::Root;
use tokio::sync::{broadcast, watch};

use crate::session_log::{LoggedEvent, SessionEvent, SessionId, SessionLog, SessionLogError};

/// Live events a subscriber may fall behind by before it catches up from the log instead.
const FAN_OUT_CAPACITY: usize = 1024;

/// A session this process has touched: its log writer and the fan-out to live subscribers.
#[derive(Debug)]
pub struct LiveSession {
    id: SessionId,
    slug: String,
    writer: Mutex<SessionLog>,
    events: broadcast::Sender<Arc<LoggedEvent>>,
    /// Whether a turn runs; followers watch it, so a turn that ends without its `turn_end`
    /// (its append failed) still ends their streams.
    running: watch::Sender<bool>,
}

impl LiveSession {
    /// Opens session `id`'s log in site `slug`'s `workspace` (the `seq` continues from the
    /// file), with no turn running yet.
    ///
    /// Blocking: opens and scans the log.
    pub fn open(workspace: &Root, slug: &str, id: &SessionId) -> Result<Self, SessionLogError> {
        let writer = SessionLog::open(workspace, id)?;
        let (events, _) = broadcast::channel(FAN_OUT_CAPACITY);
        Ok(LiveSession {
            id: id.clone(),
            slug: slug.to_owned(),
            writer: Mutex::new(writer),
            events,
            running: watch::Sender::new(false),
        })
    }

    /// The session.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Its site.
    pub fn slug(&self) -> &str {
        &self.slug
    }

    /// Appends `event` to the log and only then fans it out, under one lock so live order is
    /// `seq` order. A `turn_end` marks the session's turn finished after it is fanned out, so
    /// a follower that sees "not running" has the `turn_end` already buffered.
    ///
    /// Blocking: one `write(2)` (and a sync for `turn_end`).
    pub fn append(&self, event: SessionEvent) -> Result<Arc<LoggedEvent>, SessionLogError> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let event = Arc::new(writer.append(event)?);
        // No subscriber is not an error: the log has it.
        let _ = self.events.send(Arc::clone(&event));
        if event.turn_end {
            self.running.send_replace(false);
        }
        Ok(event)
    }

    /// A receiver of every event appended from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LoggedEvent>> {
        self.events.subscribe()
    }

    /// Marks a turn of this session running, until its `turn_end` or
    /// [`LiveSession::mark_finished`].
    pub fn mark_running(&self) {
        self.running.send_replace(true);
    }

    /// Whether a turn of this session is running (from [`LiveSession::mark_running`] until its
    /// `turn_end`).
    pub fn is_running(&self) -> bool {
        *self.running.borrow()
    }

    /// A receiver told each time a turn starts or ends; its first value is the current one.
    pub fn watch_running(&self) -> watch::Receiver<bool> {
        self.running.subscribe()
    }

    /// Marks the turn over even if its `turn_end` could not be appended, so no follower waits
    /// for a turn that has ended.
    pub fn mark_finished(&self) {
        self.running.send_replace(false);
    }
}
