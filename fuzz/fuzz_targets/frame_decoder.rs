//! Fuzzes the frame decoder with arbitrary bytes in arbitrary chunkings, then every message
//! parser with each decoded frame.
#![no_main]

use atelier_proto::{
    encode, BuildEvent, Decoder, ExitRecord, Frame, FrameError, Hello, MessageError, Spec,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size, so one input explores one chunking.
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(seed % 64) + 1;

    let mut decoder = Decoder::new();
    let mut reencoded = Vec::new();
    let mut outcome = Ok(());
    'feed: for mut piece in input.chunks(chunk) {
        loop {
            match decoder.decode(&mut piece) {
                Ok(Some(frame)) => {
                    assert!(frame.payload.len() <= frame.kind.max_len());
                    reencoded.extend(encode(&frame).expect("a decoded frame re-encodes"));
                    parse_all(&frame);
                }
                Ok(None) => break,
                Err(err) => {
                    outcome = Err(err);
                    break 'feed;
                }
            }
        }
    }
    // Whatever was decoded is exactly a prefix of the input.
    assert!(input.starts_with(&reencoded));

    match outcome {
        Err(FrameError::UnknownKind(_) | FrameError::TooLarge { .. }) => {
            assert!(decoder.is_failed());
            assert!(matches!(decoder.next_frame(), Err(FrameError::Failed(_))));
            assert!(matches!(decoder.finish(), Err(FrameError::Failed(_))));
        }
        Err(other) => panic!("feeding produced {other:?}"),
        Ok(()) => match decoder.finish() {
            Ok(()) => assert_eq!(reencoded.len(), input.len()),
            Err(FrameError::Truncated { received, .. }) => {
                assert_eq!(reencoded.len() + received, input.len())
            }
            Err(other) => panic!("finish produced {other:?}"),
        },
    }
});

/// Runs every parser on the frame; what one accepts must survive its own round trip.
fn parse_all(frame: &Frame) {
    check(Hello::from_frame(frame), Hello::to_frame, Hello::from_frame);
    check(Spec::from_frame(frame), Spec::to_frame, Spec::from_frame);
    check(
        ExitRecord::from_frame(frame),
        ExitRecord::to_frame,
        ExitRecord::from_frame,
    );
    check(
        BuildEvent::from_frame(frame),
        BuildEvent::to_frame,
        BuildEvent::from_frame,
    );
}

fn check<T: PartialEq + std::fmt::Debug>(
    parsed: Result<T, MessageError>,
    to_frame: fn(&T) -> Result<Frame, MessageError>,
    from_frame: fn(&Frame) -> Result<T, MessageError>,
) {
    if let Ok(message) = parsed {
        let frame = to_frame(&message).expect("an accepted message encodes");
        assert_eq!(from_frame(&frame).expect("its encoding parses"), message);
    }
}
