//! TEST FIXTURE, not an agent: a stand-in for the Claude Code CLI in Atelier's end-to-end tests
//! and demo. It parses argv like the real CLI (an unknown option is refused), then follows its
//! prompt as a script, printing Claude Code's stream-json as it goes (see [`HELP`] and the
//! README next to this crate).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The version `--version` prints: a Claude Code 2.x.
pub const VERSION: &str = "2.1.4 (Claude Code)";

/// The help `--help` prints: an option line for every flag the daemon's argv uses, and the
/// script's directives.
pub const HELP: &str = "\
Usage: atelier-test-agent [options] [prompt]

TEST FIXTURE standing in for the Claude Code CLI in Atelier's tests and demo. It is not an
agent: it follows its prompt as a script and prints Claude Code's stream-json.

Arguments:
  prompt                            The script (usually after --)

Options:
  -p, --print                       Print the response and exit (required)
  --output-format <format>          Output format: only stream-json (required)
  --verbose                         Accepted
  --permission-mode <mode>          Reported in the init frame
  --max-turns <turns>               Accepted
  --setting-sources <sources>       Accepted
  --settings <file-or-json>         Accepted
  --strict-mcp-config               Accepted
  --disable-slash-commands          Accepted
  --mcp-config <configs...>         An MCP configuration file or JSON; must hold mcpServers
  --tools <tools...>                Built-in tools offered: reported in the init frame
  --allowedTools, --allowed-tools <tools...>
                                    Accepted
  --disallowedTools, --disallowed-tools <tools...>
                                    Accepted
  --append-system-prompt <prompt>   The brief (see the brief directive)
  -r, --resume <sessionId>          Continue that session: the result carries its id
  -v, --version                     Print the version
  -h, --help                        Print this help

The prompt is a script, one directive per line; any other line is said as assistant text.
In <text>, \\n stands for a newline.
  write <path> <text>   create or replace a file relative to the working directory
                        (parents made, a newline added): a Write tool use
  append <path> <text>  append <text> and a newline to a file: an Edit tool use
  delete <path>         remove a file
  sleep <ms>            wait
  hang                  wait until killed
  stderr <text>         write a line to stderr
  exit <code>           exit now with that code, without a result line
  kill-self             SIGKILL itself
  raw <text>            print <text> as one raw stdout line (valid JSON or not)
  env <NAME>            say NAME=<value> or NAME unset
  spam <n>              say n lines
  say-long <n>          say n bytes of 'x' in one frame (one long stdout line)
  peek-parent           say whether the parent's memory opens: parent mem: opened|<error>
  mcp                   say each configured MCP server: mcp <name> <url> [header names]
  brief                 say the brief's size and first line, or brief none
A prompt without any directive appends itself to notes.md, so every turn changes a file.
Exit codes: 0 done (after a result line), 1 usage, 2 a directive failed, or exit's own.
";

/// Options that take a value.
const VALUE_FLAGS: [&str; 13] = [
    "--output-format",
    "--tools",
    "--permission-mode",
    "--max-turns",
    "--setting-sources",
    "--settings",
    "--mcp-config",
    "--allowedTools",
    "--allowed-tools",
    "--disallowedTools",
    "--disallowed-tools",
    "--append-system-prompt",
    "--resume",
];
/// Options that take none.
const SWITCHES: [&str; 5] = [
    "-p",
    "--print",
    "--verbose",
    "--strict-mcp-config",
    "--disable-slash-commands",
];

/// Runs with `args` (without the program name) and returns the exit code.
pub fn run(args: &[String]) -> i32 {
    match parse(args) {
        Ok(Invocation::Version) => {
            println!("{VERSION}");
            0
        }
        Ok(Invocation::Help) => {
            print!("{HELP}");
            0
        }
        Ok(Invocation::Turn(turn)) => match Script::new(turn) {
            Ok(script) => script.run(),
            Err(why) => {
                eprintln!("Error: {why}");
                1
            }
        },
        Err(why) => {
            eprintln!("error: {why}");
            1
        }
    }
}

