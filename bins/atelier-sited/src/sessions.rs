//! Agent sessions: the live sessions of this process (each a [`LiveSession`] with its fan-out),
//! the session → site index, listing, admission of a first turn and of a follow-up, stop, the
//! boot sweep, and the SSE follow endpoint. A turn itself runs in [`crate::turns`], handed the
//! [`TurnServices`] it uses rather than this service.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use atelier_fs::{FileKind, Root};
use atelier_http::{push_event, sse_response, Response, SseChunk, SseEvent, SseKeepAlive};
use bytes::Bytes;
use hyper::header::{HeaderValue, CONNECTION};
use tokio::sync::{broadcast, mpsc};

use crate::actor::Actor;
use crate::dates::iso8601;
use crate::drivers::{AdmitError, Drivers};
use crate::live_session::LiveSession;
use crate::manifest::{self, Driver};
use crate::metrics::{Metrics, Open};
use crate::reservations::{Busy, Hold, Reservation};
use crate::runs::{RunRefusal, Runner};
use crate::session_log::{
    self, LoggedEvent, SessionId, SessionLogError, SessionMeta, SessionSummary,
};
use crate::sites::{SiteError, Sites};
use crate::turns::{
    RunningTurns, Turn, TurnControl, TurnServices, TurnSettings, TurnSlot, TurnSlots,
};
use atelier_proto::Door;
use atelier_site_api::{SendMessage, SessionEvent, Slug, StartSession, TurnState};

pub use atelier_site_api::limits::MAX_PROMPT_UNITS;
/// How many bytes of framed backlog go out in one chunk.
const REPLAY_CHUNK: usize = 64 * 1024;
/// SSE frames queued for one client before the follower waits for it.
const CLIENT_QUEUE: usize = 64;
/// The keep-alive comment's interval, so a stream with no events is not closed as idle by a
/// proxy or client in between.
pub const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The data of the `error` frame that ends a follow whose stored events could not be read: the
/// reason a client acts on, and, like a turn fault's `error` event, a fixed sentence the
/// engine's UI shows as `message` (never the error's own text, which may name paths).
pub const REPLAY_FAILED_DATA: &str = r#"{"reason":"replay_failed","message":"The session's earlier events could not be read, so its stream ended; following it again tries once more."}"#;

