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
    /// `seq` order.
    ///
    /// Blocking: one `write(2)`.
    pub fn append(&self, event: SessionEvent) -> Result<Arc<LoggedEvent>, SessionLogError> {
        self.append_then(event, || {})
    }

    /// Appends a turn's `turn_end` as [`LiveSession::append`] does, running `release` (the
    /// turn freeing its site and slot) after the write and before the fan-out. An engine that
    /// reads the `turn_end` and at once sends the next message or starts a build therefore
    /// finds the site free, as it would in a daemon that does both in one step. The turn is
    /// marked finished after the fan-out, so a follower that sees "not running" has the
    /// `turn_end` already buffered; when the append fails, `release` still runs and the turn
    /// is still marked finished, so no follower waits for a turn that has ended.
    ///
    /// Blocking: one `write(2)` and a sync.
    pub fn end_turn(
        &self,
        turn_end: SessionEvent,
        release: impl FnOnce(),
    ) -> Result<Arc<LoggedEvent>, SessionLogError> {
        self.append_then(turn_end, release)
    }

    fn append_then(
        &self,
        event: SessionEvent,
        release: impl FnOnce(),
    ) -> Result<Arc<LoggedEvent>, SessionLogError> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let turn_end = event.is_turn_end();
        let appended = writer.append(event).map(Arc::new);
        release();
        if let Ok(event) = &appended {
            // No subscriber is not an error: the log has it.
            let _ = self.events.send(Arc::clone(event));
        }
        if turn_end {
            self.running.send_replace(false);
        }
        appended
    }

    /// A receiver of every event appended from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LoggedEvent>> {
        self.events.subscribe()
    }

    /// Marks a turn of this session running, until its `turn_end` or
    /// [`LiveSession::mark_finished`].
    ///
    /// Blocking: it waits for an append in progress. The turn before this one freed the site
    /// inside the append of its `turn_end`, before marking itself finished; without the
    /// writer's lock, that mark could come after this one and end this turn's followers.
    pub fn mark_running(&self) {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
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

#[cfg(test)]
mod tests {
    use super::*;
    use atelier_site_api::TurnState;
    use tokio::sync::broadcast::error::TryRecvError;

    fn session() -> (tempfile::TempDir, LiveSession) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("site")).unwrap();
        let root = Root::open(dir.path().join("site")).unwrap();
        let id = SessionId::new_v4().unwrap();
        let session = LiveSession::open(&root, "alpha", &id).unwrap();
        (dir, session)
    }

    fn idle_end() -> SessionEvent {
        SessionEvent::TurnEnd {
            state: TurnState::Idle,
            resume_token: None,
        }
    }

    #[test]
    fn a_turn_is_released_before_any_follower_can_read_its_end() {
        let (_dir, session) = session();
        session.mark_running();
        let mut follower = session.subscribe();
        let mut released = false;
        let ended = session
            .end_turn(idle_end(), || {
                // Written, not yet fanned out, and the turn still running.
                assert!(matches!(follower.try_recv(), Err(TryRecvError::Empty)));
                assert!(session.is_running());
                released = true;
            })
            .unwrap();
        assert!(released);
        assert!(ended.turn_end);
        assert_eq!(follower.try_recv().unwrap().seq, ended.seq);
        assert!(!session.is_running());
    }

    #[test]
    fn the_next_turn_is_marked_running_after_the_last_one_is_marked_finished() {
        let (_dir, session) = session();
        let session = Arc::new(session);
        session.mark_running();
        let mut watching = session.watch_running();
        // The next turn is admitted the moment the site is released, and marks itself running
        // from another thread while the ending turn still holds the log.
        let next = std::sync::Mutex::new(None);
        session
            .end_turn(idle_end(), || {
                let session = Arc::clone(&session);
                *next.lock().unwrap() = Some(std::thread::spawn(move || session.mark_running()));
                std::thread::sleep(std::time::Duration::from_millis(50));
            })
            .unwrap();
        next.into_inner().unwrap().unwrap().join().unwrap();
        assert!(session.is_running(), "the next turn's mark stands");
        // Followers saw the end, then the next turn.
        assert!(*watching.borrow_and_update());
    }
}