enum Invocation {
    Version,
    Help,
    Turn(TurnArgs),
}

#[derive(Default)]
struct TurnArgs {
    prompt: String,
    resume: Option<String>,
    mcp_config: Option<String>,
    brief: Option<String>,
    permission_mode: Option<String>,
    tools: Option<String>,
}

fn parse(args: &[String]) -> Result<Invocation, String> {
    let (mut print, mut format) = (false, None);
    let mut turn = TurnArgs::default();
    let mut prompt: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        match arg {
            "--version" | "-v" => return Ok(Invocation::Version),
            "--help" | "-h" => return Ok(Invocation::Help),
            "--" => {
                prompt = Some(args[i + 1..].join(" "));
                break;
            }
            "-p" | "--print" => print = true,
            flag if SWITCHES.contains(&flag) => {}
            "-r" => {
                turn.resume = Some(value_of(args, i, arg)?);
                i += 1;
            }
            flag if VALUE_FLAGS.contains(&flag) => {
                let value = value_of(args, i, flag)?;
                match flag {
                    "--output-format" => format = Some(value),
                    "--resume" => turn.resume = Some(value),
                    "--mcp-config" => turn.mcp_config = Some(value),
                    "--append-system-prompt" => turn.brief = Some(value),
                    "--permission-mode" => turn.permission_mode = Some(value),
                    "--tools" => turn.tools = Some(value),
                    _ => {}
                }
                i += 1;
            }
            flag if flag.starts_with('-') => return Err(format!("unknown option '{flag}'")),
            text => prompt = Some(text.to_owned()),
        }
        i += 1;
    }
    if !print {
        return Err("only print mode (-p) is scripted".to_owned());
    }
    if format.as_deref() != Some("stream-json") {
        return Err("only --output-format stream-json is scripted".to_owned());
    }
    turn.prompt = prompt.filter(|p| !p.trim().is_empty()).ok_or(
        "Input must be provided either through stdin or as a prompt argument when using --print",
    )?;
    Ok(Invocation::Turn(turn))
}

fn value_of(args: &[String], at: usize, flag: &str) -> Result<String, String> {
    args.get(at + 1)
        .cloned()
        .ok_or_else(|| format!("option '{flag}' argument missing"))
}

/// The MCP servers of `--mcp-config` (a file or inline JSON), as the real CLI refuses a
/// configuration it cannot load.
fn load_mcp(config: &str) -> Result<serde_json::Map<String, Value>, String> {
    let text = if config.trim_start().starts_with('{') {
        config.to_owned()
    } else {
        std::fs::read_to_string(config)
            .map_err(|e| format!("Invalid MCP configuration: {config}: {e}"))?
    };
    let parsed: Value = serde_json::from_str(&text)
        .map_err(|e| format!("Invalid MCP configuration: {config}: {e}"))?;
    match parsed.get("mcpServers") {
        Some(Value::Object(servers)) => Ok(servers.clone()),
        _ => Err(format!(
            "Invalid MCP configuration: {config}: mcpServers is missing"
        )),
    }
}

/// A directive that failed: the script stops with exit code 2.
type Outcome = Result<(), String>;

/// One scripted turn.
struct Script {
    turn: TurnArgs,
    session_id: String,
    mcp_servers: serde_json::Map<String, Value>,
    cwd: PathBuf,
    started: Instant,
    tool_uses: u32,
    messages: u32,
    frames: u32,
    last_text: String,
}

impl Script {
    fn new(turn: TurnArgs) -> Result<Script, String> {
        let mcp_servers = match &turn.mcp_config {
            Some(config) => load_mcp(config)?,
            None => serde_json::Map::new(),
        };
        let session_id = match &turn.resume {
            Some(token) => token.clone(),
            None => random_uuid()?,
        };
        let cwd = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
        Ok(Script {
            turn,
            session_id,
            mcp_servers,
            cwd,
            started: Instant::now(),
            tool_uses: 0,
            messages: 0,
            frames: 0,
            last_text: String::new(),
        })
    }

