//! Decoder tests: round trips, split input, header-only refusal, truncation, properties.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::frame::encode;

/// Decodes all of `input`, offered in chunks of the given sizes (cycled), then checks the end.
fn decode_chunked(input: &[u8], chunks: &[usize]) -> Result<Vec<Frame>, FrameError> {
    let mut decoder = Decoder::new();
    let mut frames = Vec::new();
    let mut rest = input;
    for &size in chunks.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (mut chunk, tail) = rest.split_at(size.clamp(1, rest.len()));
        rest = tail;
        while let Some(frame) = decoder.decode(&mut chunk)? {
            frames.push(frame);
        }
    }
    decoder.finish()?;
    Ok(frames)
}

fn encode_all(frames: &[Frame]) -> Vec<u8> {
    frames.iter().flat_map(|f| encode(f).unwrap()).collect()
}

fn header(type_byte: u8, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[0] = type_byte;
    h[1..].copy_from_slice(&len.to_be_bytes());
    h
}

#[test]
fn every_kind_round_trips_empty_small_and_at_cap() {
    for kind in FrameKind::ALL {
        let at_cap: Vec<u8> = (0..kind.max_len()).map(|i| (i % 251) as u8).collect();
        for payload in [Vec::new(), b"{\"a\":1}".to_vec(), at_cap] {
            let frame = Frame::new(kind, payload);
            let wire = encode(&frame).unwrap();
            assert_eq!(wire.len(), HEADER_LEN + frame.payload.len());
            assert_eq!(
                decode_chunked(&wire, &[wire.len()]).unwrap(),
                std::slice::from_ref(&frame)
            );
        }
    }
}

#[test]
fn header_of_exactly_cap_is_accepted_and_cap_plus_one_refused() {
    for kind in FrameKind::ALL {
        let max = kind.max_len();
        let mut decoder = Decoder::new();
        let cap = u32::try_from(max).unwrap();
        assert_eq!(
            decoder.feed(&header(kind.as_byte(), cap)).unwrap(),
            HEADER_LEN
        );
        assert_eq!(decoder.wanted(), max, "{kind}");

        let mut decoder = Decoder::new();
        let err = decoder.feed(&header(kind.as_byte(), cap + 1)).unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { kind: k, len, max: m }
                if k == kind && len == max + 1 && m == max),
            "{kind}: {err}"
        );
    }
}

