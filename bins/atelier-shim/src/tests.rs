//! The outcome contract (codes and stderr lines) and the library entry driven in-process over
//! pipes.

use std::time::Duration;

use atelier_proto::{encode, read_frame, Decoder, Door, ExitRecord, Frame, FrameKind, Spec};
use tokio::io::AsyncWriteExt;

use super::*;
use crate::settings::{Confinement, Settings};

fn every_error() -> Vec<ShimError> {
    vec![
        ShimError::NoDoor("ATELIER_DOOR is not set".into()),
        ShimError::NotAConnection("stdin is a RegularFile".into()),
        ShimError::BadSpec(SpecRefusal::NoSpec),
        ShimError::BytesAfterSpec(3),
        ShimError::NamespaceNotInEffect(NotInEffect::NoInterface),
        ShimError::CannotListen {
            name: "proxy",
            addr: "127.0.0.1:3128".parse().unwrap(),
            source: io::Error::from(io::ErrorKind::AddrInUse),
        },
        ShimError::Spawn {
            program: "/x".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        },
        ShimError::DaemonGone("it closed\nthe connection".into()),
        ShimError::Internal("x".into()),
    ]
}

#[test]
fn every_outcome_has_its_code_and_one_confinement_line() {
    let codes: Vec<u8> = every_error().iter().map(ShimError::exit_code).collect();
    assert_eq!(codes, [64, 64, 65, 65, 78, 71, 127, 74, 70]);
    for error in every_error() {
        let line = error.stderr_line();
        assert!(!line.contains('\n') && !line.contains('\r'), "{line:?}");
        assert!(line.starts_with("[confinement] "), "{line}");
    }
    assert_eq!(
        ShimError::NamespaceNotInEffect(NotInEffect::NoInterface).stderr_line(),
        "[confinement] network namespace not in effect: this unit can see no interface at all, not even lo"
    );
    assert_eq!(
        ShimError::BadSpec(SpecRefusal::NoSpec).stderr_line(),
        "[confinement] shim: refused — the connection ended before a spec. Nothing was run."
    );
}

#[tokio::test]
async fn the_library_entry_runs_a_conversation_over_pipes() {
    let workdir = tempfile::tempdir().unwrap();
    let settings = Settings {
        door: Door::Git,
        workdir: workdir.path().to_owned(),
        unit: "unconfined".into(),
        unit_env: vec![("HOME".into(), "/nonexistent".into())],
        confinement: Confinement::Unconfined,
        kill_grace: Duration::from_secs(5),
        spec_timeout: Duration::from_secs(5),
    };
    let (mut daemon_out, shim_in) = tokio::io::duplex(1024);
    let (shim_out, mut daemon_in) = tokio::io::duplex(1024);
    let shim = tokio::spawn(async move { run(&settings, shim_in, shim_out).await });

    let mut decoder = Decoder::new();
    let hello = read_frame(&mut daemon_in, &mut decoder)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        Hello::from_frame(&hello).unwrap(),
        Hello::new(Door::Git, "unconfined")
    );
    let spec = Spec {
        v: 1,
        door: Door::Git,
        argv: vec!["/bin/sh".into(), "-c".into(), "pwd; echo $HOME >&2".into()],
        env: Default::default(),
        host_netns: "net:[1]".into(),
        stdin: None,
    };
    daemon_out
        .write_all(&encode(&spec.to_frame().unwrap()).unwrap())
        .await
        .unwrap();

    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let exit = loop {
        let frame: Frame = read_frame(&mut daemon_in, &mut decoder)
            .await
            .unwrap()
            .unwrap();
        match frame.kind {
            FrameKind::Stdout => stdout.extend_from_slice(&frame.payload),
            FrameKind::Stderr => stderr.extend_from_slice(&frame.payload),
            FrameKind::Exit => break ExitRecord::from_frame(&frame).unwrap(),
            other => panic!("{other}"),
        }
    };
    assert_eq!(exit, ExitRecord::exited(0));
    let cwd = std::fs::canonicalize(workdir.path()).unwrap();
    assert_eq!(
        String::from_utf8(stdout).unwrap().trim(),
        cwd.display().to_string()
    );
    assert_eq!(stderr, b"/nonexistent\n");
    let finished = shim.await.unwrap().unwrap();
    assert_eq!(finished.end, ChildEnd::Exited(0));
    assert_eq!(finished.end.exit_code(), 0);
}
