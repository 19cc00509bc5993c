//! Preview, publish, releases and rollback: production gets exactly the bytes of
//! the preproduction release that was previewed — a copy into its own store, never a rebuild —
//! and any retained production release can be served again by flipping the link back.

use std::path::Path;
use std::time::SystemTime;

use atelier_fs::{FsError, Root};
use atelier_releases::{ReleaseError, Store, Strategy};

use atelier_site_api::Slug;

use crate::actor::Actor;
use crate::dates::iso8601;
use crate::manifest::{self, Published};
use crate::reservations;
use crate::site_table::{self, SiteRow, SurfacePaths};
use crate::sites::{SiteError, Sites};

/// Why a publishing request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A site refusal (unknown, webspace, quota…).
    #[error(transparent)]
    Site(#[from] SiteError),
    /// A bad request field.
    #[error("{0}")]
    Validation(&'static str),
    /// Nothing built to publish.
    #[error("{0}")]
    NoBuild(&'static str),
    /// No such production release.
    #[error("No release '{release}' for '{slug}'")]
    UnknownRelease {
        /// The site.
        slug: String,
        /// The release asked for.
        release: String,
    },
    /// A release store operation failed.
    #[error(transparent)]
    Release(#[from] ReleaseError),
}

pub use atelier_site_api::{Preview, Releases, Served};

/// The site's two stores, after its webspace was proved.
fn stores(row: &SiteRow) -> Result<(Store, Store), PublishError> {
    // A store the first build has not made yet holds nothing to publish.
    let preprod = open_store(
        &row.surfaces.preprod,
        "Nothing to publish — build the site first",
    )?;
    Ok((preprod, prod_store(row)?))
}

/// The site's production store, after its webspace was proved.
fn prod_store(row: &SiteRow) -> Result<Store, PublishError> {
    // Purged with its site: nothing was published since.
    open_store(
        &row.surfaces.prod,
        "Nothing is published — publish the site first",
    )
}

/// Opens a surface's store: a missing one is `no_build` with `missing` as its detail, a
/// refused one (a planted link is never followed) the webspace's refusal.
fn open_store(paths: &SurfacePaths, missing: &'static str) -> Result<Store, PublishError> {
    match Store::open(&paths.store_dir, &paths.link_path) {
        Ok(store) => Ok(store),
        Err(ReleaseError::Fs(FsError::NotFound { .. })) => Err(PublishError::NoBuild(missing)),
        Err(e) => Err(store_error(&paths.store_dir, e)),
    }
}

/// A store's failure as publishing answers it: a refusal (a link or a folder where the served
/// link or the store should be, never followed) is the webspace's, not the provisioner's
/// layout; anything else is the release's own failure.
fn store_error(store_dir: &Path, error: ReleaseError) -> PublishError {
    if error.is_refusal() {
        SiteError::from(site_table::store_refused(store_dir, error)).into()
    } else {
        error.into()
    }
}

impl Sites {
    /// `GET /v1/sites/:slug/preview`. Blocking.
    pub fn preview(&self, slug: &Slug) -> Result<Preview, PublishError> {
        let status = self.get(slug)?;
        Ok(Preview {
            url: status.preprod.url,
            release: status.preprod.release,
            built_at: None,
        })
    }

    /// `POST /v1/sites/:slug/publish` after the actor and `confirm` checks; `served` is told
    /// the release production serves as soon as it does (the audit entry), before production's
    /// old releases are pruned, which may take long enough for a crash to cut it. Blocking.
    pub fn publish(
        &self,
        slug: &Slug,
        actor: &Actor,
        served: impl FnOnce(&str),
    ) -> Result<Served, PublishError> {
        let lock = self.reservations().serving(slug.as_str());
        let _serving = reservations::hold(&lock);
        let status = self.get(slug)?;
        let row = self.declared_row(&status.manifest)?;
        self.ensure_store(&row, "prod")?;
        let (preprod, prod) = stores(&row)?;
        let current = preprod
            .current()
            .map_err(|e| store_error(&row.surfaces.preprod.store_dir, e))?
            .ok_or(PublishError::NoBuild(
                "Nothing to publish — build the site first",
            ))?;
        let incoming = match preprod.release_bytes(&current) {
            Ok(bytes) => bytes,
            Err(ReleaseError::UnknownRelease { .. }) | Err(ReleaseError::Fs(_)) => {
                return Err(PublishError::NoBuild(
                    "The current preprod release is missing — rebuild",
                ))
            }
            Err(e) => return Err(e.into()),
        };
        self.check_quota(slug.as_str(), incoming)?;
        let published = atelier_releases::publish(&preprod, &prod, Strategy::default()).map_err(
            |e| match e {
                // preprod moved on meanwhile (a build's prune): nothing of it to publish.
                ReleaseError::NothingToPublish { .. } | ReleaseError::UnknownRelease { .. } => {
                    PublishError::NoBuild("The current preprod release is missing — rebuild")
                }
                e => store_error(&row.surfaces.prod.store_dir, e),
            },
        )?;
        let release = published.release.as_str().to_owned();
        self.record_published(slug.as_str(), &release, actor);
        served(&release);
        if let Err(e) = prod.prune(self.config().releases_retained) {
            tracing::warn!(site = %slug, error = %e, "pruning production releases failed");
        }
        Ok(Served {
            url: self.prod_url(&status.manifest.domain),
            release,
        })
    }

    /// `GET /v1/sites/:slug/releases`: production's releases from the declared surface (no
    /// proof, nothing written). Blocking.
    pub fn releases(&self, slug: &Slug) -> Result<Releases, PublishError> {
        let status = self.get(slug)?;
        let empty = Releases {
            releases: Vec::new(),
            current: None,
        };
        let Ok(row) = self.table_row(&status.manifest) else {
            return Ok(empty);
        };
        let Ok(prod) = Store::open(&row.surfaces.prod.store_dir, &row.surfaces.prod.link_path)
        else {
            return Ok(empty);
        };
        let releases = prod
            .list()?
            .iter()
            .map(|id| id.as_str().to_owned())
            .collect();
        Ok(Releases {
            releases,
            current: prod.current()?.map(|id| id.as_str().to_owned()),
        })
    }

    /// `POST /v1/sites/:slug/rollback` after the actor check: serves retained production
    /// release `release` again. Blocking.
    pub fn rollback(
        &self,
        slug: &Slug,
        release: &str,
        actor: &Actor,
    ) -> Result<Served, PublishError> {
        let lock = self.reservations().serving(slug.as_str());
        let _serving = reservations::hold(&lock);
        // The contract's order: an unknown site is 404 before an empty release is 400.
        let status = self.get(slug)?;
        if release.is_empty() {
            return Err(PublishError::Validation("release is required"));
        }
        let row = self.declared_row(&status.manifest)?;
        let prod = prod_store(&row)?;
        let unknown = || PublishError::UnknownRelease {
            slug: slug.to_string(),
            release: release.to_owned(),
        };
        let activated = match prod.activate(release) {
            Ok(id) => id,
            Err(ReleaseError::UnknownRelease { .. } | ReleaseError::InvalidReleaseId { .. }) => {
                return Err(unknown())
            }
            Err(e) => return Err(store_error(&row.surfaces.prod.store_dir, e)),
        };
        let release = activated.as_str().to_owned();
        self.record_published(slug.as_str(), &release, actor);
        Ok(Served {
            url: self.prod_url(&status.manifest.domain),
            release,
        })
    }

    fn prod_url(&self, domain: &str) -> String {
        format!("{}://{domain}/", self.config().prod_url_scheme)
    }

    /// Records in `site.json` what production serves and who put it there.
    /// Notes in the manifest what production serves now. Production changed already, so a
    /// manifest that cannot take the note (an agent broke it meanwhile) fails nothing: the
    /// answer and the audit entry still tell the change, and the journal why the note is
    /// missing.
    fn record_published(&self, slug: &str, release: &str, actor: &Actor) {
        if let Err(error) = self.write_published(slug, release, actor) {
            tracing::warn!(site = %slug, release, %error, "production serves the release, but the manifest could not record it");
        }
    }

    fn write_published(&self, slug: &str, release: &str, actor: &Actor) -> Result<(), SiteError> {
        let workspace = Root::open(&self.config().sites_root)?.open_dir(slug)?;
        let mut manifest = manifest::read_manifest(&workspace, slug)?
            .ok_or_else(|| SiteError::NotFound(slug.to_owned()))?;
        manifest.published = Some(Published {
            release: release.to_owned(),
            at: iso8601(SystemTime::now()),
            by: actor.username.clone(),
        });
        manifest::write_manifest(&workspace, &manifest)?;
        Ok(())
    }
}