/// Why a session operation was refused or failed; `problem.rs` maps each to its problem.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A bad request field (prompt, `after`).
    #[error("{0}")]
    Validation(String),
    /// No such session.
    #[error("No session '{0}'")]
    UnknownSession(String),
    /// A site operation failed or refused (unknown site, busy, quota, …).
    #[error(transparent)]
    Site(#[from] SiteError),
    /// Something holds the site.
    #[error(transparent)]
    Busy(#[from] Busy),
    /// Every global turn slot is taken.
    #[error("At most {0} agent turns may run at once")]
    MaxConcurrent(u32),
    /// The body named no driver and the site has no readable driver record to fall back on.
    #[error("no driver record for site '{0}'")]
    NoDriverRecord(String),
    /// The driver may not run a turn here.
    #[error(transparent)]
    Driver(#[from] AdmitError),
    /// The run seam refuses new runs.
    #[error(transparent)]
    Run(#[from] RunRefusal),
    /// Stop of a session with no running turn.
    #[error("No running turn to stop")]
    NotRunning,
    /// A follow-up while the site's turn runs.
    #[error("A turn is already running for '{0}'")]
    AlreadyRunning(String),
    /// The log or meta failed or was refused.
    #[error(transparent)]
    Log(#[from] SessionLogError),
    /// A blocking task failed.
    #[error("session task failed: {0}")]
    Task(String),
}

/// The session service, shared by every request.
#[derive(Debug, Clone)]
pub struct Sessions {
    inner: Arc<SessionsState>,
}

struct SessionsState {
    sites: Sites,
    runner: Runner,
    drivers: Drivers,
    agents: Arc<TurnSettings>,
    metrics: Metrics,
    slots: TurnSlots,
    live: Mutex<HashMap<SessionId, Arc<LiveSession>>>,
    index: Mutex<HashMap<SessionId, String>>,
    turns: Arc<RunningTurns>,
}

impl std::fmt::Debug for SessionsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionsState")
            .field("max_concurrent", &self.slots.max())
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// The service over `sites`, with at most `max_concurrent` turns at once, counting its
    /// turns and followers in `metrics`.
    pub fn new(
        sites: Sites,
        runner: Runner,
        drivers: Drivers,
        agents: TurnSettings,
        max_concurrent: u32,
        metrics: Metrics,
    ) -> Self {
        Self {
            inner: Arc::new(SessionsState {
                sites,
                runner,
                drivers,
                agents: Arc::new(agents),
                metrics,
                slots: TurnSlots::new(max_concurrent),
                live: Mutex::new(HashMap::new()),
                index: Mutex::new(HashMap::new()),
                turns: Arc::new(RunningTurns::default()),
            }),
        }
    }

    /// The site service.
    pub fn sites(&self) -> &Sites {
        &self.inner.sites
    }

    /// The run seam.
    pub fn runner(&self) -> &Runner {
        &self.inner.runner
    }

    /// The drivers.
    pub fn drivers(&self) -> &Drivers {
        &self.inner.drivers
    }

    /// The daemon's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Takes a global turn slot, or refuses with `max_concurrent_sessions`.
    pub fn take_slot(&self) -> Result<TurnSlot, SessionError> {
        let slots = &self.inner.slots;
        slots.take().ok_or(SessionError::MaxConcurrent(slots.max()))
    }

    /// The live session `id`, if this process has one.
    pub fn live(&self, id: &SessionId) -> Option<Arc<LiveSession>> {
        let live = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        live.get(id).cloned()
    }

    /// Marks a turn of session `id` on site `slug` running, opening its log on first touch
    /// (the `seq` continues from the file), and returns the session to append to.
    ///
    /// Blocking: opens and scans the log.
    pub fn begin_turn(&self, slug: &str, id: &SessionId) -> Result<Arc<LiveSession>, SessionError> {
        let mut live = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let session = match live.get(id) {
            Some(session) => Arc::clone(session),
            None => {
                let workspace = self.workspace(slug)?;
                let session = Arc::new(LiveSession::open(&workspace, slug, id)?);
                live.insert(id.clone(), Arc::clone(&session));
                session
            }
        };
        session.mark_running();
        self.inner
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), slug.to_owned());
        Ok(session)
    }

    fn workspace(&self, slug: &str) -> Result<Root, SessionError> {
        Ok(self.inner.sites.workspace(slug)?)
    }

    /// The site of session `id`: the in-memory index, else a scan of every site's metas.
    ///
    /// Blocking on a scan.
    pub fn resolve(&self, id: &SessionId) -> Option<String> {
        if let Some(slug) = self
            .inner
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
        {
            return Some(slug.clone());
        }
        let root = Root::open(&self.inner.sites.config().sites_root).ok()?;
        let entries = atelier_fs::tree::list_dir(&root, None).ok()?;
        let slug = entries
            .into_iter()
            .filter(|(_, kind)| *kind == FileKind::Dir)
            .filter_map(|(name, _)| Slug::parse(name.to_str()?).ok())
            .find(|slug| holds(&root, slug, id))?
            .to_string();
        self.inner
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), slug.clone());
        Some(slug)
    }

    /// Forgets the sessions of site `slug`, deleted: they are unknown from now on (404), and
    /// their logs' descriptors go with their last followers.
    pub fn forget_site(&self, slug: &str) {
        // In the order `begin_turn` takes them: the live sessions, then the index.
        let mut live = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut index = self
            .inner
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let gone: Vec<SessionId> = index
            .iter()
            .filter(|(_, site)| site.as_str() == slug)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            index.remove(&id);
            live.remove(&id);
        }
    }

    /// `GET /v1/sites/:slug/sessions`: the site's sessions, newest first (404 unknown site).
    ///
    /// Blocking.
    pub fn list(&self, slug: &Slug) -> Result<Vec<SessionSummary>, SessionError> {
        self.inner.sites.get(slug)?;
        let workspace = self.workspace(slug.as_str())?;
        Ok(session_log::list_metas(&workspace, slug.as_str())?
            .into_iter()
            .map(SessionSummary::from)
            .collect())
    }

    /// `POST /v1/sites/:slug/sessions` after the route's site and actor checks: admission in the
    /// numbered order below, so a request that breaks several rules always meets the same
    /// refusal; then the meta, and the first turn launched detached. Returns the new session.
    pub async fn start(
        &self,
        slug: &Slug,
        request: StartSession,
        actor: &Actor,
    ) -> Result<SessionId, SessionError> {
        // 1. the prompt was checked at the edge.
        let StartSession {
            prompt,
            driver: body_driver,
        } = request;
        // 2-3. the site, then the driver: the body's when valid, else the driver record.
        let this = self.clone();
        let owned_slug = slug.clone();
        let driver = blocking(move || {
            this.inner.sites.get(&owned_slug)?;
            match body_driver {
                Some(driver) => Ok(driver),
                None => this
                    .inner
                    .sites
                    .recorded_driver(owned_slug.as_str())
                    .ok_or_else(|| SessionError::NoDriverRecord(owned_slug.to_string())),
            }
        })
        .await?;
        // 4-9.
        let admitted = self.admit_turn(slug, driver, None).await?;
        let slug = slug.as_str();
        // 10. the meta, the live session, then the turn, detached.
        let id = SessionId::new_v4().map_err(|e| SessionError::Task(e.to_string()))?;
        let meta = SessionMeta {
            session_id: id.to_string(),
            slug: slug.to_owned(),
            driver: driver.as_str().to_owned(),
            started_at: iso8601(SystemTime::now()),
            turns: 0,
            state: "running".to_owned(),
            resume_token: None,
            identity_epoch: Some(self.inner.agents.identity_epoch),
            recovery_pending: false,
        };
        self.launch(admitted, meta, prompt).await?;
        tracing::info!(site = %slug, session = %id, actor = %actor.username, "session started");
        Ok(id)
    }

    /// `POST /v1/sessions/:id/messages` after the route's actor check: a follow-up turn
    /// of the session, resuming the driver's own session when it left a token.
    pub async fn send_message(
        &self,
        id: &SessionId,
        request: SendMessage,
    ) -> Result<String, SessionError> {
        let message = request.message;
        let meta = self.read_meta_of(id).await?;
        // The meta names the session's site; it was read from the site's own workspace.
        let site =
            Slug::parse(&meta.slug).map_err(|_| SessionError::UnknownSession(id.to_string()))?;
        let slug = meta.slug.clone();
        let driver = Driver::parse(&meta.driver)
            .ok_or_else(|| SessionError::NoDriverRecord(slug.clone()))?;
        let admitted = self.admit_turn(&site, driver, Some(id)).await?;
        // Under the hold: the session may have gone with a delete that finished meanwhile.
        let mut meta = self.read_meta_of(id).await?;
        meta.state = "running".to_owned();
        self.launch(admitted, meta, message).await?;
        Ok(slug)
    }

    async fn read_meta_of(&self, id: &SessionId) -> Result<SessionMeta, SessionError> {
        let this = self.clone();
        let id = id.clone();
        blocking(move || {
            let unknown = || SessionError::UnknownSession(id.to_string());
            let slug = this.resolve(&id).ok_or_else(unknown)?;
            this.refuse_while_deleting(&slug)?;
            let workspace = this.workspace(&slug).map_err(|_| unknown())?;
            session_log::read_meta(&workspace, &slug, &id)?.ok_or_else(unknown)
        })
        .await
    }

    /// A site being deleted answers every request on it with 409 `site_deleting`: its
    /// workspace is on its way out, so its sessions are neither unknown nor readable yet.
    fn refuse_while_deleting(&self, slug: &str) -> Result<(), SessionError> {
        match self.inner.sites.reservations().holder(slug) {
            Some(Hold::Deleting) => Err(Busy(Hold::Deleting).into()),
            _ => Ok(()),
        }
    }

    /// Admission steps 4-9 of [`Sessions::start`], also run for a follow-up of `session`:
    /// confinement admission for the turn door (503, before anything is held), the site's hold,
    /// existence under the hold, quota, a global slot, then the driver's admission. That comes
    /// last, not before the hold as the original's did: its probe is a run through the site's
    /// own turn door, which only the site's hold may open.
    async fn admit_turn(
        &self,
        site: &Slug,
        driver: Driver,
        session: Option<&SessionId>,
    ) -> Result<Admitted, SessionError> {
        let slug = site.as_str();
        let target = self.inner.sites.config().run_target(slug);
        self.inner.runner.admit(&target, Door::Turn).await?;
        let this = self.clone();
        let owned_site = site.clone();
        let owned_slug = slug.to_owned();
        let is_follow_up = session.is_some();
        let (reservation, running, slot) = blocking(move || {
            let sites = &this.inner.sites;
            let reservation = sites
                .reservations()
                .reserve(&owned_slug, Hold::Session)
                .map_err(|busy| {
                    if is_follow_up && busy.0 == Hold::Session {
                        SessionError::AlreadyRunning(owned_slug.clone())
                    } else {
                        SessionError::Busy(busy)
                    }
                })?;
            // The gauge goes with the hold, so it reads what `STATUS=` counts.
            let running = this.inner.metrics.turn_running();
            // Under the hold: a delete that finished meanwhile leaves nothing to start in.
            sites.get(&owned_site)?;
            sites.check_quota(&owned_slug, 0)?;
            let slot = this.take_slot()?;
            Ok((reservation, running, slot))
        })
        .await?;
        let bin = self
            .inner
            .drivers
            .admit(&self.inner.runner, &target, driver)
            .await?;
        Ok(Admitted {
            slug: slug.to_owned(),
            driver,
            bin,
            reservation,
            running,
            slot,
        })
    }

    /// Writes the meta as running, opens the live session and starts the turn detached.
    async fn launch(
        &self,
        admitted: Admitted,
        meta: SessionMeta,
        prompt: String,
    ) -> Result<(), SessionError> {
        let id = SessionId::parse(&meta.session_id)
            .ok_or_else(|| SessionError::UnknownSession(meta.session_id.clone()))?;
        let this = self.clone();
        let (slug, turn_meta, turn_id) = (admitted.slug.clone(), meta.clone(), id.clone());
        let session = blocking(move || {
            session_log::write_meta(&this.workspace(&slug)?, &turn_meta)?;
            this.begin_turn(&slug, &turn_id)
        })
        .await?;
        // Before the answer (the turn itself only ever ends it): an engine that reads the site
        // right after its 201 sees the turn.
        self.inner
            .sites
            .set_session_state(&admitted.slug, "running", id.as_str());
        let control = TurnControl::new();
        self.inner.turns.insert(id.clone(), Arc::clone(&control));
        let services = TurnServices {
            sites: self.inner.sites.clone(),
            runner: self.inner.runner.clone(),
            settings: Arc::clone(&self.inner.agents),
            metrics: self.inner.metrics.clone(),
            running: Arc::clone(&self.inner.turns),
        };
        let ended = (self.clone(), id.clone(), Arc::clone(&session));
        let turn = Turn {
            services: Arc::new(services),
            session,
            meta,
            prompt,
            driver: admitted.driver,
            bin: admitted.bin,
            reservation: admitted.reservation,
            slot: admitted.slot,
            running: admitted.running,
            control,
        };
        self.inner.metrics.turn_started();
        tokio::spawn(async move {
            turn.run().await;
            let (this, id, session) = ended;
            this.close_idle(&id, &session);
        });
        Ok(())
    }

    /// Lets go of session `id`'s live session once its turn is over and no other began, so an
    /// idle session holds no log descriptor (a long-running daemon touches thousands); its
    /// last followers keep it until they end, and the next turn opens the log again.
    fn close_idle(&self, id: &SessionId, session: &Arc<LiveSession>) {
        // Under the lock `begin_turn` marks a turn running with, so none can begin meanwhile.
        let mut live = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if live
            .get(id)
            .is_some_and(|held| Arc::ptr_eq(held, session) && !held.is_running())
        {
            live.remove(id);
        }
    }

    /// `POST /v1/sessions/:id/stop` after the route's actor check: asks the running
    /// turn to stop and answers once its agent run is gone; the commit and `turn_end` follow.
    /// A session with no running turn in this process — unknown ids included — is
    /// `not_running`, never 404. Returns the site, for the audit line.
    pub async fn stop(&self, id: &SessionId) -> Result<String, SessionError> {
        let control = self
            .inner
            .turns
            .control(id)
            .ok_or(SessionError::NotRunning)?;
        control.request_stop();
        control.run_gone().await;
        let slug = self
            .inner
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
            .unwrap_or_default();
        Ok(slug)
    }

    /// Shutdown: asks every running turn to stop. Each then writes its error, commit and
    /// `turn_end` as a stop does, so its followers' streams end.
    pub fn interrupt_all(&self) {
        self.inner.turns.stop_all();
    }

    /// Waits until no turn is running, at most `deadline`; returns whether none is.
    pub async fn wait_idle(&self, deadline: Duration) -> bool {
        self.inner.turns.wait_idle(deadline).await
    }

    /// The boot sweep, before sited listens: indexes every site's sessions; a session
    /// left running by a dead process gets its one error and `turn_end` (interrupted) and is
    /// marked for recovery, its site held `site_recovering`. The recovery commits themselves
    /// go through the git door, which PID 1 starts only once sited is ready, so they are
    /// [`Sessions::commit_recoveries`]'s, after READY. One site's problem never stops the
    /// sweep.
    pub async fn sweep(&self) -> (SweepReport, Vec<Recovery>) {
        let mut report = SweepReport::default();
        let mut recoveries = Vec::new();
        let this = self.clone();
        let found = blocking(move || {
            let mut found = Vec::new();
            for slug in this.inner.sites.slugs() {
                let Ok(workspace) = this.workspace(&slug) else {
                    continue;
                };
                match session_log::list_metas(&workspace, &slug) {
                    Ok(metas) => found.extend(metas.into_iter().map(|m| (slug.clone(), m))),
                    Err(e) => {
                        tracing::warn!(site = %slug, error = %e, "sweep: unreadable session metas")
                    }
                }
            }
            Ok(found)
        })
        .await
        .unwrap_or_default();
        // One hold per site, shared by all its sessions to recover: the site is free once the
        // last of them is committed.
        let mut holds: HashMap<String, Arc<Reservation>> = HashMap::new();
        for (slug, meta) in found {
            let Some(id) = SessionId::parse(&meta.session_id) else {
                continue;
            };
            self.inner
                .index
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.clone(), slug.clone());
            report.sessions += 1;
            if meta.state != "running" {
                self.end_unended_turn(&slug, &id, &meta).await;
            }
            if meta.state == "running" || meta.recovery_pending {
                let hold = match holds.get(&slug) {
                    Some(hold) => Ok(Arc::clone(hold)),
                    None => self
                        .inner
                        .sites
                        .reservations()
                        .reserve(&slug, Hold::Recovery)
                        .map(|hold| {
                            let hold = Arc::new(hold);
                            holds.insert(slug.clone(), Arc::clone(&hold));
                            hold
                        })
                        .map_err(SessionError::from),
                };
                let marked = match hold {
                    Ok(hold) => self.mark_for_recovery(&slug, &id, meta, hold).await,
                    Err(e) => Err(e),
                };
                match marked {
                    Ok(recovery) => recoveries.push(recovery),
                    Err(e) => {
                        report.pending += 1;
                        tracing::error!(site = %slug, session = %id, error = %e, "sweep: recovery failed; the next boot retries");
                    }
                }
            }
        }
        report.recovered = recoveries.len();
        (report, recoveries)
    }

    /// Appends the `turn_end` of a finished turn whose meta was written (a turn writes its meta,
    /// then its `turn_end`) but whose `turn_end` is not in the log: the process was killed
    /// between the two, or the append failed. Without it every replay of the session would
    /// end without the turn's end.
    async fn end_unended_turn(&self, slug: &str, id: &SessionId, meta: &SessionMeta) {
        let this = self.clone();
        let (site, session_id, ending) = (slug.to_owned(), id.clone(), meta.clone());
        let ended = blocking(move || {
            let workspace = this.workspace(&site)?;
            let ends = session_log::last_event_ends_turn(&workspace, &session_id)
                .map_err(SessionLogError::from)?;
            if ends != Some(false) {
                return Ok(false);
            }
            let session = this.begin_turn(&site, &session_id)?;
            let turn_end = SessionEvent::TurnEnd {
                state: TurnState::parse(&ending.state),
                resume_token: ending.resume_token,
            };
            let appended = session.end_turn(turn_end, || {});
            this.close_idle(&session_id, &session);
            appended?;
            Ok(true)
        })
        .await;
        match ended {
            Ok(true) => {
                tracing::warn!(site = %slug, session = %id, state = %meta.state, "sweep: ended a turn whose turn_end a previous run did not write")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(site = %slug, session = %id, error = %e, "sweep: could not end a turn left without its turn_end")
            }
        }
    }

    /// Under the site's `hold`, ends a running session's turn as interrupted and records
    /// durably that its work is still to be committed.
    async fn mark_for_recovery(
        &self,
        slug: &str,
        id: &SessionId,
        mut meta: SessionMeta,
        hold: Arc<Reservation>,
    ) -> Result<Recovery, SessionError> {
        if meta.state == "running" {
            let this = self.clone();
            let (site, session_id) = (slug.to_owned(), id.clone());
            let session = blocking(move || this.begin_turn(&site, &session_id)).await?;
            let session2 = Arc::clone(&session);
            blocking(move || {
                session2.append(crate::turn_fault::TurnFault::Interrupted.event())?;
                session2.append(SessionEvent::TurnEnd {
                    state: TurnState::Interrupted,
                    resume_token: None,
                })?;
                Ok(())
            })
            .await?;
            session.mark_finished();
            self.close_idle(id, &session);
            meta.state = "interrupted".to_owned();
        }
        meta.recovery_pending = true;
        session_log::write_meta(&self.workspace(slug)?, &meta)?;
        Ok(Recovery {
            slug: slug.to_owned(),
            id: id.clone(),
            meta,
            hold,
        })
    }

    /// Commits each recovery point through the site's git door and releases the site; a
    /// failed commit stays pending for the next boot.
    pub async fn commit_recoveries(self, recoveries: Vec<Recovery>) {
        for Recovery {
            slug,
            id,
            mut meta,
            hold,
        } in recoveries
        {
            let target = self.inner.sites.config().run_target(&slug);
            let committed = match self.workspace(&slug) {
                Ok(workspace) => self
                    .inner
                    .sites
                    .git()
                    .commit(
                        &target,
                        &workspace,
                        &crate::git::recovery_message(id.as_str()),
                    )
                    .await
                    .map(|_| workspace)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match committed {
                Ok(workspace) => {
                    meta.recovery_pending = false;
                    if let Err(e) = session_log::write_meta(&workspace, &meta) {
                        tracing::error!(site = %slug, session = %id, error = %e, "could not clear the recovery mark");
                    }
                    tracing::info!(site = %slug, session = %id, "recovered a session left by a dead process");
                }
                Err(e) => {
                    tracing::error!(site = %slug, session = %id, error = %e, "the recovery commit failed; the next boot retries")
                }
            }
            drop(hold);
        }
    }

    /// The site of session `id`, or `UnknownSession`. Blocking on a scan, off the workers.
    pub async fn site_of(&self, id: &SessionId) -> Result<String, SessionError> {
        let this = self.clone();
        let lookup = id.clone();
        blocking(move || {
            this.resolve(&lookup)
                .ok_or_else(|| SessionError::UnknownSession(lookup.to_string()))
        })
        .await
    }

    /// `GET /v1/sessions/:id/events?after=N`: the stream response, or 404.
    pub async fn follow(&self, id: &SessionId, after: i64) -> Result<Response, SessionError> {
        let id = id.clone();
        let slug = self.site_of(&id).await?;
        self.refuse_while_deleting(&slug)?;
        // Subscribe before the log is read, so nothing appended meanwhile is missed.
        let live = self.live(&id);
        let receiver = live.as_ref().map(|session| session.subscribe());
        let (frames, queue) = mpsc::channel(CLIENT_QUEUE);
        let follower = Follower {
            sessions: self.clone(),
            slug,
            id,
            last: after,
            frames,
        };
        tokio::spawn(follower.run(live, receiver));
        // The stream holds the follower's count: it ends, or the client goes, and it is given
        // back.
        let following = self.inner.metrics.sse_follower();
        let stream =
            futures_util::stream::unfold((queue, following), |(mut queue, following)| async move {
                queue.recv().await.map(|frame| (frame, (queue, following)))
            });
        let mut response = sse_response(
            stream,
            SseKeepAlive::new(SSE_KEEP_ALIVE).with_comment("ping"),
        );
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("keep-alive"));
        Ok(response)
    }
}

