//! The tools the model may call: a [`Tools`] registry of [`ToolSource`]s, each offering some
//! named tools with their JSON schemas and running their calls.
//!
//! The workspace's file tools are one source ([`Workspace`]); an MCP server's tools (the
//! Publication API) are another ([`RemoteTools`]), offered under names of their own. A source
//! never sees a call of another's tool, and two sources cannot offer the same name.
//!
//! Parts: [`args`] (the typed parse of what the model sends), [`Workspace`] (the file tools
//! over the confined filesystem layer), [`RemoteTools`] (a server's tools over
//! [`crate::mcp`]), [`ToolError`] (every refusal, named).

pub mod args;
mod error;
mod ignore;
mod remote;
mod walk;
mod workspace;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use atelier_llm::ToolDefinition;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use args::{parse_call, parse_raw_call, ToolPath, WorkspaceCall, WorkspaceDir};
pub use error::ToolError;
pub use remote::{RemoteTools, ServerName, MAX_TOOL_NAME_CHARS, MCP_TOOL_PREFIX};
pub use workspace::{Workspace, MAX_READ_BYTES};

/// A tool call in flight.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>>;

/// What a successful call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// What the model reads, as JSON.
    pub data: Value,
    /// The workspace files the call created or changed, to report as they happen.
    pub changes: Vec<FileChange>,
}

impl ToolOutput {
    /// An output that changed nothing.
    pub fn data(data: Value) -> ToolOutput {
        ToolOutput {
            data,
            changes: Vec::new(),
        }
    }
}

/// A file a call created or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative to the workspace.
    pub path: String,
    /// Whether it is new.
    pub kind: ChangeKind,
}

/// Whether a changed file is new or was there before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// It did not exist.
    Created,
    /// It existed and now holds other bytes.
    Modified,
}

impl ChangeKind {
    /// The word the model and the output lines use.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Modified => "modified",
        }
    }
}

/// Some tools and the way to run them.
pub trait ToolSource: Send + Sync {
    /// The tools offered, with their schemas.
    fn definitions(&self) -> Vec<ToolDefinition>;

    /// Runs the call of `name` (one of [`ToolSource::definitions`]) with the model's
    /// `arguments`, parsed but not validated.
    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolFuture<'a>;
}

/// Two sources offer a tool of the same name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("two tool sources offer a tool named {name}")]
pub struct DuplicateTool {
    /// The name offered twice.
    pub name: String,
}

/// Every tool of a turn, each name owned by one source.
#[derive(Default)]
pub struct Tools {
    definitions: Vec<ToolDefinition>,
    owners: HashMap<String, usize>,
    sources: Vec<Arc<dyn ToolSource>>,
}

// === impl Tools ===

impl Tools {
    /// No tools.
    pub fn new() -> Tools {
        Tools::default()
    }

    /// Offers `source`'s tools too; nothing is added if one of its names is taken.
    pub fn add(&mut self, source: Arc<dyn ToolSource>) -> Result<(), DuplicateTool> {
        let offered = source.definitions();
        let mut names = std::collections::HashSet::new();
        if let Some(taken) = offered
            .iter()
            .find(|tool| self.owners.contains_key(&tool.name) || !names.insert(tool.name.as_str()))
        {
            return Err(DuplicateTool {
                name: taken.name.clone(),
            });
        }
        let index = self.sources.len();
        for tool in &offered {
            self.owners.insert(tool.name.clone(), index);
        }
        self.definitions.extend(offered);
        self.sources.push(source);
        Ok(())
    }

    /// Every tool offered, in the order added.
    pub fn definitions(&self) -> &[ToolDefinition] {
        &self.definitions
    }

    /// Runs a call of `name`; a name nobody offers is [`ToolError::UnknownTool`].
    pub async fn call(&self, name: &str, arguments: &Value) -> Result<ToolOutput, ToolError> {
        let source = self
            .owners
            .get(name)
            .and_then(|index| self.sources.get(*index))
            .ok_or_else(|| ToolError::UnknownTool {
                name: name.to_owned(),
            })?;
        source.call(name, arguments).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo(&'static [&'static str]);

    impl ToolSource for Echo {
        fn definitions(&self) -> Vec<ToolDefinition> {
            self.0
                .iter()
                .map(|name| ToolDefinition {
                    name: (*name).to_owned(),
                    description: String::new(),
                    input_schema: json!({"type": "object"}),
                })
                .collect()
        }

        fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> ToolFuture<'a> {
            Box::pin(async move { Ok(ToolOutput::data(json!({"tool": name, "args": arguments}))) })
        }
    }

    #[tokio::test]
    async fn each_name_goes_to_its_own_source_and_names_are_not_shared() {
        let mut tools = Tools::new();
        tools.add(Arc::new(Echo(&["a", "b"]))).unwrap();
        tools.add(Arc::new(Echo(&["c"]))).unwrap();
        assert_eq!(
            tools.add(Arc::new(Echo(&["d", "b"]))).unwrap_err().name,
            "b"
        );
        assert_eq!(
            tools.add(Arc::new(Echo(&["e", "e"]))).unwrap_err().name,
            "e"
        );
        let names: Vec<&str> = tools
            .definitions()
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        let out = tools.call("c", &json!({"x": 1})).await.unwrap();
        assert_eq!(out.data, json!({"tool": "c", "args": {"x": 1}}));
        let error = tools.call("d", &json!({})).await.unwrap_err();
        assert_eq!(error.to_string(), "unknown tool: d");
    }
}