#[test]
fn several_frames_fed_one_byte_at_a_time_come_out_whole() {
    let frames = vec![
        Frame::new(
            FrameKind::Hello,
            &br#"{"v":1,"door":"turn","unit":"u"}"#[..],
        ),
        Frame::new(FrameKind::Spec, vec![b's'; 3000]),
        Frame::stdout(Bytes::new()),
        Frame::stdout(&b"out"[..]),
        Frame::stderr(&b"err\n"[..]),
        Frame::new(
            FrameKind::Event,
            &br#"{"event":"refused","reason":"r"}"#[..],
        ),
        Frame::new(FrameKind::Exit, &br#"{"code":0,"signal":null}"#[..]),
    ];
    let wire = encode_all(&frames);

    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    for byte in &wire {
        assert_eq!(decoder.feed(std::slice::from_ref(byte)).unwrap(), 1);
        if let Some(frame) = decoder.next_frame().unwrap() {
            out.push(frame);
        }
        assert_eq!(decoder.next_frame().unwrap(), None);
    }
    decoder.finish().unwrap();
    assert_eq!(out, frames);
}

#[test]
fn feed_takes_only_up_to_the_end_of_the_current_frame() {
    let frames = [Frame::stdout(&b"abc"[..]), Frame::stderr(&b"de"[..])];
    let wire = encode_all(&frames);
    let mut decoder = Decoder::new();

    assert_eq!(
        decoder.feed(&wire).unwrap(),
        8,
        "stops after the first frame"
    );
    assert_eq!(decoder.wanted(), 0);
    assert_eq!(
        decoder.feed(&wire[8..]).unwrap(),
        0,
        "takes nothing while a frame waits"
    );
    assert_eq!(decoder.next_frame().unwrap(), Some(frames[0].clone()));
    assert_eq!(decoder.feed(&wire[8..]).unwrap(), 7);
    assert_eq!(decoder.next_frame().unwrap(), Some(frames[1].clone()));
    decoder.finish().unwrap();
}

#[test]
fn oversize_length_is_refused_from_the_header_alone() {
    // Only the header is ever fed: the refusal cannot have waited for payload.
    let mut decoder = Decoder::new();
    let err = decoder.feed(&header(b'S', u32::MAX)).unwrap_err();
    assert!(
        matches!(err, FrameError::TooLarge { kind: FrameKind::Spec, len, max: 1_048_576 }
            if len == u32::MAX as usize),
        "{err}"
    );
    assert!(decoder.is_failed());
    assert_eq!(decoder.wanted(), 0);
}

#[test]
fn unknown_type_is_refused_from_the_header_alone() {
    let mut decoder = Decoder::new();
    // The first four header bytes are accepted: the type is only judged with the length.
    assert_eq!(decoder.feed(&header(b'Z', 1)[..4]).unwrap(), 4);
    let err = decoder.feed(&[1]).unwrap_err();
    assert!(matches!(err, FrameError::UnknownKind(b'Z')), "{err}");
}

#[test]
fn a_failed_decoder_stays_failed_with_the_original_cause() {
    for bad in [header(b'h', 0), header(b'O', 65_537)] {
        let mut decoder = Decoder::new();
        let first = decoder.feed(&bad).unwrap_err();
        assert!(!matches!(first, FrameError::Failed(_)), "{first}");
        let valid = encode(&Frame::stdout(&b"x"[..])).unwrap();
        let later = [
            decoder.feed(&valid).unwrap_err(),
            decoder.next_frame().unwrap_err(),
            decoder.decode(&mut &valid[..]).unwrap_err(),
            decoder.finish().unwrap_err(),
            decoder.feed(&[]).unwrap_err(),
        ];
        for err in later {
            assert!(matches!(err, FrameError::Failed(_)), "{err}");
            assert_eq!(err.root().to_string(), first.to_string());
        }
    }
}

#[test]
fn ends_inside_a_frame_are_truncations_distinct_from_a_clean_end() {
    let wire = encode(&Frame::stdout(&b"hello"[..])).unwrap();

    // Clean ends: nothing fed, or exactly one whole frame.
    Decoder::new().finish().unwrap();
    assert_eq!(decode_chunked(&wire, &[3]).unwrap().len(), 1);

    // Inside the header.
    for cut in 1..HEADER_LEN {
        let err = decode_chunked(&wire[..cut], &[1]).unwrap_err();
        assert!(
            matches!(err, FrameError::Truncated { part: FramePart::Header, received, expected: 5 }
                if received == cut),
            "cut {cut}: {err}"
        );
    }
    // Inside the payload, including right after the header.
    for cut in HEADER_LEN..wire.len() {
        let err = decode_chunked(&wire[..cut], &[2]).unwrap_err();
        assert!(
            matches!(err, FrameError::Truncated { part: FramePart::Payload, received, expected: 10 }
                if received == cut),
            "cut {cut}: {err}"
        );
    }
    // A whole frame followed by part of the next one.
    let two = [wire.clone(), wire[..7].to_vec()].concat();
    let err = decode_chunked(&two, &[4]).unwrap_err();
    assert!(
        matches!(
            err,
            FrameError::Truncated {
                part: FramePart::Payload,
                received: 7,
                expected: 10
            }
        ),
        "{err}"
    );
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    (
        proptest::sample::select(FrameKind::ALL.to_vec()),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(kind, payload)| Frame::new(kind, payload))
}

proptest! {
    #[test]
    fn arbitrary_bytes_in_arbitrary_chunks_never_panic(
        input in proptest::collection::vec(any::<u8>(), 0..2048),
        chunks in proptest::collection::vec(1usize..64, 1..16),
    ) {
        let whole = decode_chunked(&input, &[input.len().max(1)]);
        let split = decode_chunked(&input, &chunks);
        // Chunking never changes the outcome.
        match (whole, split) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "whole {:?} vs split {:?}", a, b),
        }
    }

    #[test]
    fn arbitrary_bytes_with_a_valid_type_byte_never_panic(
        kind in proptest::sample::select(FrameKind::ALL.to_vec()),
        len in 0u32..400,
        tail in proptest::collection::vec(any::<u8>(), 0..1024),
        chunks in proptest::collection::vec(1usize..64, 1..16),
    ) {
        // Random bytes rarely start with a known type and a small length; this reaches the
        // payload path and the frames after it.
        let input = [&header(kind.as_byte(), len)[..], &tail].concat();
        let mut decoder = Decoder::new();
        let mut consumed = Vec::new();
        let mut rest = &input[..];
        let mut sizes = chunks.iter().cycle();
        while !rest.is_empty() {
            let size = (*sizes.next().unwrap()).min(rest.len());
            let (mut chunk, tail) = rest.split_at(size);
            rest = tail;
            loop {
                match decoder.decode(&mut chunk) {
                    Ok(Some(frame)) => consumed.extend(encode(&frame).unwrap()),
                    Ok(None) => break,
                    Err(_) => { rest = &[]; break; }
                }
            }
        }
        // Whatever came out re-encodes to a prefix of the input.
        prop_assert!(input.starts_with(&consumed));
    }

    #[test]
    fn valid_encodings_round_trip_in_any_chunking(
        frames in proptest::collection::vec(arb_frame(), 0..8),
        chunks in proptest::collection::vec(1usize..97, 1..16),
    ) {
        let wire = encode_all(&frames);
        prop_assert_eq!(decode_chunked(&wire, &chunks).unwrap(), frames);
    }
}
