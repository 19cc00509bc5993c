//! Builds and publishing end to end in `none` confinement: the real shim runs `atelier-build`,
//! sited writes the log and promotes; publish copies the previewed bytes; rollback flips back.
//! Every refusal is named and promotes nothing.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use atelier_sited::Router;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support;
use crate::support::{actor, call, declare_sites, make_roots, raw_settings, Reply};

struct Instance {
    _dir: tempfile::TempDir,
    root: PathBuf,
    socket: PathBuf,
    router: Router,
}

impl Instance {
    async fn post(&self, path: &str, body: Value) -> Reply {
        call(&self.socket, Method::POST, path, body).await
    }

    async fn get(&self, path: &str) -> Reply {
        call(&self.socket, Method::GET, path, Value::Null).await
    }

    /// `POST /v1/sites` of alpha, declared in the site table.
    async fn create_alpha(&self) -> Reply {
        self.post(
            "/v1/sites",
            json!({"slug": "alpha", "name": "Alpha", "domain": "alpha.example.org", "actor": actor()}),
        )
        .await
    }

    fn workspace(&self) -> PathBuf {
        self.root.join("sites/alpha")
    }

    fn webspace(&self) -> PathBuf {
        self.root.join("www/alpha.example.org")
    }

    /// Sets the manifest's build steps (the contract's strings) and writes `files`.
    fn set_build(&self, install: &str, build: &str, output: &str, files: &[(&str, &str)]) {
        let path = self.workspace().join("site.json");
        let mut manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        manifest["build"] = json!({"install": install, "build": build, "output": output});
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&manifest).unwrap() + "\n",
        )
        .unwrap();
        for (name, text) in files {
            std::fs::write(self.workspace().join(name), text).unwrap();
        }
    }

    /// Starts a build and waits for its terminal record; returns the record with its log.
    async fn build(&self) -> Value {
        let started = self
            .post("/v1/sites/alpha/build", json!({"actor": actor()}))
            .await;
        assert_eq!(started.status, StatusCode::ACCEPTED, "{}", started.body);
        let id = started.json()["build_id"].as_str().unwrap().to_owned();
        for _ in 0..3000 {
            let got = self.get(&format!("/v1/sites/alpha/builds/{id}")).await;
            assert_eq!(got.status, StatusCode::OK, "{}", got.body);
            let record = got.json();
            if record["outcome"] != "running" {
                assert_eq!(record["id"], id.as_str());
                self.wait_free().await;
                return record;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the build never ended");
    }

    async fn wait_free(&self) {
        for _ in 0..500 {
            if self.router.sites().reservations().holder("alpha").is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the site stayed held");
    }

    /// What a surface's link serves: the bytes of `file` through the served link.
    fn served(&self, surface: &str, file: &str) -> Option<String> {
        std::fs::read_to_string(self.webspace().join(surface).join(file)).ok()
    }
}

async fn instance(configure: impl FnOnce(&mut atelier_sited::RawSettings)) -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    make_roots(&root);
    declare_sites(&root, &[("alpha", "alpha.example.org")]);
    let mut raw = raw_settings(&root);
    raw.releases_retained = Some(2);
    configure(&mut raw);
    let router = Router::new(&raw.validate().unwrap()).unwrap();
    let socket = root.join("sited.sock");
    support::serve(router.clone(), &socket);
    let instance = Instance {
        _dir: dir,
        root,
        socket,
        router,
    };
    let created = instance.create_alpha().await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    instance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_preview_publish_and_roll_back_the_exact_bytes() {
    let instance = instance(|_| {}).await;
    let nothing = instance
        .post(
            "/v1/sites/alpha/publish",
            json!({"confirm": true, "actor": actor()}),
        )
        .await;
    assert_eq!(nothing.status, StatusCode::CONFLICT);
    assert_eq!(nothing.json()["reason"], "no_build");
    assert_eq!(
        nothing.json()["detail"],
        "Nothing to publish — build the site first"
    );

    // The shipped template builds offline with `sh build.sh` into dist/.
    let first = instance.build().await;
    assert_eq!(first["outcome"], "success", "{first}");
    let release1 = first["release"].as_str().unwrap().to_owned();
    let log = first["log"].as_str().unwrap();
    assert!(log.contains("# build: sh build.sh"), "{log}");
    assert!(log.contains("\n# promote to preprod\n"), "{log}");
    assert!(log.contains(&format!("released {release1}")), "{log}");
    assert!(first["finished_at"].is_string());
    let page1 = instance.served("pre", "index.html").unwrap();
    let preview = instance.get("/v1/sites/alpha/preview").await.json();
    assert_eq!(
        preview,
        json!({"url": "http://pre.alpha.example.org/", "release": release1, "built_at": null})
    );
    let site = instance.get("/v1/sites/alpha").await.json();
    assert_eq!(site["last_build"]["release"], release1.as_str());
    assert_eq!(site["preprod"]["release"], release1.as_str());

    let refused = instance
        .post("/v1/sites/alpha/publish", json!({"actor": actor()}))
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        refused.json()["detail"],
        "publish requires an explicit confirm: true"
    );
    let published = instance
        .post(
            "/v1/sites/alpha/publish",
            json!({"confirm": true, "note": "first", "actor": actor()}),
        )
        .await;
    assert_eq!(published.status, StatusCode::OK, "{}", published.body);
    let prod1 = published.json()["release"].as_str().unwrap().to_owned();
    assert_eq!(published.json()["url"], "https://alpha.example.org/");
    assert_eq!(
        instance.served("web", "index.html").unwrap(),
        page1,
        "the previewed bytes"
    );
    let site = instance.get("/v1/sites/alpha").await.json();
    assert_eq!(site["published"]["release"], prod1.as_str());
    assert_eq!(site["published"]["by"], "ana");

    // A second build with other bytes, published; then roll back to the first.
    let index = instance.workspace().join("src/index.html");
    let text = std::fs::read_to_string(&index).unwrap();
    std::fs::write(&index, text.replace("</body>", "<p>second</p></body>")).unwrap();
    let second = instance.build().await;
    assert_eq!(second["outcome"], "success", "{second}");
    let page2 = instance.served("pre", "index.html").unwrap();
    assert_ne!(page2, page1);
    let published = instance
        .post(
            "/v1/sites/alpha/publish",
            json!({"confirm": true, "actor": actor()}),
        )
        .await;
    let prod2 = published.json()["release"].as_str().unwrap().to_owned();
    assert_eq!(instance.served("web", "index.html").unwrap(), page2);
    let releases = instance.get("/v1/sites/alpha/releases").await.json();
    assert_eq!(
        releases,
        json!({"releases": [prod2, prod1], "current": prod2})
    );

    let rolled = instance
        .post(
            "/v1/sites/alpha/rollback",
            json!({"release": prod1, "actor": actor()}),
        )
        .await;
    assert_eq!(rolled.status, StatusCode::OK, "{}", rolled.body);
    assert_eq!(
        rolled.json(),
        json!({"release": prod1, "url": "https://alpha.example.org/"})
    );
    assert_eq!(instance.served("web", "index.html").unwrap(), page1);
    // The link is relative, so the tree stays relocatable.
    let link = std::fs::read_link(instance.webspace().join("web")).unwrap();
    assert!(link.is_relative(), "{}", link.display());

    for (release, status) in [
        ("", StatusCode::BAD_REQUEST),
        ("20990101T000000000Z-000000", StatusCode::NOT_FOUND),
        ("../../etc", StatusCode::NOT_FOUND),
    ] {
        let bad = instance
            .post(
                "/v1/sites/alpha/rollback",
                json!({"release": release, "actor": actor()}),
            )
            .await;
        assert_eq!(bad.status, status, "{release:?}: {}", bad.body);
    }
    // The site is looked up first: an unknown one is 404 whatever the body.
    let nosuch = instance
        .post(
            "/v1/sites/nosuch/rollback",
            json!({"release": "", "actor": actor()}),
        )
        .await;
    assert_eq!(nosuch.status, StatusCode::NOT_FOUND, "{}", nosuch.body);
    assert_eq!(
        instance.served("web", "index.html").unwrap(),
        page1,
        "nothing changed"
    );

    let audit = instance.get("/v1/audit?site=alpha").await.json();
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "rollback",
            "publish",
            "build",
            "publish",
            "build",
            "create_site"
        ]
    );
    assert_eq!(
        audit["data"][3]["detail"],
        json!({"release": prod1, "note": "first"})
    );
}

