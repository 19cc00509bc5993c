//! Pure parsers of what the kernel tells the shim about itself: the unit name in
//! `/proc/self/cgroup`, the interfaces in `/proc/self/net/dev`, and namespace identities as
//! `readlink /proc/self/ns/net` prints them.

/// Why `/proc/self/net/dev` could not be read as an interface table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetDevError {
    /// The two header lines are missing or are not the table's.
    #[error("the interface table has no header")]
    NoHeader,
    /// A row has no `name:` column.
    #[error("interface row {row} has no name")]
    BadRow {
        /// 1-based row number after the headers.
        row: usize,
    },
}

/// The unit the shim runs in: the last path component ending in `.service` of the cgroup
/// path, from the unified (`0::`) line, or from the first line on a host without one.
///
/// `None` when no component names a service (a shell, a scope, the root cgroup).
pub fn unit_from_cgroup(cgroup: &str) -> Option<String> {
    let mut lines = cgroup.lines().filter(|line| !line.is_empty());
    let first = lines.clone().next()?;
    let line = lines.find(|line| line.starts_with("0::")).unwrap_or(first);
    // hierarchy-ID:controller-list:cgroup-path; the path may itself contain ':'.
    let path = line.splitn(3, ':').nth(2)?;
    path.rsplit('/')
        .find(|component| component.len() > ".service".len() && component.ends_with(".service"))
        .map(str::to_owned)
}

/// The interface names of a `/proc/<pid>/net/dev` table, in table order.
pub fn interfaces_from_net_dev(table: &str) -> Result<Vec<String>, NetDevError> {
    let mut lines = table.lines();
    let header_ok = lines.next().is_some_and(|l| l.contains('|'))
        && lines
            .next()
            .is_some_and(|l| l.contains("face") && l.contains('|'));
    if !header_ok {
        return Err(NetDevError::NoHeader);
    }
    lines
        .filter(|line| !line.trim().is_empty())
        .enumerate()
        .map(|(index, line)| match line.split_once(':') {
            Some((name, _)) if !name.trim().is_empty() => Ok(name.trim().to_owned()),
            _ => Err(NetDevError::BadRow { row: index + 1 }),
        })
        .collect()
}

/// Returns true if and only if `identity` has the form `net:[<inode>]`, as
/// `readlink /proc/self/ns/net` prints a network namespace.
pub fn is_netns_identity(identity: &str) -> bool {
    identity
        .strip_prefix("net:[")
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|inode| !inode.is_empty() && inode.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests;
