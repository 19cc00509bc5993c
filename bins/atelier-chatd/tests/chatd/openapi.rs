//! The API document `docs/openapi/chatd.json` held against chatd: the router's route table and
//! the document name the same paths and methods, the document's reasons are exactly the ones
//! [`ApiError`] can answer with (each with its status and message), and a live chatd answers
//! a request to every documented operation with a documented status and a body the document's
//! schema accepts.

use std::collections::BTreeSet;
use std::path::Path;

use atelier_chatd::router::{API_PREFIX, ROUTES};
use atelier_chatd::ApiError;
use atelier_schema_check as schema;
use atelier_schema_check::openapi::{self, METHODS};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use super::{send, serve, user, As, Events, Reply, Server};

/// Every capability chatd checks.
const EVERY_CAPABILITY: &str = "ai.chat,ai.tools.write,ai.providers.manage,ai.audit.read";

fn document() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi/chatd.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_document_and_the_route_table_name_the_same_operations() {
    let document = document();
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .flat_map(|route| {
            route
                .methods
                .iter()
                .map(move |method| (format!("{API_PREFIX}{}", route.path), method.to_lowercase()))
        })
        .collect();
    openapi::check_operations(&document, &served).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
}

/// The document's reason details: `components.x-reasons`.
fn reason_details(document: &Value) -> &serde_json::Map<String, Value> {
    document["components"]["x-reasons"].as_object().unwrap()
}

/// Returns true if and only if `message` is `template` with each `{name}` standing for any
/// text.
fn fits_template(template: &str, message: &str) -> bool {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        pattern.push_str(&regex::escape(&rest[..open]));
        pattern.push_str("(?s:.*)");
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::Regex::new(&pattern).unwrap().is_match(message)
}

