//! Fuzzes the first-flight walker: no panic, an accepted server name is lowercase visible
//! ASCII, and a prefix never decides differently from the whole.
#![no_main]

use atelier_gate::{inspect_first_flight, FirstFlight, HelloRefusal};
use libfuzzer_sys::fuzz_target;

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
        }
        FirstFlight::Refuse(refusal) => {
            assert_ne!(*refusal, HelloRefusal::ServerNameMismatch);
            assert_ne!(*refusal, HelloRefusal::Timeout);
        }
        FirstFlight::NeedMore => assert!(data.len() < atelier_gate::MAX_FIRST_FLIGHT),
    }
    // Every prefix, at a cut chosen by the last byte, needs more or decides the same.
    if let Some(&seed) = data.last() {
        let cut = data.len() * usize::from(seed) / 255;
        let prefix = inspect_first_flight(&data[..cut]);
        assert!(
            prefix == FirstFlight::NeedMore || prefix == whole,
            "{prefix:?} vs {whole:?}"
        );
    }
});
