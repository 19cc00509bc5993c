//! Site identities, with the host's `/etc/passwd`, `/etc/shadow` and `/etc/group` as the only
//! ledger: the next site gets the highest ordinal ever used plus one, a removed site's identity
//! is locked and kept, and an ordinal is never handed out twice.

use std::collections::{BTreeMap, BTreeSet};

pub use atelier_layout::accounts::{parse_group, parse_passwd, GroupEntry, PasswdEntry};
use atelier_layout::names::{self, MAX_ORDINAL};
use atelier_layout::{Declaration, SiteOrdinal};
use serde::Serialize;

/// The GECOS prefix of a site identity; the rest is the slug, the ledger's only record of which
/// site an ordinal belongs to.
pub const GECOS_PREFIX: &str = "atelier site ";

/// The shadow expiry (days since the epoch) that marks a retired identity: `usermod
/// --expiredate 1`. A password lock alone means nothing, since `useradd` writes one.
pub const RETIRED_EXPIRY: i64 = 1;

/// The login shell of every account Atelier creates.
pub const NOLOGIN: &str = "/usr/sbin/nologin";

/// One line of `/etc/shadow`, without the password hash (never kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShadowEntry {
    /// Login name.
    pub name: String,
    /// Account expiry in days since the epoch, if set.
    pub expire: Option<i64>,
}

/// The host's account databases, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Accounts {
    /// `/etc/passwd`.
    pub passwd: Vec<PasswdEntry>,
    /// `/etc/group`.
    pub groups: Vec<GroupEntry>,
    /// `/etc/shadow`, or `None` when it could not be read (not root).
    pub shadow: Option<Vec<ShadowEntry>>,
}

// === impl Accounts ===

impl Accounts {
    /// The user named `name`.
    pub fn user(&self, name: &str) -> Option<&PasswdEntry> {
        self.passwd.iter().find(|u| u.name == name)
    }

    /// The user with id `uid`.
    pub fn user_by_uid(&self, uid: u32) -> Option<&PasswdEntry> {
        self.passwd.iter().find(|u| u.uid == uid)
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&GroupEntry> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The group with id `gid`.
    pub fn group_by_gid(&self, gid: u32) -> Option<&GroupEntry> {
        self.groups.iter().find(|g| g.gid == gid)
    }

    /// Whether `name`'s shadow entry says it is retired; `None` when shadow was not readable.
    pub fn is_retired(&self, name: &str) -> Option<bool> {
        let shadow = self.shadow.as_ref()?;
        Some(
            shadow
                .iter()
                .any(|s| s.name == name && s.expire == Some(RETIRED_EXPIRY)),
        )
    }
}

/// Parses `/etc/shadow`, keeping only names and expiry dates.
pub fn parse_shadow(text: &str) -> Vec<ShadowEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() < 8 {
                return None;
            }
            Some(ShadowEntry {
                name: f[0].to_owned(),
                expire: f[7].parse().ok(),
            })
        })
        .collect()
}

/// Why the ledger cannot be trusted, or an ordinal cannot be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum IdentityError {
    /// The instance has identities but `/etc/shadow` could not be read, so retired ones cannot
    /// be told from live ones.
    #[error("cannot read /etc/shadow to tell retired site identities from live ones")]
    ShadowUnreadable,
    /// An identity has uid 0.
    #[error("site identity {name} has uid 0")]
    RootUid {
        /// The account.
        name: String,
    },
    /// An identity shares its uid with another account.
    #[error("site identity {name} shares uid {uid} with {other}")]
    SharedUid {
        /// The account.
        name: String,
        /// Its uid.
        uid: u32,
        /// The other account.
        other: String,
    },
    /// A live identity names no site.
    #[error("live site identity {name} names no site in its comment")]
    NoSlug {
        /// The account.
        name: String,
    },
    /// Two live identities claim one site.
    #[error("site {slug} is bound to two live identities: {first} and {second}")]
    TwoIdentities {
        /// The site.
        slug: String,
        /// One identity.
        first: String,
        /// The other.
        second: String,
    },
    /// A live identity's primary group is not the instance group.
    #[error("site identity {name}'s primary group is not {group}")]
    WrongPrimaryGroup {
        /// The account.
        name: String,
        /// The instance group.
        group: String,
    },
    /// A live identity belongs to a group other than its own private group.
    #[error("site identity {name} is a member of {group}, which is not its own")]
    ForeignMembership {
        /// The account.
        name: String,
        /// The group.
        group: String,
    },
    /// A private group holds someone other than its identity and the service user.
    #[error(
        "private group {group} holds {member}, who is neither its identity nor the service user"
    )]
    ForeignMember {
        /// The group.
        group: String,
        /// The member.
        member: String,
    },
    /// Every ordinal up to 999 has been used.
    #[error("site {slug} needs an ordinal above {MAX_ORDINAL}; ordinals are never reused")]
    OrdinalsExhausted {
        /// The site.
        slug: String,
    },
}

