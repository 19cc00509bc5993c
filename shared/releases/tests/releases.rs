//! Release store tests on real trees: promote, publish, current, list, activate and prune,
//! every refusal as a named case that is checked to change nothing, the strategies' sharing
//! rules, and a reader racing 100 flips.

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::support::{snapshot, Webspace};
use atelier_fs::Root;
use atelier_releases::{publish, ReleaseId, Store, Strategy};

#[test]
fn promote_copies_the_tree_and_flips_a_relative_link() {
    let web = Webspace::new();
    let src = web.source(
        "v1",
        &[
            ("index.html", 100),
            ("assets/app.css", 10),
            ("a/b/c.txt", 3),
        ],
    );
    let pre = web.preprod();
    assert_eq!(
        pre.current().unwrap(),
        None,
        "the placeholder serves nothing"
    );

    let promoted = pre
        .promote(&Root::open(&src).unwrap(), Strategy::Copy)
        .unwrap();
    let link = std::fs::read_link(web.path().join("pre")).unwrap();
    assert_eq!(link, Path::new(".releases/pre").join(promoted.id.as_str()));
    assert_eq!(pre.current().unwrap(), Some(promoted.id.clone()));
    assert_eq!(pre.list().unwrap(), std::slice::from_ref(&promoted.id));
    assert_eq!(snapshot(&web.path().join("pre")), snapshot(&src));
    assert_eq!(promoted.stats.files, 3);
    assert_eq!(
        promoted.stats.bytes,
        snapshot(&src).values().map(|b| b.len() as u64).sum::<u64>()
    );
    assert_eq!(promoted.stats.copied, 3);

    let release = web.path().join(".releases/pre").join(promoted.id.as_str());
    for (rel, mode) in [
        ("", 0o750),
        ("a/b", 0o750),
        ("a/b/c.txt", 0o640),
        ("index.html", 0o640),
    ] {
        let meta = std::fs::symlink_metadata(release.join(rel)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, mode, "{rel}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(web.path().join(".releases/pre"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_promoted_release_does_not_change_when_the_workspace_does() {
    for strategy in Strategy::ALL {
        let web = Webspace::new();
        let src = web.source("v1", &[("index.html", 100)]);
        let pre = web.preprod();
        let first = pre.promote(&Root::open(&src).unwrap(), strategy).unwrap();
        // A second promote of the same bytes: the unchanged strategy links to the first
        // release, never to the source.
        let second = pre.promote(&Root::open(&src).unwrap(), strategy).unwrap();
        std::fs::write(src.join("index.html"), "rewritten by the agent").unwrap();
        for id in [&first.id, &second.id] {
            let served = std::fs::read(
                web.path()
                    .join(".releases/pre")
                    .join(id.as_str())
                    .join("index.html"),
            )
            .unwrap();
            assert!(served.starts_with(b"v1 "), "{strategy:?}");
        }
        let src_ino = std::fs::metadata(src.join("index.html")).unwrap().ino();
        let rel_ino = std::fs::metadata(web.path().join("pre/index.html"))
            .unwrap()
            .ino();
        assert_ne!(
            src_ino, rel_ino,
            "{strategy:?}: a release file is never the workspace's inode"
        );
    }
}

#[test]
fn link_unchanged_shares_only_identical_files_and_publish_shares_all() {
    let web = Webspace::new();
    let files = [
        ("index.html", 5000),
        ("a.css", 300),
        ("b/c.js", 70_000),
        ("b/d.txt", 0),
    ];
    let src = web.source("v1", &files);
    let pre = web.preprod();
    let first = pre
        .promote(&Root::open(&src).unwrap(), Strategy::LinkUnchanged)
        .unwrap();
    assert_eq!(
        first.stats.linked, 0,
        "nothing to link on the first promote"
    );

    // One file changed, one file of the same size changed in its last byte.
    std::fs::write(src.join("a.css"), "changed").unwrap();
    let mut js = std::fs::read(src.join("b/c.js")).unwrap();
    *js.last_mut().unwrap() ^= 1;
    std::fs::write(src.join("b/c.js"), &js).unwrap();
    let second = pre
        .promote(&Root::open(&src).unwrap(), Strategy::LinkUnchanged)
        .unwrap();
    if second.stats.cloned > 0 {
        // A filesystem that clones: every file of a build output is cloned instead.
        assert_eq!(second.stats.cloned, 4);
        return;
    }
    assert_eq!(second.stats.linked, 2);
    assert_eq!(second.stats.copied, 2);
    assert_eq!(snapshot(&web.path().join("pre")), snapshot(&src));
    let ino = |id: &ReleaseId, rel: &str| {
        std::fs::metadata(web.path().join(".releases/pre").join(id.as_str()).join(rel))
            .unwrap()
            .ino()
    };
    assert_eq!(ino(&first.id, "index.html"), ino(&second.id, "index.html"));
    assert_eq!(ino(&first.id, "b/d.txt"), ino(&second.id, "b/d.txt"));
    assert_ne!(ino(&first.id, "a.css"), ino(&second.id, "a.css"));
    assert_ne!(ino(&first.id, "b/c.js"), ino(&second.id, "b/c.js"));

    let prod = web.prod();
    let published = publish(&pre, &prod, Strategy::LinkUnchanged).unwrap();
    assert_eq!(published.source, second.id);
    assert_eq!(published.stats.linked, 4);
    assert_eq!(
        snapshot(&web.path().join("web")),
        snapshot(&web.path().join("pre"))
    );
    let prod_ino = std::fs::metadata(web.path().join("web/a.css"))
        .unwrap()
        .ino();
    assert_eq!(prod_ino, ino(&second.id, "a.css"));

    // Pruning preprod down to nothing but the served release never takes prod's bytes.
    let third = pre
        .promote(
            &Root::open(web.source("v3", &files)).unwrap(),
            Strategy::LinkUnchanged,
        )
        .unwrap();
    let pruned = pre.prune(1).unwrap();
    assert_eq!(pruned.kept, [third.id]);
    assert_eq!(snapshot(&web.path().join("web")), snapshot(&src));

    let copied = publish(&pre, &prod, Strategy::Copy).unwrap();
    assert_eq!(copied.stats.linked, 0);
    assert_eq!(copied.stats.copied, 4);
}

#[test]
fn current_reads_only_direct_release_children_of_this_store() {
    let web = Webspace::new();
    let pre = web.preprod();
    let id = pre
        .promote(
            &Root::open(web.source("v1", &[("i", 1)])).unwrap(),
            Strategy::Copy,
        )
        .unwrap()
        .id;
    let link = web.path().join("pre");
    let set = |target: &str| {
        std::fs::remove_file(&link).unwrap();
        symlink(target, &link).unwrap();
    };
    let absolute = format!("{}/.releases/pre/{id}", web.path().display());
    let cases: Vec<(&str, String, Option<&ReleaseId>)> = vec![
        ("relative", format!(".releases/pre/{id}"), Some(&id)),
        ("dotted", format!("./.releases/pre/./{id}"), Some(&id)),
        ("absolute", absolute, Some(&id)),
        ("placeholder", ".releases/pre".into(), None),
        ("placeholder with slash", ".releases/pre/".into(), None),
        ("the other store", format!(".releases/web/{id}"), None),
        ("deeper", format!(".releases/pre/{id}/assets"), None),
        ("a dot name", format!(".releases/pre/.staging-{id}"), None),
        ("not an id", ".releases/pre/latest".into(), None),
        ("outside", "/etc".into(), None),
        (
            "escaping back in",
            format!("../x/../{}/.releases/pre/{id}", web.name()),
            Some(&id),
        ),
        (
            "missing release keeps its name",
            ".releases/pre/20000101T000000000Z-000000".into(),
            None,
        ),
    ];
    for (name, target, want) in cases {
        set(&target);
        let got = pre.current().unwrap();
        if name == "missing release keeps its name" {
            assert_eq!(
                got.unwrap().as_str(),
                "20000101T000000000Z-000000",
                "case {name}"
            );
            continue;
        }
        assert_eq!(got.as_ref(), want, "case {name}: {target}");
    }
    std::fs::remove_file(&link).unwrap();
    assert_eq!(pre.current().unwrap(), None, "no link at all");
    std::fs::create_dir(&link).unwrap();
    assert_eq!(pre.current().unwrap_err().reason(), "link_not_symlink");
}

#[test]
fn list_is_newest_first_and_ignores_what_is_not_a_release() {
    let web = Webspace::new();
    let pre = web.preprod();
    let src = web.source("v", &[("i", 1)]);
    let ids: Vec<ReleaseId> = (0..4)
        .map(|_| {
            pre.promote(&Root::open(&src).unwrap(), Strategy::Copy)
                .unwrap()
                .id
        })
        .collect();
    let store = web.path().join(".releases/pre");
    std::fs::create_dir(store.join(".staging-20990101T000000000Z-000000")).unwrap();
    std::fs::create_dir(store.join("latest")).unwrap();
    std::fs::write(store.join("29990101T000000000Z-000000"), "a file").unwrap();
    symlink(ids[0].as_str(), store.join("20990101T000000000Z-000001")).unwrap();
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(pre.list().unwrap(), newest_first);
}

#[test]
fn prune_keeps_the_newest_and_never_the_served_one() {
    let web = Webspace::new();
    let pre = web.preprod();
    let src = web.source("v", &[("i", 1)]);
    let ids: Vec<ReleaseId> = (0..6)
        .map(|_| {
            pre.promote(&Root::open(&src).unwrap(), Strategy::Copy)
                .unwrap()
                .id
        })
        .collect();
    pre.activate(ids[0].as_str()).unwrap();
    let pruned = pre.prune(2).unwrap();
    assert_eq!(
        pruned.kept,
        [ids[5].clone(), ids[4].clone(), ids[0].clone()]
    );
    assert_eq!(
        pruned.removed,
        [ids[3].clone(), ids[2].clone(), ids[1].clone()]
    );
    assert!(pruned.failed.is_empty());
    assert_eq!(
        pre.list().unwrap(),
        [ids[5].clone(), ids[4].clone(), ids[0].clone()]
    );
    assert_eq!(pre.current().unwrap(), Some(ids[0].clone()));
    let pruned = pre.prune(0).unwrap();
    assert_eq!(
        pruned.kept,
        [ids[0].clone()],
        "retained 0 still keeps the served release"
    );
}

#[test]
fn rollback_activates_any_retained_release() {
    let web = Webspace::new();
    let pre = web.preprod();
    let prod = web.prod();
    let first = pre
        .promote(
            &Root::open(web.source("v1", &[("i", 10)])).unwrap(),
            Strategy::default(),
        )
        .unwrap();
    let p1 = publish(&pre, &prod, Strategy::default()).unwrap();
    pre.promote(
        &Root::open(web.source("v2", &[("i", 10)])).unwrap(),
        Strategy::default(),
    )
    .unwrap();
    let p2 = publish(&pre, &prod, Strategy::default()).unwrap();
    assert_eq!(
        prod.list().unwrap(),
        [p2.release.clone(), p1.release.clone()]
    );
    assert!(std::fs::read(web.path().join("web/i"))
        .unwrap()
        .starts_with(b"v2 "));
    assert_eq!(prod.activate(p1.release.as_str()).unwrap(), p1.release);
    assert_eq!(prod.current().unwrap(), Some(p1.release.clone()));
    assert!(std::fs::read(web.path().join("web/i"))
        .unwrap()
        .starts_with(b"v1 "));
    assert_eq!(p1.source, first.id);
}

#[test]
fn open_refusals_are_named() {
    let web = Webspace::new();
    let base = web.path();
    std::fs::create_dir_all(base.join("elsewhere/store")).unwrap();
    std::fs::create_dir_all(web.outside()).unwrap();
    symlink(web.outside(), base.join("linked")).unwrap();
    let outer = base.parent().unwrap().join("store");
    std::fs::create_dir_all(&outer).unwrap();
    let p = |rel: &str| base.join(rel);
    let cases: Vec<(&str, std::path::PathBuf, std::path::PathBuf, &str)> = vec![
        (
            "relative store",
            ".releases/pre".into(),
            p("pre"),
            "path_not_normal",
        ),
        (
            "dot dot in store",
            p(".releases/../.releases/pre"),
            p("pre"),
            "path_not_normal",
        ),
        (
            "dot in link",
            p(".releases/pre"),
            p("./pre"),
            "path_not_normal",
        ),
        (
            "trailing slash",
            p(".releases/pre/"),
            p("pre"),
            "path_not_normal",
        ),
        (
            "store beside the link's directory",
            outer.clone(),
            p("pre"),
            "store_not_under_link_dir",
        ),
        (
            "store is the link's directory",
            base.clone(),
            p("pre"),
            "store_not_under_link_dir",
        ),
        (
            "store behind the link",
            p("pre/store"),
            p("pre"),
            "store_behind_link",
        ),
        (
            "a link on the way to the store",
            p("linked/store"),
            p("pre"),
            "symlink_refused",
        ),
        ("missing store", p(".releases/gone"), p("pre"), "not_found"),
        (
            "root as link",
            p(".releases/pre"),
            "/".into(),
            "path_not_normal",
        ),
    ];
    for (name, store, link, want) in cases {
        let err = Store::open(&store, &link).unwrap_err();
        assert_eq!(err.reason(), want, "case {name}: {err}");
    }
}

#[test]
fn activate_refusals_are_named_and_change_nothing() {
    let web = Webspace::new();
    let pre = web.preprod();
    let id = pre
        .promote(
            &Root::open(web.source("v1", &[("i", 1)])).unwrap(),
            Strategy::Copy,
        )
        .unwrap()
        .id;
    let store = web.path().join(".releases/pre");
    symlink(id.as_str(), store.join("20990101T000000000Z-000000")).unwrap();
    std::fs::write(store.join("20990101T000000000Z-000001"), "file").unwrap();
    let cases = [
        ("empty", "", "invalid_release_id"),
        ("parent escape", "../web", "invalid_release_id"),
        ("absolute", "/etc", "invalid_release_id"),
        ("nested", "x/../y", "invalid_release_id"),
        (
            "staging name",
            ".staging-20990101T000000000Z-000000",
            "invalid_release_id",
        ),
        ("unknown", "20990101T000000000Z-000009", "unknown_release"),
        (
            "a link named like a release",
            "20990101T000000000Z-000000",
            "unknown_release",
        ),
        (
            "a file named like a release",
            "20990101T000000000Z-000001",
            "unknown_release",
        ),
    ];
    let before = snapshot_links(web.path());
    for (name, given, want) in cases {
        let err = pre.activate(given).unwrap_err();
        assert_eq!(err.reason(), want, "case {name}: {err}");
        assert_eq!(
            snapshot_links(web.path()),
            before,
            "case {name} changed something"
        );
    }
    // The served link replaced by a directory: refused, the directory kept.
    std::fs::remove_file(web.path().join("pre")).unwrap();
    std::fs::create_dir(web.path().join("pre")).unwrap();
    assert_eq!(
        pre.activate(id.as_str()).unwrap_err().reason(),
        "link_not_symlink"
    );
    assert!(web.path().join("pre").is_dir());
}

#[test]
fn promote_refusals_are_named_and_leave_nothing_behind() {
    type Plant = fn(&Path, &Path);
    let cases: Vec<(&str, Plant, &str)> = vec![
        (
            "symlink to a file",
            |src, _| symlink("/etc/passwd", src.join("assets/passwd")).unwrap(),
            "source_symlink",
        ),
        (
            "symlink inside",
            |src, _| symlink("index.html", src.join("alias.html")).unwrap(),
            "source_symlink",
        ),
        (
            "dangling symlink",
            |src, _| symlink("nowhere", src.join("z")).unwrap(),
            "source_symlink",
        ),
        (
            "symlinked directory",
            |src, out| symlink(out, src.join("assets/out")).unwrap(),
            "source_symlink",
        ),
        (
            "fifo",
            |src, _| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    src.join("assets/fifo"),
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                )
                .unwrap();
            },
            "source_special_file",
        ),
        (
            "socket",
            |src, _| {
                std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
            },
            "source_special_file",
        ),
        (
            "hard link",
            |src, out| {
                std::fs::write(out.join("secret"), "s").unwrap();
                std::fs::hard_link(out.join("secret"), src.join("assets/secret")).unwrap();
            },
            "source_hard_link",
        ),
    ];
    for strategy in Strategy::ALL {
        for (name, plant, want) in &cases {
            let web = Webspace::new();
            let pre = web.preprod();
            let good = web.source("v0", &[("index.html", 10)]);
            let served = pre
                .promote(&Root::open(&good).unwrap(), strategy)
                .unwrap()
                .id;
            let src = web.source(
                "v1",
                &[("index.html", 10), ("assets/a.css", 5), ("zz/last.txt", 1)],
            );
            std::fs::create_dir_all(web.outside()).unwrap();
            plant(&src, &web.outside());
            let before = snapshot_links(web.path());
            let err = pre
                .promote(&Root::open(&src).unwrap(), strategy)
                .unwrap_err();
            assert_eq!(err.reason(), *want, "{strategy:?} case {name}: {err}");
            assert!(err.is_refusal());
            assert_eq!(
                snapshot_links(web.path()),
                before,
                "{strategy:?} case {name} left something"
            );
            assert_eq!(pre.current().unwrap(), Some(served.clone()));
        }
    }
}