/// A site deleted (its preproduction store goes with it) and created again under the same slug
/// builds, previews and publishes without another `apply`; after a purge, production is made
/// again on publish, and a rollback before that is `no_build`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_deleted_and_created_again_builds_previews_and_publishes() {
    let instance = instance(|_| {}).await;
    let delete = |query: &'static str| support::delete_site(&instance.socket, query);
    let publish = || {
        instance.post(
            "/v1/sites/alpha/publish",
            json!({"confirm": true, "actor": actor()}),
        )
    };
    assert_eq!(instance.build().await["outcome"], "success");
    assert_eq!(publish().await.status, StatusCode::OK);

    for (round, query) in [
        ("kept production", "/v1/sites/alpha"),
        ("purged production", "/v1/sites/alpha?purge_prod=true"),
    ] {
        let deleted = delete(query).await;
        assert_eq!(deleted.status, StatusCode::OK, "{round}: {}", deleted.body);
        assert!(
            !instance.webspace().join(".releases/pre").exists(),
            "{round}: the delete took preproduction's store"
        );
        let created = instance.create_alpha().await;
        assert_eq!(
            created.status,
            StatusCode::CREATED,
            "{round}: {}",
            created.body
        );
        if round == "purged production" {
            let rollback = instance
                .post(
                    "/v1/sites/alpha/rollback",
                    json!({"release": "20990101T000000000Z-000000", "actor": actor()}),
                )
                .await;
            assert_eq!(
                rollback.status,
                StatusCode::CONFLICT,
                "{round}: {}",
                rollback.body
            );
            assert_eq!(rollback.json()["reason"], "no_build", "{round}");
            assert_eq!(
                rollback.json()["detail"],
                "Nothing is published — publish the site first",
                "{round}"
            );
        }
        let built = instance.build().await;
        assert_eq!(built["outcome"], "success", "{round}: {built}");
        let release = built["release"].as_str().unwrap().to_owned();
        let preview = instance.get("/v1/sites/alpha/preview").await.json();
        assert_eq!(preview["release"], release.as_str(), "{round}");
        let page = instance.served("pre", "index.html").unwrap();
        let published = publish().await;
        assert_eq!(
            published.status,
            StatusCode::OK,
            "{round}: {}",
            published.body
        );
        assert_eq!(
            instance.served("web", "index.html").unwrap(),
            page,
            "{round}"
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(instance.webspace().join(".releases/pre"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(
            mode & 0o7777,
            0o2750,
            "{round}: the store made again as provisioned"
        );
    }
}

/// A delete takes the workspace off its slug in one rename before removing it, so one cut
/// short (a crash, an unreadable folder) leaves only a dot-named leftover: the slug is free
/// to create again, the list does not see it, and the next start removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_cut_short_leaves_the_slug_free_and_its_leftover_goes_at_the_next_start() {
    let instance = instance(|_| {}).await;
    let sites_root = instance.root.join("sites");
    let names = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&sites_root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with('.') || n.starts_with(".deleted-"))
            .collect();
        names.sort();
        names
    };
    let deleted = support::delete_site(&instance.socket, "/v1/sites/alpha").await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    assert_eq!(names(), Vec::<String>::new(), "nothing is left behind");

    // What a delete cut short after its rename leaves.
    let leftover = sites_root.join(".deleted-alpha-1765000000000000000");
    std::fs::create_dir_all(leftover.join("src")).unwrap();
    std::fs::write(leftover.join("src/index.html"), "<p>old</p>").unwrap();
    let created = instance.create_alpha().await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let listed = instance.get("/v1/sites").await.json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");

    let sites = instance.router.sites().clone();
    let removed = tokio::task::spawn_blocking(move || sites.remove_deleted_leftovers())
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(names(), ["alpha"]);
    assert!(instance.workspace().join("site.json").exists());
}