/// The documented reasons whose message templates fit `message`.
fn reasons_of_message(document: &Value, message: &str) -> Vec<String> {
    reason_details(document)
        .iter()
        .filter(|(_, detail)| {
            detail["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|template| fits_template(template.as_str().unwrap(), message))
        })
        .map(|(reason, _)| reason.clone())
        .collect()
}

/// Every `x-reasons` list of the document with the status it is filed under, the
/// unmatched-request block's (listed by status directly) included.
fn filed_reasons(document: &Value) -> Vec<(String, String)> {
    let mut filed = openapi::filed_reasons(document);
    for (status, reasons) in document["x-unmatched"]["x-reasons"].as_object().unwrap() {
        for reason in reasons.as_array().unwrap() {
            filed.push((status.clone(), reason.as_str().unwrap().to_owned()));
        }
    }
    filed
}

#[test]
fn every_reason_the_router_can_answer_with_is_documented_and_no_other() {
    let document = document();
    let enumerated: BTreeSet<String> = document["components"]["schemas"]["Reason"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|reason| reason.as_str().unwrap().to_owned())
        .collect();
    let details = reason_details(&document);
    let detailed: BTreeSet<String> = details.keys().cloned().collect();
    assert_eq!(enumerated, detailed, "the Reason enum and x-reasons differ");

    let produced: Vec<&str> = ApiError::ALL.iter().map(ApiError::reason).collect();
    let distinct: BTreeSet<String> = produced.iter().map(|r| (*r).to_owned()).collect();
    assert_eq!(
        distinct.len(),
        produced.len(),
        "ApiError::ALL repeats a reason"
    );
    assert_eq!(
        distinct, enumerated,
        "the router's reasons and the document's differ"
    );

    for error in &ApiError::ALL {
        let detail = &details[error.reason()];
        assert_eq!(
            detail["status"],
            error.status().as_u16(),
            "the status of {}",
            error.reason()
        );
        // Errors whose message is all placeholder (an empty one here) have nothing to compare.
        let message = error.to_string();
        if !message.is_empty() {
            assert!(
                reasons_of_message(&document, &message).contains(&error.reason().to_owned()),
                "{}: {message:?} fits none of its documented messages",
                error.reason()
            );
        }
    }

    let filed = filed_reasons(&document);
    openapi::check_filed_reasons(&filed, details).unwrap();
}

/// Sends requests to a live chatd and holds each answer against the document.
struct Prober {
    document: Value,
    server: Server,
    /// The operations probed so far, as `(path template, method)`.
    probed: BTreeSet<(String, String)>,
}

/// One request of a probe: the method, the operation's path template and the path sent (both
/// under the prefix), and the body.
struct Call {
    method: Method,
    template: &'static str,
    path: String,
    body: Option<Value>,
}

fn call(method: Method, template: &'static str, path: &str, body: Option<Value>) -> Call {
    Call {
        method,
        template,
        path: path.to_owned(),
        body,
    }
}

impl Prober {
    fn new() -> Self {
        Prober {
            document: document(),
            server: serve(vec![]),
            probed: BTreeSet::new(),
        }
    }

    /// Sends `call` as `who` and checks the answer against the call's documented operation:
    /// `expected` is its status, which the document must list; a JSON or NDJSON body must fit
    /// the documented schema, and a refusal's message one of the response's reasons. The body
    /// read (`null` when empty or not JSON; an NDJSON stream as an array of its lines).
    async fn probe(&mut self, who: As<'_>, call: Call, expected: StatusCode) -> Value {
        let Call {
            method,
            template,
            path,
            body,
        } = call;
        let path = format!("{API_PREFIX}{path}");
        let path = path.as_str();
        let name = format!("{method} {path}");
        let reply = send(&self.server.socket, who, method.clone(), path, body).await;
        assert_eq!(reply.status, expected, "{name}");
        let template = format!("{API_PREFIX}{template}");
        let operation = self.document["paths"][&template][method.as_str().to_lowercase()].clone();
        assert!(operation.is_object(), "{name}: no documented operation");
        let status = reply.status;
        let response = &operation["responses"][status.as_str()];
        assert!(response.is_object(), "{name}: {status} is not documented");
        let content_type = reply
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = self.check_body(&name, response, content_type, reply).await;
        self.probed
            .insert((template, method.as_str().to_lowercase()));
        body
    }

    /// Probes each call in turn.
    async fn run(&mut self, who: As<'_>, calls: impl IntoIterator<Item = (Call, StatusCode)>) {
        for (call, expected) in calls {
            self.probe(who, call, expected).await;
        }
    }

    async fn check_body(
        &self,
        name: &str,
        response: &Value,
        content_type: Option<String>,
        reply: Reply,
    ) -> Value {
        let Some(content) = response.get("content") else {
            let bytes = reply.body.collect().await.unwrap().to_bytes();
            assert!(bytes.is_empty(), "{name}: a body where none is documented");
            return Value::Null;
        };
        // Parameters such as `charset` do not change the media type.
        let content_type = content_type.unwrap_or_default();
        let content_type = content_type.split(';').next().unwrap_or_default().trim();
        let media = &content[content_type];
        assert!(
            media.is_object(),
            "{name}: {content_type} is not a documented media type"
        );
        match content_type {
            "application/x-ndjson" => {
                let lines = Events::new(reply).rest().await;
                for line in &lines {
                    self.fits(name, &media["schema"], line);
                }
                Value::Array(lines)
            }
            "application/json" => {
                let bytes = reply.body.collect().await.unwrap().to_bytes();
                let body: Value = serde_json::from_slice(&bytes).unwrap();
                self.fits(name, &media["schema"], &body);
                if let Some(reasons) = response.get("x-reasons").and_then(Value::as_array) {
                    let message = body["error"].as_str().unwrap();
                    let fitting = reasons_of_message(&self.document, message);
                    assert!(
                        reasons
                            .iter()
                            .any(|r| fitting.contains(&r.as_str().unwrap().to_owned())),
                        "{name}: {message:?} is none of {reasons:?}"
                    );
                }
                body
            }
            _ => {
                let bytes = reply.body.collect().await.unwrap().to_bytes();
                assert!(!bytes.is_empty(), "{name}: an empty {content_type} body");
                Value::Null
            }
        }
    }

    fn fits(&self, name: &str, schema: &Value, value: &Value) {
        if let Err(mismatch) = schema::check(&self.document, schema, value) {
            panic!("{name}: the answer does not fit the document: {mismatch}\n{value}");
        }
    }
}

fn everything(id: &str) -> As<'_> {
    As {
        capabilities: EVERY_CAPABILITY,
        ..user(id)
    }
}

