//! Readable output: tables and lines for a terminal. Everything sited or an agent wrote is
//! escaped first, so no control character or bidirectional override reaches the terminal.

use std::fmt::Write as _;

use atelier_clidocs::progress::is_reordering;

use atelier_site_client::model::{
    AuditEntry, BuildRecord, BuildWithLog, Capabilities, DeleteReport, Health, Preview, Releases,
    Served, SessionEvent, SessionSummary, SiteStatus, StoredEvent,
};

/// The most of a prompt an event line shows.
const PROMPT_CHARS: usize = 120;

/// `text` with control characters, and the format characters that reorder text, escaped.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_reordering(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` cleaned and cut to `max` characters.
fn cut(text: &str, max: usize) -> String {
    let cleaned = clean(text);
    if cleaned.chars().count() <= max {
        return cleaned;
    }
    let mut shown: String = cleaned.chars().take(max).collect();
    shown.push('…');
    shown
}

fn or_none(value: Option<&str>) -> String {
    value.map(clean).unwrap_or_else(|| "none".to_owned())
}

/// Left-aligned columns under a header; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 < widths.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                let _ = write!(text, "{cell}{}  ", " ".repeat(pad));
            } else {
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Aligned `key  value` lines.
fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

fn drivers_table(drivers: &[atelier_site_client::model::DriverAvailability]) -> String {
    let rows: Vec<Vec<String>> = drivers
        .iter()
        .map(|d| {
            vec![
                clean(d.id.as_str()),
                if d.available { "yes" } else { "no" }.to_owned(),
                or_none(d.version.as_deref()),
                if d.is_default { "default" } else { "" }.to_owned(),
            ]
        })
        .collect();
    table(&["DRIVER", "AVAILABLE", "VERSION", ""], &rows)
}

/// `health`.
pub fn health(health: &Health) -> String {
    let mut out = fields(&[
        ("status", clean(&health.status)),
        ("service", clean(&health.service)),
        ("pairing", "fingerprint verified".to_owned()),
    ]);
    out.push('\n');
    out.push_str(&drivers_table(&health.drivers));
    out
}

/// `capabilities`.
pub fn capabilities(caps: &Capabilities) -> String {
    let mut out = fields(&[
        ("default driver", clean(caps.default_driver.as_str())),
        ("max sites", caps.limits.max_sites.to_string()),
        (
            "max sessions",
            caps.limits.max_concurrent_sessions.to_string(),
        ),
        (
            "disk quota",
            format!("{} MiB per site", caps.limits.site_disk_quota_mb),
        ),
    ]);
    out.push('\n');
    out.push_str(&drivers_table(&caps.drivers));
    out.push('\n');
    let rows: Vec<Vec<String>> = caps
        .templates
        .iter()
        .map(|t| vec![clean(&t.id), clean(&t.label), clean(&t.description)])
        .collect();
    out.push_str(&table(&["TEMPLATE", "LABEL", "DESCRIPTION"], &rows));
    out
}

fn build_summary(build: Option<&BuildRecord>) -> String {
    match build {
        None => "none".to_owned(),
        Some(b) => {
            let mut text = format!("{} {}", clean(&b.id), clean(b.outcome.as_str()));
            if let Some(error) = &b.error {
                let _ = write!(text, ": {}", clean(error));
            }
            text
        }
    }
}

/// `sites list`.
pub fn sites(sites: &[SiteStatus]) -> String {
    if sites.is_empty() {
        return "no sites\n".to_owned();
    }
    let rows: Vec<Vec<String>> = sites
        .iter()
        .map(|s| {
            vec![
                clean(&s.manifest.slug),
                clean(&s.manifest.domain),
                clean(&s.session.state),
                s.last_build
                    .as_ref()
                    .map(|b| clean(b.outcome.as_str()))
                    .unwrap_or_else(|| "-".to_owned()),
                or_none(s.preprod.release.as_deref()),
                s.published
                    .as_ref()
                    .map(|p| clean(&p.release))
                    .unwrap_or_else(|| "never".to_owned()),
                clean(&s.manifest.name),
            ]
        })
        .collect();
    table(
        &[
            "SLUG",
            "DOMAIN",
            "SESSION",
            "BUILD",
            "PREPROD",
            "PUBLISHED",
            "NAME",
        ],
        &rows,
    )
}

/// `sites show` and `sites create`.
pub fn site(status: &SiteStatus) -> String {
    let m = &status.manifest;
    let session = match &status.session.session_id {
        Some(id) => format!("{} ({})", clean(&status.session.state), clean(id)),
        None => clean(&status.session.state),
    };
    let published = match &status.published {
        Some(p) => format!(
            "{} at {} by {}",
            clean(&p.release),
            clean(&p.at),
            clean(&p.by)
        ),
        None => "never".to_owned(),
    };
    fields(&[
        ("slug", clean(&m.slug)),
        ("name", clean(&m.name)),
        ("domain", clean(&m.domain)),
        ("template", clean(&m.template)),
        ("driver", clean(m.driver.as_str())),
        ("owner", m.owner_user_id.to_string()),
        ("created", clean(&m.created_at)),
        (
            "build",
            format!(
                "install {:?} · build {:?} · output {}",
                clean(&m.build.install),
                clean(&m.build.build),
                clean(&m.build.output)
            ),
        ),
        ("session", session),
        ("last build", build_summary(status.last_build.as_ref())),
        (
            "preprod",
            format!(
                "{} (release {})",
                clean(&status.preprod.url),
                or_none(status.preprod.release.as_deref())
            ),
        ),
        ("published", published),
    ])
}

/// `sites delete`.
pub fn deleted(report: &DeleteReport) -> String {
    let mut out = format!("deleted {}", clean(&report.deleted));
    // purged_prod echoes the request: what happened is in the surfaces.
    if report.purged_prod {
        if report.removed_surfaces.iter().any(|s| s == "prod") {
            out.push_str(" (production purged)");
        } else {
            out.push_str(" (production NOT purged: see the skipped surfaces)");
        }
    }
    out.push('\n');
    if !report.removed_surfaces.is_empty() {
        let removed: Vec<String> = report.removed_surfaces.iter().map(|s| clean(s)).collect();
        let _ = writeln!(out, "removed surfaces: {}", removed.join(", "));
    }
    for skipped in &report.skipped_surfaces {
        let _ = writeln!(
            out,
            "skipped surface {}: {}",
            clean(&skipped.surface),
            clean(&skipped.reason)
        );
    }
    out
}

/// `session list`.
pub fn sessions(sessions: &[SessionSummary]) -> String {
    if sessions.is_empty() {
        return "no sessions\n".to_owned();
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                clean(&s.session_id),
                clean(&s.started_at),
                s.turns.to_string(),
                clean(&s.state),
            ]
        })
        .collect();
    table(&["SESSION", "STARTED", "TURNS", "STATE"], &rows)
}

