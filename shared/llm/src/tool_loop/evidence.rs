//! Heavy evidence within a turn: the screenshot flag, the elision of stale heavy tool results,
//! and the overflow projection that turns older user images into breadcrumbs.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::types::{ContentBlock, Message, Role, ToolCall, ToolResult};

/// Tools whose output is heavy whatever it holds (documents, HTML, snapshots).
pub const HEAVY_TOOL_NAMES: [&str; 3] = [
    "site_render_snapshot",
    "site_read_document",
    "site_get_node_html",
];

/// The tool whose input gets the `captureScreenshot` flag.
pub const SCREENSHOT_TOOL: &str = "site_render_snapshot";

/// The breadcrumb that replaces an older user message's images on the overflow retry.
pub const HISTORICAL_IMAGES_OMITTED: &str =
    "[Earlier attached images omitted after the provider rejected the full conversation context.]";

/// Whether the result of tool `name` is heavy: it carries images, or the tool is one of
/// [`HEAVY_TOOL_NAMES`].
pub fn is_heavy(name: &str, result: &ToolResult) -> bool {
    !result.images.is_empty() || HEAVY_TOOL_NAMES.contains(&name)
}

/// The stand-in for an earlier heavy result of tool `name`: same `ok`, a note instead of the
/// data, no images and no error text (a failed stub renders as "Tool call failed.").
pub fn elided_result(name: &str, result: &ToolResult) -> ToolResult {
    ToolResult {
        call_id: result.call_id.clone(),
        ok: result.ok,
        data: Some(json!({
            "elided": true,
            "note": format!(
                "Earlier {name} output removed to conserve context. Call {name} again if you need the current state."
            ),
        })),
        error: None,
        images: Vec::new(),
    }
}