/// A small real JPEG, base64.
fn jpeg_base64() -> String {
    use base64::Engine as _;
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
        .encode_image(&image::DynamicImage::new_rgb8(8, 8))
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(&jpeg)
}

#[tokio::test]
async fn a_live_chatd_answers_every_documented_operation_as_documented() {
    use StatusCode as S;
    let (get, post, put, delete) = (Method::GET, Method::POST, Method::PUT, Method::DELETE);
    let mut prober = Prober::new();
    let alice = everything("openapi-alice");

    // Credentials: a base-URL credential needs no master key; an API key does, and this chatd
    // has none. Nothing listens on port 9, so the test is a 200 that names the failure.
    let local = json!({"providerId": "openai-compatible", "authMode": "baseUrl",
        "displayLabel": "Local", "baseUrl": "http://127.0.0.1:9/v1"});
    let created = prober
        .probe(
            alice,
            call(
                post.clone(),
                "credentials",
                "credentials",
                Some(local.clone()),
            ),
            S::CREATED,
        )
        .await;
    let one = format!(
        "credentials/{}",
        created["credential"]["id"].as_str().unwrap()
    );
    let keyed = json!({"providerId": "anthropic", "authMode": "apiKey", "displayLabel": "K",
        "apiKey": "sk-test"});
    let wrong_mode = json!({"providerId": "ollama", "authMode": "apiKey", "displayLabel": "O",
        "apiKey": "k"});
    let credentials = [
        (
            call(post.clone(), "credentials", "credentials", Some(local)),
            S::CONFLICT,
        ),
        (
            call(post.clone(), "credentials", "credentials", Some(keyed)),
            S::INTERNAL_SERVER_ERROR,
        ),
        (
            call(post.clone(), "credentials", "credentials", Some(wrong_mode)),
            S::BAD_REQUEST,
        ),
        (
            call(
                post.clone(),
                "credentials",
                "credentials",
                Some(json!({"providerId": "ollama"})),
            ),
            S::BAD_REQUEST,
        ),
        (call(get.clone(), "credentials", "credentials", None), S::OK),
        (
            call(
                put.clone(),
                "credentials/{id}",
                &one,
                Some(json!({"displayLabel": "Local llama"})),
            ),
            S::OK,
        ),
        (
            call(
                put.clone(),
                "credentials/{id}",
                "credentials/none",
                Some(json!({})),
            ),
            S::NOT_FOUND,
        ),
        (
            call(
                get.clone(),
                "providers/{id}/models",
                "providers/nobody/models",
                None,
            ),
            S::BAD_REQUEST,
        ),
        (
            call(
                get.clone(),
                "providers/{id}/models",
                "providers/ollama/models?credentialId=none",
                None,
            ),
            S::NOT_FOUND,
        ),
    ];
    prober.run(alice, credentials).await;
    let tested = prober
        .probe(
            alice,
            call(
                post.clone(),
                "credentials/{id}/test",
                &format!("{one}/test"),
                None,
            ),
            S::OK,
        )
        .await;
    assert_eq!(tested["ok"], false);

    // Defaults, which hold the credential until cleared.
    let set = json!({"credentialId": created["credential"]["id"], "modelId": "m-1"});
    let defaults = [
        (
            call(
                put.clone(),
                "defaults/{scope}",
                "defaults/site",
                Some(set.clone()),
            ),
            S::OK,
        ),
        (
            call(
                put.clone(),
                "defaults/{scope}",
                "defaults/garden",
                Some(set),
            ),
            S::BAD_REQUEST,
        ),
        (
            call(delete.clone(), "credentials/{id}", &one, None),
            S::CONFLICT,
        ),
    ];
    prober.run(alice, defaults).await;
    let listed = prober
        .probe(
            alice,
            call(get.clone(), "defaults", "defaults", None),
            S::OK,
        )
        .await;
    assert_eq!(listed["defaults"]["site"]["modelId"], "m-1");
    let cleared = [
        (
            call(delete.clone(), "defaults/{scope}", "defaults/site", None),
            S::NO_CONTENT,
        ),
        (call(delete.clone(), "credentials/{id}", &one, None), S::OK),
        (
            call(delete.clone(), "credentials/{id}", &one, None),
            S::NOT_FOUND,
        ),
    ];
    prober.run(alice, cleared).await;

    // Conversations, and a turn with an image whose stored copy is then served.
    let new = json!({"scope": "site", "credentialId": "cred-1", "modelId": "model-1"});
    let created = prober
        .probe(
            alice,
            call(post.clone(), "conversations", "conversations", Some(new)),
            S::CREATED,
        )
        .await;
    let id = created["conversation"]["id"].as_str().unwrap().to_owned();
    let conversation = format!("conversations/{id}");
    let turn = json!({"conversationId": id, "snapshot": {"page": "home"}, "content": [
        {"kind": "text", "text": "this"},
        {"kind": "image", "mimeType": "image/jpeg", "data": jpeg_base64()},
    ]});
    let conversations = [
        (
            call(
                post.clone(),
                "conversations",
                "conversations",
                Some(json!({"scope": "site"})),
            ),
            S::BAD_REQUEST,
        ),
        (
            call(
                get.clone(),
                "conversations",
                "conversations?scope=site",
                None,
            ),
            S::OK,
        ),
        (
            call(get.clone(), "conversations", "conversations", None),
            S::BAD_REQUEST,
        ),
        (
            call(
                put.clone(),
                "conversations/{id}",
                &conversation,
                Some(json!({"title": "Documented"})),
            ),
            S::OK,
        ),
        (
            call(
                post.clone(),
                "chat/{scope}",
                "chat/content",
                Some(turn.clone()),
            ),
            S::BAD_REQUEST,
        ),
        (
            call(
                post.clone(),
                "chat/{scope}",
                "chat/garden",
                Some(turn.clone()),
            ),
            S::NOT_FOUND,
        ),
        (
            call(
                post.clone(),
                "chat/{scope}",
                "chat/site",
                Some(json!({"conversationId": id, "prompt": "hi"})),
            ),
            S::BAD_REQUEST,
        ),
    ];
    prober.run(alice, conversations).await;
    let streamed = prober
        .probe(
            alice,
            call(post.clone(), "chat/{scope}", "chat/site", Some(turn)),
            S::OK,
        )
        .await;
    let lines = streamed.as_array().unwrap();
    assert_eq!(lines.first().unwrap()["type"], "bridgeReady");
    assert_eq!(lines.last().unwrap()["type"], "done");
    let detail = prober
        .probe(
            alice,
            call(get.clone(), "conversations/{id}", &conversation, None),
            S::OK,
        )
        .await;
    let url = detail["conversation"]["messages"][0]["content"][1]["url"]
        .as_str()
        .unwrap();
    let image = "conversations/{conversationId}/messages/{messageId}/images/{index}";
    let missing = format!("{conversation}/messages/none/images/0");
    let ends = [
        (
            call(
                get.clone(),
                image,
                url.strip_prefix(API_PREFIX).unwrap(),
                None,
            ),
            S::OK,
        ),
        (call(get.clone(), image, &missing, None), S::NOT_FOUND),
        (
            call(delete.clone(), "conversations/{id}", &conversation, None),
            S::OK,
        ),
        (
            call(get.clone(), "conversations/{id}", &conversation, None),
            S::NOT_FOUND,
        ),
    ];
    prober.run(alice, ends).await;

    // A tool result for no bridge of this chatd goes to the CMS, which knows none either. The
    // audit then reads the events the calls above recorded.
    let result = json!({"bridgeId": "b-none", "requestId": "r-none", "result": {"ok": true}});
    let rest = [
        (
            call(post.clone(), "tool-result", "tool-result", Some(result)),
            S::NOT_FOUND,
        ),
        (
            call(
                post.clone(),
                "tool-result",
                "tool-result",
                Some(json!({"result": {}})),
            ),
            S::BAD_REQUEST,
        ),
        (
            call(get.clone(), "audit", "audit?tz=Europe/Bratislava", None),
            S::OK,
        ),
        (
            call(get.clone(), "audit", "audit?tz=Mars/Olympus", None),
            S::OK,
        ),
        (
            call(get.clone(), "audit/events", "audit/events?limit=0", None),
            S::BAD_REQUEST,
        ),
    ];
    prober.run(alice, rest).await;
    let events = prober
        .probe(
            alice,
            call(get.clone(), "audit/events", "audit/events?limit=500", None),
            S::OK,
        )
        .await;
    assert!(!events["events"].as_array().unwrap().is_empty());

    // The refusals every route shares: the capability, the service token, the Origin.
    let chat_only = As {
        capabilities: "ai.chat",
        ..alice
    };
    prober
        .probe(
            chat_only,
            call(get.clone(), "audit", "audit", None),
            S::FORBIDDEN,
        )
        .await;
    let no_token = As {
        token: None,
        ..alice
    };
    prober
        .probe(
            no_token,
            call(get, "defaults", "defaults", None),
            S::UNAUTHORIZED,
        )
        .await;
    let elsewhere = As {
        origin: Some("https://elsewhere.example"),
        ..alice
    };
    let new = json!({"scope": "site", "credentialId": "c", "modelId": "m"});
    prober
        .probe(
            elsewhere,
            call(post, "conversations", "conversations", Some(new)),
            S::FORBIDDEN,
        )
        .await;

    openapi::check_probed(&prober.document, &prober.probed).unwrap();
}