/// One site identity of the instance found in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerIdentity {
    /// Its ordinal.
    pub k: SiteOrdinal,
    /// Its account name.
    pub name: String,
    /// The slug its comment binds it to.
    pub slug: Option<String>,
    /// Whether it is retired (locked with the retired expiry).
    pub retired: bool,
}

/// What the ledger says about the declared sites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allocation {
    /// Every declared site's ordinal, in declaration order, paired with its index in
    /// `declaration.sites`.
    pub sites: Vec<(SiteOrdinal, usize)>,
    /// The ordinals allocated by this run (their accounts do not exist yet).
    pub new: BTreeSet<SiteOrdinal>,
    /// Live identities whose site is no longer declared: to be locked, never deleted.
    pub removed: Vec<LedgerIdentity>,
}

/// The instance's site identities in the ledger, by ordinal.
pub fn ledger(
    decl: &Declaration,
    accounts: &Accounts,
) -> Result<Vec<LedgerIdentity>, IdentityError> {
    let mut found = Vec::new();
    for user in &accounts.passwd {
        let Some((inst, k)) = names::parse_site_identity(&user.name) else {
            continue;
        };
        if inst != decl.instance {
            continue;
        }
        let retired = accounts
            .is_retired(&user.name)
            .ok_or(IdentityError::ShadowUnreadable)?;
        if user.uid == 0 {
            return Err(IdentityError::RootUid {
                name: user.name.clone(),
            });
        }
        if let Some(other) = accounts
            .passwd
            .iter()
            .find(|o| o.uid == user.uid && o.name != user.name)
        {
            return Err(IdentityError::SharedUid {
                name: user.name.clone(),
                uid: user.uid,
                other: other.name.clone(),
            });
        }
        let slug = user
            .gecos
            .strip_prefix(GECOS_PREFIX)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        if slug.is_none() && !retired {
            return Err(IdentityError::NoSlug {
                name: user.name.clone(),
            });
        }
        if !retired {
            check_groups(decl, accounts, user)?;
        }
        found.push(LedgerIdentity {
            k,
            name: user.name.clone(),
            slug,
            retired,
        });
    }
    found.sort_by_key(|id| id.k);
    Ok(found)
}