/// Parses `after` as JavaScript's `Number()` would for the cursor: absent → -1, empty → 0,
/// non-finite → 400; a fraction is floored (seq > 1.5 is seq > 1).
pub fn parse_after(value: Option<&str>) -> Result<i64, SessionError> {
    let Some(value) = value else {
        return Ok(-1);
    };
    let value = value.trim();
    if value.is_empty() {
        return Ok(0);
    }
    let number: f64 = match value.parse() {
        Ok(n) if f64::is_finite(n) => n,
        _ => return Err(SessionError::Validation("after must be a number".into())),
    };
    // Every seq is >= 0, so any cursor below -1 means "everything".
    Ok(number.floor().clamp(-1.0, i64::MAX as f64) as i64)
}

/// Frames a logged event as its SSE event: `id:` its seq, `data:` its line as stored.
/// Whether the site `slug` (a workspace with a manifest: a husk without one is no site)
/// holds session `id`'s meta.
fn holds(root: &Root, slug: &Slug, id: &SessionId) -> bool {
    let slug = slug.as_str();
    let Ok(workspace) = root.open_dir(slug) else {
        return false;
    };
    matches!(manifest::read_manifest(&workspace, slug), Ok(Some(_)))
        && matches!(session_log::read_meta(&workspace, slug, id), Ok(Some(_)))
}

