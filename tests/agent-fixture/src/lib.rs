//! TEST FIXTURE, not an agent: a stand-in for the Claude Code CLI in Atelier's end-to-end tests
//! and demo. It parses argv like the real CLI (unknown options refused), then follows its
//! prompt as a script, printing Claude Code's stream-json as it goes.
//!
//! Directives, one per prompt line (any other line is said as assistant text):
//! `write <path> <text>`, `append <path> <text>`, `delete <path>`, `sleep <ms>`, `hang`,
//! `stderr <text>`, `exit <code>` (no result line), `kill-self` (SIGKILL), `raw <text>`,
//! `env <NAME>`, `spam <n>`. A prompt with no directive appends itself to `notes.md`.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The version `--version` prints: a Claude Code 2.x.
pub const VERSION: &str = "2.1.4 (Claude Code)";

/// The help `--help` prints: an option line for every flag the daemon's argv uses.
pub const HELP: &str = "Usage: atelier-test-agent [options] [prompt]

TEST FIXTURE standing in for the Claude Code CLI in Atelier's tests. Not an agent.

Options:
  -p, --print                       Print the response and exit (required)
  --output-format <format>          Only stream-json
  --verbose                         Accepted
  --permission-mode <mode>          Accepted
  --max-turns <n>                   Accepted
  --setting-sources <sources>       Accepted
  --settings <file-or-json>         Accepted
  --strict-mcp-config               Accepted
  --mcp-config <configs...>         Accepted
  --allowedTools <tools...>         Accepted
  --disallowedTools <tools...>      Accepted
  --append-system-prompt <prompt>   Accepted
  -r, --resume <sessionId>          Continue that session (its id is the result's)
  --version                         Print the version
  -h, --help                        Print this help

The prompt (after --) is a script, one directive per line; any other line is said:
  write <path> <text>   create or replace a file (parents made), a Write tool use
  append <path> <text>  append a line to a file, an Edit tool use
  delete <path>         remove a file
  sleep <ms>            wait
  hang                  wait until killed
  stderr <text>         write a line to stderr
  exit <code>           exit now, without a result line
  kill-self             SIGKILL itself
  raw <text>            print the text as a raw stdout line
  env <NAME>            say NAME=<value> or NAME unset
  spam <n>              say n lines
A prompt without any directive appends itself to notes.md.
";

const VALUE_FLAGS: [&str; 10] = [
    "--output-format",
    "--permission-mode",
    "--max-turns",
    "--setting-sources",
    "--settings",
    "--mcp-config",
    "--allowedTools",
    "--disallowedTools",
    "--append-system-prompt",
    "--resume",
];
const SWITCHES: [&str; 4] = ["-p", "--print", "--verbose", "--strict-mcp-config"];

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
        Ok(Invocation::Turn { prompt, resume }) => Script::new(resume).run(&prompt),
        Err(why) => {
            eprintln!("error: {why}");
            1
        }
    }
}

enum Invocation {
    Version,
    Help,
    Turn {
        prompt: String,
        resume: Option<String>,
    },
}