#[test]
fn publish_refusals_are_named_and_change_nothing() {
    // Nothing built: preprod serves the placeholder.
    let web = Webspace::new();
    let (pre, prod) = (web.preprod(), web.prod());
    let before = snapshot_links(web.path());
    assert_eq!(
        publish(&pre, &prod, Strategy::default())
            .unwrap_err()
            .reason(),
        "nothing_to_publish"
    );
    assert_eq!(snapshot_links(web.path()), before);

    // The served preprod release was removed behind our back: "rebuild".
    let id = pre
        .promote(
            &Root::open(web.source("v1", &[("i", 1)])).unwrap(),
            Strategy::default(),
        )
        .unwrap()
        .id;
    std::fs::remove_dir_all(web.path().join(".releases/pre").join(id.as_str())).unwrap();
    let before = snapshot_links(web.path());
    assert_eq!(
        publish(&pre, &prod, Strategy::default())
            .unwrap_err()
            .reason(),
        "unknown_release"
    );
    assert_eq!(snapshot_links(web.path()), before);

    // A file in the preprod release that promote did not make (another mode, another owner).
    type Tamper = fn(&Path);
    let tampers: Vec<(&str, Tamper)> = vec![
        ("group-writable", |f| {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o660)).unwrap()
        }),
        ("another owner", |f| {
            std::os::unix::fs::chown(f, Some(65534), None).unwrap()
        }),
    ];
    for strategy in Strategy::ALL {
        for (name, tamper) in &tampers {
            let web = Webspace::new();
            let (pre, prod) = (web.preprod(), web.prod());
            pre.promote(
                &Root::open(web.source("v1", &[("i", 1), ("j", 2)])).unwrap(),
                strategy,
            )
            .unwrap();
            tamper(&web.path().join("pre/j"));
            let before = snapshot_links(web.path());
            let err = publish(&pre, &prod, strategy).unwrap_err();
            assert_eq!(
                err.reason(),
                "foreign_release_file",
                "{strategy:?} case {name}"
            );
            assert_eq!(
                snapshot_links(web.path()),
                before,
                "{strategy:?} case {name}"
            );
        }
    }

    // Someone's directory where production's link belongs: refused before anything is copied,
    // so no release appears that no link serves.
    for strategy in Strategy::ALL {
        let web = Webspace::new();
        let (pre, prod) = (web.preprod(), web.prod());
        pre.promote(
            &Root::open(web.source("v1", &[("i", 1)])).unwrap(),
            strategy,
        )
        .unwrap();
        let link = web.path().join("web");
        let _ = std::fs::remove_file(&link);
        std::fs::create_dir(&link).unwrap();
        std::fs::write(link.join("index.html"), "hand-made").unwrap();
        let before = snapshot_links(web.path());
        let releases_before = prod.list().unwrap();
        let err = publish(&pre, &prod, strategy).unwrap_err();
        assert_eq!(err.reason(), "link_not_symlink", "{strategy:?}");
        assert!(err.is_refusal());
        assert_eq!(snapshot_links(web.path()), before, "{strategy:?}");
        assert_eq!(prod.list().unwrap(), releases_before, "{strategy:?}");
        assert_eq!(
            std::fs::read_to_string(link.join("index.html")).unwrap(),
            "hand-made"
        );
    }

    // One store given as both surfaces.
    let web = Webspace::new();
    let pre = web.preprod();
    pre.promote(
        &Root::open(web.source("v1", &[("i", 1)])).unwrap(),
        Strategy::default(),
    )
    .unwrap();
    let again = web.preprod();
    assert_eq!(
        publish(&pre, &again, Strategy::default())
            .unwrap_err()
            .reason(),
        "same_store"
    );
}

