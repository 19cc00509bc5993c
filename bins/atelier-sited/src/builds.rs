//! Builds: `POST /v1/sites/:slug/build` admits a build and runs it detached through
//! the site's build door (`atelier-build` with the manifest's steps as its plan); sited writes
//! the log from the relayed frames, promotes the verified output into preproduction, and
//! always ends with one terminal record, so the site's hold always clears.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use atelier_fs::{FsError, Root};
use atelier_layout::workspace::{
    BUILDER_DIR, BUILDER_DIR_MODE, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE,
};
use atelier_proto::build::{BuildFailure, BuildLog, BuildPlan, BuildReport, EventReader};
use atelier_proto::Door;
use atelier_releases::{ReleaseId, Store, Strategy};

use crate::build_record::{self, BuildOutcome, BuildRecord, RecordError, BUILDS_DIR};
use crate::dates::iso8601;
use crate::metrics::Metrics;
use crate::reservations::{Hold, Reservation};
use crate::runs::{base_env, RunItem, RunSpec, Runner};
use crate::sites::{SiteError, Sites};
use atelier_site_api::wire::BuildWithLog;
use atelier_site_api::Slug;

mod log_file;

use log_file::BuildLogFile;

/// The most of a build log `GET` returns: its end, where a failure is told.
const MAX_LOG_BYTES: u64 = 8 * 1024 * 1024;
/// Beyond the two steps' deadlines, the time atelier-build may take to verify the output
/// before sited ends the run itself.
const BUILD_SLACK: Duration = Duration::from_secs(120);
/// The `PATH` a build's steps get.
const BUILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What builds run with.
#[derive(Debug, Clone)]
pub struct BuildSettings {
    /// `atelier-build`, as the build door sees it.
    pub build_bin: PathBuf,
    /// The install step's deadline.
    pub install_timeout_ms: u64,
    /// The build step's deadline.
    pub build_timeout_ms: u64,
    /// Preproduction releases kept besides the served one.
    pub releases_retained: usize,
    /// Development only: extra certificate authorities the build's steps trust
    /// (`NODE_EXTRA_CA_CERTS`, which npm and Node read), e.g. a lab registry's test CA.
    pub extra_ca_certs: Option<PathBuf>,
}

