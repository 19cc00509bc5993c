//! The command line, and the turn's settings parsed from it and from the environment.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;

use atelier_llm::{
    ProviderKind, ANTHROPIC_BASE_URL, OLLAMA_DEFAULT_BASE_URL, OPENAI_BASE_URL, OPENROUTER_BASE_URL,
};
use clap::{Parser, ValueEnum};
use reqwest::Url;

use crate::conversation::ResumeToken;
use crate::tools::ServerName;

/// The environment variable holding the provider's API key. Never an argument, which any
/// process on the host could read; never written anywhere by the agent.
pub const API_KEY_ENV: &str = "AGENT_API_KEY";

/// The default of `--max-turns`.
pub const DEFAULT_MAX_TURNS: u32 = 50;

/// The longest prompt read from stdin.
pub const MAX_PROMPT_BYTES: u64 = 1024 * 1024; // 1 MiB

/// The directory below HOME holding the state of the turn HOME's agent.
const HOME_STATE_DIR: &str = "state";

/// Atelier's own coding agent: one turn of a model editing the workspace.
///
/// Runs in the current directory, the workspace: the model gets file tools confined to it
/// (read, write, edit, list, glob, grep; no shell, no web), and the brief in AGENTS.md at its
/// root. With --mcp-url and --mcp-name it is also offered an MCP server's tools, as
/// mcp__NAME__TOOL; a server that is unavailable is a warning line, not a failed turn. It
/// writes one JSON object per line on stdout (text, tool, tool_result, file_change, warning,
/// then result or error). The provider's API key is read from AGENT_API_KEY; requests
/// to the provider honour HTTPS_PROXY, HTTP_PROXY and NO_PROXY, while the MCP server is always
/// reached directly. The conversation is kept in $HOME/state/atelier-agent/TOKEN.json (or
/// below --state-dir), and the result line names the token --resume takes.
///
/// SIGTERM or SIGINT stops the turn where it is: the conversation so far is saved and the
/// error line's reason is interrupted. A provider round that fails transiently (429, 408,
/// 5xx, a dropped connection) before it says anything is asked again after 2, 10 and 30 s,
/// each pause a warning line.
///
/// Exit codes: 0 the turn ended (result line); 1 it failed (error line); 2 a usage error.
#[derive(Debug, Parser)]
#[command(name = "atelier-agent", version)]
pub struct Cli {
    /// The provider's API.
    #[arg(long, value_enum)]
    pub provider: Provider,
    /// The model id, as the provider names it.
    #[arg(long)]
    pub model: String,
    /// The provider's base URL (required for openai-compatible; the provider's own otherwise).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Continue the conversation saved under this token (the `resume` of a result line).
    #[arg(long, value_name = "TOKEN")]
    pub resume: Option<ResumeToken>,
    /// The most provider rounds this turn may take.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_TURNS,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_turns: u32,
    /// The most tokens one answer of the model may take (default: for Anthropic, which
    /// requires a limit, what the model allows: 4096 for Claude 3, 8192 for Claude 3.5, 32000
    /// for later models; for the others, the provider's own).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_output_tokens: Option<u32>,
    /// Where conversations are kept (default: $HOME/state).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// An MCP server (streamable HTTP) whose tools the model is offered; reached directly,
    /// never through a proxy, and sent no key. Needs --mcp-name.
    #[arg(long, value_name = "URL", value_parser = mcp_url, requires = "mcp_name")]
    pub mcp_url: Option<Url>,
    /// The MCP server's name in its tools' names, mcp__NAME__TOOL (1 to 32 of A-Z a-z 0-9 _
    /// -). Needs --mcp-url.
    #[arg(long, value_name = "NAME", requires = "mcp_url")]
    pub mcp_name: Option<ServerName>,
    /// The request; `-` reads it from stdin.
    pub prompt: String,
}

/// The providers the agent speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Responses API.
    #[value(name = "openai")]
    OpenAi,
    /// OpenRouter's Responses API.
    #[value(name = "openrouter")]
    OpenRouter,
    /// Ollama's chat completions.
    Ollama,
    /// Any OpenAI-compatible chat-completions endpoint.
    #[value(name = "openai-compatible")]
    OpenAiCompatible,
}

// === impl Provider ===