/// A folder where a served link should be (someone replaced `pre` or `web`) is the webspace's
/// fault, refused by name as the contract says: publish and rollback answer 409
/// `webspace_unavailable`, and production is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_where_a_served_link_should_be_is_webspace_unavailable() {
    let instance = instance(|_| {}).await;
    assert_eq!(instance.build().await["outcome"], "success");
    let publish = || {
        instance.post(
            "/v1/sites/alpha/publish",
            json!({"confirm": true, "actor": actor()}),
        )
    };
    let published = publish().await;
    assert_eq!(published.status, StatusCode::OK, "{}", published.body);
    let release = published.json()["release"].as_str().unwrap().to_owned();
    let page = instance.served("web", "index.html").unwrap();

    let replace = |surface: &str| {
        let link = instance.webspace().join(surface);
        let target = std::fs::read_link(&link).unwrap();
        std::fs::remove_file(&link).unwrap();
        std::fs::create_dir(&link).unwrap();
        std::fs::write(link.join("index.html"), "planted").unwrap();
        move || {
            std::fs::remove_dir_all(&link).unwrap();
            std::os::unix::fs::symlink(&target, &link).unwrap();
        }
    };
    let restore = replace("pre");
    let refused = publish().await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(refused.json()["reason"], "webspace_unavailable");
    assert_eq!(instance.served("web", "index.html").unwrap(), page);
    restore();

    let restore = replace("web");
    let rollback = instance
        .post(
            "/v1/sites/alpha/rollback",
            json!({"release": release, "actor": actor()}),
        )
        .await;
    assert_eq!(rollback.status, StatusCode::CONFLICT, "{}", rollback.body);
    assert_eq!(rollback.json()["reason"], "webspace_unavailable");
    assert_eq!(instance.served("web", "index.html").unwrap(), "planted");
    restore();
}