#[tokio::test]
async fn unmatched_paths_and_methods_answer_as_documented() {
    let document = document();
    let server = serve(vec![]);
    let alice = everything("openapi-bob");
    let unmatched = &document["x-unmatched"]["x-reasons"];
    let check = |status: StatusCode, body: &Value, name: &str| {
        let reasons = unmatched[status.as_str()]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {status} is not documented for unmatched requests"));
        let message = body["error"].as_str().unwrap();
        let fitting = reasons_of_message(&document, message);
        assert!(
            reasons
                .iter()
                .any(|r| fitting.contains(&r.as_str().unwrap().to_owned())),
            "{name}: {message:?}"
        );
        schema::check(
            &document,
            &json!({"$ref": "#/components/schemas/Error"}),
            body,
        )
        .unwrap();
    };
    for path in [
        "/admin/api/ai/nothing",
        "/admin/api/ai/credentials//test",
        "/elsewhere",
    ] {
        let (status, _, body) = send(&server.socket, alice, Method::GET, path, None)
            .await
            .json()
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        check(status, &body, path);
    }
    // Every documented path, with a method it does not list.
    for (template, item) in document["paths"].as_object().unwrap() {
        let unlisted = METHODS
            .iter()
            .filter(|m| **m != "head" && **m != "options" && **m != "trace")
            .find(|m| item.get(**m).is_none())
            .unwrap();
        let path = template
            .replace("{scope}", "site")
            .replace("{index}", "0")
            .replace(['{', '}'], "");
        let method = Method::from_bytes(unlisted.to_uppercase().as_bytes()).unwrap();
        let name = format!("{method} {path}");
        let (status, _, body) = send(&server.socket, alice, method, &path, None)
            .await
            .json()
            .await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{name}");
        check(status, &body, &name);
    }
}
