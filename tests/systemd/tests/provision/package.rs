//! The Debian package as an operator installs it: `scripts/package` builds the `.deb` from the
//! freshly built binaries on the host; a fresh box gets only that package, the example
//! declaration and the operator's setup (and the journey's two test fixtures, the real Claude
//! Code and the lab model, which no package holds). There `dpkg -i` installs it: every binary
//! on the PATH is the package's, `man atelier-provision` renders, the copyright file names every
//! linked crate with its licence files beside it, and the package brings no unit or account of
//! its own (lintian, on the host beforehand, finds neither an error nor a warning in it). Then
//! the demo's journey (`deploy/demo/journey.sh`) runs against it unchanged: `atelier-provision
//! apply` of the example, `atelierctl health` pairing, turns through the turn door, builds
//! through the build door, and the rest.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use atelier_systemd_tests::{
    built_binaries_dir, journey_box, repo_root, Atelier, JOURNEY_IN_BOX, PACKAGE_IN_BOX,
};

/// Runs inside the box, after `DEB=` and `JOURNEY=` lines. Prints `KEY=value` facts for the
/// test to check, and the journey's output prefixed with `journey| `.
const SCRIPT: &str = r#"
set -uo pipefail
dpkg -i "$DEB" > /tmp/dpkg 2>&1; echo "dpkg=$?"
sed 's/^/dpkg| /' /tmp/dpkg
echo "installed=$(dpkg-query -W -f='${Status}' atelier)"
for bin in atelier-provision atelier-sited atelier-shim atelier-gate atelier-build atelier-chatd atelierctl; do
  path=$(command -v $bin)
  echo "bin_$bin=$path $(dpkg -S "$path" 2>/dev/null | cut -d: -f1)"
done
echo "templates=$(dpkg -S /usr/share/atelier/templates/basic/template.json 2>/dev/null | cut -d: -f1)"
echo "man_path=$(man -w atelier-provision 2>&1)"
echo "man_head=$(man atelier-provision 2>/dev/null | head -n 8 | tr -s ' ' | paste -sd ' ')"
echo "man_ctl=$(man -w atelierctl-health 2>&1)"
echo "completion=$(bash -c '. /usr/share/bash-completion/completions/atelierctl && complete -p atelierctl' 2>&1)"
echo "package_units=$(dpkg -L atelier | grep -c -e '^/usr/lib/systemd/' -e '^/lib/systemd/' -e sysusers)"
copyright=/usr/share/doc/atelier/copyright
echo "copyright_format=$(head -n 1 $copyright)"
echo "copyright_tokio=$(grep -A2 '^Files: vendor/tokio-1\.' $copyright | paste -sd '|')"
echo "copyright_unstated=$(grep -c '^License: *$' $copyright)"
echo "licences_tokio=$(ls /usr/share/doc/atelier/crates/tokio-1.*/ | paste -sd ' ')"
echo "licences_crates=$(ls /usr/share/doc/atelier/crates | wc -l) $(grep -c '^Files: vendor/' $copyright)"
echo "run_atelier=$(stat -c '%U:%G %a' /run/atelier)"

bash "$JOURNEY" > /tmp/journey 2>&1; echo "journey=$?"
sed 's/^/journey| /' /tmp/journey
echo "env_paths=$(grep -e ^ATELIER_SHIM_BIN= -e ^ATELIER_BUILD_BIN= -e ^ATELIER_TEMPLATES_DIR= /etc/atelier/example/env | paste -sd ' ')"
echo "door_exec=$(grep ^ExecStart= /etc/systemd/system/atelier-example-s1-build@.service)"
echo "chatd_socket=$(systemctl is-enabled atelier-chatd@example.socket) $(systemctl is-active atelier-chatd@example.socket)"
echo "chatd_exec=$(grep ^ExecStart= /etc/systemd/system/atelier-chatd@example.service)"
echo "version=$(dpkg-query -W -f='${Version}' atelier)"

# Taking the package off while the instance is provisioned is refused, naming the way out.
# A second instance whose declaration put its units elsewhere on PID 1's search path is found
# by its unit, and named by the declaration its Documentation= gives.
copy=/etc/atelier/example/instance.json
moved=/run/systemd/system/atelier-sited@moved.service
printf '[Unit]\nDocumentation=file:///srv/moved/instance.json\n[Service]\nExecStart=/bin/true\n' \
  > $moved
