//! What a site identity's entries in the host's account databases must be, held by the
//! provisioner at plan and apply and by sited before every run alike.

/// The first of `groups` (name and listed members) that lists `identity` though it is neither
/// the identity's own private group nor `instance_group` (its primary): a group the provisioner
/// never gives a site identity. A door's run holds every group `/etc/group` lists its user in,
/// and no unit property shows them.
pub fn foreign_group<'g>(
    groups: impl IntoIterator<Item = (&'g str, &'g [String])>,
    identity: &str,
    instance_group: &str,
) -> Option<&'g str> {
    groups
        .into_iter()
        .find(|(name, members)| {
            *name != identity && *name != instance_group && members.iter().any(|m| m == identity)
        })
        .map(|(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_own_and_the_instance_group_may_list_an_identity() {
        let group = |name: &'static str, members: &[&str]| {
            (
                name,
                members.iter().map(|m| (*m).to_owned()).collect::<Vec<_>>(),
            )
        };
        let groups = [
            group("atelier-example", &["atelier-a-example_1"]),
            group(
                "atelier-a-example_1",
                &["atelier-a-example_1", "atelier-example"],
            ),
            group("www-data", &["nginx"]),
        ];
        let listed = |extra: &[(&'static str, Vec<String>)]| {
            let all: Vec<(&str, &[String])> = groups
                .iter()
                .chain(extra)
                .map(|(name, members)| (*name, members.as_slice()))
                .collect();
            foreign_group(all, "atelier-a-example_1", "atelier-example").map(str::to_owned)
        };
        assert_eq!(listed(&[]), None, "its own group and the instance's");
        assert_eq!(
            listed(&[group("shadow", &["atelier-a-example_1"])]),
            Some("shadow".to_owned())
        );
        assert_eq!(
            listed(&[group("atelier-a-example_2", &["atelier-a-example_1"])]),
            Some("atelier-a-example_2".to_owned()),
            "another site's private group"
        );
    }
}