fn frame(wire: &mut Vec<u8>, event: &LoggedEvent) {
    let seq = event.seq.to_string();
    push_event(
        wire,
        Some(&seq),
        None,
        &String::from_utf8_lossy(&event.line),
    );
}

async fn blocking<T, F>(work: F) -> Result<T, SessionError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, SessionError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SessionError::Task(e.to_string()))?
}

/// What the boot sweep found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Sessions indexed.
    pub sessions: usize,
    /// Sessions marked for recovery (their commits follow once sited is ready).
    pub recovered: usize,
    /// Sessions whose marking failed (their site was held or unwritable).
    pub pending: usize,
}

/// A session marked for recovery whose commit is still to be made; it holds its site.
#[derive(Debug)]
pub struct Recovery {
    slug: String,
    id: SessionId,
    meta: SessionMeta,
    /// The site's recovery hold, shared by its sessions to recover.
    hold: Arc<Reservation>,
}

/// A turn admitted and not yet started: what it holds.
struct Admitted {
    slug: String,
    driver: Driver,
    bin: std::path::PathBuf,
    reservation: Reservation,
    running: Open,
    slot: TurnSlot,
}

/// One SSE client's follower: replay from the cursor, flush what arrived meanwhile, tail.
struct Follower {
    sessions: Sessions,
    slug: String,
    id: SessionId,
    /// The highest `seq` sent (or the cursor).
    last: i64,
    frames: mpsc::Sender<SseChunk>,
}