systemctl daemon-reload
echo "instances=$(/usr/libexec/atelier/instances | paste -sd ',')"
dpkg -r atelier > /tmp/remove 2>&1; echo "remove_refused=$?"
sed 's/^/remove| /' /tmp/remove
echo "remove_names=$(grep -c "atelier-provision remove --declaration $copy" /tmp/remove)"
echo "remove_names_moved=$(grep -c "remove --declaration /srv/moved/instance.json$" /tmp/remove)"
echo "after_refusal=$(dpkg-query -W -f='${Status}' atelier) $(command -v atelier-sited)"
# Installed again over itself, as an upgrade is: the instance is told to apply.
dpkg -i "$DEB" > /tmp/upgrade 2>&1; echo "upgrade=$?"
sed 's/^/upgrade| /' /tmp/upgrade
echo "upgrade_names=$(grep -c "atelier-provision apply --declaration $copy" /tmp/upgrade)"
echo "upgrade_names_moved=$(grep -c "apply --declaration /srv/moved/instance.json$" /tmp/upgrade)"
rm $moved
systemctl daemon-reload
# Decommissioned, the instance no longer holds the package.
atelier-provision remove --declaration "$copy" --purge-published > /tmp/decommission 2>&1
echo "decommission=$?"
dpkg -r atelier > /tmp/removed 2>&1; echo "removed=$?"
echo "after_remove=$(dpkg-query -W -f='${Status}' atelier 2>&1) $(command -v atelier-sited || echo gone)"
exit 0
"#;

/// Builds the `.deb` into `out` from the binaries beside this test (a debug package: no cargo
/// runs, `cargo test` holds the target folder) and returns its path.
#[expect(
    clippy::expect_used,
    reason = "test helper: a package that cannot be built must fail the test"
)]
fn package(out: &Path) -> std::path::PathBuf {
    let bins = built_binaries_dir().expect("locating the built binaries");
    let built = Command::new("bash")
        .arg(repo_root().join("scripts/package"))
        .args(["--profile", "debug", "--bin-dir"])
        .arg(&bins)
        .arg("--out")
        .arg(out)
        .output()
        .expect("running scripts/package");
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "scripts/package failed ({}):\n{stdout}\n{}",
        built.status,
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = stdout.lines().last().unwrap_or_default();
    assert!(deb.ends_with(".deb"), "scripts/package printed {stdout:?}");
    deb.into()
}

/// What lintian says of the package at its error and warning levels (nothing, for a package
/// Debian's tools accept), and the package's `Depends`.
#[expect(
    clippy::expect_used,
    reason = "test helper: a package lintian cannot read must fail the test"
)]
fn lint(deb: &Path) -> (String, String) {
    let linted = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--tag-display-limit", "0"])
        .arg(deb)
        .output()
        .expect("running lintian (scripts/install-deps installs it)");
    let said = String::from_utf8_lossy(&linted.stdout);
    let faults = said
        .lines()
        .filter(|line| !line.starts_with("I: ") && !line.starts_with("N: "))
        .collect::<Vec<_>>()
        .join("\n");
    let faults = if linted.status.success() {
        faults
    } else {
        format!("lintian {}: {faults}", linted.status)
    };
    let fields = Command::new("dpkg-deb")
        .args(["--field"])
        .arg(deb)
        .arg("Depends")
        .output()
        .expect("running dpkg-deb");
    let depends = String::from_utf8_lossy(&fields.stdout).trim().to_owned();
    (faults, depends)
}