/// The store a deleted site lost is made again without following a link planted where it (or
/// the stores' directory) was: the build fails naming the refusal, publish and rollback are
/// `webspace_unavailable`, and nothing lands where the link points.
/// A delete that arrives while a publish (or a rollback, or a build's promote) changes what
/// the site serves waits for it: the release is never half copied into a store the delete
/// removes. The test holds the site's serving lock as a publish under way does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_waits_for_a_publish_under_way() {
    let instance = instance(|_| {}).await;
    assert_eq!(instance.build().await["outcome"], "success");
    let publishing = instance.router.sites().reservations().serving("alpha");
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _serving = publishing.lock().unwrap();
        held_tx.send(()).unwrap();
        release_rx.recv().unwrap();
    });
    held_rx.recv().unwrap();
    let socket = instance.socket.clone();
    let delete =
        tokio::spawn(async move { support::delete_site(&socket, "/v1/sites/alpha").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !delete.is_finished(),
        "the delete went ahead of the publish"
    );
    assert!(instance.workspace().exists());
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    let deleted = delete.await.unwrap();
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    assert!(!instance.workspace().exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_planted_where_a_deleted_store_was_is_refused_never_followed() {
    let instance = instance(|_| {}).await;
    let webspace = instance.webspace();
    let elsewhere = instance.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    for (case, planted, query) in [
        ("the preprod store", ".releases/pre", "/v1/sites/alpha"),
        (
            "the stores' directory",
            ".releases",
            "/v1/sites/alpha?purge_prod=true",
        ),
    ] {
        let deleted = support::delete_site(&instance.socket, query).await;
        assert_eq!(deleted.status, StatusCode::OK, "{case}: {}", deleted.body);
        let planted = webspace.join(planted);
        if planted.is_dir() {
            std::fs::remove_dir_all(&planted).unwrap();
        }
        std::os::unix::fs::symlink(&elsewhere, &planted).unwrap();
        let created = instance.create_alpha().await;
        assert_eq!(
            created.status,
            StatusCode::CREATED,
            "{case}: {}",
            created.body
        );

        let built = instance.build().await;
        assert_eq!(built["outcome"], "failed", "{case}: {built}");
        let log = built["log"].as_str().unwrap();
        assert!(
            log.contains("# refused: release store") && log.contains("symbolic link"),
            "{case}: {log}"
        );
        let published = instance
            .post(
                "/v1/sites/alpha/publish",
                json!({"confirm": true, "actor": actor()}),
            )
            .await;
        assert_eq!(
            published.status,
            StatusCode::CONFLICT,
            "{case}: {}",
            published.body
        );
        assert_eq!(published.json()["reason"], "webspace_unavailable", "{case}");
        let rollback = instance
            .post(
                "/v1/sites/alpha/rollback",
                json!({"release": "20990101T000000000Z-000000", "actor": actor()}),
            )
            .await;
        if planted.ends_with(".releases") {
            assert_eq!(
                rollback.status,
                StatusCode::CONFLICT,
                "{case}: {}",
                rollback.body
            );
            assert_eq!(rollback.json()["reason"], "webspace_unavailable", "{case}");
        } else {
            // Production was kept: it answers for itself, and knows no such release.
            assert_eq!(
                rollback.status,
                StatusCode::NOT_FOUND,
                "{case}: {}",
                rollback.body
            );
        }
        assert_eq!(
            std::fs::read_dir(&elsewhere).unwrap().count(),
            0,
            "{case}: nothing made through the link"
        );
        assert!(
            std::fs::symlink_metadata(&planted)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{case}: the link is left as it was"
        );
        std::fs::remove_file(&planted).unwrap();
    }
}

/// A build program that cannot even start leaves no step event; its log still says how the run
/// ended, so a failed build never shows an empty log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_program_that_never_starts_is_named_in_the_log() {
    let instance = instance(|raw| raw.build_bin = Some("/nonexistent/atelier-build".into())).await;
    let record = instance.build().await;
    assert_eq!(record["outcome"], "failed", "{record}");
    let log = record["log"].as_str().unwrap();
    assert!(log.contains("# the build program exited 127"), "{log}");
    assert!(
        !instance.webspace().join("pre").exists(),
        "nothing promoted"
    );
}

/// A step printing without end cannot fill the disk: its log keeps the output's first MiB, a
/// line counting what was left out, and the last whole lines of at most 4 MiB, then sited's
/// own lines; the build goes on to its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_printing_without_end_keeps_its_logs_head_and_tail() {
    let instance = instance(|_| {}).await;
    // 2,000,000 numbered lines: 14.9 MB of output.
    instance.set_build("seq 2000000", "sh b.sh", "dist", &[("b.sh", HELLO_BUILD)]);
    let record = instance.build().await;
    assert_eq!(record["outcome"], "success", "{}", record["error"]);
    let id = record["id"].as_str().unwrap();
    let file = instance
        .workspace()
        .join(format!(".builder/builds/{id}.log"));
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size < 5 * 1024 * 1024 + 4096, "{size}");
    let log = record["log"].as_str().unwrap();
    assert_eq!(log.len() as u64, size, "a log this size is answered whole");
    let (head, rest) = log
        .split_once("\n# atelier: ")
        .unwrap_or_else(|| panic!("no line counting what was left out"));
    assert!(
        head.contains("# install: seq 2000000\n1\n2\n3\n"),
        "{}",
        &head[..200]
    );
    let (count, tail) = rest
        .split_once(" bytes of the build's output are left out here\n")
        .unwrap();
    let count: u64 = count.parse().unwrap();
    assert!(count > 9_000_000, "{count}");
    // The tail starts at a whole line and ends where seq did, before the build step's header.
    let first: u64 = tail.lines().next().unwrap().parse().unwrap();
    assert!(first > 1_000_000, "{first}");
    let (printed, after) = tail.split_once("1999999\n2000000\n").unwrap();
    assert!(printed.ends_with(&format!("{}\n", 1_999_998)));
    assert!(after.contains("# build: sh b.sh"), "{after}");
    assert!(after.contains("\n# promote to preprod\n"), "{after}");
    assert!(after.ends_with(&format!(
        "released {}\n",
        record["release"].as_str().unwrap()
    )));
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