impl Provider {
    /// The shared drivers' name for it.
    pub fn kind(self) -> ProviderKind {
        match self {
            Provider::Anthropic => ProviderKind::Anthropic,
            Provider::OpenAi => ProviderKind::OpenAi,
            Provider::OpenRouter => ProviderKind::OpenRouter,
            Provider::Ollama => ProviderKind::Ollama,
            Provider::OpenAiCompatible => ProviderKind::OpenAiCompatible,
        }
    }

    /// Its command-line spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
            Provider::OpenRouter => "openrouter",
            Provider::Ollama => "ollama",
            Provider::OpenAiCompatible => "openai-compatible",
        }
    }

    /// Its own base URL, when it has one.
    fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Anthropic => Some(ANTHROPIC_BASE_URL),
            Provider::OpenAi => Some(OPENAI_BASE_URL),
            Provider::OpenRouter => Some(OPENROUTER_BASE_URL),
            Provider::Ollama => Some(OLLAMA_DEFAULT_BASE_URL),
            Provider::OpenAiCompatible => None,
        }
    }

    /// Whether it refuses every request without a key.
    fn needs_key(self) -> bool {
        matches!(
            self,
            Provider::Anthropic | Provider::OpenAi | Provider::OpenRouter
        )
    }
}

/// An MCP server the turn is to offer the tools of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// Its name in its tools' names.
    pub name: ServerName,
    /// Where it is.
    pub url: Url,
}

/// `--mcp-url`: an `http` or `https` URL with a host and no credentials in it.
fn mcp_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("an MCP server is reached over http or https".to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL names no host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the URL may not carry credentials".to_owned());
    }
    Ok(url)
}

/// The output limit of a turn given none: Anthropic's Messages API requires one, and the
/// shared driver's (8192) would cut a large page short on a model that allows more; a model of
/// a family not known here is taken to be a later one. The other APIs have limits of their own.
fn default_output_limit(provider: Provider, model: &str) -> Option<u32> {
    if provider != Provider::Anthropic {
        return None;
    }
    let limit = if model.starts_with("claude-3-5-") {
        8192
    } else if model.starts_with("claude-3-7-") {
        32_000
    } else if model.starts_with("claude-3-") {
        4096
    } else {
        32_000
    };
    Some(limit)
}

/// A turn's settings, checked.
pub struct Settings {
    /// The provider.
    pub provider: Provider,
    /// The model id.
    pub model: String,
    /// Where the provider is.
    pub base_url: String,
    /// The key, when there is one. Never shown: [`Settings`] has no `Debug`.
    pub api_key: Option<String>,
    /// The conversation to continue.
    pub resume: Option<ResumeToken>,
    /// The round limit.
    pub max_turns: u32,
    /// The output limit of one answer, when one is asked for.
    pub max_output_tokens: Option<u32>,
    /// Where conversations are kept.
    pub state_dir: PathBuf,
    /// The MCP server whose tools are offered, if any.
    pub mcp: Option<McpServer>,
    /// The request.
    pub prompt: String,
}

/// Settings that cannot make a turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// openai-compatible has no base URL of its own.
    #[error("--provider openai-compatible needs --base-url")]
    NoBaseUrl,
    /// The provider needs a key and the environment has none.
    #[error("--provider {0} needs an API key in {API_KEY_ENV}")]
    NoApiKey(&'static str),
    /// Neither `--state-dir` nor HOME says where conversations go.
    #[error("no state directory: give --state-dir or set HOME")]
    NoStateDir,
    /// The prompt is empty.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The prompt could not be read from stdin.
    #[error("reading the prompt from stdin: {0}")]
    Stdin(String),
}

/// What the settings read from the process environment, so tests need not change it.
pub trait Environment {
    /// The variable `key`, if set.
    fn var(&self, key: &str) -> Option<OsString>;
    /// The prompt from stdin (at most [`MAX_PROMPT_BYTES`]).
    fn stdin_prompt(&self) -> std::io::Result<String>;
}

/// The real process environment.
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, key: &str) -> Option<OsString> {
        std::env::var_os(key)
    }

    fn stdin_prompt(&self) -> std::io::Result<String> {
        let mut text = String::new();
        std::io::stdin()
            .take(MAX_PROMPT_BYTES)
            .read_to_string(&mut text)?;
        Ok(text)
    }
}

// === impl Settings ===