#[test]
fn the_package_installs_with_dpkg_and_runs_the_demo_journey() {
    let out = tempfile::tempdir().expect("a folder for the package");
    let deb = package(out.path());
    let (faults, depends) = lint(&deb);
    assert_eq!(faults, "", "lintian's errors and warnings");
    assert!(
        depends.starts_with("libc6 (>= 2.") && depends.contains(", systemd (>= "),
        "the linked C library comes first: {depends}"
    );
    let run = journey_box(Atelier::Package(deb))
        .expect("putting the journey's box together")
        .timeout(Duration::from_secs(420))
        .run(&format!(
            "DEB={PACKAGE_IN_BOX}\nJOURNEY={JOURNEY_IN_BOX}\n{SCRIPT}"
        ))
        .expect("booting systemd in a container");
    run.assert_success();
    let fact = |key: &str| run.fact(key).unwrap_or("<missing>");

    assert_eq!(fact("dpkg"), "0", "{run:?}");
    assert_eq!(fact("installed"), "install ok installed", "{run:?}");
    for bin in [
        "atelier-provision",
        "atelier-sited",
        "atelier-shim",
        "atelier-gate",
        "atelier-build",
        "atelier-chatd",
        "atelierctl",
    ] {
        assert_eq!(
            fact(&format!("bin_{bin}")),
            format!("/usr/bin/{bin} atelier"),
            "{bin} on the PATH is the package's\n{run:?}"
        );
    }
    assert_eq!(fact("templates"), "atelier", "{run:?}");
    assert_eq!(
        fact("man_path"),
        "/usr/share/man/man1/atelier-provision.1.gz",
        "{run:?}"
    );
    let man = fact("man_head");
    assert!(
        man.contains("NAME") && man.contains("atelier-provision - Renders and applies"),
        "man atelier-provision: {man:?}\n{run:?}"
    );
    assert_eq!(
        fact("man_ctl"),
        "/usr/share/man/man1/atelierctl-health.1.gz",
        "a page per subcommand\n{run:?}"
    );
    assert!(
        fact("completion").starts_with("complete ") && fact("completion").ends_with(" atelierctl"),
        "{run:?}"
    );
    assert_eq!(fact("package_units"), "0", "{run:?}");
    // The copyright file is machine-readable and names every linked crate with its licence;
    // each crate's licence files are beside it.
    assert_eq!(
        fact("copyright_format"),
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/",
        "{run:?}"
    );
    let tokio = fact("copyright_tokio");
    assert!(
        tokio.starts_with("Files: vendor/tokio-1.")
            && tokio.ends_with("/*|Copyright: Tokio Contributors <team@tokio.rs>|License: MIT"),
        "{run:?}"
    );
    assert_eq!(fact("copyright_unstated"), "0", "{run:?}");
    assert_eq!(fact("licences_tokio"), "LICENSE", "{run:?}");
    let (kept, named) = fact("licences_crates").split_once(' ').unwrap_or_default();
    assert_eq!(kept, named, "a folder per named crate\n{run:?}");
    assert!(kept.parse::<u32>().unwrap_or(0) > 100, "{run:?}");
    assert_eq!(fact("run_atelier"), "root:root 755", "{run:?}");

    assert_eq!(fact("journey"), "0", "{run:?}");
    let output = &run.output;
    assert!(
        output.contains("journey| == the whole journey passed"),
        "{run:?}"
    );
    assert!(!output.contains("NOT OK"), "{run:?}");
    for step in [
        "ok: the second apply planned and did nothing",
        "ok: sited is active, started by its socket, as the service user",
        "ok: the agent ran through the turn door",
        "ok: the build ran through the build door",
    ] {
        assert!(output.contains(step), "{step}\n{run:?}");
    }
    assert_eq!(
        fact("env_paths"),
        "ATELIER_BUILD_BIN=\"/usr/bin/atelier-build\" ATELIER_SHIM_BIN=\"/usr/bin/atelier-shim\" \
         ATELIER_TEMPLATES_DIR=\"/usr/share/atelier/templates\"",
        "{run:?}"
    );
    assert_eq!(
        fact("door_exec"),
        "ExecStart=/usr/bin/atelier-shim",
        "{run:?}"
    );
    // The example's chat block: apply enabled chatd's socket, which runs the package's binary.
    assert_eq!(fact("chatd_socket"), "enabled active", "{run:?}");
    assert_eq!(
        fact("chatd_exec"),
        "ExecStart=/usr/bin/atelier-chatd --database /var/lib/atelier-chatd-example/chat.sqlite3",
        "{run:?}"
    );
    // Each commit is a later version: the workspace's, then the commit's time and name.
    assert!(fact("version").contains("+git"), "{run:?}");

    // Removal waits for the instance's decommissioning; an upgrade says to apply.
    assert_ne!(fact("remove_refused"), "0", "{run:?}");
    assert_eq!(
        fact("instances"),
        "example /etc/atelier/example/instance.json,moved /srv/moved/instance.json",
        "{run:?}"
    );
    assert_eq!(fact("remove_names"), "1", "{run:?}");
    assert_eq!(fact("remove_names_moved"), "1", "{run:?}");
    // dpkg keeps the wish to remove it (deinstall), the package installed.
    assert!(
        fact("after_refusal").ends_with(" ok installed /usr/bin/atelier-sited"),
        "{run:?}"
    );
    assert_eq!(fact("upgrade"), "0", "{run:?}");
    assert_eq!(fact("upgrade_names"), "1", "{run:?}");
    assert_eq!(fact("upgrade_names_moved"), "1", "{run:?}");
    assert_eq!(fact("decommission"), "0", "{run:?}");
    assert_eq!(fact("removed"), "0", "{run:?}");
    assert!(fact("after_remove").ends_with(" gone"), "{run:?}");
}