/// `build show`.
pub fn build(record: &BuildWithLog, with_log: bool) -> String {
    let b = &record.record;
    let mut out = fields(&[
        ("build", clean(&b.id)),
        ("outcome", clean(b.outcome.as_str())),
        ("started", clean(&b.started_at)),
        ("finished", or_none(b.finished_at.as_deref())),
        ("release", or_none(b.release.as_deref())),
        ("error", or_none(b.error.as_deref())),
    ]);
    if with_log {
        out.push_str("\n--- log ---\n");
        for line in record.log.lines() {
            out.push_str(&clean(line));
            out.push('\n');
        }
    }
    out
}

/// The lines of a growing build log past its first `shown` bytes, each as `| <line>`, and
/// `shown` moved past them. The log comes as sited sends it (see
/// [`BuildWithLog::log_window`]): whole, or only its end with the count of bytes left out
/// before it; bytes that were left out before they could be shown are said to be missing, and
/// the end is shown from its first whole line. While the build runs only whole lines are
/// shown (the last may still be written); once it `ended`, the rest too.
pub fn log_since((skipped, tail): (u64, &str), shown: &mut u64, ended: bool) -> String {
    let mut out = String::new();
    let mut start = usize::try_from(shown.saturating_sub(skipped)).unwrap_or(usize::MAX);
    let jumped = *shown < skipped;
    if jumped {
        start = tail.find('\n').map_or(tail.len(), |i| i + 1);
    }
    // A lossy decoding at the cut can shift the text by a byte or two: never split a character.
    while start < tail.len() && !tail.is_char_boundary(start) {
        start += 1;
    }
    if jumped {
        let missing = (skipped + start as u64).saturating_sub(*shown);
        let _ = writeln!(
            out,
            "| [{missing} bytes of the log not shown: sited keeps only its end]"
        );
    }
    let rest = tail.get(start..).unwrap_or_default();
    let whole = if ended {
        rest.len()
    } else {
        rest.rfind('\n').map_or(0, |i| i + 1)
    };
    if start <= tail.len() {
        *shown = skipped + (start + whole) as u64;
    }
    for line in rest[..whole].lines() {
        out.push_str("| ");
        out.push_str(&clean(line));
        out.push('\n');
    }
    out
}