impl Settings {
    /// Checks `cli` and completes it from `env`.
    pub fn from_cli(cli: Cli, env: &dyn Environment) -> Result<Settings, SettingsError> {
        let base_url = match (&cli.base_url, cli.provider.default_base_url()) {
            (Some(url), _) => url.clone(),
            (None, Some(url)) => url.to_owned(),
            (None, None) => return Err(SettingsError::NoBaseUrl),
        };
        let api_key = env
            .var(API_KEY_ENV)
            .and_then(|key| key.into_string().ok())
            .filter(|key| !key.is_empty());
        if api_key.is_none() && cli.provider.needs_key() {
            return Err(SettingsError::NoApiKey(cli.provider.as_str()));
        }
        let state_dir = match (cli.state_dir, env.var("HOME")) {
            (Some(dir), _) => dir,
            (None, Some(home)) if !home.is_empty() => PathBuf::from(home).join(HOME_STATE_DIR),
            (None, _) => return Err(SettingsError::NoStateDir),
        };
        let prompt = if cli.prompt == "-" {
            env.stdin_prompt()
                .map_err(|e| SettingsError::Stdin(e.to_string()))?
        } else {
            cli.prompt
        };
        if prompt.trim().is_empty() {
            return Err(SettingsError::EmptyPrompt);
        }
        // clap sees to both or neither.
        let mcp = match (cli.mcp_name, cli.mcp_url) {
            (Some(name), Some(url)) => Some(McpServer { name, url }),
            _ => None,
        };
        let max_output_tokens = cli
            .max_output_tokens
            .or_else(|| default_output_limit(cli.provider, &cli.model));
        Ok(Settings {
            provider: cli.provider,
            model: cli.model,
            base_url,
            api_key,
            resume: cli.resume,
            max_turns: cli.max_turns,
            max_output_tokens,
            state_dir,
            mcp,
            prompt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;
    use std::collections::HashMap;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn output_limit_table() {
        for (name, provider, model, limit) in [
            (
                "claude 3",
                Provider::Anthropic,
                "claude-3-haiku-20240307",
                Some(4096),
            ),
            (
                "claude 3.5",
                Provider::Anthropic,
                "claude-3-5-sonnet-20241022",
                Some(8192),
            ),
            (
                "claude 3.7",
                Provider::Anthropic,
                "claude-3-7-sonnet-20250219",
                Some(32_000),
            ),
            (
                "claude 4",
                Provider::Anthropic,
                "claude-sonnet-4-5",
                Some(32_000),
            ),
            (
                "a later family",
                Provider::Anthropic,
                "claude-next",
                Some(32_000),
            ),
            ("openai", Provider::OpenAi, "claude-3-5-sonnet", None),
            ("compatible", Provider::OpenAiCompatible, "qwen", None),
            ("ollama", Provider::Ollama, "llama3", None),
            (
                "openrouter",
                Provider::OpenRouter,
                "anthropic/claude-3.5-sonnet",
                None,
            ),
        ] {
            assert_eq!(default_output_limit(provider, model), limit, "{name}");
        }
    }

    struct Fake {
        vars: HashMap<&'static str, &'static str>,
        stdin: &'static str,
    }

    impl Environment for Fake {
        fn var(&self, key: &str) -> Option<OsString> {
            self.vars.get(key).map(OsString::from)
        }
        fn stdin_prompt(&self) -> std::io::Result<String> {
            Ok(self.stdin.to_owned())
        }
    }

    fn settings(argv: &[&str], vars: &[(&'static str, &'static str)]) -> Result<Settings, String> {
        let cli = Cli::try_parse_from(std::iter::once("atelier-agent").chain(argv.iter().copied()))
            .map_err(|e| format!("clap {:?}", e.kind()))?;
        let env = Fake {
            vars: vars.iter().copied().collect(),
            stdin: "from stdin",
        };
        Settings::from_cli(cli, &env).map_err(|e| e.to_string())
    }

    #[test]
    fn settings_table() {
        let home = [("HOME", "/home/t")];
        let keyed = [("HOME", "/home/t"), (API_KEY_ENV, "k")];
        let ok = |argv: &[&str], vars: &[(&'static str, &'static str)]| {
            settings(argv, vars).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
        };

        let s = ok(
            &[
                "--provider",
                "openai-compatible",
                "--model",
                "m",
                "--base-url",
                "http://h/v1",
                "go",
            ],
            &home,
        );
        assert_eq!(
            (s.base_url.as_str(), s.api_key.as_deref()),
            ("http://h/v1", None)
        );
        assert_eq!(s.state_dir, PathBuf::from("/home/t/state"));
        assert_eq!((s.max_turns, s.prompt.as_str()), (DEFAULT_MAX_TURNS, "go"));

        let s = ok(
            &[
                "--provider",
                "anthropic",
                "--model",
                "m",
                "--max-turns",
                "3",
                "--state-dir",
                "/s",
                "--resume",
                "ab_1",
                "--",
                "-x",
            ],
            &keyed,
        );
        assert_eq!(s.base_url, ANTHROPIC_BASE_URL);
        assert_eq!(s.api_key.as_deref(), Some("k"));
        assert_eq!(s.state_dir, PathBuf::from("/s"));
        assert_eq!(s.resume.unwrap().as_str(), "ab_1");
        assert_eq!((s.max_turns, s.prompt.as_str()), (3, "-x"));

        let s = ok(&["--provider", "ollama", "--model", "m", "-"], &home);
        assert_eq!(s.prompt, "from stdin");
        assert_eq!(s.base_url, OLLAMA_DEFAULT_BASE_URL);

        type Refused<'a> = (
            &'a str,
            &'a [&'a str],
            &'a [(&'static str, &'static str)],
            &'a str,
        );
        let refused: [Refused<'_>; 7] = [
            (
                "no base url",
                &["--provider", "openai-compatible", "--model", "m", "go"],
                &home,
                "--provider openai-compatible needs --base-url",
            ),
            (
                "no key",
                &["--provider", "openrouter", "--model", "m", "go"],
                &home,
                "--provider openrouter needs an API key in AGENT_API_KEY",
            ),
            (
                "no home",
                &["--provider", "ollama", "--model", "m", "go"],
                &[],
                "no state directory: give --state-dir or set HOME",
            ),
            (
                "empty prompt",
                &["--provider", "ollama", "--model", "m", " "],
                &home,
                "the prompt is empty",
            ),
            (
                "bad token",
                &[
                    "--provider",
                    "ollama",
                    "--model",
                    "m",
                    "--resume",
                    "../x",
                    "go",
                ],
                &home,
                "clap ValueValidation",
            ),
            (
                "zero turns",
                &[
                    "--provider",
                    "ollama",
                    "--model",
                    "m",
                    "--max-turns",
                    "0",
                    "go",
                ],
                &home,
                "clap ValueValidation",
            ),
            (
                "unknown provider",
                &["--provider", "gemini", "--model", "m", "go"],
                &home,
                "clap InvalidValue",
            ),
        ];
        for (name, argv, vars, want) in refused {
            let error = settings(argv, vars)
                .err()
                .unwrap_or_else(|| panic!("case {name} passed"));
            assert!(error.starts_with(want), "case {name}: {error}");
        }
    }

    #[test]
    fn the_mcp_server_is_named_and_located_together() {
        let home = [("HOME", "/home/t")];
        let run = |extra: &[&str]| {
            let argv: Vec<&str> = ["--provider", "ollama", "--model", "m"]
                .into_iter()
                .chain(extra.iter().copied())
                .chain(["go"])
                .collect();
            settings(&argv, &home).map(|s| s.mcp)
        };
        assert_eq!(run(&[]), Ok(None));
        let server = run(&[
            "--mcp-url",
            "http://127.0.0.1:3129/mcp",
            "--mcp-name",
            "dedalo_publication",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(server.name.to_string(), "dedalo_publication");
        assert_eq!(server.url.as_str(), "http://127.0.0.1:3129/mcp");
        for (name, extra, want) in [
            (
                "a url alone",
                &["--mcp-url", "http://127.0.0.1:3129/mcp"][..],
                "clap MissingRequiredArgument",
            ),
            (
                "a name alone",
                &["--mcp-name", "p"][..],
                "clap MissingRequiredArgument",
            ),
            (
                "a name with a dot",
                &["--mcp-url", "http://127.0.0.1/mcp", "--mcp-name", "a.b"][..],
                "clap ValueValidation",
            ),
            (
                "not http",
                &["--mcp-url", "file:///tmp/mcp", "--mcp-name", "p"][..],
                "clap ValueValidation",
            ),
            (
                "credentials in the url",
                &[
                    "--mcp-url",
                    "https://k:s@api.example/mcp",
                    "--mcp-name",
                    "p",
                ][..],
                "clap ValueValidation",
            ),
            (
                "not a url",
                &["--mcp-url", "127.0.0.1:3129", "--mcp-name", "p"][..],
                "clap ValueValidation",
            ),
        ] {
            assert_eq!(run(extra).err().as_deref(), Some(want), "case {name}");
        }
    }
}
