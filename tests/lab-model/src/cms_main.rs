//! atelier-lab-cms's entry point: a test stand-in for the CMS's session, content and
//! tool-result routes on a loopback address, and optionally for its Publication API's MCP
//! endpoint on another (`--help`).

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;

/// TEST FIXTURE: a stand-in for the CMS's `GET /admin/api/cms/me`, its content read routes
/// (data tables, rows, search, authors, users, media) and `POST /admin/api/ai/tool-result` on
/// loopback, knowing three users (an editor with the AI capabilities, a client without them and
/// an author of their own posts) by fixed session cookies, and a small seeded blog; with
/// --publication-listen, also for the Publication API's MCP endpoint.
#[derive(Debug, Parser)]
#[command(name = "atelier-lab-cms")]
struct Args {
    /// The loopback address to listen on, e.g. 127.0.0.1:3001.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Also serve the Publication API's stand-in on this loopback address: a minimal MCP
    /// server at /mcp with one tool, publication_search (what a turn door's relay reaches).
    #[arg(long, value_name = "ADDR:PORT")]
    publication_listen: Option<SocketAddr>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match atelier_lab_model::cms::run(args.listen, args.publication_listen) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("atelier-lab-cms: {error}");
            ExitCode::FAILURE
        }
    }
}
