//! `concordctl`: Concord's command-line client.
//!
//! `main` only parses arguments (`args.rs`) and hands them to `commands.rs`, which
//! talks to the server through the `concord` SDK and prints with `output.rs`.
//! Exit status: 0 on success (also when stdout's reader goes away, as with `| head`),
//! 1 on a Concord error (printed as `error: CODE: message` on stderr), 2 on a usage
//! error (from clap).

use std::process::ExitCode;

use clap::Parser;

mod args;
mod commands;
mod locks;
mod output;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = args::Cli::parse();
    match commands::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): not a failure.
        Err(err) if err.message() == commands::STDOUT_CLOSED => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}
