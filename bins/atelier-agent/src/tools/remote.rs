//! An MCP server's tools, offered to the model as `mcp__<server>__<tool>`, the names Claude Code
//! gives them. The list is asked once, when the turn starts; each call goes to the server
//! under the tool's own name, and its answer becomes the call's result: the text (or the
//! structured content) on success, the server's words as a failed result when it reports an
//! error, and a named `unavailable` failure when it cannot be asked.
//!
//! Providers accept tool names of at most [`MAX_TOOL_NAME_CHARS`] of `A–Z a–z 0–9 _ -`, so
//! other characters of a server's names become `_`; a tool whose name is then too long, or
//! taken by an earlier one, is left out with a warning, and so is every tool past
//! [`MAX_REMOTE_TOOLS`].

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use atelier_llm::ToolDefinition;
use reqwest::Url;
use serde_json::{json, Value};

use super::{ToolError, ToolFuture, ToolOutput, ToolSource};
use crate::mcp::{McpClient, McpError, RemoteTool, SETUP_TIMEOUT};

/// What every remote tool's name starts with.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// The longest tool name providers accept.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// The most tools one server may offer the model.
pub const MAX_REMOTE_TOOLS: usize = 100;

/// The longest server name.
const MAX_SERVER_NAME_CHARS: usize = 32;

/// The longest tool description passed on, in characters.
const MAX_DESCRIPTION_CHARS: usize = 2048;

/// The most text of one result the model is given, in bytes.
pub const MAX_RESULT_BYTES: usize = 256 * 1024; // 256 KiB

/// What ends a result that was cut.
const RESULT_CUT_NOTICE: &str = "\n[The rest of the result was cut: at most 256 KiB is shown.]";

/// A server's name as its tools' names carry it: 1 to 32 of `A–Z a–z 0–9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerName(String);

/// A server name that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a server name is 1 to {MAX_SERVER_NAME_CHARS} of A-Z a-z 0-9 _ -")]
pub struct BadServerName;

impl FromStr for ServerName {
    type Err = BadServerName;

