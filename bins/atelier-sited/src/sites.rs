//! Sites: create (in the contract's exact order, undoing a half-made workspace), get, list,
//! delete (refused while anything holds the site, removing nothing), and the disk quota.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use atelier_fs::{FileKind, FsError, Root};
use serde_json::Value;

use crate::actor::Actor;
use crate::agents_md;
use crate::build_record::{self, BuildRecord};
use crate::dates::iso8601;
use crate::domain::{normalize_domain, BadDomain};
use crate::git::{Git, GitError};
use crate::listing::{Listing, SessionBoard, Watched};
use crate::manifest::{self, Driver, ManifestError, SiteManifest, DEFAULT_TEMPLATE};
use crate::reservations::{Busy, Hold, Reservation, Reservations};
use crate::runs::{RunTarget, Runner};
use crate::site_table::{self, SiteRow, SiteTable, WebspaceError};
use crate::templates::{TemplateError, Templates, WORKSPACE_DIR_MODE};
use atelier_fs::tree;
use atelier_proto::Door;
use atelier_site_api::{CreateSite, Slug};

use atelier_layout::workspace::{
    self, create_mark, driver_record, BUILDER_DIR, BUILDER_DIR_MODE, DRIVER_RECORDS_DIR,
    PRIVATE_DIR_MODE, PRIVATE_FILE_MODE,
};
const BYTES_PER_MB: u64 = 1_048_576;

/// What the site service needs from the settings.
#[derive(Debug, Clone)]
pub struct SitesConfig {
    /// The instance name (the site table and webspace markers must name it).
    pub instance: String,
    /// The workspaces' root.
    pub sites_root: PathBuf,
    /// `sites.json`.
    pub site_table_file: PathBuf,
    /// Substituted into templates and written into the brief.
    pub publication_api_url: String,
    /// Where templates live.
    pub templates_dir: PathBuf,
    /// At most this many sites.
    pub max_sites: u32,
    /// A site's workspace plus its release stores may use at most this many MiB.
    pub site_disk_quota_mb: u64,
    /// The driver a create without one records.
    pub default_driver: Driver,
    /// The label before a site's domain on preproduction.
    pub preprod_host_prefix: String,
    /// Per-command git timeout.
    pub git_timeout: Duration,
    /// Releases kept per surface besides the served one.
    pub releases_retained: usize,
    /// `http` or `https`: production's URL scheme.
    pub prod_url_scheme: String,
}

impl SitesConfig {
    /// Where site `slug`'s runs happen: its workspace.
    pub fn run_target(&self, slug: &str) -> RunTarget {
        RunTarget {
            slug: slug.to_owned(),
            workspace: self.sites_root.join(slug),
        }
    }
}

