//! User images through chatd's real socket: a table of named bad
//! messages, each refused with its status and message before anything is stored, and accepted
//! images that come back re-encoded — EXIF orientation applied, every metadata segment gone.

use crate::support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use atelier_chatd::store::Store;
use atelier_chatd::turn::{Turn, TurnRunner};
use atelier_chatd::{RawSettings, Router};
use atelier_llm::LoopEvent;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixStream;

const TOKEN: &str = "test-service-token-000000000000000000000000";

/// A model that answers every turn with one word.
struct Echo;

impl TurnRunner for Echo {
    fn run(&self, turn: Turn) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(async move {
            let _ = turn.events.send(LoopEvent::Text { text: "ok".into() });
            let _ = turn.events.send(LoopEvent::Done);
        })
    }
}

struct Chatd {
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

fn start() -> Chatd {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("chatd.sock");
    let settings = RawSettings {
        database: Some(dir.path().join("chat.sqlite3")),
        public_origins: vec!["https://cms.example".into()],
        service_token: Some(TOKEN.into()),
        openrouter_url: Some("http://127.0.0.1:9".into()),
        cms_origin: Some(support::cms_origin()),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    let store = Arc::new(Store::open(&settings.database).unwrap());
    let router = Router::new(&settings, store, Arc::new(Echo)).unwrap();
    support::serve_router(router, &socket);
    Chatd { _dir: dir, socket }
}

async fn call(
    socket: &Path,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Bytes) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header(
            "cookie",
            support::cookie_for("alice", "ai.chat,ai.tools.write"),
        )
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

async fn json_call(
    socket: &Path,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, bytes) = call(socket, method, path, body).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn conversation(socket: &Path) -> String {
    let (status, body) = json_call(
        socket,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": "site", "credentialId": "c", "modelId": "m"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    body["conversation"]["id"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------------------------
// Making JPEGs.

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn jpeg_of(image: &image::DynamicImage) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode_image(image)
        .unwrap();
    out
}

/// A `w`×`h` JPEG whose left half is red and right half blue (so a rotation is visible).
fn jpeg(w: u32, h: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(w, h, |x, _| {
        if x < w / 2 {
            image::Rgb([255, 0, 0])
        } else {
            image::Rgb([0, 0, 255])
        }
    });
    jpeg_of(&image::DynamicImage::ImageRgb8(image))
}

/// A JPEG of noise, whose scan data is most of the file.
fn noisy_jpeg(w: u32, h: u32) -> Vec<u8> {
    let mut seed = 0x9e37_79b9_u32;
    let image = image::RgbImage::from_fn(w, h, |_, _| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let [a, b, c, _] = seed.to_le_bytes();
        image::Rgb([a, b, c])
    });
    jpeg_of(&image::DynamicImage::ImageRgb8(image))
}

/// `jpeg` with `segment` (marker + payload) inserted right after the start-of-image marker.
fn with_segment(jpeg: &[u8], marker: u8, payload: &[u8]) -> Vec<u8> {
    let length = u16::try_from(payload.len() + 2).unwrap().to_be_bytes();
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, marker, length[0], length[1]]);
    out.extend_from_slice(payload);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// An EXIF APP1 payload carrying only an orientation tag.
fn exif_orientation(value: u16) -> Vec<u8> {
    let mut payload = b"Exif\0\0II*\0\x08\0\0\0".to_vec();
    payload.extend_from_slice(&1_u16.to_le_bytes()); // one entry
    payload.extend_from_slice(&0x0112_u16.to_le_bytes()); // Orientation
    payload.extend_from_slice(&3_u16.to_le_bytes()); // SHORT
    payload.extend_from_slice(&1_u32.to_le_bytes()); // count
    payload.extend_from_slice(&value.to_le_bytes());
    payload.extend_from_slice(&[0, 0]);
    payload.extend_from_slice(&0_u32.to_le_bytes()); // no next IFD
    payload
}

/// `jpeg` with its frame header claiming `w`×`h`.
fn claiming(jpeg: &[u8], w: u16, h: u16) -> Vec<u8> {
    let mut out = jpeg.to_vec();
    let sof = out
        .windows(2)
        .position(|m| m == [0xFF, 0xC0])
        .expect("a baseline frame header");
    out[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    out[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    out
}

/// The marker codes of a JPEG's segments up to its first scan.
fn markers(jpeg: &[u8]) -> Vec<u8> {
    let mut at = 2;
    let mut found = Vec::new();
    while at + 4 <= jpeg.len() && jpeg[at] == 0xFF {
        let code = jpeg[at + 1];
        found.push(code);
        if code == 0xDA {
            break;
        }
        at += 2 + usize::from(u16::from_be_bytes([jpeg[at + 2], jpeg[at + 3]]));
    }
    found
}

fn image_block(data: String) -> Value {
    json!({"kind": "image", "mimeType": "image/jpeg", "data": data})
}

fn text_block(text: &str) -> Value {
    json!({"kind": "text", "text": text})
}

const BAD_BODY: &str = "Invalid request body.";
const NOT_CANONICAL: &str = "Image data must be canonical base64.";
const NOT_JPEG: &str = "Image data is not a JPEG.";
const UNDECODABLE: &str = "Image data could not be decoded.";
const NOT_VALID: &str = "Image data is not a valid JPEG.";
const DIMENSIONS: &str = "Image dimensions exceed the 1568px / 1,500,000px limit.";
const NOT_FULL: &str = "Image data could not be fully decoded.";
const EMPTY: &str = "Message must contain text or an image.";

#[tokio::test]
async fn every_bad_image_message_is_refused_before_anything_is_stored() {
    let chatd = start();
    let good = jpeg(16, 16);
    let noisy = noisy_jpeg(160, 120);
    // A PNG's signature and header chunk: what a browser would send if it skipped the
    // JPEG conversion.
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x04\x00\x00\x00\x04\x08\x02\x00\x00\x00\x26\x93\x09\x29".to_vec();
    let good_b64 = b64(&good);
    let one = |data: String| vec![text_block("look"), image_block(data)];
    let cases: Vec<(&str, Vec<Value>, StatusCode, &str)> = vec![
        (
            "png posing as jpeg",
            one(b64(&png)),
            StatusCode::BAD_REQUEST,
            NOT_JPEG,
        ),
        (
            "gif bytes",
            one(b64(b"GIF89a\x01\x00\x01\x00")),
            StatusCode::BAD_REQUEST,
            NOT_JPEG,
        ),
        (
            "truncated data",
            one(b64(&noisy[..noisy.len() * 3 / 4])),
            StatusCode::BAD_REQUEST,
            NOT_FULL,
        ),
        (
            "missing end of image",
            one(b64(&noisy[..noisy.len() - 2])),
            StatusCode::BAD_REQUEST,
            NOT_FULL,
        ),
        (
            "cut inside a header segment",
            one(b64(&good[..12])),
            StatusCode::BAD_REQUEST,
            UNDECODABLE,
        ),
        (
            "jpeg magic then garbage",
            one(b64(b"\xFF\xD8\xFF\x13\x37garbage!")),
            StatusCode::BAD_REQUEST,
            UNDECODABLE,
        ),
        (
            "no frame header",
            one(b64(b"\xFF\xD8\xFF\xFE\x00\x04hi\xFF\xD9")),
            StatusCode::BAD_REQUEST,
            UNDECODABLE,
        ),
        (
            "zero height",
            one(b64(&claiming(&good, 16, 0))),
            StatusCode::BAD_REQUEST,
            NOT_VALID,
        ),
        (
            "16,385-pixel edge",
            one(b64(&claiming(&good, 16_385, 16))),
            StatusCode::PAYLOAD_TOO_LARGE,
            DIMENSIONS,
        ),
        (
            "1,569-pixel edge",
            one(b64(&claiming(&good, 1569, 1))),
            StatusCode::PAYLOAD_TOO_LARGE,
            DIMENSIONS,
        ),
        (
            "1,500,001 pixels in edges under the limit",
            one(b64(&claiming(&good, 1250, 1201))),
            StatusCode::PAYLOAD_TOO_LARGE,
            DIMENSIONS,
        ),
        (
            "decompression bomb: 65,535 × 65,535 in a few hundred bytes",
            one(b64(&claiming(&good, 65_535, 65_535))),
            StatusCode::PAYLOAD_TOO_LARGE,
            DIMENSIONS,
        ),
        (
            "non-canonical base64: padding dropped",
            one(good_b64.trim_end_matches('=').to_owned()
                + if good_b64.ends_with('=') { "" } else { "A" }),
            StatusCode::BAD_REQUEST,
            NOT_CANONICAL,
        ),
        (
            "non-canonical base64: unused bits set",
            one("/9j/4B==".into()),
            StatusCode::BAD_REQUEST,
            NOT_CANONICAL,
        ),
        (
            "non-canonical base64: line breaks",
            one(format!("{}\n{}", &good_b64[..40], &good_b64[40..])),
            StatusCode::BAD_REQUEST,
            NOT_CANONICAL,
        ),
        (
            "non-canonical base64: url alphabet",
            one(good_b64.replace('/', "_").replace('+', "-")),
            StatusCode::BAD_REQUEST,
            NOT_CANONICAL,
        ),
        (
            "oversize after decode (over the schema's 2,000,000 characters)",
            one(b64(&[0xFF; 1_500_003])),
            StatusCode::BAD_REQUEST,
            BAD_BODY,
        ),
        (
            "nine images",
            (0..9).map(|_| image_block(good_b64.clone())).collect(),
            StatusCode::BAD_REQUEST,
            BAD_BODY,
        ),
        (
            "two texts",
            vec![
                text_block("a"),
                text_block("b"),
                image_block(good_b64.clone()),
            ],
            StatusCode::BAD_REQUEST,
            BAD_BODY,
        ),
        (
            "a png mime type",
            vec![json!({"kind": "image", "mimeType": "image/png", "data": b64(&png)})],
            StatusCode::BAD_REQUEST,
            BAD_BODY,
        ),
        (
            "data under four characters",
            one("/9j".into()),
            StatusCode::BAD_REQUEST,
            BAD_BODY,
        ),
        (
            "only whitespace text",
            vec![text_block(" \n\t ")],
            StatusCode::BAD_REQUEST,
            EMPTY,
        ),
        (
            "a good image then a truncated one",
            vec![
                image_block(good_b64.clone()),
                image_block(b64(&noisy[..noisy.len() / 2])),
            ],
            StatusCode::BAD_REQUEST,
            NOT_FULL,
        ),
    ];
    assert!(cases.len() >= 20);
    for (name, content, status, message) in cases {
        let id = conversation(&chatd.socket).await;
        let (got, body) = json_call(
            &chatd.socket,
            Method::POST,
            "/admin/api/ai/chat/site",
            Some(json!({"conversationId": id, "content": content})),
        )
        .await;
        assert_eq!(
            (got, body),
            (status, json!({"error": message})),
            "case {name}"
        );
        let (_, detail) = json_call(
            &chatd.socket,
            Method::GET,
            &format!("/admin/api/ai/conversations/{id}"),
            None,
        )
        .await;
        assert_eq!(
            detail["conversation"]["messages"],
            json!([]),
            "case {name}: stored"
        );
        assert_eq!(
            detail["conversation"]["title"], "New conversation",
            "case {name}"
        );
    }
}

#[tokio::test]
async fn accepted_images_come_back_reencoded_upright_and_without_metadata() {
    let chatd = start();
    let plain = jpeg(40, 20);
    let tagged = with_segment(
        &with_segment(
            &with_segment(&plain, 0xE1, &exif_orientation(6)),
            0xFE,
            b"secret comment",
        ),
        0xED,
        b"Photoshop 3.0\0IPTC",
    );
    let gray = jpeg_of(&image::DynamicImage::new_luma8(12, 30));
    assert!(markers(&tagged).contains(&0xE1));
    let id = conversation(&chatd.socket).await;
    let content = vec![
        text_block("  compare these  "),
        image_block(b64(&tagged)),
        image_block(b64(&gray)),
    ];
    let (status, body) = call(
        &chatd.socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        Some(json!({"conversationId": id, "content": content})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let (_, detail) = json_call(
        &chatd.socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    let user = &detail["conversation"]["messages"][0];
    assert_eq!(
        user["content"][0],
        json!({"kind": "text", "text": "compare these"})
    );
    assert_eq!(detail["conversation"]["title"], "compare these");
    let fetch = |index: usize| {
        let url = user["content"][index]["url"].as_str().unwrap().to_owned();
        let socket = chatd.socket.clone();
        async move { call(&socket, Method::GET, &url, None).await }
    };
    let (status, rotated) = fetch(1).await;
    assert_eq!(status, StatusCode::OK);
    // Orientation 6 (rotate 90° clockwise): 40×20 became 20×40, red on top.
    let decoded = image::load_from_memory(&rotated).unwrap().to_rgb8();
    assert_eq!(decoded.dimensions(), (20, 40));
    let top = decoded.get_pixel(10, 2);
    let bottom = decoded.get_pixel(10, 37);
    assert!(top[0] > 200 && top[2] < 60, "{top:?}");
    assert!(bottom[2] > 200 && bottom[0] < 60, "{bottom:?}");
    let found = markers(&rotated);
    for metadata in [0xE1, 0xFE, 0xED, 0xE2] {
        assert!(
            !found.contains(&metadata),
            "marker {metadata:#x} kept: {found:x?}"
        );
    }
    assert!(!rotated.windows(6).any(|w| w == b"secret"));
    assert_ne!(&rotated[..], &tagged[..]);
    let (_, regray) = fetch(2).await;
    assert_eq!(image::load_from_memory(&regray).unwrap().width(), 12);

    // An image-only turn of eight is accepted and titled "Images".
    let id = conversation(&chatd.socket).await;
    let eight: Vec<Value> = (0..8).map(|_| image_block(b64(&plain))).collect();
    let (status, _) = call(
        &chatd.socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        Some(json!({"conversationId": id, "content": eight})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, detail) = json_call(
        &chatd.socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(detail["conversation"]["title"], "Images");
    assert_eq!(
        detail["conversation"]["messages"][0]["content"]
            .as_array()
            .unwrap()
            .len(),
        8
    );
}