fn parse(args: &[String]) -> Result<Invocation, String> {
    let (mut print, mut format, mut resume, mut prompt) = (false, None, None, None);
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
            "-r" | "--resume" => {
                resume = Some(args.get(i + 1).ok_or("--resume needs a value")?.clone());
                i += 1;
            }
            flag if VALUE_FLAGS.contains(&flag) => {
                let value = args.get(i + 1).ok_or(format!("{flag} needs a value"))?;
                if flag == "--output-format" {
                    format = Some(value.clone());
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
    let prompt = prompt.ok_or("no prompt")?;
    Ok(Invocation::Turn { prompt, resume })
}

/// One scripted turn.
struct Script {
    session_id: String,
    started: Instant,
    tool_uses: u32,
    messages: u32,
}

impl Script {
    fn new(resume: Option<String>) -> Script {
        Script {
            session_id: resume.unwrap_or_else(random_uuid),
            started: Instant::now(),
            tool_uses: 0,
            messages: 0,
        }
    }

    fn emit(&self, frame: Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{frame}");
        let _ = out.flush();
    }

    fn say(&mut self, text: &str) {
        self.messages += 1;
        self.emit(json!({
            "type": "assistant",
            "message": {"id": format!("msg_{:04}", self.messages), "type": "message", "role": "assistant",
                        "model": "scripted", "content": [{"type": "text", "text": text}]},
            "session_id": self.session_id,
        }));
    }

    fn tool(&mut self, name: &str, input: Value, outcome: &str) {
        self.tool_uses += 1;
        let id = format!("toolu_{:04}", self.tool_uses);
        self.messages += 1;
        self.emit(json!({
            "type": "assistant",
            "message": {"id": format!("msg_{:04}", self.messages), "type": "message", "role": "assistant",
                        "model": "scripted", "content": [{"type": "tool_use", "id": id, "name": name, "input": input}]},
            "session_id": self.session_id,
        }));
        self.emit(json!({
            "type": "user",
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": outcome}]},
            "session_id": self.session_id,
        }));
    }

    fn run(mut self, prompt: &str) -> i32 {
        let cwd = std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        self.emit(
            json!({"type": "system", "subtype": "init", "session_id": self.session_id,
                         "cwd": cwd, "model": "scripted", "tools": ["Read", "Write", "Edit"]}),
        );
        let mut directed = false;
        for line in prompt.lines() {
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            let outcome = match word {
                "write" | "append" | "delete" => {
                    directed = true;
                    self.edit(word, rest)
                }
                "sleep" => {
                    directed = true;
                    std::thread::sleep(Duration::from_millis(rest.trim().parse().unwrap_or(0)));
                    Ok(())
                }
                "hang" => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
                "stderr" => {
                    directed = true;
                    eprintln!("{rest}");
                    Ok(())
                }
                "exit" => return rest.trim().parse().unwrap_or(1),
                "kill-self" => {
                    let _ = rustix::process::kill_process(
                        rustix::process::getpid(),
                        rustix::process::Signal::KILL,
                    );
                    return 137;
                }
                "raw" => {
                    directed = true;
                    println!("{rest}");
                    Ok(())
                }
                "env" => {
                    directed = true;
                    let name = rest.trim();
                    match std::env::var(name) {
                        Ok(value) => self.say(&format!("{name}={value}")),
                        Err(_) => self.say(&format!("{name} unset")),
                    }
                    Ok(())
                }
                "spam" => {
                    directed = true;
                    for i in 0..rest.trim().parse().unwrap_or(0u32) {
                        self.say(&format!("spam {i}"));
                    }
                    Ok(())
                }
                _ => {
                    if !line.trim().is_empty() {
                        self.say(line);
                    }
                    Ok(())
                }
            };
            if let Err(why) = outcome {
                eprintln!("error: {why}");
                return 2;
            }
        }
        if !directed {
            if let Err(why) =
                self.edit("append", &format!("notes.md {}", prompt.replace('\n', " ")))
            {
                eprintln!("error: {why}");
                return 2;
            }
        }
        self.emit(json!({
            "type": "result", "subtype": "success", "is_error": false,
            "duration_ms": self.started.elapsed().as_millis() as u64, "num_turns": 1,
            "result": "done", "session_id": self.session_id, "total_cost_usd": 0.0001,
        }));
        0
    }

    fn edit(&mut self, verb: &str, rest: &str) -> Result<(), String> {
        let (path, text) = rest.split_once(' ').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(format!("{verb} needs a path"));
        }
        let file = Path::new(path);
        if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| format!("{path}: {e}"))?;
        }
        let absolute = std::env::current_dir()
            .map(|d| d.join(file))
            .unwrap_or(file.to_path_buf());
        let shown = absolute.display().to_string();
        match verb {
            "write" => {
                std::fs::write(file, format!("{text}\n")).map_err(|e| format!("{path}: {e}"))?;
                self.tool(
                    "Write",
                    json!({"file_path": shown, "content": text}),
                    "File created successfully",
                );
            }
            "append" => {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .map_err(|e| format!("{path}: {e}"))?;
                writeln!(f, "{text}").map_err(|e| format!("{path}: {e}"))?;
                self.tool(
                    "Edit",
                    json!({"file_path": shown, "new_string": text}),
                    "File updated",
                );
            }
            _ => {
                std::fs::remove_file(file).map_err(|e| format!("{path}: {e}"))?;
                self.say(&format!("Deleted {path}"));
            }
        }
        Ok(())
    }
}

fn random_uuid() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut bytes);
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
