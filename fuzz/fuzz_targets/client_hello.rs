//! Fuzzes the first-flight walker: no panic, an accepted server name is lowercase visible
//! ASCII, a prefix never decides differently from the whole, and the walker agrees with a
//! TLS server's own parser (rustls's) about the name a ClientHello carries.
#![no_main]

use atelier_gate::{
    inspect_first_flight, is_plan_hostname, FirstFlight, FirstFlightReader, HelloRefusal,
};
use libfuzzer_sys::fuzz_target;
use rustls::server::Acceptor;

/// What a TLS server makes of the same bytes, as the upstream receives them after the gate
/// accepted them.
#[derive(Debug)]
enum ServerView {
    /// A whole ClientHello, and the DNS name it carries if it carries one the server takes.
    Hello(Option<String>),
    /// The bytes end before a whole ClientHello.
    NeedMore,
    /// Not a ClientHello the server accepts.
    Refused,
}

fn server_view(data: &[u8]) -> ServerView {
    let mut acceptor = Acceptor::default();
    let mut rest = data;
    loop {
        if rest.is_empty() {
            return ServerView::NeedMore;
        }
        if acceptor.read_tls(&mut rest).is_err() {
            return ServerView::Refused;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return ServerView::Hello(accepted.client_hello().server_name().map(str::to_owned))
            }
            Ok(None) => {}
            Err(_) => return ServerView::Refused,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = inspect_first_flight(data);
    match &whole {
        FirstFlight::Accept { sni } => {
            assert!(!sni.is_empty());
            assert!(
                sni.bytes()
                    .all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()),
                "{sni:?}"
            );
            // The gate forwards these very bytes: the server must not read another name
            // from them, nor no name where the gate read one a plan could hold.
            match server_view(data) {
                // A server reads `name.` as the absolute form of `name`; the gate never plans
                // a name with the dot, so such a hello fails the CONNECT host check.
                ServerView::Hello(Some(name)) => {
                    let absolute = sni.strip_suffix('.').unwrap_or(sni);
                    assert!(
                        name.eq_ignore_ascii_case(absolute),
                        "gate {sni:?}, server {name:?}"
                    )
                }
                ServerView::Hello(None) => {
                    assert!(!is_plan_hostname(sni), "gate {sni:?}, server no name")
                }
                ServerView::NeedMore => panic!("gate {sni:?}, server still reading"),
                ServerView::Refused => {}
            }
        }
        FirstFlight::Refuse(refusal) => {
            assert_ne!(*refusal, HelloRefusal::ServerNameMismatch);
            assert_ne!(*refusal, HelloRefusal::Timeout);
        }
        FirstFlight::NeedMore => assert!(data.len() < atelier_gate::MAX_FIRST_FLIGHT),
    }
    // Every prefix, at a cut chosen by the last byte, needs more or decides the same; and a
    // reader fed the prefix, then the rest, answers as the whole walks do.
    if let Some(&seed) = data.last() {
        let cut = data.len() * usize::from(seed) / 255;
        let prefix = inspect_first_flight(&data[..cut]);
        assert!(
            prefix == FirstFlight::NeedMore || prefix == whole,
            "{prefix:?} vs {whole:?}"
        );
        let mut reader = FirstFlightReader::default();
        let first = reader.inspect(&data[..cut]);
        assert_eq!(first, prefix);
        if first == FirstFlight::NeedMore {
            assert_eq!(reader.inspect(data), whole);
        }
    }
});
