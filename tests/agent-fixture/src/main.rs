//! atelier-test-agent's entry point: run the script and exit with its code.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(atelier_test_agent::run(&args));
}