    fn from_str(text: &str) -> Result<ServerName, BadServerName> {
        if (1..=MAX_SERVER_NAME_CHARS).contains(&text.len()) && text.bytes().all(name_byte) {
            Ok(ServerName(text.to_owned()))
        } else {
            Err(BadServerName)
        }
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether providers accept `byte` in a tool name.
fn name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

/// One server's tools, offered under their prefixed names.
#[derive(Debug)]
pub struct RemoteTools {
    server: ServerName,
    client: McpClient,
    /// The name offered to the model → the server's own name.
    names: HashMap<String, String>,
    definitions: Vec<ToolDefinition>,
}

// === impl RemoteTools ===

impl RemoteTools {
    /// Opens a session with the server `server` at `url` and lists its tools, all within
    /// [`SETUP_TIMEOUT`]. Returns the tools that can be offered, and a warning for each left
    /// out.
    pub async fn connect(
        server: ServerName,
        url: Url,
    ) -> Result<(RemoteTools, Vec<String>), McpError> {
        let listed = tokio::time::timeout(SETUP_TIMEOUT, async {
            let client = McpClient::connect(url).await?;
            let tools = client.list_tools().await?;
            Ok::<_, McpError>((client, tools))
        })
        .await
        .map_err(|_| McpError::Timeout(SETUP_TIMEOUT))?;
        let (client, tools) = listed?;
        Ok(RemoteTools::offer(server, client, tools))
    }

    /// Names `tools` for the model; see the module docs for what is left out.
    pub fn offer(
        server: ServerName,
        client: McpClient,
        tools: Vec<RemoteTool>,
    ) -> (RemoteTools, Vec<String>) {
        let mut names = HashMap::new();
        let mut definitions = Vec::new();
        let mut warnings = Vec::new();
        let total = tools.len();
        for tool in tools {
            if definitions.len() == MAX_REMOTE_TOOLS {
                warnings.push(format!(
                    "the {server} server offers {total} tools; only the first \
                     {MAX_REMOTE_TOOLS} are offered to the model"
                ));
                break;
            }
            let offered = offered_name(&server, &tool.name);
            if offered.len() > MAX_TOOL_NAME_CHARS {
                warnings.push(format!(
                    "the {server} server's tool {:?} is not offered: its name is over \
                     {MAX_TOOL_NAME_CHARS} characters as {offered}",
                    tool.name
                ));
                continue;
            }
            if names.contains_key(&offered) {
                warnings.push(format!(
                    "the {server} server's tool {:?} is not offered: another tool is \
                     already offered as {offered}",
                    tool.name
                ));
                continue;
            }
            definitions.push(ToolDefinition {
                name: offered.clone(),
                description: description(&tool),
                input_schema: object_schema(tool.input_schema),
            });
            names.insert(offered, tool.name);
        }
        let remote = RemoteTools {
            server,
            client,
            names,
            definitions,
        };
        (remote, warnings)
    }

    async fn run(&self, name: &str, arguments: &Value) -> Result<ToolOutput, ToolError> {
        let remote = self.names.get(name).ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
        })?;
        if !arguments.is_object() {
            return Err(ToolError::invalid(
                name,
                "the arguments must be a JSON object",
            ));
        }
        match self.client.call_tool(remote, arguments).await {
            Ok(result) if result.is_error => Err(ToolError::Remote {
                tool: name.to_owned(),
                detail: cut(result.text()),
            }),
            Ok(result) => {
                let text = result.text();
                let data = match result.structured_content {
                    Some(structured) if text.trim().is_empty() => structured,
                    _ => as_data(cut(text)),
                };
                Ok(ToolOutput::data(data))
            }
            Err(McpError::Rpc { code, message }) => Err(ToolError::Remote {
                tool: name.to_owned(),
                detail: cut(format!("error {code}: {message}")),
            }),
            Err(error) => Err(ToolError::Unavailable {
                server: self.server.to_string(),
                detail: error.to_string(),
            }),
        }
    }
}

impl ToolSource for RemoteTools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        self.definitions.clone()
    }

    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolFuture<'a> {
        Box::pin(self.run(name, arguments))
    }
}

/// `mcp__<server>__<tool>`, every character providers refuse made `_`.
fn offered_name(server: &ServerName, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii() && name_byte(c as u8) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{MCP_TOOL_PREFIX}{server}__{tool}")
}

/// The description the model reads: the server's, else its title, cut to a bound.
fn description(tool: &RemoteTool) -> String {
    let text = tool
        .description
        .as_deref()
        .or(tool.title.as_deref())
        .unwrap_or_default();
    text.chars().take(MAX_DESCRIPTION_CHARS).collect()
}

/// The server's schema as an object schema, which every provider wants.
fn object_schema(schema: Value) -> Value {
    match schema {
        Value::Object(mut fields) => {
            fields
                .entry("type")
                .or_insert_with(|| Value::from("object"));
            Value::Object(fields)
        }
        _ => json!({"type": "object"}),
    }
}

/// Text cut to [`MAX_RESULT_BYTES`] on a character boundary, with a notice when cut.
fn cut(mut text: String) -> String {
    if text.len() > MAX_RESULT_BYTES {
        let mut end = MAX_RESULT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(RESULT_CUT_NOTICE);
    }
    text
}

