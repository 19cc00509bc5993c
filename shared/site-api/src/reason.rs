//! The closed list of machine `reason`s sited refuses a request (or ends a turn) with, and
//! their wire strings. Clients branch on these strings, so the list only grows deliberately.

/// Every machine `reason` the daemon may emit, and nothing else: clients branch on these
/// strings, so the list is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// 409: a `site.json` exists.
    SlugExists,
    /// 409: something non-site is at the workspace path.
    WorkspaceExists,
    /// 409: another site has the domain.
    DomainTaken,
    /// 409: the site table or webspace refused.
    WebspaceUnavailable,
    /// 409: nothing to publish.
    NoBuild,
    /// 409: no live turn to stop.
    NotRunning,
    /// 409: a turn holds the site.
    SessionRunning,
    /// 409: a build holds the site.
    BuildRunning,
    /// 409: a create holds the site.
    SiteInitializing,
    /// 409: the boot recovery holds the site.
    SiteRecovering,
    /// 409: a git operation holds the site.
    GitRunning,
    /// 409: a delete holds the site.
    SiteDeleting,
    /// 429: the instance has its maximum of sites.
    MaxSites,
    /// 429: the global turn semaphore is full.
    MaxConcurrentSessions,
    /// 429: over the site's disk quota.
    DiskQuota,
    /// 503: the host cannot confine runs.
    ConfinementUnavailable,
    /// 503: a second run on a site.
    ConfinementSiteBusy,
    /// 503: no identity for the site.
    ConfinementIdentityMissing,
    /// 503: a previous run would not die.
    ConfinementIdentityQuarantined,
    /// 503: the unit never said hello.
    ConfinementUnitRefused,
    /// 503: the loaded unit differs from what was rendered.
    ConfinementUnitNonconformant,
    /// 503: the daemon is stopping.
    ConfinementDaemonStopping,
    /// 503: the agent CLI lacks a required flag.
    ConfinementAgentCliUnsupported,
    /// 503: the agent CLI probe did not finish.
    ConfinementAgentCliUnproved,
}

impl Reason {
    /// Every reason.
    pub const ALL: [Reason; 24] = [
        Reason::SlugExists,
        Reason::WorkspaceExists,
        Reason::DomainTaken,
        Reason::WebspaceUnavailable,
        Reason::NoBuild,
        Reason::NotRunning,
        Reason::SessionRunning,
        Reason::BuildRunning,
        Reason::SiteInitializing,
        Reason::SiteRecovering,
        Reason::GitRunning,
        Reason::SiteDeleting,
        Reason::MaxSites,
        Reason::MaxConcurrentSessions,
        Reason::DiskQuota,
        Reason::ConfinementUnavailable,
        Reason::ConfinementSiteBusy,
        Reason::ConfinementIdentityMissing,
        Reason::ConfinementIdentityQuarantined,
        Reason::ConfinementUnitRefused,
        Reason::ConfinementUnitNonconformant,
        Reason::ConfinementDaemonStopping,
        Reason::ConfinementAgentCliUnsupported,
        Reason::ConfinementAgentCliUnproved,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::SlugExists => "slug_exists",
            Reason::WorkspaceExists => "workspace_exists",
            Reason::DomainTaken => "domain_taken",
            Reason::WebspaceUnavailable => "webspace_unavailable",
            Reason::NoBuild => "no_build",
            Reason::NotRunning => "not_running",
            Reason::SessionRunning => "session_running",
            Reason::BuildRunning => "build_running",
            Reason::SiteInitializing => "site_initializing",
            Reason::SiteRecovering => "site_recovering",
            Reason::GitRunning => "git_running",
            Reason::SiteDeleting => "site_deleting",
            Reason::MaxSites => "max_sites",
            Reason::MaxConcurrentSessions => "max_concurrent_sessions",
            Reason::DiskQuota => "disk_quota",
            Reason::ConfinementUnavailable => "confinement_unavailable",
            Reason::ConfinementSiteBusy => "confinement.site_busy",
            Reason::ConfinementIdentityMissing => "confinement.identity_missing",
            Reason::ConfinementIdentityQuarantined => "confinement.identity_quarantined",
            Reason::ConfinementUnitRefused => "confinement.unit_refused",
            Reason::ConfinementUnitNonconformant => "confinement.unit_nonconformant",
            Reason::ConfinementDaemonStopping => "confinement.daemon_stopping",
            Reason::ConfinementAgentCliUnsupported => "confinement.agent_cli_unsupported",
            Reason::ConfinementAgentCliUnproved => "confinement.agent_cli_unproved",
        }
    }
}