    /// Prints one frame and flushes it, as the real CLI streams.
    fn emit(&mut self, mut frame: Value) {
        self.frames += 1;
        frame["uuid"] = json!(format!("00000000-0000-4000-8000-{:012x}", self.frames));
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{frame}");
        let _ = out.flush();
    }

    fn assistant(&mut self, content: Value) {
        self.messages += 1;
        let frame = json!({
            "type": "assistant",
            "message": {
                "id": format!("msg_scripted{:04}", self.messages), "type": "message",
                "role": "assistant", "model": "scripted", "content": content,
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
            "parent_tool_use_id": null,
            "session_id": self.session_id,
        });
        self.emit(frame);
    }

    fn say(&mut self, text: &str) {
        self.last_text = text.to_owned();
        self.assistant(json!([{"type": "text", "text": text}]));
    }

    fn tool(&mut self, name: &str, input: Value, outcome: &str) {
        self.tool_uses += 1;
        let id = format!("toolu_scripted{:04}", self.tool_uses);
        self.assistant(json!([{"type": "tool_use", "id": id, "name": name, "input": input}]));
        let frame = json!({
            "type": "user",
            "message": {"role": "user", "content": [
                {"tool_use_id": id, "type": "tool_result", "content": outcome}]},
            "parent_tool_use_id": null,
            "session_id": self.session_id,
        });
        self.emit(frame);
    }

    fn init(&mut self) {
        let tools: Vec<String> = match &self.turn.tools {
            Some(list) => list
                .split([',', ' '])
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
            None => ["Read", "Write", "Edit"].map(str::to_owned).to_vec(),
        };
        let servers: Vec<Value> = self
            .mcp_servers
            .keys()
            .map(|name| json!({"name": name, "status": "connected"}))
            .collect();
        let frame = json!({
            "type": "system", "subtype": "init", "cwd": self.cwd.display().to_string(),
            "session_id": self.session_id, "tools": tools, "mcp_servers": servers,
            "model": "scripted",
            "permissionMode": self.turn.permission_mode.as_deref().unwrap_or("default"),
            "apiKeySource": "none", "claude_code_version": "2.1.4", "output_style": "default",
        });
        self.emit(frame);
    }

    fn run(mut self) -> i32 {
        self.init();
        let prompt = self.turn.prompt.clone();
        let mut directed = false;
        for line in prompt.lines() {
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            let outcome = match word {
                "write" | "append" | "delete" => self.edit(word, rest),
                "sleep" => {
                    number(word, rest).map(|ms| std::thread::sleep(Duration::from_millis(ms)))
                }
                "hang" => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
                "stderr" => {
                    eprintln!("{rest}");
                    Ok(())
                }
                "exit" => match number(word, rest).and_then(|code| {
                    i32::try_from(code).map_err(|_| format!("exit: {code} is not an exit code"))
                }) {
                    Ok(code) => return code,
                    Err(why) => Err(why),
                },
                "kill-self" => {
                    let _ = rustix::process::kill_process(
                        rustix::process::getpid(),
                        rustix::process::Signal::KILL,
                    );
                    loop {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
                "raw" => {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{rest}");
                    let _ = out.flush();
                    Ok(())
                }
                "env" => {
                    let name = rest.trim();
                    match std::env::var_os(name) {
                        Some(value) => self.say(&format!("{name}={}", value.to_string_lossy())),
                        None => self.say(&format!("{name} unset")),
                    }
                    Ok(())
                }
                "spam" => number(word, rest).map(|n| {
                    for i in 0..n {
                        self.say(&format!("spam {i}"));
                    }
                }),
                "peek-parent" => {
                    let parent = std::os::unix::process::parent_id();
                    let opened = std::fs::File::open(format!("/proc/{parent}/mem"));
                    let said = opened.map_or_else(|e| e.to_string(), |_| "opened".to_owned());
                    self.say(&format!("parent mem: {said}"));
                    Ok(())
                }
                "say-long" => number(word, rest).map(|n| {
                    self.say(&"x".repeat(usize::try_from(n).unwrap_or(0)));
                }),
                "mcp" => {
                    self.say_mcp();
                    Ok(())
                }
                "brief" => {
                    let said = match &self.turn.brief {
                        Some(brief) => format!(
                            "brief {} bytes: {}",
                            brief.len(),
                            brief.lines().next().unwrap_or("")
                        ),
                        None => "brief none".to_owned(),
                    };
                    self.say(&said);
                    Ok(())
                }
                _ => {
                    if !line.trim().is_empty() {
                        self.say(line);
                    }
                    continue;
                }
            };
            directed = true;
            if let Err(why) = outcome {
                eprintln!("error: {why}");
                return 2;
            }
        }
        if !directed {
            let note = format!("notes.md {}", prompt.replace('\n', " "));
            if let Err(why) = self.edit("append", &note) {
                eprintln!("error: {why}");
                return 2;
            }
        }
        let frame = json!({
            "type": "result", "subtype": "success", "is_error": false,
            "duration_ms": u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "duration_api_ms": 0, "num_turns": self.messages, "result": self.last_text,
            "session_id": self.session_id, "total_cost_usd": 0.0,
            "usage": {"input_tokens": 0, "output_tokens": 0}, "permission_denials": [],
        });
        self.emit(frame);
        0
    }

    fn say_mcp(&mut self) {
        let lines: Vec<String> = self
            .mcp_servers
            .iter()
            .map(|(name, server)| {
                let url = server.get("url").and_then(Value::as_str).unwrap_or("-");
                let headers: Vec<&str> = server
                    .get("headers")
                    .and_then(Value::as_object)
                    .map(|h| h.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                // Header names only: their values are keys.
                format!("mcp {name} {url} [{}]", headers.join(" "))
            })
            .collect();
        if lines.is_empty() {
            self.say("mcp none");
        }
        for line in lines {
            self.say(&line);
        }
    }

    fn edit(&mut self, verb: &str, rest: &str) -> Outcome {
        let (path, text) = rest.split_once(' ').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(format!("{verb} needs a path"));
        }
        let text = text.replace("\\n", "\n");
        let file = Path::new(path);
        let shown = self.cwd.join(file).display().to_string();
        let failed = |e: std::io::Error| format!("{verb} {path}: {e}");
        match verb {
            "write" => {
                if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(failed)?;
                }
                std::fs::write(file, format!("{text}\n")).map_err(failed)?;
                self.tool(
                    "Write",
                    json!({"file_path": shown, "content": text}),
                    &format!("File created successfully at: {shown}"),
                );
            }
            "append" => {
                if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(failed)?;
                }
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .map_err(failed)?;
                writeln!(f, "{text}").map_err(failed)?;
                self.tool(
                    "Edit",
                    json!({"file_path": shown, "old_string": "", "new_string": text}),
                    &format!("The file {shown} has been updated."),
                );
            }
            _ => {
                std::fs::remove_file(file).map_err(failed)?;
                self.say(&format!("Deleted {path}"));
            }
        }
        Ok(())
    }
}

/// The directive's argument as a count.
fn number(word: &str, rest: &str) -> Result<u64, String> {
    rest.trim()
        .parse()
        .map_err(|_| format!("{word} needs a number, not '{}'", rest.trim()))
}

/// A version 4 UUID, as the CLI's session ids are.
fn random_uuid() -> Result<String, String> {
    atelier_site_api::SessionId::new_v4()
        .map(String::from)
        .map_err(|e| format!("no randomness for a session id: {e}"))
}
