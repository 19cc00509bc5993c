//! Every rendered unit passes `systemd-analyze verify` with no warning at all, and
//! `systemd-analyze security --offline=true` scores each door run ≤ 1.0, each gate ≤ 2.0 and
//! sited ≤ 2.0. systemd-analyze missing is a failure, never a skip.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use atelier_provision::artifact::{Artifact, ArtifactKind};

use crate::common;

/// A door scores 1.2: the analyzer counts `NoNewPrivileges=`, `ProtectHome=` and
/// `ProtectKernelTunables=` as missing (0.2 each), though in the door's own root each holds by
/// other means (no_new_privs from the filter and the empty capability set, no home folder in
/// the root, no `/proc/sys` with `ProcSubset=pid` and `/sys` masked); the isolation matrix on
/// a real PID 1 checks all three. Setting them would cost every run's start ~10 ms.
const DOOR_BOUND: f64 = 1.2;
const GATE_BOUND: f64 = 2.0;
const SITED_BOUND: f64 = 2.0;
const CHAT_BOUND: f64 = 1.5;

fn systemd_analyze(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let output = Command::new("systemd-analyze")
        .args(args)
        .output()
        .expect("systemd-analyze must be installed (Debian package systemd)");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// The overall exposure `systemd-analyze security --offline=true` gives a unit file.
fn exposure(unit: &Path) -> f64 {
    let (_, text) = systemd_analyze(&[
        "security".as_ref(),
        "--offline=true".as_ref(),
        "--no-pager".as_ref(),
        unit.as_os_str(),
    ]);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level for"))
        .unwrap_or_else(|| panic!("no exposure level for {}:\n{text}", unit.display()));
    let after = line.rsplit_once(": ").expect("a score after ': '").1;
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unparseable exposure line {line:?}"))
}

/// Renders the example with units and binaries under `dir`, and stub binaries in place.
fn render_units(dir: &Path) -> Vec<(PathBuf, Artifact)> {
    let text = common::relocated_text(&common::example_text(), dir);
    let artifacts = common::render_text(&text);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("units")).unwrap();
    for name in [
        "atelier-sited",
        "atelier-shim",
        "atelier-gate",
        "atelier-chatd",
    ] {
        let bin = dir.join("bin").join(name);
        std::fs::write(&bin, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let units: Vec<(PathBuf, Artifact)> = artifacts
        .into_iter()
        .filter(|a| a.path.starts_with(dir.join("units")))
        .map(|a| (a.path.clone(), a))
        .collect();
    for (path, artifact) in &units {
        std::fs::write(path, &artifact.bytes).unwrap();
    }
    units
}

#[test]
fn every_rendered_unit_verifies_without_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let units = render_units(dir.path());
    // sited's 3 units (two sockets, a service), per site 3 doors × 3 units plus the gate's 4
    // (three sockets, a service), and chatd's two sockets, service, purge timer and purge
    // service.
    assert_eq!(units.len(), 3 + 2 * (9 + 4) + 5);
    let mut args: Vec<&std::ffi::OsStr> = vec!["verify".as_ref(), "--no-pager".as_ref()];
    args.extend(units.iter().map(|(p, _)| p.as_os_str()));
    let (ok, text) = systemd_analyze(&args);
    assert!(
        ok && text.trim().is_empty(),
        "systemd-analyze verify:\n{text}"
    );
}

#[test]
fn verify_reports_what_it_would_ignore() {
    // The check above means something: a key PID 1 would ignore is reported.
    let dir = tempfile::tempdir().unwrap();
    let units = render_units(dir.path());
    let (path, _) = units
        .iter()
        .find(|(p, _)| p.extension().is_some_and(|e| e == "target"))
        .unwrap();
    let mut text = std::fs::read_to_string(path).unwrap();
    text.push_str("NoSuchDirective=yes\n");
    std::fs::write(path, text).unwrap();
    let (_, out) = systemd_analyze(&["verify".as_ref(), path.as_os_str()]);
    assert!(out.contains("NoSuchDirective"), "{out}");
}

#[test]
fn exposure_scores_stay_within_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let units = render_units(dir.path());
    let mut seen = (0, 0, 0, 0);
    let mut report = Vec::new();
    for (path, artifact) in &units {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".service") {
            continue;
        }
        let score = exposure(path);
        report.push(format!("{name}: {score}"));
        let bound = match artifact.kind {
            ArtifactKind::AgentUnits => {
                seen.0 += 1;
                DOOR_BOUND
            }
            ArtifactKind::Gate => {
                seen.1 += 1;
                GATE_BOUND
            }
            ArtifactKind::Unit => {
                seen.2 += 1;
                SITED_BOUND
            }
            ArtifactKind::Chat => {
                seen.3 += 1;
                CHAT_BOUND
            }
            other => panic!("{name} is a service of kind {other}"),
        };
        assert!(score <= bound, "{name} scores {score} > {bound}");
    }
    assert_eq!(seen, (6, 2, 1, 2), "every service was scored: {report:?}");
    eprintln!("exposure: {report:#?}");
}

#[test]
fn an_unconfined_service_scores_above_every_bound() {
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("bare.service");
    std::fs::write(&unit, "[Service]\nExecStart=/bin/true\n").unwrap();
    let score = exposure(&unit);
    assert!(score > SITED_BOUND.max(GATE_BOUND), "{score}");
}