#[test]
fn leftovers_of_a_crash_are_removed_by_the_next_promote() {
    let web = Webspace::new();
    let pre = web.preprod();
    let src = web.source("v1", &[("i", 1)]);
    let first = pre
        .promote(&Root::open(&src).unwrap(), Strategy::Copy)
        .unwrap()
        .id;
    let store = web.path().join(".releases/pre");
    std::fs::create_dir_all(store.join(".staging-20000101T000000000Z-000000/half")).unwrap();
    symlink(
        ".releases/pre/x",
        web.path().join("pre.tmp-20000101T000000000Z-000000"),
    )
    .unwrap();
    // Not ours to touch: another surface's temp link and an unrelated dot name.
    symlink(
        ".releases/web/x",
        web.path().join("web.tmp-20000101T000000000Z-000000"),
    )
    .unwrap();
    std::fs::create_dir(store.join(".keep")).unwrap();
    let second = pre
        .promote(&Root::open(&src).unwrap(), Strategy::Copy)
        .unwrap()
        .id;
    assert!(!store.join(".staging-20000101T000000000Z-000000").exists());
    assert!(web
        .path()
        .join("pre.tmp-20000101T000000000Z-000000")
        .symlink_metadata()
        .is_err());
    assert!(web
        .path()
        .join("web.tmp-20000101T000000000Z-000000")
        .symlink_metadata()
        .is_ok());
    assert!(store.join(".keep").exists());
    assert_eq!(pre.list().unwrap(), [second, first]);
}