/// `preview`.
pub fn preview(preview: &Preview) -> String {
    fields(&[
        ("url", clean(&preview.url)),
        ("release", or_none(preview.release.as_deref())),
    ])
}

/// `publish` and `rollback`.
pub fn served(served: &Served) -> String {
    fields(&[
        ("release", clean(&served.release)),
        ("url", clean(&served.url)),
    ])
}

/// `releases`: newest first, the served one marked.
pub fn releases(releases: &Releases) -> String {
    if releases.releases.is_empty() {
        return "no production releases\n".to_owned();
    }
    releases
        .releases
        .iter()
        .map(|r| {
            let mark = if Some(r) == releases.current.as_ref() {
                "*"
            } else {
                " "
            };
            format!("{mark} {}\n", clean(r))
        })
        .collect()
}

/// `audit`.
pub fn audit(entries: &[AuditEntry]) -> String {
    if entries.is_empty() {
        return "no audit entries\n".to_owned();
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                clean(&e.ts),
                format!("{} ({})", clean(&e.actor.username), e.actor.user_id),
                clean(&e.action),
                or_none(e.site.as_deref()),
                cut(&e.detail.to_string(), 200),
            ]
        })
        .collect();
    table(&["TIME", "ACTOR", "ACTION", "SITE", "DETAIL"], &rows)
}