/// A build script whose output is one page saying "hi".
const HELLO_BUILD: &str = "mkdir -p dist; echo hi > dist/index.html";

/// What a promote cut short by a crash left in the stores (a staging copy, a next-link) is
/// removed by the boot sweep, so it does not count against the site's quota until the next
/// promote; the served release stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_boot_sweep_removes_what_an_interrupted_promote_left() {
    let instance = instance(|_| {}).await;
    instance.set_build("", "sh b.sh", "dist", &[("b.sh", HELLO_BUILD)]);
    assert_eq!(instance.build().await["outcome"], "success");
    let store = instance.webspace().join(".releases/pre");
    let staging = store.join(".staging-20260101T000000000Z-000001");
    std::fs::create_dir_all(staging.join("assets")).unwrap();
    std::fs::write(staging.join("assets/big.bin"), vec![0u8; 4096]).unwrap();
    let next_link = instance.webspace().join("pre.tmp-crashed");
    std::os::unix::fs::symlink(".releases/pre/nowhere", &next_link).unwrap();
    instance.router.builds().sweep();
    assert!(!staging.exists(), "the staging copy is gone");
    assert!(
        std::fs::symlink_metadata(&next_link).is_err(),
        "the next-link is gone"
    );
    assert_eq!(
        instance.served("pre", "index.html").as_deref(),
        Some("hi\n"),
        "the served release stays"
    );
}