/// Why a site operation was refused or failed; `problem.rs` maps each to its HTTP problem.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    /// The slug breaks the grammar (create).
    #[error(transparent)]
    BadSlug(#[from] atelier_site_api::BadSlug),
    /// The name is missing, blank or longer than 200 chars.
    #[error("name must be a non-empty string up to 200 chars")]
    BadName,
    /// The domain breaks the grammar.
    #[error(transparent)]
    BadDomain(#[from] BadDomain),
    /// No such template.
    #[error("Unknown template '{0}'")]
    UnknownTemplate(String),
    /// No such site.
    #[error("No site named '{0}'")]
    NotFound(String),
    /// A site with this slug exists.
    #[error("A site named '{0}' already exists")]
    SlugExists(String),
    /// Something that is not a site occupies the slug's path.
    #[error("Something that is not a site already exists at '{0}'")]
    WorkspaceExists(String),
    /// Another site has this domain.
    #[error("Another site already uses the domain '{0}'")]
    DomainTaken(String),
    /// The site table or the webspace refused.
    #[error(transparent)]
    Webspace(#[from] WebspaceError),
    /// Something holds the site.
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The instance has its maximum number of sites.
    #[error("This instance already has its maximum of {0} sites")]
    MaxSites(u32),
    /// The site would go over its disk quota.
    #[error("Site '{slug}' needs {needed_mb:.1} MB, over its quota of {quota_mb} MB")]
    DiskQuota {
        /// The site.
        slug: String,
        /// What it would use.
        needed_mb: f64,
        /// Its quota.
        quota_mb: u64,
    },
    /// The manifest is unreadable or invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A filesystem operation failed or was refused.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// Scaffolding failed.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// git failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A blocking task panicked or was cancelled.
    #[error("site task failed: {0}")]
    Task(String),
}

pub use atelier_site_api::{
    DeleteReport, Preprod, SiteSession as SessionState, SiteStatus, SkippedSurface,
};

/// The site service, shared by every request.
#[derive(Debug, Clone)]
pub struct Sites {
    config: Arc<SitesConfig>,
    reservations: Reservations,
    templates: Templates,
    git: Git,
    /// Each site's live or last session in this process (`SiteStatus.session`).
    session_states: Arc<Mutex<SessionBoard>>,
    /// The last site list, kept while nothing it was read from changes.
    listing: Arc<Listing>,
    /// Taken by a create from its count of the sites to its mark: two creates of different
    /// slugs must not both count one site below the limit.
    admissions: Arc<Mutex<()>>,
}

impl Sites {
    /// The service over `config`, running git through `runner`.
    pub fn new(config: SitesConfig, runner: Runner) -> Self {
        let templates = Templates::new(&config.templates_dir);
        let git = Git::new(runner, config.git_timeout);
        Self {
            config: Arc::new(config),
            reservations: Reservations::new(),
            templates,
            git,
            session_states: Arc::new(Mutex::new(SessionBoard::default())),
            listing: Arc::new(Listing::default()),
            admissions: Arc::new(Mutex::new(())),
        }
    }

    /// Records site `slug`'s live or last session and its state.
    pub fn set_session_state(&self, slug: &str, state: &'static str, session_id: &str) {
        self.session_states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set(
                slug,
                SessionState {
                    state: state.to_owned(),
                    session_id: Some(session_id.to_owned()),
                },
            );
    }

    /// The slugs of every site (a workspace with a valid manifest), sorted. Blocking.
    pub fn slugs(&self) -> Vec<String> {
        match self.sites_root() {
            Ok(root) => self
                .manifests(&root, &mut Watched::none())
                .into_iter()
                .map(|m| m.slug)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The reservations every site operation honours.
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// The templates.
    pub fn templates(&self) -> &Templates {
        &self.templates
    }

    /// How git is run.
    pub fn git(&self) -> &Git {
        &self.git
    }

    /// The settings.
    pub fn config(&self) -> &SitesConfig {
        &self.config
    }

    /// Site `slug`'s workspace, manifest or not: a slug outside the grammar, or a path that is
    /// missing, a file or a planted link, is no site's. Blocking.
    pub fn workspace(&self, slug: &str) -> Result<Root, SiteError> {
        let not_found = || SiteError::NotFound(slug.to_owned());
        let slug = Slug::parse(slug).map_err(|_| not_found())?;
        let root = self.sites_root()?;
        match root.open_dir(slug.as_str()) {
            Ok(workspace) => Ok(workspace),
            Err(e @ FsError::Io { .. }) => Err(e.into()),
            Err(_) => Err(not_found()),
        }
    }

    fn sites_root(&self) -> Result<Root, SiteError> {
        Ok(Root::open(&self.config.sites_root)?)
    }

    /// Runs blocking filesystem work off the async workers.
    async fn blocking<T, F>(&self, work: F) -> Result<T, SiteError>
    where
        T: Send + 'static,
        F: FnOnce(&Sites) -> Result<T, SiteError> + Send + 'static,
    {
        let sites = self.clone();
        tokio::task::spawn_blocking(move || work(&sites))
            .await
            .map_err(|e| SiteError::Task(e.to_string()))?
    }

    /// Creates a site from a request body, checked in the numbered order of `admit` so a
    /// request that breaks several rules always meets the same refusal.
    pub async fn create(&self, site: CreateSite, actor: &Actor) -> Result<SiteStatus, SiteError> {
        let owner = actor.user_id;
        let site = self.blocking(move |s| s.check_new(site)).await?;
        // 7: confinement admission for the git door: nothing is made when no run can start.
        let target = self.config.run_target(site.slug.as_str());
        self.git
            .runner()
            .admit(&target, Door::Git)
            .await
            .map_err(GitError::Refused)?;
        let (init, manifest) = self.blocking(move |s| s.admit(site, owner)).await?;
        // 12-13: fill the workspace, or remove everything this request made.
        let made = self.populate(&manifest).await;
        let slug = manifest.slug.clone();
        let result = match made {
            Ok(()) => Ok(self.status_of(manifest)),
            Err(e) => {
                tracing::warn!(site = %slug, error = %e, "create failed; removing the workspace");
                let undo = slug.clone();
                self.blocking(move |s| {
                    s.undo_create(&undo);
                    Ok(())
                })
                .await?;
                Err(e)
            }
        };
        drop(init);
        result
    }

    /// Steps 1-6, the checks before confinement admission; the request with its domain
    /// normalized.
    fn check_new(&self, site: CreateSite) -> Result<CreateSite, SiteError> {
        // 1-2: slug and name, checked at the edge.
        let slug = &site.slug;
        // 3: an existing manifest.
        let root = self.sites_root()?;
        if has_manifest(&root, slug) {
            return Err(SiteError::SlugExists(slug.to_string()));
        }
        // 4-5: domain grammar, then no other site has it.
        let domain = normalize_domain(&site.domain)?;
        if self
            .manifests(&root, &mut Watched::none())
            .iter()
            .any(|m| m.domain == domain && m.slug != slug.as_str())
        {
            return Err(SiteError::DomainTaken(domain));
        }
        // 6: the site table declares this site with this domain, and its webspace is ours.
        self.prove_declared(slug, &domain)?;
        Ok(CreateSite { domain, ..site })
    }

    /// Steps 8-11, after confinement admission: the `init` hold, the site limit, the template
    /// and the exclusive workspace directory.
    fn admit(
        &self,
        site: CreateSite,
        owner: i64,
    ) -> Result<(Reservation, SiteManifest), SiteError> {
        let CreateSite {
            slug,
            name,
            domain,
            template,
            driver,
        } = site;
        let root = self.sites_root()?;
        // 8: hold the site while it is made.
        let init = self.reservations.reserve(slug.as_str(), Hold::Init)?;
        // 9: the site limit: the sites, and the creates under way (marked, maybe without a
        // manifest yet), counted and marked by one create at a time.
        let admitting = self
            .admissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut sites: std::collections::HashSet<String> = self
            .manifests(&root, &mut Watched::none())
            .into_iter()
            .map(|manifest| manifest.slug)
            .collect();
        sites.extend(marked_creates(&root));
        if sites.len() >= self.config.max_sites as usize {
            return Err(SiteError::MaxSites(self.config.max_sites));
        }
        // 10: the template.
        let template_id = template.unwrap_or_else(|| DEFAULT_TEMPLATE.to_owned());
        let template = self
            .templates
            .get(&template_id)
            .ok_or_else(|| SiteError::UnknownTemplate(template_id.clone()))?;
        // 11: the workspace directory, exclusively.
        if !tree::create_dir_exclusive(&root, slug.as_str(), WORKSPACE_DIR_MODE)? {
            return Err(if has_manifest(&root, &slug) {
                SiteError::SlugExists(slug.to_string())
            } else {
                SiteError::WorkspaceExists(slug.to_string())
            });
        }
        // Until the create is answered, a mark says the workspace is half made: a process
        // killed before that leaves it for the next boot to remove, not a workspace that
        // blocks the slug and that no delete finds.
        let marked = root
            .create_dir_all(DRIVER_RECORDS_DIR, PRIVATE_DIR_MODE)
            .and_then(|_| root.write_atomic(create_mark(slug.as_str()), b"", PRIVATE_FILE_MODE));
        if let Err(e) = marked {
            self.undo_create(slug.as_str());
            return Err(e.into());
        }
        drop(admitting);
        // An unknown driver was ignored at the edge, as the original ignored one.
        let driver = driver.unwrap_or(self.config.default_driver);
        let manifest = SiteManifest {
            slug: slug.to_string(),
            name,
            domain,
            owner_user_id: owner,
            created_at: iso8601(SystemTime::now()),
            driver,
            template: template_id,
            build: template.build,
            published: None,
        };
        Ok((init, manifest))
    }

    /// Step 12: scaffold, driver record, manifest, brief, `.builder`, first commit, modes.
    async fn populate(&self, manifest: &SiteManifest) -> Result<(), SiteError> {
        let files = manifest.clone();
        self.blocking(move |s| s.write_files(&files)).await?;
        let workspace = self.sites_root()?.open_dir(&manifest.slug)?;
        let target = self.config.run_target(&manifest.slug);
        self.git.init(&target, &workspace).await?;
        let slug = manifest.slug.clone();
        self.blocking(move |s| {
            let workspace = s.sites_root()?.open_dir(&slug)?;
            // git wrote under the daemon's umask: give the tree the shared modes, so the
            // site's identity can work in it, but leave `.builder/` traverse-only.
            tree::apply_modes(
                &workspace,
                WORKSPACE_DIR_MODE,
                manifest::WORKSPACE_FILE_MODE,
                &[BUILDER_DIR],
            )?;
            // Made: the mark goes, durably, before the create is answered.
            let root = s.sites_root()?;
            root.remove_file(create_mark(&slug))?;
            root.open_dir(DRIVER_RECORDS_DIR)?.sync()?;
            Ok(())
        })
        .await
    }

    fn write_files(&self, manifest: &SiteManifest) -> Result<(), SiteError> {
        let root = self.sites_root()?;
        let workspace = root.open_dir(&manifest.slug)?;
        self.templates.scaffold(
            &manifest.template,
            &workspace,
            &self.config.publication_api_url,
        )?;
        root.create_dir_all(DRIVER_RECORDS_DIR, PRIVATE_DIR_MODE)?;
        let record = format!("{{\"driver\":\"{}\"}}\n", manifest.driver.as_str());
        root.write_atomic(
            driver_record(&manifest.slug),
            record.as_bytes(),
            PRIVATE_FILE_MODE,
        )?;
        manifest::write_manifest(&workspace, manifest)?;
        agents_md::write_brief(&workspace, manifest, &self.config.publication_api_url)?;
        workspace.create_own_dir_all(BUILDER_DIR, BUILDER_DIR_MODE)?;
        Ok(())
    }

    /// Step 13: removes the workspace directory this create made and its driver record.
    fn undo_create(&self, slug: &str) {
        let root = match self.sites_root() {
            Ok(root) => root,
            Err(e) => {
                tracing::error!(site = %slug, error = %e, "could not undo a failed create");
                return;
            }
        };
        if let Err(e) = tree::remove_tree(&root, slug) {
            tracing::error!(site = %slug, error = %e, "could not remove the half-made workspace");
        }
        if let Err(e) = root.remove_file(driver_record(slug)) {
            tracing::error!(site = %slug, error = %e, "could not remove the driver record");
        }
        if let Err(e) = root.remove_file(create_mark(slug)) {
            tracing::error!(site = %slug, error = %e, "could not remove the create's mark");
        }
    }

    /// Removes what creates cut short by a killed process left (see [`Sites::admit`]): each
    /// workspace still marked half made, with its driver record and its mark; the slugs
    /// removed. Run at boot, before anything is served. Blocking.
    pub fn remove_unfinished_creates(&self) -> Vec<String> {
        let Ok(root) = self.sites_root() else {
            return Vec::new();
        };
        let marked = marked_creates(&root);
        for slug in &marked {
            self.undo_create(slug);
        }
        marked
    }

    fn prove_declared(&self, slug: &Slug, domain: &str) -> Result<SiteRow, SiteError> {
        let row = self.row_for(slug.as_str(), domain)?;
        site_table::prove_webspace(&row, &self.config.instance)?;
        Ok(row)
    }

    /// The site table's row of `slug`, which must declare it with `domain`.
    fn row_for(&self, slug: &str, domain: &str) -> Result<SiteRow, WebspaceError> {
        let table = SiteTable::read(&self.config.site_table_file, &self.config.instance)?;
        let row = table.row(slug).ok_or_else(|| {
            WebspaceError(format!("site '{slug}' is not declared in the site table"))
        })?;
        if row.domain != domain {
            return Err(WebspaceError(format!(
                "site '{slug}' is declared with the domain {}, not {domain}",
                row.domain
            )));
        }
        Ok(row.clone())
    }

    /// The site's row in the site table, not proved (for reads).
    pub fn table_row(&self, manifest: &SiteManifest) -> Result<SiteRow, WebspaceError> {
        self.row_for(&manifest.slug, &manifest.domain)
    }

    /// The site's row, its webspace proved this instance's and writable (for writes).
    pub fn declared_row(&self, manifest: &SiteManifest) -> Result<SiteRow, SiteError> {
        let slug = Slug::parse(&manifest.slug)?;
        self.prove_declared(&slug, &manifest.domain)
    }

    /// Every readable, valid manifest under the sites root, sorted by slug, each workspace
    /// watched before it is read.
    fn manifests(&self, root: &Root, watched: &mut Watched) -> Vec<SiteManifest> {
        let Ok(entries) = tree::list_dir(root, None) else {
            return Vec::new();
        };
        entries
            .into_iter()
            .filter(|(_, kind)| *kind == FileKind::Dir)
            .filter_map(|(name, _)| Slug::parse(name.to_str()?).ok())
            .filter_map(|slug| {
                let workspace = root.open_dir(slug.as_str()).ok()?;
                // Only the manifest of the workspace's own entries: an agent writing the
                // site's files beside it does not make the list read again.
                watched.watch_entries(&workspace, &[OsStr::new(manifest::MANIFEST_FILE)]);
                manifest::read_manifest(&workspace, slug.as_str()).ok()?
            })
            .collect()
    }

    /// The status of site `slug`.
    pub fn get(&self, slug: &Slug) -> Result<SiteStatus, SiteError> {
        let not_found = || SiteError::NotFound(slug.to_string());
        if self.reservations.holder(slug.as_str()) == Some(Hold::Deleting) {
            return Err(Busy(Hold::Deleting).into());
        }
        let root = self.sites_root()?;
        let workspace = match root.open_dir(slug.as_str()) {
            Ok(ws) => ws,
            Err(e) if !matches!(e, FsError::Io { .. }) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        let manifest = manifest::read_manifest(&workspace, slug.as_str())?.ok_or_else(not_found)?;
        Ok(self.status_of(manifest))
    }

    /// Every site's status, sorted by slug; a site whose status cannot be built is left out.
    /// Served from memory while nothing it was read from has changed ([`Listing`]).
    pub fn list(&self) -> Result<Vec<SiteStatus>, SiteError> {
        if let Some(sites) = self.list_fresh() {
            return Ok(sites);
        }
        let mut watched = Watched::start();
        let root = self.sites_root()?;
        watched.watch(&root);
        // One read of the site table serves every site of the list.
        if let Ok(dir) = site_table::directory(&self.config.site_table_file) {
            watched.watch(&dir);
        }
        let table = SiteTable::read(&self.config.site_table_file, &self.config.instance).ok();
        let sites: Vec<SiteStatus> = self
            .manifests(&root, &mut watched)
            .into_iter()
            .map(|m| self.status_with(m, &root, table.as_ref(), &mut watched))
            .collect();
        self.listing.keep(watched, &sites);
        Ok(sites)
    }

    /// The kept site list with each site's session as it is now, if nothing the list was read
    /// from has changed since: no file is read.
    pub fn list_fresh(&self) -> Option<Vec<SiteStatus>> {
        self.listing.fresh(&self.session_states)
    }

    /// The list's answer body (`{"data": [...]}`) from memory, if nothing the list was read
    /// from has changed since: no file is read, and nothing is serialized unless a session
    /// changed.
    pub fn list_body_fresh(&self) -> Option<bytes::Bytes> {
        self.listing.fresh_body(&self.session_states)
    }

    fn status_of(&self, manifest: SiteManifest) -> SiteStatus {
        let table = SiteTable::read(&self.config.site_table_file, &self.config.instance).ok();
        match self.sites_root() {
            Ok(root) => self.status_with(manifest, &root, table.as_ref(), &mut Watched::none()),
            Err(_) => self.status_parts(manifest, None, None),
        }
    }

    fn status_with(
        &self,
        manifest: SiteManifest,
        root: &Root,
        table: Option<&SiteTable>,
        watched: &mut Watched,
    ) -> SiteStatus {
        let release = table
            .and_then(|t| t.row(&manifest.slug))
            .filter(|row| row.domain == manifest.domain)
            .and_then(|row| preprod_release(row, watched));
        let last_build = root.open_dir(&manifest.slug).ok().and_then(|ws| {
            watched.watch_down(&ws, Path::new(build_record::BUILDS_DIR));
            build_record::latest(&ws)
        });
        self.status_parts(manifest, release, last_build)
    }

    fn status_parts(
        &self,
        manifest: SiteManifest,
        release: Option<String>,
        last_build: Option<BuildRecord>,
    ) -> SiteStatus {
        let url = format!(
            "http://{}.{}/",
            self.config.preprod_host_prefix, manifest.domain
        );
        let session = self
            .session_states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .session(&manifest.slug);
        SiteStatus {
            published: manifest.published.clone(),
            manifest,
            session,
            last_build,
            preprod: Preprod { url, release },
        }
    }

    /// Deletes site `slug`: refused while anything holds it, and then nothing is
    /// removed; otherwise its workspace, driver record and preproduction (plus production when
    /// `purge_prod`) go. A surface whose webspace cannot be proved is skipped and reported.
    pub fn delete(&self, slug: &Slug, purge_prod: bool) -> Result<DeleteReport, SiteError> {
        let not_found = || SiteError::NotFound(slug.to_string());
        let _deleting = self.reservations.reserve(slug.as_str(), Hold::Deleting)?;
        // A publish or rollback under way finishes first: its release must not be half copied
        // into a store the delete removes, nor land after it.
        let lock = self.reservations.serving(slug.as_str());
        let _serving = crate::reservations::hold(&lock);
        let root = self.sites_root()?;
        // Existence is decided under the hold: a workspace that is a link or a file is no site.
        let workspace = match root.open_dir(slug.as_str()) {
            Ok(ws) => ws,
            Err(e) if !matches!(e, FsError::Io { .. }) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        let manifest = match manifest::read_manifest(&workspace, slug.as_str()) {
            Ok(Some(m)) => Some(m),
            Ok(None) => return Err(not_found()),
            // A corrupt or planted manifest still names a workspace to delete.
            Err(e) => {
                tracing::warn!(site = %slug, error = %e, "deleting a site with an unreadable manifest");
                None
            }
        };
        drop(workspace);

        let mut surfaces = vec!["preprod"];
        if purge_prod {
            surfaces.push("prod");
        }
        let mut removed_surfaces = Vec::new();
        let mut skipped_surfaces = Vec::new();
        for surface in surfaces {
            match self.remove_surface(slug, manifest.as_ref(), surface) {
                Ok(()) => removed_surfaces.push(surface.to_owned()),
                Err(reason) => skipped_surfaces.push(SkippedSurface {
                    surface: surface.to_owned(),
                    reason,
                }),
            }
        }
        // The workspace leaves its slug in one rename, then goes: a delete cut short (a crash,
        // a folder the agent made unreadable) never leaves half a workspace under the slug,
        // which would be no site to delete and still block creating it again.
        let retired = workspace::deleted_workspace_name(slug.as_str(), unix_nanos());
        root.rename_dir(slug.as_str(), &retired)?;
        self.session_states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forget(slug.as_str());
        root.remove_file(driver_record(slug.as_str()))?;
        if let Err(error) = tree::remove_tree(&root, &retired) {
            tracing::warn!(site = %slug, %error, "the deleted workspace is left as {retired}; the next start removes it");
        }
        Ok(DeleteReport {
            deleted: slug.to_string(),
            purged_prod: purge_prod,
            removed_surfaces,
            skipped_surfaces,
        })
    }

    /// Removes what deletes cut short left in the sites root (see [`Sites::delete`]); the
    /// count removed. Blocking.
    pub fn remove_deleted_leftovers(&self) -> usize {
        let Ok(root) = self.sites_root() else {
            return 0;
        };
        let Ok(entries) = tree::list_dir(&root, None) else {
            return 0;
        };
        let mut removed = 0;
        for (name, _) in entries {
            let Some(name) = name.to_str().filter(|n| workspace::is_deleted_workspace(n)) else {
                continue;
            };
            match tree::remove_tree(&root, name) {
                Ok(_) => removed += 1,
                Err(error) => tracing::warn!(%error, "a deleted workspace, {name}, is left"),
            }
        }
        removed
    }

    /// Makes a surface's release store again when it is missing, with the provisioner's mode in
    /// the proved webspace (whose setgid bit gives it the web group): a delete without purge
    /// took preproduction's, a purge production's, and a site created again under the same
    /// slug builds and publishes without another `apply`. An existing store is left as it is.
    ///
    /// Each level is opened without following a link, so a link planted where the store (or
    /// the stores' directory) was is refused as `webspace_unavailable`, and nothing is made
    /// where it points.
    pub fn ensure_store(&self, row: &SiteRow, surface: &'static str) -> Result<(), SiteError> {
        let webspace = site_table::prove_webspace(row, &self.config.instance)?;
        let store = &surface_paths(row, surface).store_dir;
        let rel = site_table::inside(&row.webspace, store)
            .ok_or_else(|| WebspaceError(format!("{} is outside the webspace", store.display())))?;
        let mode = atelier_layout::paths::mode_rule(atelier_layout::paths::Role::ReleaseStore).mode;
        match webspace.create_dir_all(&rel, mode) {
            Ok(_) => Ok(()),
            Err(e) if e.is_refusal() => Err(site_table::store_refused(store, e).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes a surface's served link, then its release store; never the webspace itself.
    fn remove_surface(
        &self,
        slug: &Slug,
        manifest: Option<&SiteManifest>,
        surface: &'static str,
    ) -> Result<(), String> {
        let manifest = manifest.ok_or("the site's manifest is unreadable")?;
        let table = SiteTable::read(&self.config.site_table_file, &self.config.instance)
            .map_err(|e| e.to_string())?;
        let row = table
            .row(slug.as_str())
            .ok_or("the site is not declared in the site table")?;
        if row.domain != manifest.domain {
            return Err(format!("the site table declares the domain {}", row.domain));
        }
        let webspace = site_table::prove_webspace(row, &self.config.instance).map_err(|e| e.0)?;
        let paths = surface_paths(row, surface);
        for path in [&paths.link_path, &paths.store_dir] {
            let rel = site_table::inside(&row.webspace, path)
                .ok_or_else(|| format!("{} is outside the webspace", path.display()))?;
            tree::remove_tree(&webspace, &rel).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Bytes the site uses: its workspace plus its declared release stores (links are not
    /// followed; what is missing counts 0, and so does what goes away while it is measured).
    /// A store that cannot be measured fails the measure as the workspace does: counted as
    /// empty, it would let exactly the largest sites past their quota.
    pub fn usage_bytes(&self, slug: &str) -> Result<u64, SiteError> {
        let slug = Slug::parse(slug).map_err(|_| SiteError::NotFound(slug.to_owned()))?;
        let root = self.sites_root()?;
        let mut total = tree::usage_bytes(&root, Some(Path::new(slug.as_str())))?;
        if let Ok(table) = SiteTable::read(&self.config.site_table_file, &self.config.instance) {
            if let Some(row) = table.row(slug.as_str()) {
                if let Ok(webspace) = Root::open(&row.webspace) {
                    for store in [
                        &row.surfaces.preprod.store_dir,
                        &row.surfaces.prod.store_dir,
                    ] {
                        if let Some(rel) = site_table::inside(&row.webspace, store) {
                            total += tree::usage_bytes(&webspace, Some(&rel))?;
                        }
                    }
                }
            }
        }
        Ok(total)
    }

    /// The driver site `slug`'s sessions use, from its driver record; `None` when the
    /// record is missing, planted or unreadable.
    pub fn recorded_driver(&self, slug: &str) -> Option<Driver> {
        let slug = Slug::parse(slug).ok()?;
        let bytes = self
            .sites_root()
            .ok()?
            .read_limited(driver_record(slug.as_str()), 4096)
            .ok()?;
        let record: Value = serde_json::from_slice(&bytes).ok()?;
        Driver::parse(record.get("driver")?.as_str()?)
    }

    /// Refuses with `disk_quota` when the site's usage plus `extra_bytes` is over its quota.
    pub fn check_quota(&self, slug: &str, extra_bytes: u64) -> Result<(), SiteError> {
        let needed = self.usage_bytes(slug)?.saturating_add(extra_bytes);
        let quota = self.config.site_disk_quota_mb.saturating_mul(BYTES_PER_MB);
        if needed > quota {
            return Err(SiteError::DiskQuota {
                slug: slug.to_owned(),
                needed_mb: needed as f64 / BYTES_PER_MB as f64,
                quota_mb: self.config.site_disk_quota_mb,
            });
        }
        Ok(())
    }
}

/// A row's paths of `surface` (`prod` or `preprod`).
fn surface_paths<'r>(row: &'r SiteRow, surface: &str) -> &'r atelier_layout::files::SurfacePaths {
    if surface == "prod" {
        &row.surfaces.prod
    } else {
        &row.surfaces.preprod
    }
}

/// The release a row's preproduction link serves, read off the declared surface without
/// proving the webspace; `None` when unreadable. The link's directory and the directories
/// down to the store are watched first.
fn preprod_release(row: &SiteRow, watched: &mut Watched) -> Option<String> {
    let surface = &row.surfaces.preprod;
    if let Some(link_dir) = surface.link_path.parent() {
        if let Ok(dir) = Root::open(link_dir) {
            // Every entry: the link is one, the way down to the store another.
            watched.watch(&dir);
            let store = surface
                .store_dir
                .strip_prefix(link_dir)
                .unwrap_or(Path::new(""));
            watched.watch_down(&dir, store);
        }
    }
    let store = atelier_releases::Store::open(&surface.store_dir, &surface.link_path).ok()?;
    Some(store.current().ok()??.as_str().to_owned())
}

fn has_manifest(root: &Root, slug: &Slug) -> bool {
    root.metadata(Path::new(slug.as_str()).join(manifest::MANIFEST_FILE))
        .is_ok()
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The slugs whose create is marked under way.
fn marked_creates(root: &Root) -> Vec<String> {
    let Ok(entries) = tree::list_dir(root, Some(Path::new(DRIVER_RECORDS_DIR))) else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|(name, _)| {
            let slug = workspace::marked_create(name.to_str()?)?;
            Some(Slug::parse(slug).ok()?.to_string())
        })
        .collect()
}