/// `call` as the executor receives it: [`SCREENSHOT_TOOL`]'s input (an object, or `{}`) gets
/// `captureScreenshot` set to whether the model can see tool-result images. The flag is added
/// here, outside the tool's schema, so the executor must keep it through validation, which
/// would otherwise drop it as an undeclared key.
pub fn prepare_call(call: &ToolCall, tool_result_images: bool) -> ToolCall {
    let mut call = call.clone();
    if call.name == SCREENSHOT_TOOL {
        let mut input = match call.arguments {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        input.insert(
            "captureScreenshot".to_owned(),
            Value::Bool(tool_result_images),
        );
        call.arguments = Value::Object(input);
    }
    call
}

/// The tool-result messages of this turn that hold heavy results, so that only the newest
/// result of each heavy tool stays whole.
#[derive(Debug, Default)]
pub(crate) struct HeavyEvidence {
    /// Per tracked message: its index in the working history and its heavy results as
    /// (block index, tool name), as they were when appended.
    tracked: Vec<(usize, Vec<(usize, String)>)>,
}

impl HeavyEvidence {
    /// Records the tool-result message just appended at `index` (its calls' names by id in
    /// `names`) and, if it holds heavy results, stubs every heavy result that is not in the
    /// newest tracked message holding a result of the same tool.
    pub(crate) fn record(
        &mut self,
        messages: &mut [Message],
        index: usize,
        names: &HashMap<String, String>,
    ) {
        let Some(message) = messages.get(index) else {
            return;
        };
        let heavy: Vec<(usize, String)> = message
            .content
            .iter()
            .enumerate()
            .filter_map(|(block, content)| match content {
                ContentBlock::ToolResult(result) => {
                    let name = names.get(&result.call_id)?;
                    is_heavy(name, result).then(|| (block, name.clone()))
                }
                _ => None,
            })
            .collect();
        if heavy.is_empty() {
            return;
        }
        self.tracked.push((index, heavy));
        let mut newest: HashMap<&str, usize> = HashMap::new();
        for (index, heavy) in &self.tracked {
            for (_, name) in heavy {
                let slot = newest.entry(name.as_str()).or_insert(*index);
                *slot = (*slot).max(*index);
            }
        }
        for (index, heavy) in &self.tracked {
            for (block, name) in heavy {
                if newest.get(name.as_str()) == Some(index) {
                    continue;
                }
                if let Some(ContentBlock::ToolResult(result)) = messages
                    .get_mut(*index)
                    .and_then(|message| message.content.get_mut(*block))
                {
                    *result = elided_result(name, result);
                }
            }
        }
    }
}

/// The overflow retry's projection: every user message before the newest one loses its
/// images, with one [`HISTORICAL_IMAGES_OMITTED`] text block where its first image was.
/// Returns whether anything changed (no retry otherwise).
pub fn elide_historical_user_images(messages: &mut [Message]) -> bool {
    let Some(newest) = messages
        .iter()
        .rposition(|message| message.role == Role::User)
    else {
        return false;
    };
    let mut changed = false;
    for message in messages[..newest]
        .iter_mut()
        .filter(|message| message.role == Role::User)
    {
        let Some(first) = message
            .content
            .iter()
            .position(|block| matches!(block, ContentBlock::Image(_)))
        else {
            continue;
        };
        let mut content = Vec::with_capacity(message.content.len());
        for (index, block) in message.content.drain(..).enumerate() {
            if index == first {
                content.push(ContentBlock::Text {
                    text: HISTORICAL_IMAGES_OMITTED.to_owned(),
                });
            }
            if !matches!(block, ContentBlock::Image(_)) {
                content.push(block);
            }
        }
        message.content = content;
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Image;

    fn image() -> ContentBlock {
        ContentBlock::Image(Image {
            mime_type: "image/jpeg".to_owned(),
            data: "/9j/".to_owned(),
        })
    }

    fn text(text: &str) -> ContentBlock {
        ContentBlock::Text {
            text: text.to_owned(),
        }
    }

    fn user(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    fn result(call_id: &str, ok: bool, images: usize) -> ToolResult {
        ToolResult {
            call_id: call_id.to_owned(),
            ok,
            data: ok.then(|| json!({"html": "<main>…</main>"})),
            error: (!ok).then(|| "boom".to_owned()),
            images: (0..images)
                .map(|_| Image {
                    mime_type: "image/png".to_owned(),
                    data: "AAAA".to_owned(),
                })
                .collect(),
        }
    }

    fn tool_message(results: Vec<ToolResult>) -> Message {
        Message {
            role: Role::Tool,
            content: results.into_iter().map(ContentBlock::ToolResult).collect(),
        }
    }

    fn results(message: &Message) -> Vec<&ToolResult> {
        message
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::ToolResult(result) => Some(result),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn older_user_images_become_one_breadcrumb_each() {
        let mut messages = vec![
            user(vec![text("a"), image(), image(), text("b"), image()]),
            Message {
                role: Role::Assistant,
                content: vec![text("ok")],
            },
            user(vec![image(), text("c")]),
            user(vec![image(), text("now")]),
        ];
        assert!(elide_historical_user_images(&mut messages));
        assert_eq!(
            messages[0].content,
            [text("a"), text(HISTORICAL_IMAGES_OMITTED), text("b")]
        );
        assert_eq!(
            messages[2].content,
            [text(HISTORICAL_IMAGES_OMITTED), text("c")]
        );
        // The newest user message keeps its images.
        assert_eq!(messages[3].content, [image(), text("now")]);
        // Nothing left to project: no second retry from the same history.
        assert!(!elide_historical_user_images(&mut messages));
    }

    #[test]
    fn no_projection_without_older_user_images() {
        let mut only = vec![user(vec![image(), text("now")])];
        assert!(!elide_historical_user_images(&mut only));
        assert_eq!(only[0].content, [image(), text("now")]);
        let mut text_only = vec![user(vec![text("a")]), user(vec![image()])];
        assert!(!elide_historical_user_images(&mut text_only));
        assert!(!elide_historical_user_images(&mut []));
    }

    #[test]
    fn screenshot_flag_goes_into_the_snapshot_input_only() {
        let snapshot = ToolCall {
            id: "c".to_owned(),
            name: SCREENSHOT_TOOL.to_owned(),
            arguments: json!({"nodeId": "n1"}),
        };
        assert_eq!(
            prepare_call(&snapshot, true).arguments,
            json!({"nodeId": "n1", "captureScreenshot": true})
        );
        let bare = ToolCall {
            arguments: Value::Null,
            ..snapshot
        };
        assert_eq!(
            prepare_call(&bare, false).arguments,
            json!({"captureScreenshot": false})
        );
        let other = ToolCall {
            id: "d".to_owned(),
            name: "site_find_nodes".to_owned(),
            arguments: json!({"query": "x"}),
        };
        assert_eq!(prepare_call(&other, true), other);
    }

    #[test]
    fn only_the_newest_heavy_result_of_each_tool_stays_whole() {
        let names: HashMap<String, String> = [
            ("doc1", "site_read_document"),
            ("find1", "site_find_nodes"),
            ("shot1", "custom_screenshot"),
            ("html1", "site_get_node_html"),
            ("doc2", "site_read_document"),
            ("shot2", "custom_screenshot"),
            ("find2", "site_find_nodes"),
        ]
        .into_iter()
        .map(|(id, name)| (id.to_owned(), name.to_owned()))
        .collect();
        let mut evidence = HeavyEvidence::default();
        let mut messages = vec![
            user(vec![text("go")]),
            tool_message(vec![
                result("doc1", true, 0),
                result("find1", true, 0),
                result("shot1", true, 1),
                result("html1", false, 0),
            ]),
        ];
        evidence.record(&mut messages, 1, &names);
        // Alone, every heavy result is the newest of its tool.
        assert_eq!(
            results(&messages[1]),
            [
                &result("doc1", true, 0),
                &result("find1", true, 0),
                &result("shot1", true, 1),
                &result("html1", false, 0),
            ]
        );

        messages.push(tool_message(vec![
            result("doc2", true, 0),
            result("shot2", true, 2),
            result("find2", true, 0),
        ]));
        evidence.record(&mut messages, 2, &names);
        let first = results(&messages[1]);
        assert_eq!(
            first[0],
            &elided_result("site_read_document", &result("doc1", true, 0))
        );
        assert_eq!(
            first[0].data,
            Some(json!({
                "elided": true,
                "note": "Earlier site_read_document output removed to conserve context. Call site_read_document again if you need the current state."
            }))
        );
        // Non-heavy results are untouched; a heavy result with no newer twin stays whole.
        assert_eq!(first[1], &result("find1", true, 0));
        assert!(first[2].images.is_empty() && first[2].ok);
        assert_eq!(first[3], &result("html1", false, 0));
        // The newest message keeps everything.
        assert_eq!(
            results(&messages[2]),
            [
                &result("doc2", true, 0),
                &result("shot2", true, 2),
                &result("find2", true, 0),
            ]
        );
    }

    #[test]
    fn a_stubbed_failure_reads_as_a_plain_failure() {
        let stub = elided_result("site_get_node_html", &result("h", false, 3));
        assert!(!stub.ok);
        assert!(stub.images.is_empty());
        assert_eq!(stub.output_text(), "Tool call failed.");
    }
}