/// A directory where production's link belongs (someone's hand-made page) is the webspace's
/// fault, named: publish is refused 409 before anything is copied, and the page stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_over_a_directory_in_the_links_place_is_refused_and_copies_nothing() {
    let instance = instance(|_| {}).await;
    instance.set_build("", "sh b.sh", "dist", &[("b.sh", HELLO_BUILD)]);
    assert_eq!(instance.build().await["outcome"], "success");
    let link = instance.webspace().join("web");
    let _ = std::fs::remove_file(&link);
    std::fs::create_dir(&link).unwrap();
    std::fs::write(link.join("index.html"), "hand-made").unwrap();
    let refused = instance
        .post(
            "/v1/sites/alpha/publish",
            json!({"confirm": true, "actor": actor()}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(
        refused.json()["reason"],
        "webspace_unavailable",
        "{}",
        refused.body
    );
    let store = instance.webspace().join(".releases/web");
    let releases = std::fs::read_dir(&store).map_or(0, Iterator::count);
    assert_eq!(releases, 0, "nothing was copied");
    assert_eq!(instance.served("web", "index.html").unwrap(), "hand-made");
}

/// A site whose disk use cannot be measured (here a tree deeper than the walk goes) is not
/// over its quota: the build fails as an error, the log naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmeasurable_site_fails_its_build_as_an_error_not_over_quota() {
    let instance = instance(|_| {}).await;
    instance.set_build("", "sh b.sh", "dist", &[("b.sh", HELLO_BUILD)]);
    let deep: PathBuf = std::iter::once("deep")
        .chain(std::iter::repeat_n("d", 300))
        .collect();
    std::fs::create_dir_all(instance.workspace().join(deep)).unwrap();
    let record = instance.build().await;
    assert_eq!(record["outcome"], "failed", "{record}");
    assert_eq!(record["error"], "build error", "{}", record["log"]);
    let log = record["log"].as_str().unwrap();
    assert!(
        log.contains("# error: measuring the site's disk use: "),
        "{log}"
    );
    assert!(instance.served("pre", "index.html").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_outputs_and_timeouts_are_named_and_promote_nothing() {
    let instance = instance(|raw| raw.build_timeout_ms = Some(1500)).await;
    let outside = instance.root.join("outside");
    std::fs::create_dir_all(outside.join("dist")).unwrap();
    std::fs::write(outside.join("dist/index.html"), "outside").unwrap();
    let outside_link = format!("ln -s {} out", outside.display());
    let cases: [(&str, &str, &str, String, &str); 5] = [
        (
            "output is a symlink",
            "sh b.sh",
            "dist",
            "rm -rf dist; ln -s src dist".into(),
            "build output 'dist' is a symbolic link",
        ),
        (
            "output contains a symlink",
            "sh b.sh",
            "dist",
            "rm -rf dist; mkdir dist; ln -s /etc/passwd dist/p".into(),
            "build output 'dist' contains a symbolic link",
        ),
        (
            "output escapes the workspace",
            "sh b.sh",
            "out/dist",
            format!("rm -rf out; {outside_link}"),
            "build output 'out/dist' resolves outside the workspace",
        ),
        (
            "output missing",
            "sh b.sh",
            "nothing",
            "true".into(),
            "build produced no nothing/ directory",
        ),
        (
            "step over its deadline",
            "sh b.sh",
            "dist",
            "sleep 313 & sleep 314".into(),
            "build timed out",
        ),
    ];
    for (name, build, output, script, error) in cases {
        instance.set_build("", build, output, &[("b.sh", &script)]);
        let record = instance.build().await;
        assert_eq!(record["outcome"], "failed", "{name}: {record}");
        assert_eq!(record["error"], error, "{name}: {}", record["log"]);
        assert_eq!(record["release"], Value::Null, "{name}");
        assert!(
            instance.served("pre", "index.html").is_none(),
            "{name}: nothing promoted"
        );
        let store = std::fs::read_dir(instance.webspace().join(".releases/pre"))
            .unwrap()
            .count();
        assert_eq!(store, 0, "{name}: the store is empty");
    }
    assert!(
        processes_with("sleep 313").is_empty() && processes_with("sleep 314").is_empty(),
        "a timed-out step leaves no process"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("dist/index.html")).unwrap(),
        "outside"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_and_a_turn_never_run_at_once_and_unknown_builds_are_404() {
    let instance = instance(|_| {}).await;
    let turn = instance
        .post(
            "/v1/sites/alpha/sessions",
            json!({"prompt": "write busy.txt x\nsleep 3000", "actor": actor()}),
        )
        .await;
    assert_eq!(turn.status, StatusCode::CREATED, "{}", turn.body);
    let refused = instance
        .post("/v1/sites/alpha/build", json!({"actor": actor()}))
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.json()["reason"], "session_running");
    assert_eq!(
        refused.json()["detail"],
        "Cannot build while a session is running"
    );
    instance.wait_free().await;

    instance.set_build("", "sleep 2", "dist", &[]);
    let started = instance
        .post("/v1/sites/alpha/build", json!({"actor": actor()}))
        .await;
    assert_eq!(started.status, StatusCode::ACCEPTED);
    let again = instance
        .post("/v1/sites/alpha/build", json!({"actor": actor()}))
        .await;
    assert_eq!(again.json()["reason"], "build_running");
    assert_eq!(again.json()["detail"], "A build is already running");
    let session = instance
        .post(
            "/v1/sites/alpha/sessions",
            json!({"prompt": "hi", "actor": actor()}),
        )
        .await;
    assert_eq!(session.status, StatusCode::CONFLICT);
    assert_eq!(session.json()["reason"], "build_running");
    instance.wait_free().await;

    for id in ["20990101T000000000Z-000000", "..%2F..%2Fsite.json", "x"] {
        let got = instance.get(&format!("/v1/sites/alpha/builds/{id}")).await;
        assert_eq!(got.status, StatusCode::NOT_FOUND, "{id}");
    }
    let missing = instance
        .post("/v1/sites/zeta/build", json!({"actor": actor()}))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(Path::new(&instance.workspace())
        .join(".builder/builds")
        .is_dir());
}

/// A build log past what a `GET` returns still answers: its end, after a line saying how much
/// of its start was left out, never a 500.
#[tokio::test]
async fn a_huge_build_log_answers_with_its_end() {
    let instance = instance(|raw| raw.build_bin = Some("/nonexistent/atelier-build".into())).await;
    let record = instance.build().await;
    let id = record["id"].as_str().unwrap();
    let path = instance
        .workspace()
        .join(format!(".builder/builds/{id}.log"));
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let line = format!("{}\n", "x".repeat(99));
    for _ in 0..90_000 {
        log.write_all(line.as_bytes()).unwrap();
    }
    log.write_all(b"the last line\n").unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > 9_000_000);

    let got = instance.get(&format!("/v1/sites/alpha/builds/{id}")).await;
    assert_eq!(got.status, StatusCode::OK);
    let text = got.json()["log"].as_str().unwrap().to_owned();
    let (head, tail) = text.split_once('\n').unwrap();
    let skipped: u64 = head
        .strip_prefix("# the log's first ")
        .and_then(|rest| rest.strip_suffix(" bytes are left out"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{head}"));
    assert_eq!(
        skipped + tail.len() as u64,
        size,
        "nothing else is left out"
    );
    assert!(tail.len() as u64 <= 8 * 1024 * 1024);
    assert!(tail.starts_with(&line), "the tail starts at a whole line");
    assert!(tail.ends_with("\nthe last line\n"));
}