/// A successful result's text as the model is given it: the JSON it holds, when it is JSON
/// (then it is not quoted as a string), else the text.
fn as_data(text: String) -> Value {
    match serde_json::from_str::<Value>(&text) {
        Ok(value) if value.is_object() || value.is_array() => value,
        _ => Value::String(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> RemoteTool {
        RemoteTool {
            name: name.to_owned(),
            description: None,
            title: None,
            input_schema: Value::Null,
        }
    }

    fn client() -> McpClient {
        McpClient::new(Url::parse("http://127.0.0.1:9/mcp").unwrap()).unwrap()
    }

    #[test]
    fn server_names_are_checked() {
        for (text, ok) in [
            ("dedalo_publication", true),
            ("a-b_9", true),
            ("", false),
            ("two words", false),
            ("a.b", false),
            (&"x".repeat(33), false),
        ] {
            assert_eq!(text.parse::<ServerName>().is_ok(), ok, "{text:?}");
        }
    }

    #[test]
    fn tools_are_named_for_the_model_or_left_out_with_a_warning() {
        let server: ServerName = "pub".parse().unwrap();
        let mut described = tool("publication_search");
        described.description = Some("Search the records.".to_owned());
        described.input_schema = json!({"properties": {"query": {"type": "string"}}});
        let mut titled = tool("records.get");
        titled.title = Some("Get a record".to_owned());
        let tools = vec![
            described,
            titled,
            tool("records/get"),
            tool(&"long".repeat(20)),
            tool("café"),
        ];
        let (remote, warnings) = RemoteTools::offer(server, client(), tools);
        let names: Vec<&str> = remote.definitions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "mcp__pub__publication_search",
                "mcp__pub__records_get",
                "mcp__pub__caf_"
            ]
        );
        assert_eq!(
            remote.definitions[0].input_schema,
            json!({"type": "object", "properties": {"query": {"type": "string"}}})
        );
        assert_eq!(remote.definitions[0].description, "Search the records.");
        assert_eq!(remote.definitions[1].description, "Get a record");
        assert_eq!(
            remote.definitions[1].input_schema,
            json!({"type": "object"})
        );
        assert_eq!(remote.names["mcp__pub__records_get"], "records.get");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("\"records/get\""), "{}", warnings[0]);
        assert!(
            warnings[1].contains("over 64 characters"),
            "{}",
            warnings[1]
        );
    }

    #[test]
    fn past_the_bound_tools_are_left_out() {
        let server: ServerName = "s".parse().unwrap();
        let tools = (0..MAX_REMOTE_TOOLS + 5)
            .map(|n| tool(&format!("t{n}")))
            .collect();
        let (remote, warnings) = RemoteTools::offer(server, client(), tools);
        assert_eq!(remote.definitions.len(), MAX_REMOTE_TOOLS);
        assert_eq!(
            warnings,
            ["the s server offers 105 tools; only the first 100 are offered to the model"]
        );
    }

    #[test]
    fn results_are_cut_and_json_is_not_quoted() {
        let long = "é".repeat(MAX_RESULT_BYTES);
        let shown = cut(long);
        assert!(shown.ends_with(RESULT_CUT_NOTICE));
        assert!(shown.len() <= MAX_RESULT_BYTES + RESULT_CUT_NOTICE.len());
        assert_eq!(as_data("{\"a\": 1}".to_owned()), json!({"a": 1}));
        assert_eq!(as_data("[1]".to_owned()), json!([1]));
        assert_eq!(as_data("42".to_owned()), json!("42"));
        assert_eq!(as_data("plain".to_owned()), json!("plain"));
    }

    #[tokio::test]
    async fn a_call_of_a_tool_not_offered_or_without_an_object_is_refused() {
        let server: ServerName = "s".parse().unwrap();
        let (remote, _) = RemoteTools::offer(server, client(), vec![tool("t")]);
        let error = remote.call("mcp__s__u", &json!({})).await.unwrap_err();
        assert_eq!(error.reason(), "unknown_tool");
        let error = remote.call("mcp__s__t", &json!([1])).await.unwrap_err();
        assert_eq!(error.reason(), "invalid_arguments");
        // Nothing listens on the discard port: a named failure, not a failed turn.
        let error = remote.call("mcp__s__t", &json!({})).await.unwrap_err();
        assert_eq!(error.reason(), "unavailable");
        assert!(
            error.to_string().starts_with("unavailable: the s server"),
            "{error}"
        );
    }
}
