//! atelier-dbus-probe: asks PID 1 over D-Bus what a test inside a [`SystemdBox`] needs to
//! know, through `atelier-systemd` (the same calls sited makes), and prints one line per
//! question. A refusal prints `refused <reason> <kind>: <message>` and still exits 0: the
//! refusal is the answer under test. Usage errors exit 2.
//!
//! [`SystemdBox`]: atelier_systemd_tests::SystemdBox

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use atelier_layout::{Declaration, Door, Layout, SiteOrdinal};
use atelier_systemd::{
    door_expectations, DoorFacts, Error, Killed, Signal, Stopped, Systemd, UnitKind, UnitStatus,
};
use clap::{Parser, Subcommand};

/// Ask PID 1 one question over D-Bus.
#[derive(Debug, Parser)]
struct Args {
    /// The bus to use instead of the system bus.
    #[arg(long)]
    bus: Option<String>,
    #[command(subcommand)]
    question: Question,
}

#[derive(Debug, Subcommand)]
enum Question {
    /// PID 1's release.
    Version,
    /// PID 1's release, refused below MIN.
    RequireVersion { min: u32 },
    /// The state of every unit matching the patterns, one per line.
    Units { patterns: Vec<String> },
    /// The same for those that still hold a run (not stopped, or stopped with tasks left).
    Live { patterns: Vec<String> },
    /// One unit's state.
    State { unit: String },
    /// The properties PID 1 loaded for a unit, one `Name=value` per line.
    Properties { unit: String, names: Vec<String> },
    /// A door's socket, target and service checked against what Atelier expects.
    ConformDoor {
        /// The instance declaration the door was rendered from.
        #[arg(long)]
        declaration: PathBuf,
        /// The site's ordinal.
        #[arg(long)]
        site: u64,
        /// The site's slug.
        #[arg(long)]
        slug: String,
        /// turn, build or git.
        #[arg(long)]
        door: String,
        /// Expect what Atelier expects of this release instead of PID 1's own.
        #[arg(long)]
        assume_version: Option<u32>,
    },
    /// StopUnit.
    Stop { unit: String },
    /// KillUnit with a signal number.
    Kill { unit: String, signal: i32 },
    /// Waits until PID 1 reports the unit gone, at most SECONDS.
    WaitGone { unit: String, seconds: f64 },
    /// NConnections of a socket unit.
    Connections { socket: String },
    /// StartUnit, which Atelier never calls: prints the D-Bus error name PID 1 answers with.
    Start { unit: String },
    /// Times conform-door of one door against a baseline of reading PID 1's Version, both
    /// ROUNDS times in this process; prints the medians and their ratio.
    BenchConform {
        /// The instance declaration the door was rendered from.
        #[arg(long)]
        declaration: PathBuf,
        /// The site's ordinal.
        #[arg(long)]
        site: u64,
        /// The site's slug.
        #[arg(long)]
        slug: String,
        /// turn, build or git.
        #[arg(long)]
        door: String,
        /// How many times each.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
    },
    /// Connects to a unix socket and holds the connection until killed.
    Hold { path: PathBuf },
}

fn refused(error: &Error) -> String {
    let kind = match error {
        Error::BusUnavailable { .. } => "bus-unavailable",
        Error::VersionUnreadable { .. } => "version-unreadable",
        Error::TooOld { .. } => "too-old",
        Error::Unreadable { .. } => "unreadable",
        Error::Denied { .. } => "denied",
        Error::Refused { .. } => "refused",
        Error::BadName(_) => "bad-name",
        Error::StillAlive { .. } => "still-alive",
        Error::Nonconformant(n) => {
            return format!(
                "refused {} nonconformant unit={} property={}: {error}",
                error.reason().refusal().as_str(),
                n.unit,
                n.property.name
            )
        }
    };
    format!(
        "refused {} {kind}: {error}",
        error.reason().refusal().as_str()
    )
}

fn door(name: &str) -> anyhow::Result<Door> {
    Door::ALL
        .into_iter()
        .find(|d| d.as_str() == name)
        .with_context(|| format!("{name:?} is not a door"))
}