/// Why a build was refused or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A site refusal (unknown, webspace, quota…).
    #[error(transparent)]
    Site(#[from] SiteError),
    /// Something holds the site.
    #[error("{}", busy_detail(.0.0))]
    Busy(#[from] crate::reservations::Busy),
    /// No such build of this site (an id that could escape the builds directory included).
    #[error("No build '{id}' for '{slug}'")]
    UnknownBuild {
        /// The site.
        slug: String,
        /// The id asked for.
        id: String,
    },
    /// A record or log that sited did not write, or could not read.
    #[error("reading build {id}: {source}")]
    Unreadable {
        /// The build.
        id: String,
        /// What failed.
        #[source]
        source: FsError,
    },
    /// A record that does not parse.
    #[error("build {0}'s record is corrupt")]
    Corrupt(String),
    /// The run seam refuses new runs.
    #[error(transparent)]
    Run(#[from] crate::runs::RunRefusal),
}

/// The build service.
#[derive(Debug, Clone)]
pub struct Builds {
    sites: Sites,
    runner: Runner,
    settings: BuildSettings,
    metrics: Metrics,
}

impl Builds {
    /// Builds of `sites` through `runner`, counted in `metrics`.
    pub fn new(sites: Sites, runner: Runner, settings: BuildSettings, metrics: Metrics) -> Builds {
        Builds {
            sites,
            runner,
            settings,
            metrics,
        }
    }

    /// `POST /v1/sites/:slug/build` after the actor check: the site, its preproduction
    /// webspace, confinement admission for the build door, the hold, existence under the
    /// hold, the record; then the run, detached.
    pub async fn start(&self, slug: &Slug) -> Result<String, BuildError> {
        if self.runner.is_stopping() {
            return Err(crate::runs::RunRefusal::DaemonStopping.into());
        }
        let admitted = Instant::now();
        let this = self.clone();
        let owned = slug.clone();
        tokio::task::spawn_blocking(move || this.check(&owned))
            .await
            .map_err(|e| SiteError::Task(e.to_string()))??;
        let target = self.sites.config().run_target(slug.as_str());
        self.runner.admit(&target, Door::Build).await?;
        let this = self.clone();
        let owned = slug.clone();
        let (reservation, id, plan) = tokio::task::spawn_blocking(move || this.admit(&owned))
            .await
            .map_err(|e| SiteError::Task(e.to_string()))??;
        match plan {
            Some(plan) => {
                let this = self.clone();
                let (slug, build_id) = (slug.clone(), id.clone());
                tokio::spawn(
                    async move { this.run(slug, build_id, plan, reservation, admitted).await },
                );
            }
            // Its record already says it failed.
            None => self
                .metrics
                .build_ended(BuildOutcome::Failed, admitted.elapsed()),
        }
        Ok(id)
    }

    /// The site and its preproduction webspace, before confinement admission.
    fn check(&self, slug: &Slug) -> Result<(), BuildError> {
        let status = self.sites.get(slug)?;
        self.sites.declared_row(&status.manifest)?;
        Ok(())
    }

    /// The hold and the steps up to the record; the plan is `None` when the manifest's steps
    /// cannot be one, and the record then already says the build failed.
    fn admit(&self, slug: &Slug) -> Result<(Reservation, String, Option<BuildPlan>), BuildError> {
        let reservation = self
            .sites
            .reservations()
            .reserve(slug.as_str(), Hold::Build)?;
        let status = self.sites.get(slug)?;
        let build = &status.manifest.build;
        let plan = BuildPlan::from_manifest(
            &build.install,
            &build.build,
            &build.output,
            self.settings.install_timeout_ms,
            self.settings.build_timeout_ms,
            false,
        );
        let id = ReleaseId::generate().as_str().to_owned();
        let workspace = self.workspace(slug.as_str())?;
        workspace
            .create_own_dir_all(BUILDER_DIR, BUILDER_DIR_MODE)
            .and_then(|_| workspace.create_dir_all(BUILDS_DIR, PRIVATE_DIR_MODE))
            .map_err(SiteError::from)?;
        let record = BuildRecord {
            id: id.clone(),
            outcome: BuildOutcome::Running,
            started_at: iso8601(SystemTime::now()),
            finished_at: None,
            release: None,
            error: None,
        };
        // The log first: a record saying `running` is only written once the build can run.
        workspace
            .open_append(log_path(&id), PRIVATE_FILE_MODE)
            .map_err(SiteError::from)?;
        if let Err(e) = write_record(&workspace, &record) {
            // No record: no build, and so no log of one.
            let _ = workspace.remove_file(log_path(&id));
            return Err(e);
        }
        // A manifest whose steps cannot be a plan is the build's failure, recorded as such.
        let plan = match plan {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!(site = %slug, build = %id, "the manifest's build steps are unusable: {e}");
                let mut failed = record;
                finish(
                    &mut failed,
                    Err(BuildFailure::BuildError.as_str().into_owned()),
                );
                write_record(&workspace, &failed)?;
                append_log(&workspace, &id, format!("\n# refused: {e}\n").as_bytes());
                return Ok((reservation, id, None));
            }
        };
        Ok((reservation, id, Some(plan)))
    }

    fn workspace(&self, slug: &str) -> Result<Root, SiteError> {
        Ok(Root::open(&self.sites.config().sites_root)?.open_dir(slug)?)
    }

    /// The pipeline; never fails out: every path ends in one terminal record.
    async fn run(
        self,
        slug: Slug,
        id: String,
        plan: BuildPlan,
        reservation: Reservation,
        admitted: Instant,
    ) {
        let outcome = self.pipeline(&slug, &id, &plan).await;
        let ended = match outcome {
            Ok(_) => BuildOutcome::Success,
            Err(_) => BuildOutcome::Failed,
        };
        let this = self.clone();
        let (slug2, id2) = (slug.clone(), id.clone());
        let written =
            tokio::task::spawn_blocking(move || this.record_end(&slug2, &id2, outcome)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(site = %slug, build = %id, error = %e, "could not write the build's terminal record")
            }
            Err(e) => {
                tracing::error!(site = %slug, build = %id, error = %e, "the build record task failed")
            }
        }
        self.metrics.build_ended(ended, admitted.elapsed());
        drop(reservation);
        tracing::info!(site = %slug, build = %id, outcome = ended.as_str(), "build ended");
    }

    /// Gives build `id` its terminal record, unless it has one already (a promote records its
    /// success itself). Blocking.
    fn record_end(
        &self,
        slug: &Slug,
        id: &str,
        outcome: Result<String, String>,
    ) -> Result<(), BuildError> {
        let workspace = self.workspace(slug.as_str())?;
        let mut record = read_record(&workspace, slug.as_str(), id)?;
        if record.outcome != BuildOutcome::Running {
            return Ok(());
        }
        finish(&mut record, outcome);
        write_record(&workspace, &record)
    }

    async fn pipeline(&self, site: &Slug, id: &str, plan: &BuildPlan) -> Result<String, String> {
        let slug = site.as_str();
        let build_error = || BuildFailure::BuildError.as_str().into_owned();
        let workspace = self.workspace(slug).map_err(|e| {
            tracing::error!(site = %slug, build = %id, error = %e, "the workspace is gone");
            build_error()
        })?;
        let mut log = BuildLogFile::new(&workspace, id);
        let decision_line =
            |decision: &atelier_proto::egress::Decision| format!("{}\n", decision.line());
        let target = self.sites.config().run_target(slug);
        let mut env = base_env(BUILD_PATH);
        if self.runner.has_gate(Door::Build) {
            env.extend(atelier_agents::proxy_env());
        }
        if let Some(ca) = &self.settings.extra_ca_certs {
            env.insert(
                "NODE_EXTRA_CA_CERTS".to_owned(),
                ca.to_string_lossy().into_owned(),
            );
        }
        let spec = RunSpec {
            door: Door::Build,
            argv: plan.to_argv(self.settings.build_bin.to_string_lossy()),
            env,
            stdin: None,
        };
        let mut run = match self.runner.open(&target, spec).await {
            Ok(run) => run,
            Err(refusal) => {
                log.note(format!("\n# error: {refusal}\n").as_bytes());
                return Err(build_error());
            }
        };
        if self.runner.is_unconfined() {
            log.note(b"# atelier: this build runs unconfined (agent confinement 'none', a development host)\n");
        }
        let deadline =
            Duration::from_millis(plan.install_timeout_ms + plan.build_timeout_ms) + BUILD_SLACK;
        let mut reader = EventReader::new();
        let mut report = BuildReport::new();
        let mut lines = BuildLog::new();
        let mut items = Vec::new();
        let ended = tokio::time::timeout(deadline, async {
            loop {
                match run.next().await {
                    RunItem::Stdout(bytes) => {
                        items.clear();
                        if let Err(e) = reader.push(&bytes, &mut items) {
                            return Err(e.to_string());
                        }
                        for item in &items {
                            report.record(item);
                            log.output(&lines.push(item));
                        }
                    }
                    RunItem::Stderr(bytes) => log.output(&bytes),
                    RunItem::Egress(decision) => log.output(decision_line(&decision).as_bytes()),
                    RunItem::Exit(exit) => {
                        // A program that never started (or died) leaves no step events: the
                        // log says how it ended, so a failed build never has an empty log.
                        let ended = match (exit.code, &exit.signal) {
                            (Some(0), _) => None,
                            (Some(code), _) => Some(format!("exited {code}")),
                            (None, Some(signal)) => Some(format!("was ended by {signal}")),
                            (None, None) => Some("ended without a status".to_owned()),
                        };
                        log.output(&lines.finish());
                        if let Some(ended) = ended {
                            log.note(format!("\n# the build program {ended}\n").as_bytes());
                        }
                        return reader.finish().map_err(|e| e.to_string());
                    }
                    RunItem::Lost(why) => return Err(why),
                }
            }
        })
        .await;
        run.stop().await;
        log.output(&lines.finish());
        for decision in run.take_decisions().await {
            log.output(decision_line(&decision).as_bytes());
        }
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                log.note(format!("\n# error: {why}\n").as_bytes());
                return Err(if self.runner.is_stopping() {
                    BuildFailure::Interrupted.as_str().into_owned()
                } else {
                    build_error()
                });
            }
            Err(_) => {
                log.note(b"\n# error: the build ran past its deadline\n");
                return Err(build_error());
            }
        }
        let verified = report.outcome()?;
        // A walk of the whole workspace and both stores: off the runtime's threads.
        let sites = self.sites.clone();
        let measured = site.clone();
        let quota = tokio::task::spawn_blocking(move || {
            sites.check_quota(measured.as_str(), verified.bytes)
        })
        .await;
        let Ok(quota) = quota else {
            log.note(b"\n# error: measuring the site's disk use did not finish\n");
            return Err(build_error());
        };
        match quota {
            Ok(()) => {}
            Err(e @ SiteError::DiskQuota { .. }) => {
                log.note(format!("\n# refused: {e}\n").as_bytes());
                return Err("over disk quota".to_owned());
            }
            // Not knowing the site's use is not being over its quota.
            Err(e) => {
                log.note(format!("\n# error: measuring the site's disk use: {e}\n").as_bytes());
                return Err(build_error());
            }
        }
        log.note(b"\n# promote to preprod\n");
        let promoted = self.promote(site, id, &plan.output).await;
        if let Err(why) = &promoted {
            log.note(format!("# refused: {why}\n").as_bytes());
        }
        promoted.map_err(|_| build_error())
    }

    /// Copies the verified output into preproduction's store, flips its link and records the
    /// build's success, all in one blocking task: a sited stopped meanwhile (which cuts the
    /// build's own task off, not this one) still has on record the release preproduction
    /// serves, instead of a build the next start calls interrupted.
    async fn promote(&self, slug: &Slug, id: &str, output: &str) -> Result<String, String> {
        let this = self.clone();
        let (slug, id, output) = (slug.clone(), id.to_owned(), output.to_owned());
        tokio::task::spawn_blocking(move || {
            // Its prune must not take the release a publish is copying.
            let lock = this.sites.reservations().serving(slug.as_str());
            let _serving = crate::reservations::hold(&lock);
            let status = this.sites.get(&slug).map_err(|e| e.to_string())?;
            let row = this
                .sites
                .declared_row(&status.manifest)
                .map_err(|e| e.to_string())?;
            this.sites
                .ensure_store(&row, "preprod")
                .map_err(|e| e.to_string())?;
            let store = Store::open(
                &row.surfaces.preprod.store_dir,
                &row.surfaces.preprod.link_path,
            )
            .map_err(|e| e.to_string())?;
            let source_workspace = this.workspace(slug.as_str()).map_err(|e| e.to_string())?;
            let source = source_workspace
                .open_dir(&output)
                .map_err(|e| e.to_string())?;
            let promoted = store
                .promote(&source, Strategy::default())
                .map_err(|e| e.to_string())?;
            // Recorded before the prune, which may take long enough for a kill to cut it.
            let release = promoted.id.as_str().to_owned();
            append_log(&source_workspace, &id, format!("released {release}\n").as_bytes());
            if let Err(e) = this.record_end(&slug, &id, Ok(release.clone())) {
                // The build's task records it again once this returns.
                tracing::warn!(site = %slug, build = %id, error = %e, "recording the promoted build failed");
            }
            if let Err(e) = store.prune(this.settings.releases_retained) {
                tracing::warn!(site = %slug, error = %e, "pruning preproduction releases failed");
            }
            Ok(release)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// `GET /v1/sites/:slug/builds/:id`: the record and the log. An id that is not a build
    /// id answers exactly as an unknown one. Blocking.
    pub fn get(&self, slug: &Slug, id: &str) -> Result<(BuildRecord, String), BuildError> {
        let unknown = || BuildError::UnknownBuild {
            slug: slug.to_string(),
            id: id.to_owned(),
        };
        let id = ReleaseId::parse(id).map_err(|_| unknown())?;
        // A site being deleted answers every request with the delete's busy reason.
        if self.sites.reservations().holder(slug.as_str()) == Some(Hold::Deleting) {
            return Err(crate::reservations::Busy(Hold::Deleting).into());
        }
        let workspace = match self.workspace(slug.as_str()) {
            Ok(ws) => ws,
            Err(_) => return Err(unknown()),
        };
        let record = read_record(&workspace, slug.as_str(), id.as_str())?;
        let (log, skipped) = workspace
            .read_own_tail(log_path(id.as_str()), MAX_LOG_BYTES)
            .map_err(|source| BuildError::Unreadable {
                id: id.as_str().to_owned(),
                source,
            })?
            .unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        Ok((record, BuildWithLog::log_text(skipped, &log)))
    }

    /// The boot sweep's part: a build left `running` by a dead process is interrupted, and
    /// what its promote left in the site's stores is removed. Returns the builds interrupted.
    pub fn sweep(&self) -> usize {
        let mut swept = 0;
        for slug in self.sites.slugs() {
            self.clean_promote_leftovers(&slug);
            let Ok(workspace) = self.workspace(&slug) else {
                continue;
            };
            let Ok(names) = atelier_fs::tree::list_dir(&workspace, Some(Path::new(BUILDS_DIR)))
            else {
                continue;
            };
            for (name, _) in names {
                let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                    continue;
                };
                if let Ok(mut record) = read_record(&workspace, &slug, id) {
                    if record.outcome == BuildOutcome::Running {
                        finish(
                            &mut record,
                            Err(BuildFailure::Interrupted.as_str().into_owned()),
                        );
                        if write_record(&workspace, &record).is_ok() {
                            append_log(
                                &workspace,
                                id,
                                b"\n# error: sited stopped during the build\n",
                            );
                            swept += 1;
                        }
                    }
                }
            }
        }
        swept
    }

    /// Removes what a promote, publish or prune cut short by a crash left in the site's two
    /// stores (a staging copy, a next-link, a release renamed to be pruned): the next promote
    /// would, but until then it counts against the site's quota. Logged, never fatal.
    fn clean_promote_leftovers(&self, slug: &str) {
        let status = Slug::parse(slug)
            .ok()
            .and_then(|slug| self.sites.get(&slug).ok());
        let Some(status) = status else {
            return;
        };
        let Ok(row) = self.sites.declared_row(&status.manifest) else {
            return;
        };
        for surface in [&row.surfaces.preprod, &row.surfaces.prod] {
            let Ok(store) = Store::open(&surface.store_dir, &surface.link_path) else {
                continue;
            };
            match store.clean_leftovers() {
                Ok(0) => {}
                Ok(removed) => tracing::info!(
                    site = slug,
                    store = %surface.store_dir.display(),
                    removed,
                    "removed what an interrupted promote or prune left"
                ),
                Err(e) => tracing::warn!(
                    site = slug,
                    store = %surface.store_dir.display(),
                    error = %e,
                    "could not remove what an interrupted promote left"
                ),
            }
        }
    }
}

/// The contract's detail for a build refused by a hold.
fn busy_detail(hold: Hold) -> String {
    match hold {
        Hold::Session => "Cannot build while a session is running".to_owned(),
        Hold::Build => "A build is already running".to_owned(),
        other => crate::reservations::Busy(other).to_string(),
    }
}

fn log_path(id: &str) -> PathBuf {
    Path::new(BUILDS_DIR).join(format!("{id}.log"))
}

fn finish(record: &mut BuildRecord, outcome: Result<String, String>) {
    record.finished_at = Some(iso8601(SystemTime::now()));
    match outcome {
        Ok(release) => {
            record.outcome = BuildOutcome::Success;
            record.release = Some(release);
        }
        Err(error) => {
            record.outcome = BuildOutcome::Failed;
            record.error = Some(error);
        }
    }
}

fn write_record(workspace: &Root, record: &BuildRecord) -> Result<(), BuildError> {
    build_record::write(workspace, record).map_err(|e| match e {
        RecordError::Fs(source) => BuildError::Unreadable {
            id: record.id.clone(),
            source,
        },
        // A record that does not serialize; a write never finds one missing.
        RecordError::Corrupt | RecordError::Missing => BuildError::Corrupt(record.id.clone()),
    })
}

fn read_record(workspace: &Root, slug: &str, id: &str) -> Result<BuildRecord, BuildError> {
    build_record::read(workspace, id).map_err(|e| match e {
        RecordError::Missing => BuildError::UnknownBuild {
            slug: slug.to_owned(),
            id: id.to_owned(),
        },
        RecordError::Fs(source) => BuildError::Unreadable {
            id: id.to_owned(),
            source,
        },
        RecordError::Corrupt => BuildError::Corrupt(id.to_owned()),
    })
}

/// Appends a line of sited's own to the build's log, outside a pipeline's open log; a failed
/// append is logged, never the build's failure.
fn append_log(workspace: &Root, id: &str, bytes: &[u8]) {
    BuildLogFile::new(workspace, id).note(bytes);
}