/// One line per session event: seq, type, and the field that matters.
pub fn event_line(event: &StoredEvent) -> String {
    let kind = event.kind().map(clean).unwrap_or_else(|| "?".to_owned());
    let salient = match event.event() {
        Ok(SessionEvent::TurnStart { turn, prompt }) => {
            format!("turn {turn}: {}", cut(&prompt, PROMPT_CHARS))
        }
        Ok(SessionEvent::Text { text, .. }) => clean(&text),
        // The contract's summary already leads with the tool's name.
        Ok(SessionEvent::Tool { summary, .. }) => clean(&summary),
        Ok(SessionEvent::FileChange { files }) => {
            let shown: Vec<String> = files.iter().map(|f| clean(f)).collect();
            format!("{} file(s): {}", files.len(), shown.join(", "))
        }
        Ok(SessionEvent::Result {
            ok,
            cost_usd,
            duration_ms,
            ..
        }) => {
            let mut text = if ok { "ok" } else { "not ok" }.to_owned();
            if let Some(cost) = cost_usd {
                let _ = write!(text, ", cost ${cost:.4}");
            }
            if let Some(ms) = duration_ms {
                let _ = write!(text, ", {:.1} s", ms as f64 / 1000.0);
            }
            text
        }
        Ok(SessionEvent::Error {
            reason,
            message,
            retriable,
        }) => {
            let mut text = match (reason.as_deref(), message.as_deref()) {
                (Some(reason), Some(message)) => format!("{}: {}", clean(reason), clean(message)),
                (reason, message) => or_none(reason.or(message)),
            };
            if retriable == Some(true) {
                text.push_str(" (retriable)");
            }
            text
        }
        Ok(SessionEvent::AgentOutput { source, text, .. }) => match source {
            Some(source) => format!("[{}] {}", clean(&source), clean(&text)),
            None => clean(&text),
        },
        Ok(SessionEvent::ResumeUnavailable { reason }) => or_none(reason.as_deref()),
        Ok(SessionEvent::TurnEnd { state, .. }) => format!("state {}", clean(state.as_str())),
        Err(_) => cut(&event.body.to_string(), 400),
    };
    format!("{:>6}  {kind:<18} {salient}", event.seq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn stored(seq: u64, body: Value) -> StoredEvent {
        StoredEvent {
            seq,
            ts: "2026-01-01T00:00:00Z".into(),
            body,
        }
    }

    #[test]
    fn a_delete_says_production_was_purged_only_when_it_was() {
        use atelier_site_client::model::SkippedSurface;
        let report = |removed: &[&str], skipped: &[(&str, &str)]| DeleteReport {
            deleted: "museo".into(),
            purged_prod: true,
            removed_surfaces: removed.iter().map(|s| (*s).to_owned()).collect(),
            skipped_surfaces: skipped
                .iter()
                .map(|(surface, reason)| SkippedSurface {
                    surface: (*surface).to_owned(),
                    reason: (*reason).to_owned(),
                })
                .collect(),
        };
        assert_eq!(
            deleted(&report(&["preprod", "prod"], &[])),
            "deleted museo (production purged)\nremoved surfaces: preprod, prod\n"
        );
        assert_eq!(
            deleted(&report(
                &["preprod"],
                &[("prod", "marked by instance other")]
            )),
            "deleted museo (production NOT purged: see the skipped surfaces)\n\
             removed surfaces: preprod\nskipped surface prod: marked by instance other\n"
        );
    }

    #[test]
    fn a_growing_log_is_shown_once_line_by_line_and_its_tail_at_the_end() {
        let whole = |log| (0, log);
        let mut shown = 0;
        assert_eq!(
            log_since(whole("$ npm ci\nadded 1 pack"), &mut shown, false),
            "| $ npm ci\n"
        );
        assert_eq!(shown, 9);
        assert_eq!(
            log_since(whole("$ npm ci\nadded 1 pack"), &mut shown, false),
            ""
        );
        let log = "$ npm ci\nadded 1 package\n\u{1b}[31mred\n# done";
        assert_eq!(
            log_since(whole(log), &mut shown, false),
            "| added 1 package\n| \\u{1b}[31mred\n"
        );
        assert_eq!(log_since(whole(log), &mut shown, true), "| # done\n");
        assert_eq!(shown, log.len() as u64);
        assert_eq!(log_since(whole(log), &mut shown, true), "");
        // A log that is shorter than what was shown (it cannot be, but a cap could) shows nothing.
        assert_eq!(log_since(whole("short"), &mut shown, true), "");
        assert_eq!(shown, log.len() as u64);
    }

    /// Past sited's cap a poll gets only the log's end: what follows is still shown, once,
    /// and what was left out before it could be shown is said to be missing.
    #[test]
    fn a_log_sent_without_its_start_is_followed_by_its_offsets() {
        let mut shown = 0;
        assert_eq!(log_since((0, "a\nb\n"), &mut shown, false), "| a\n| b\n");
        // The window moved 2 bytes ("a\n") on: "b" was shown, "c" is new.
        assert_eq!(log_since((2, "b\nc\n"), &mut shown, false), "| c\n");
        assert_eq!(shown, 6);
        // It moved past what was shown: the cut line is left, the gap is told.
        assert_eq!(
            log_since((10, "art\ne\nf"), &mut shown, false),
            "| [8 bytes of the log not shown: sited keeps only its end]\n| e\n"
        );
        assert_eq!(shown, 16);
        assert_eq!(log_since((11, "rt\ne\nf!"), &mut shown, true), "| f!\n");
        // A cut inside a character decodes lossily: nothing is split, nothing repeated.
        let mut shown = 3;
        assert_eq!(
            log_since((1, "\u{fffd}x\ny\n"), &mut shown, false),
            "| x\n| y\n"
        );
    }

    #[test]
    fn event_lines_show_seq_type_and_the_salient_field() {
        let cases: Vec<(&str, StoredEvent, &str)> = vec![
            (
                "turn_start",
                stored(
                    0,
                    json!({"type": "turn_start", "turn": 1, "prompt": "make\nit blue"}),
                ),
                "     0  turn_start         turn 1: make\\nit blue",
            ),
            (
                "text",
                stored(1, json!({"type": "text", "text": "Done."})),
                "     1  text               Done.",
            ),
            (
                "tool",
                stored(
                    2,
                    json!({"type": "tool", "name": "Edit", "summary": "Edit: src/main.ts"}),
                ),
                "     2  tool               Edit: src/main.ts",
            ),
            (
                "file_change",
                stored(
                    3,
                    json!({"type": "file_change", "files": ["a.html", "b.css"]}),
                ),
                "     3  file_change        2 file(s): a.html, b.css",
            ),
            (
                "result",
                stored(
                    4,
                    json!({"type": "result", "ok": true, "costUsd": 0.01234, "durationMs": 1500}),
                ),
                "     4  result             ok, cost $0.0123, 1.5 s",
            ),
            (
                "error",
                stored(
                    5,
                    json!({"type": "error", "reason": "turn_timeout", "retriable": true}),
                ),
                "     5  error              turn_timeout (retriable)",
            ),
            (
                "error with its message",
                stored(
                    5,
                    json!({"type": "error", "reason": "turn_timeout", "retriable": true, "message": "The turn ran past its time limit and was stopped."}),
                ),
                "     5  error              turn_timeout: The turn ran past its time limit and was stopped. (retriable)",
            ),
            (
                "old error",
                stored(
                    5,
                    json!({"type": "error", "message": "setup failed: x", "retriable": false}),
                ),
                "     5  error              setup failed: x",
            ),
            (
                "agent_output",
                stored(
                    6,
                    json!({"type": "agent_output", "source": "stderr", "text": "oops"}),
                ),
                "     6  agent_output       [stderr] oops",
            ),
            (
                "turn_end",
                stored(123456, json!({"type": "turn_end", "state": "idle"})),
                "123456  turn_end           state idle",
            ),
            (
                "unknown",
                stored(7, json!({"type": "thinking", "n": 1})),
                "     7  thinking           {\"n\":1,\"type\":\"thinking\"}",
            ),
        ];
        for (name, event, want) in cases {
            assert_eq!(event_line(&event), want, "{name}");
        }
    }

    #[test]
    fn agent_text_cannot_drive_the_terminal() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "escape sequence",
                "\u{1b}[2J\u{1b}]0;owned\u{7}",
                "\\u{1b}[2J\\u{1b}]0;owned\\u{7}",
            ),
            ("carriage return overwrite", "safe\rEVIL", "safe\\rEVIL"),
            ("bidi override", "abc\u{202e}fed", "abc\\u{202e}fed"),
            ("isolate", "a\u{2066}b\u{2069}", "a\\u{2066}b\\u{2069}"),
            ("nul and del", "a\0b\u{7f}", "a\\u{0}b\\u{7f}"),
            ("c1 control", "a\u{9b}31m", "a\\u{9b}31m"),
            ("plain unicode kept", "¡Olé, museo! 😀", "¡Olé, museo! 😀"),
        ];
        for (name, text, want) in cases {
            assert_eq!(clean(text), *want, "{name}");
            let line = event_line(&stored(0, json!({"type": "text", "text": text})));
            assert!(
                !line.chars().any(|c| c.is_control() || is_reordering(c)),
                "{name}: {line:?}"
            );
        }
    }

    #[test]
    fn tables_align_and_prompts_are_cut() {
        let out = table(
            &["A", "BB", "C"],
            &[
                vec!["xxx".into(), "y".into(), "z".into()],
                vec!["é".into(), "".into(), "last".into()],
            ],
        );
        assert_eq!(out, "A    BB  C\nxxx  y   z\né        last\n");
        let long = "p".repeat(500);
        let line = event_line(&stored(
            0,
            json!({"type": "turn_start", "turn": 1, "prompt": long}),
        ));
        assert!(
            line.ends_with(&format!("{}…", "p".repeat(PROMPT_CHARS))),
            "{line}"
        );
    }

    #[test]
    fn releases_mark_the_served_one() {
        let out = releases(&Releases {
            releases: vec!["r2".into(), "r1".into()],
            current: Some("r1".into()),
        });
        assert_eq!(out, "  r2\n* r1\n");
        let none = releases(&Releases {
            releases: vec![],
            current: None,
        });
        assert_eq!(none, "no production releases\n");
    }
}
