//! Fuzzes the JSON message parsers directly with arbitrary payloads.
#![no_main]

use atelier_proto::{BuildEvent, ExitRecord, Hello, Spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(hello) = Hello::from_json(data) {
        let frame = hello.to_frame().expect("an accepted hello encodes");
        assert_eq!(
            Hello::from_frame(&frame).expect("its encoding parses"),
            hello
        );
    }
    if let Ok(spec) = Spec::from_json(data) {
        let frame = spec.to_frame().expect("an accepted spec encodes");
        assert_eq!(Spec::from_frame(&frame).expect("its encoding parses"), spec);
    }
    if let Ok(exit) = ExitRecord::from_json(data) {
        let frame = exit.to_frame().expect("an accepted exit record encodes");
        assert_eq!(
            ExitRecord::from_frame(&frame).expect("its encoding parses"),
            exit
        );
    }
    if let Ok(event) = BuildEvent::from_json(data) {
        let frame = event.to_frame().expect("an accepted event encodes");
        assert_eq!(
            BuildEvent::from_frame(&frame).expect("its encoding parses"),
            event
        );
    }
});