/// One line per unit, `name load active sub`, or the refusal.
fn unit_lines(units: Result<Vec<UnitStatus>, Error>) -> String {
    match units {
        Ok(units) => units
            .iter()
            .map(|u| {
                format!(
                    "{} {} {} {}",
                    u.name, u.load_state, u.active_state, u.sub_state
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => refused(&e),
    }
}

async fn ask(systemd: &Systemd, question: Question) -> anyhow::Result<String> {
    let line = match question {
        Question::Version => match systemd.version().await {
            Ok(v) => v.to_string(),
            Err(e) => refused(&e),
        },
        Question::RequireVersion { min } => match systemd.require_version(min).await {
            Ok(v) => format!("ok {v}"),
            Err(e) => refused(&e),
        },
        Question::Units { patterns } => {
            let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
            unit_lines(systemd.units_matching(&patterns).await)
        }
        Question::Live { patterns } => {
            let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
            unit_lines(systemd.live_units(&patterns).await)
        }
        Question::State { unit } => match systemd.unit_state(&unit).await {
            Ok(u) => format!("{} {} {}", u.load_state, u.active_state, u.sub_state),
            Err(e) => refused(&e),
        },
        Question::Properties { unit, names } => {
            let kind = UnitKind::of(&unit).with_context(|| format!("{unit}: no kind"))?;
            match systemd.properties(&unit, kind).await {
                Ok(loaded) => loaded
                    .properties
                    .iter()
                    .filter(|((_, name), _)| names.is_empty() || names.contains(name))
                    .map(|((_, name), value)| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Err(e) => refused(&e),
            }
        }
        Question::ConformDoor {
            declaration,
            site,
            slug,
            door: name,
            assume_version,
        } => {
            let decl = Declaration::load(&declaration)
                .with_context(|| format!("loading {}", declaration.display()))?;
            let layout = Layout::new(&decl);
            let site_decl = decl
                .sites
                .iter()
                .find(|s| s.slug == slug)
                .with_context(|| format!("no site {slug}"))?;
            let k = SiteOrdinal::new(site)?;
            let version = match (assume_version, systemd.version().await) {
                (Some(v), _) | (None, Ok(v)) => v,
                (None, Err(e)) => return Ok(refused(&e)),
            };
            let facts = DoorFacts::from_layout(&layout, k, site_decl, door(&name)?, version);
            match systemd.conform_door(&door_expectations(&facts)).await {
                Ok(()) => "conformant".to_owned(),
                Err(e) => refused(&e),
            }
        }
        Question::Stop { unit } => match systemd.stop(&unit).await {
            Ok(Stopped::Queued { .. }) => "queued".to_owned(),
            Ok(Stopped::NotLoaded) => "not-loaded".to_owned(),
            Err(e) => refused(&e),
        },
        Question::Kill { unit, signal } => match systemd.kill(&unit, Signal::new(signal)?).await {
            Ok(Killed::Signalled) => "signalled".to_owned(),
            Ok(Killed::NotLoaded) => "not-loaded".to_owned(),
            Err(e) => refused(&e),
        },
        Question::WaitGone { unit, seconds } => {
            let started = Instant::now();
            let deadline = started + Duration::from_secs_f64(seconds);
            match systemd.wait_gone(&unit, deadline).await {
                Ok(()) => format!("gone after {} ms", started.elapsed().as_millis()),
                Err(e) => refused(&e),
            }
        }
        Question::Connections { socket } => match systemd.socket_connections(&socket).await {
            Ok(n) => n.to_string(),
            Err(e) => refused(&e),
        },
        Question::Start { unit } => {
            let reply = systemd
                .connection()
                .call_method(
                    Some("org.freedesktop.systemd1"),
                    "/org/freedesktop/systemd1",
                    Some("org.freedesktop.systemd1.Manager"),
                    "StartUnit",
                    &(unit.as_str(), "replace"),
                )
                .await;
            match reply {
                Ok(_) => "started".to_owned(),
                Err(zbus::Error::MethodError(name, _, _)) => format!("error {}", name.as_str()),
                Err(other) => format!("error {other}"),
            }
        }
        Question::BenchConform {
            declaration,
            site,
            slug,
            door: name,
            rounds,
        } => {
            let decl = Declaration::load(&declaration)
                .with_context(|| format!("loading {}", declaration.display()))?;
            let layout = Layout::new(&decl);
            let site_decl = decl
                .sites
                .iter()
                .find(|s| s.slug == slug)
                .with_context(|| format!("no site {slug}"))?;
            let version = systemd.version().await?;
            let facts = DoorFacts::from_layout(
                &layout,
                SiteOrdinal::new(site)?,
                site_decl,
                door(&name)?,
                version,
            );
            let expectations = door_expectations(&facts);
            let mut baseline = Vec::with_capacity(rounds);
            let mut conform = Vec::with_capacity(rounds);
            for _ in 0..rounds.max(1) {
                let started = Instant::now();
                systemd.version().await?;
                baseline.push(started.elapsed());
                let started = Instant::now();
                systemd.conform_door(&expectations).await?;
                conform.push(started.elapsed());
            }
            let median = |times: &mut Vec<Duration>| {
                times.sort();
                times[times.len() / 2]
            };
            let (baseline, conform) = (median(&mut baseline), median(&mut conform));
            format!(
                "version_p50_us={} conform_door_p50_us={} ratio={:.1}",
                baseline.as_micros(),
                conform.as_micros(),
                conform.as_secs_f64() / baseline.as_secs_f64().max(1e-9)
            )
        }
        Question::Hold { path } => {
            let _connection = tokio::net::UnixStream::connect(&path)
                .await
                .with_context(|| format!("connecting to {}", path.display()))?;
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    };
    Ok(line)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("atelier-dbus-probe: {e}");
            return ExitCode::from(2);
        }
    };
    let answer = runtime.block_on(async {
        let systemd = match &args.bus {
            Some(address) => Systemd::at(address).await,
            None => Systemd::system().await,
        };
        match systemd {
            Ok(systemd) => ask(&systemd, args.question).await,
            Err(e) => Ok(refused(&e)),
        }
    });
    match answer {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("atelier-dbus-probe: {e:#}");
            ExitCode::from(2)
        }
    }
}
