//! Spec reading over real byte streams, and the unit checks as a table.

use std::collections::BTreeMap;
use std::time::Duration;

use atelier_proto::{encode, Frame, PROTOCOL_VERSION};
use tokio::io::AsyncWriteExt;

use super::*;
use crate::settings::{Confinement, Settings};

fn settings(door: Door) -> Settings {
    Settings {
        door,
        workdir: "/w".into(),
        unit: "u".into(),
        unit_env: Vec::new(),
        confinement: Confinement::Unconfined,
        kill_grace: Duration::from_secs(5),
        spec_timeout: Duration::from_millis(300),
    }
}

fn spec(door: Door, env: &[(&str, &str)]) -> Spec {
    Spec {
        v: PROTOCOL_VERSION,
        door,
        argv: vec!["/bin/true".into()],
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        host_netns: "net:[1]".into(),
        stdin: None,
    }
}

#[test]
fn unit_checks() {
    let cases: Vec<(&str, Door, Spec, Option<&str>)> = vec![
        (
            "matching door, plain env",
            Door::Build,
            spec(Door::Build, &[("PATH", "/bin")]),
            None,
        ),
        (
            "another door",
            Door::Build,
            spec(Door::Turn, &[]),
            Some("the spec is for the turn door but this unit serves the build door"),
        ),
        (
            "HOME (checked here too, not only by proto)",
            Door::Git,
            spec(Door::Git, &[("HOME", "/x")]),
            Some("the spec sets HOME, which the git unit fixes"),
        ),
        (
            "an ATELIER_ key",
            Door::Build,
            spec(Door::Build, &[("ATELIER_UNIT_WORKDIR", "/x")]),
            Some("ATELIER_UNIT_WORKDIR"),
        ),
        (
            "a turn-door key on the turn door",
            Door::Turn,
            spec(Door::Turn, &[("XDG_STATE_HOME", "/x")]),
            Some("the spec sets XDG_STATE_HOME, which the turn unit fixes"),
        ),
        (
            "a turn-door key on the build door",
            Door::Build,
            spec(Door::Build, &[("XDG_STATE_HOME", "/x")]),
            None,
        ),
    ];
    for (name, unit_door, spec, want) in cases {
        let got = check(&spec, unit_door).err().map(|e| e.to_string());
        match (got, want) {
            (None, None) => {}
            (Some(got), Some(want)) => assert!(got.contains(want), "{name}: {got}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

async fn read_from(bytes: Vec<u8>, close: bool, door: Door) -> Result<Spec, SpecRefusal> {
    let (mut daemon, mut shim) = tokio::net::UnixStream::pair().unwrap();
    daemon.write_all(&bytes).await.unwrap();
    if close {
        daemon.shutdown().await.unwrap();
    }
    let result = read_spec(&mut shim, &mut Decoder::new(), &settings(door)).await;
    drop(daemon);
    result
}

fn spec_bytes(spec: &Spec) -> Vec<u8> {
    encode(&Frame::json(FrameKind::Spec, spec).unwrap()).unwrap()
}

#[tokio::test]
async fn one_good_spec_is_read() {
    let sent = spec(Door::Git, &[("LANG", "C")]);
    let got = read_from(spec_bytes(&sent), false, Door::Git)
        .await
        .unwrap();
    assert_eq!(got, sent);
}

#[tokio::test]
async fn stream_refusals() {
    let good = spec_bytes(&spec(Door::Build, &[]));
    let cases: Vec<(&str, Vec<u8>, bool, &str)> = vec![
        ("end of stream", vec![], true, "NoSpec"),
        ("silence", vec![], false, "Timeout"),
        ("half a header", b"S\x00".to_vec(), true, "Frame"),
        (
            "half a payload",
            good[..good.len() - 3].to_vec(),
            true,
            "Frame",
        ),
        (
            "an unknown type",
            b"Z\x00\x00\x00\x00".to_vec(),
            false,
            "Frame",
        ),
        (
            "an exit frame",
            encode(&Frame::new(FrameKind::Exit, &b"{}"[..])).unwrap(),
            false,
            "NotASpec",
        ),
        (
            "JSON that is an array",
            encode(&Frame::new(FrameKind::Spec, &b"[1]"[..])).unwrap(),
            false,
            "Malformed",
        ),
        (
            "another door",
            spec_bytes(&spec(Door::Turn, &[])),
            false,
            "WrongDoor",
        ),
    ];
    for (name, bytes, close, want) in cases {
        let got = read_from(bytes, close, Door::Build).await.unwrap_err();
        assert!(format!("{got:?}").starts_with(want), "{name}: {got:?}");
    }
}

#[tokio::test]
async fn anything_after_the_spec_is_refused_and_an_early_close_is_a_hang_up() {
    let good = spec_bytes(&spec(Door::Build, &[]));
    // (name, bytes after the spec, close after, want)
    let cases: [(&str, &[u8], bool, Option<&str>); 4] = [
        ("nothing more", b"", false, None),
        ("a second frame", &good, false, Some("BadSpec(SecondFrame)")),
        ("one stray byte", b"x", false, Some("BadSpec(SecondFrame)")),
        ("closed after the spec", b"", true, Some("DaemonGone")),
    ];
    for (name, after, close, want) in cases {
        let (mut daemon, mut shim) = tokio::net::UnixStream::pair().unwrap();
        daemon
            .write_all(&[&good[..], after].concat())
            .await
            .unwrap();
        if close {
            daemon.shutdown().await.unwrap();
        }
        read_spec(&mut shim, &mut Decoder::new(), &settings(Door::Build))
            .await
            .unwrap();
        let got = ensure_nothing_after_spec(&mut shim).await.err();
        let got = got.map(|e| format!("{e:?}"));
        match (got, want) {
            (None, None) => {}
            (Some(got), Some(want)) => assert!(got.starts_with(want), "{name}: {got}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}