/// What the follower does after sending some events.
enum Next {
    Continue,
    /// The client went away, the stream ended, or a `turn_end` was delivered.
    Stop,
}

impl Follower {
    async fn run(
        mut self,
        live: Option<Arc<LiveSession>>,
        receiver: Option<broadcast::Receiver<Arc<LoggedEvent>>>,
    ) {
        // The backlog, earlier turns' turn_ends included, never closes the stream by itself.
        if let Next::Stop = self.catch_up(false).await {
            return;
        }
        let (Some(live), Some(mut receiver)) = (live, receiver) else {
            return;
        };
        // Read before the buffer is drained: a turn seen finished here has its turn_end in
        // the buffer already, since `running` is cleared only after the fan-out.
        let mut watching = live.watch_running();
        let running = *watching.borrow_and_update();
        loop {
            match receiver.try_recv() {
                Ok(event) => {
                    if let Next::Stop = self.deliver(&event).await {
                        return;
                    }
                }
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    if let Next::Stop = self.catch_up(true).await {
                        return;
                    }
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    self.catch_up(true).await;
                    return;
                }
            }
        }
        if !running {
            return;
        }
        loop {
            let next = tokio::select! {
                next = receiver.recv() => next,
                () = self.frames.closed() => return,
                // The turn ended: whatever of it was logged (its turn_end too, unless that
                // append failed) is in the log; the stream ends after it rather than wait for
                // an event that will not come.
                changed = watching.changed() => {
                    if changed.is_err() || !*watching.borrow_and_update() {
                        self.catch_up(true).await;
                        return;
                    }
                    continue;
                }
            };
            let step = match next {
                Ok(event) => self.deliver(&event).await,
                // Fell behind the fan-out: the log is authoritative, read the rest from it.
                Err(broadcast::error::RecvError::Lagged(_)) => self.catch_up(true).await,
                Err(broadcast::error::RecvError::Closed) => {
                    self.catch_up(true).await;
                    Next::Stop
                }
            };
            if let Next::Stop = step {
                return;
            }
        }
    }

    /// Sends a live event unless it was already sent; a `turn_end` ends the stream either way,
    /// because only the current turn's end can be fanned out after the subscription.
    async fn deliver(&mut self, event: &LoggedEvent) -> Next {
        if i128::from(event.seq) > i128::from(self.last) {
            if let Next::Stop = self.send(event).await {
                return Next::Stop;
            }
        }
        if event.turn_end {
            Next::Stop
        } else {
            Next::Continue
        }
    }

    async fn send(&mut self, event: &LoggedEvent) -> Next {
        let mut wire = Vec::with_capacity(event.line.len() + 32);
        frame(&mut wire, event);
        self.send_framed(wire, event.seq).await
    }

    /// Sends whole framed events, the last of them `last`.
    async fn send_framed(&mut self, wire: Vec<u8>, last: u64) -> Next {
        if self
            .frames
            .send(SseChunk::Framed(Bytes::from(wire)))
            .await
            .is_err()
        {
            return Next::Stop;
        }
        self.last = i64::try_from(last).unwrap_or(i64::MAX);
        Next::Continue
    }

    /// Sends every logged event after the last one sent. With `stop_at_turn_end`, a
    /// `turn_end` among them ends the stream (it can only be the followed turn's).
    async fn catch_up(&mut self, stop_at_turn_end: bool) -> Next {
        let (sessions, slug, id, after) = (
            self.sessions.clone(),
            self.slug.clone(),
            self.id.clone(),
            self.last,
        );
        let read = blocking(move || {
            let workspace = sessions.workspace(&slug)?;
            Ok(session_log::read_events(&workspace, &id, after)?)
        })
        .await;
        let events = match read {
            Ok(events) => events,
            Err(e) => {
                tracing::error!(session = %self.id, error = %e, "session replay failed");
                let frame = SseEvent::new(REPLAY_FAILED_DATA).with_event("error");
                let _ = self.frames.send(frame.into()).await;
                return Next::Stop;
            }
        };
        // The backlog goes out in chunks of many framed events: one send and one write per
        // chunk, not per event.
        let mut wire = Vec::new();
        let mut unsent = None;
        for event in &events {
            frame(&mut wire, event);
            unsent = Some(event.seq);
            let end = stop_at_turn_end && event.turn_end;
            if wire.len() >= REPLAY_CHUNK || end {
                if let Next::Stop = self.send_framed(std::mem::take(&mut wire), event.seq).await {
                    return Next::Stop;
                }
                if end {
                    return Next::Stop;
                }
                unsent = None;
            }
        }
        match unsent {
            Some(seq) => self.send_framed(wire, seq).await,
            None => Next::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_parses_as_the_original_did() {
        let cases: [(Option<&str>, Option<i64>); 9] = [
            (None, Some(-1)),
            (Some(""), Some(0)),
            (Some("5"), Some(5)),
            (Some(" 7 "), Some(7)),
            (Some("1.5"), Some(1)),
            (Some("-1"), Some(-1)),
            (Some("-40"), Some(-1)),
            (Some("abc"), None),
            (Some("inf"), None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_after(input).ok(), want, "{input:?}");
        }
    }
}