/// A live identity's groups: primary is the instance group, its only other group is its own
/// private group, which holds no one but it and the service user.
fn check_groups(
    decl: &Declaration,
    accounts: &Accounts,
    user: &PasswdEntry,
) -> Result<(), IdentityError> {
    let instance_group = names::service_group(&decl.instance);
    if let Some(group) = accounts.group(&instance_group) {
        if user.gid != group.gid {
            return Err(IdentityError::WrongPrimaryGroup {
                name: user.name.clone(),
                group: instance_group,
            });
        }
    }
    let listed = accounts
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.members.as_slice()));
    if let Some(group) =
        atelier_layout::accounts::foreign_group(listed, &user.name, &instance_group)
    {
        return Err(IdentityError::ForeignMembership {
            name: user.name.clone(),
            group: group.to_owned(),
        });
    }
    for group in &accounts.groups {
        if group.name == user.name {
            let svc = names::service_user(&decl.instance);
            if let Some(member) = group
                .members
                .iter()
                .find(|m| **m != user.name && **m != svc)
            {
                return Err(IdentityError::ForeignMember {
                    group: group.name.clone(),
                    member: member.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Binds every declared site to an ordinal: a live identity whose comment names the slug keeps
/// its ordinal; any other site gets the highest ordinal ever used (retired ones included) plus
/// one. Live identities of sites no longer declared are returned to be locked.
pub fn allocate(decl: &Declaration, accounts: &Accounts) -> Result<Allocation, IdentityError> {
    let ledger = ledger(decl, accounts)?;
    let mut live: BTreeMap<&str, &LedgerIdentity> = BTreeMap::new();
    for id in ledger.iter().filter(|id| !id.retired) {
        let Some(slug) = id.slug.as_deref() else {
            continue;
        };
        if let Some(first) = live.insert(slug, id) {
            return Err(IdentityError::TwoIdentities {
                slug: slug.to_owned(),
                first: first.name.clone(),
                second: id.name.clone(),
            });
        }
    }
    let mut highest = ledger.iter().map(|id| id.k.get()).max().unwrap_or(0);
    let mut sites = Vec::with_capacity(decl.sites.len());
    let mut new = BTreeSet::new();
    for (index, site) in decl.sites.iter().enumerate() {
        let k = match live.get(site.slug.as_str()) {
            Some(id) => id.k,
            None => {
                let k = SiteOrdinal::new(u64::from(highest) + 1).map_err(|_| {
                    IdentityError::OrdinalsExhausted {
                        slug: site.slug.clone(),
                    }
                })?;
                highest = k.get();
                new.insert(k);
                k
            }
        };
        sites.push((k, index));
    }
    let declared: BTreeSet<&str> = decl.sites.iter().map(|s| s.slug.as_str()).collect();
    let removed = ledger
        .iter()
        .filter(|id| !id.retired)
        .filter(|id| id.slug.as_deref().is_some_and(|s| !declared.contains(s)))
        .cloned()
        .collect();
    Ok(Allocation {
        sites,
        new,
        removed,
    })
}

/// The GECOS of site `slug`'s identity.
pub fn gecos(slug: &str) -> String {
    format!("{GECOS_PREFIX}{slug}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(slugs: &[&str]) -> Declaration {
        crate::test_support::declaration(slugs)
    }

    fn accounts(ids: &[(&str, u32, &str, bool)]) -> Accounts {
        let mut passwd = vec![PasswdEntry {
            name: "root".into(),
            uid: 0,
            gid: 0,
            gecos: "root".into(),
            home: "/root".into(),
            shell: "/bin/bash".into(),
        }];
        let mut shadow = vec![];
        for &(name, uid, slug, retired) in ids {
            passwd.push(PasswdEntry {
                name: name.into(),
                uid,
                gid: 900,
                gecos: gecos(slug),
                home: "/nonexistent".into(),
                shell: NOLOGIN.into(),
            });
            shadow.push(ShadowEntry {
                name: name.into(),
                expire: retired.then_some(RETIRED_EXPIRY),
            });
        }
        Accounts {
            passwd,
            groups: vec![],
            shadow: Some(shadow),
        }
    }

    fn k(n: u64) -> SiteOrdinal {
        SiteOrdinal::new(n).unwrap()
    }

    #[test]
    fn parses_the_account_databases() {
        let users = parse_passwd("root:x:0:0:root:/root:/bin/bash\nbad line\natelier-a-example_3:x:998:997:atelier site blog:/nonexistent:/usr/sbin/nologin\n");
        assert_eq!(users.len(), 2);
        assert_eq!(users[1].gecos, "atelier site blog");
        let groups = parse_group(
            "atelier-a-example_3:x:996:atelier-demo,atelier-a-example_3\nwww-data:x:33:\n",
        );
        assert_eq!(groups[0].members, ["atelier-demo", "atelier-a-example_3"]);
        assert!(groups[1].members.is_empty());
        let shadow =
            parse_shadow("atelier-a-example_3:!:20000:0:99999:7::1:\nroot:*:20000:0:99999:7:::\n");
        assert_eq!(shadow[0].expire, Some(1));
        assert_eq!(shadow[1].expire, None);
    }

    #[test]
    fn a_fresh_host_numbers_sites_from_one_in_declaration_order() {
        let a = allocate(&decl(&["blog", "shop"]), &accounts(&[])).unwrap();
        assert_eq!(a.sites, vec![(k(1), 0), (k(2), 1)]);
        assert_eq!(a.new, [k(1), k(2)].into());
        assert!(a.removed.is_empty());
    }

    #[test]
    fn live_identities_keep_their_ordinals_and_a_new_site_gets_the_highest_plus_one() {
        let host = accounts(&[
            ("atelier-a-example_1", 901, "blog", false),
            ("atelier-a-example_4", 904, "old", true),
        ]);
        let a = allocate(&decl(&["blog", "shop"]), &host).unwrap();
        // 4 is retired but still counts: ordinals are never reused.
        assert_eq!(a.sites, vec![(k(1), 0), (k(5), 1)]);
        assert_eq!(a.new, [k(5)].into());
    }

    #[test]
    fn a_removed_site_is_to_be_locked_and_readding_it_gets_a_new_ordinal() {
        let host = accounts(&[
            ("atelier-a-example_1", 901, "blog", false),
            ("atelier-a-example_2", 902, "shop", false),
        ]);
        let a = allocate(&decl(&["blog"]), &host).unwrap();
        assert_eq!(a.removed.len(), 1);
        assert_eq!(a.removed[0].name, "atelier-a-example_2");

        let retired = accounts(&[
            ("atelier-a-example_1", 901, "blog", false),
            ("atelier-a-example_2", 902, "shop", true),
        ]);
        let a = allocate(&decl(&["blog", "shop"]), &retired).unwrap();
        assert_eq!(a.sites, vec![(k(1), 0), (k(3), 1)]);
        assert!(a.removed.is_empty());
    }

    #[test]
    fn other_instances_identities_are_not_ours() {
        let host = accounts(&[("atelier-a-other_7", 907, "blog", false)]);
        let a = allocate(&decl(&["blog"]), &host).unwrap();
        assert_eq!(a.sites, vec![(k(1), 0)]);
    }

    #[test]
    fn an_untrustworthy_ledger_is_refused_by_name() {
        let mut host = accounts(&[("atelier-a-example_1", 901, "blog", false)]);
        host.shadow = None;
        assert_eq!(
            allocate(&decl(&["blog"]), &host),
            Err(IdentityError::ShadowUnreadable)
        );

        let twice = accounts(&[
            ("atelier-a-example_1", 901, "blog", false),
            ("atelier-a-example_2", 902, "blog", false),
        ]);
        assert!(matches!(
            allocate(&decl(&["blog"]), &twice),
            Err(IdentityError::TwoIdentities { .. })
        ));

        let shared = accounts(&[("atelier-a-example_1", 0, "blog", false)]);
        assert!(matches!(
            allocate(&decl(&["blog"]), &shared),
            Err(IdentityError::RootUid { .. })
        ));

        let mut wrong_primary = accounts(&[("atelier-a-example_1", 901, "blog", false)]);
        wrong_primary.groups.push(GroupEntry {
            name: "atelier-example".into(),
            gid: 800,
            members: vec![],
        });
        assert!(matches!(
            allocate(&decl(&["blog"]), &wrong_primary),
            Err(IdentityError::WrongPrimaryGroup { .. })
        ));

        let mut sudoer = accounts(&[("atelier-a-example_1", 901, "blog", false)]);
        sudoer.groups.push(GroupEntry {
            name: "sudo".into(),
            gid: 27,
            members: vec!["atelier-a-example_1".into()],
        });
        assert!(matches!(
            allocate(&decl(&["blog"]), &sudoer),
            Err(IdentityError::ForeignMembership { .. })
        ));

        let mut crowded = accounts(&[("atelier-a-example_1", 901, "blog", false)]);
        crowded.groups.push(GroupEntry {
            name: "atelier-a-example_1".into(),
            gid: 901,
            members: vec![
                "atelier-a-example_1".into(),
                "atelier-example".into(),
                "mallory".into(),
            ],
        });
        assert!(matches!(
            allocate(&decl(&["blog"]), &crowded),
            Err(IdentityError::ForeignMember { .. })
        ));

        let full = accounts(&[("atelier-a-example_999", 1999, "old", true)]);
        assert_eq!(
            allocate(&decl(&["blog"]), &full),
            Err(IdentityError::OrdinalsExhausted {
                slug: "blog".into()
            })
        );
    }
}