/// A reader resolving the served link continuously, as a web server does per request, while
/// 100 flips happen: no open ever fails, and each snapshot taken through one resolution of
/// the link holds one release's files only.
#[test]
fn a_reader_never_sees_a_missing_file_or_two_releases_mixed_during_100_flips() {
    let web = Webspace::new();
    let pre = web.preprod();
    let files = [
        ("index.html", 4000),
        ("assets/app.css", 900),
        ("assets/app.js", 20_000),
    ];
    let ids: Vec<ReleaseId> = ["r1", "r2", "r3"]
        .iter()
        .map(|tag| {
            pre.promote(
                &Root::open(web.source(tag, &files)).unwrap(),
                Strategy::default(),
            )
            .unwrap()
            .id
        })
        .collect();
    let link = web.path().join("pre");
    let stop = Arc::new(AtomicBool::new(false));
    // Rounds the reader has finished: each flip waits for one more, so the reader overlaps
    // every flip however the machine's load schedules the two threads.
    let rounds = Arc::new(AtomicU64::new(0));
    let reader = {
        let (link, stop, rounds) = (link.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let (mut reads, mut snapshots, mut failures, mut mixed) =
                (0u64, 0u64, Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                // Per path, like a request: each open resolves the link again.
                for (rel, _) in files {
                    match std::fs::read(link.join(rel)) {
                        Ok(bytes) => {
                            reads += 1;
                            if !support::is_whole_file(&bytes) {
                                mixed += 1;
                            }
                        }
                        Err(e) => failures.push(format!("{rel}: {e}")),
                    }
                }
                // Per snapshot: resolve the link once, read every file below that directory.
                match Root::open_following_symlink(&link) {
                    Ok(dir) => {
                        let tags: std::collections::BTreeSet<String> = files
                            .iter()
                            .filter_map(|(rel, _)| {
                                let bytes = dir.read(rel).ok()?;
                                Some(support::tag_of(&bytes))
                            })
                            .collect();
                        snapshots += 1;
                        if tags.len() != 1 {
                            mixed += 1;
                        }
                    }
                    Err(e) => failures.push(format!("link: {e}")),
                }
                rounds.fetch_add(1, Ordering::SeqCst);
            }
            (reads, snapshots, failures, mixed)
        })
    };
    let wait_for_a_round = || {
        let seen = rounds.load(Ordering::SeqCst);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while rounds.load(Ordering::SeqCst) == seen {
            assert!(std::time::Instant::now() < deadline, "the reader stopped");
            std::thread::yield_now();
        }
    };
    for flip in 0..100 {
        pre.activate(ids[flip % ids.len()].as_str()).unwrap();
        wait_for_a_round();
    }
    stop.store(true, Ordering::Relaxed);
    let (reads, snapshots, failures, mixed) = reader.join().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        failures.first()
    );
    assert_eq!(mixed, 0);
    assert!(
        reads >= 300 && snapshots >= 100,
        "the reader barely ran: {reads} reads, {snapshots} snapshots"
    );
    println!("100 flips: {reads} reads, {snapshots} snapshots, 0 failures, 0 mixed");
}

/// Every entry below `dir` (links not followed): name → kind and link target, for "changed
/// nothing" checks that include the served link and leftovers.
fn snapshot_links(dir: impl AsRef<Path>) -> BTreeMap<String, String> {
    let dir = dir.as_ref();
    let mut out = BTreeMap::new();
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                out.insert(
                    name,
                    format!("-> {}", std::fs::read_link(entry.path()).unwrap().display()),
                );
            } else if kind.is_dir() {
                out.insert(name.clone(), "dir".into());
                walk(&entry.path(), &format!("{name}/"), out);
            } else {
                out.insert(name, format!("{} bytes", entry.metadata().unwrap().len()));
            }
        }
    }
    walk(dir, "", &mut out);
    out
}
