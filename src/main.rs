//! The `vlgo` program: `vlgo` (= `vlgo swiss-roll`) runs the quick-start experiment; see
//! `vlgo --help`.

use std::process::ExitCode;

use manifoldclr::TrainBackend;
use vlgo::args::{Command, parse};
use vlgo::backend::{BackendName, OnBackend};
use vlgo::swiss_roll::{self, default_out_dir};

/// A parsed command, run on the chosen backend.
struct Execute(Command);

impl OnBackend for Execute {
    type Output = ();

    fn run<B: TrainBackend>(self, device: &B::Device) -> vlgo::Result<()> {
        execute::<B>(self.0, device)
    }
}

fn execute<B: TrainBackend>(command: Command, device: &B::Device) -> vlgo::Result<()> {
    match command {
        Command::Help(text) => {
            print!("{text}");
            Ok(())
        }
        Command::Demo => Ok(vlgo::demo::demo::<B>()?),
        Command::SwissRoll { config, out, full } => {
            let out = out.unwrap_or_else(|| default_out_dir(full, config.seed));
            swiss_roll::run::<B>(&config, &out, device).map(|_| ())
        }
        Command::SwissRollGrid(study) => {
            let text = study.run::<B>(device)?;
            println!("{text}");
            println!("study folder: {}", study.out.display());
            Ok(())
        }
        Command::Pretrain {
            config,
            out,
            resume,
        } => {
            let summary = vlgo::pretrain::pretrain::<B>(&config, &out, resume, device)?;
            println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
            println!("run folder: {}", out.display());
            Ok(())
        }
        Command::Compare { runs } => {
            print!("{}", vlgo::compare::compare(&runs)?);
            Ok(())
        }
        Command::Sweep(sweep) => {
            print!("{}", sweep.run::<B>(device)?);
            println!("sweep folder: {}", sweep.out.display());
            Ok(())
        }
        Command::Semisup(args) if args.bench => {
            let mut config = manifoldclr::semisup::SemisupConfig {
                iterations: 200,
                ..Default::default()
            };
            for s in &args.sets {
                config = vlgo::settings::set(&config, s.trim_start_matches("semisup."))?;
            }
            config.validate()?;
            let report = vlgo::semisup::bench::bench::<B>(&config, device)?;
            print!("{report}");
            Ok(())
        }
        Command::Semisup(args) => {
            let summary = vlgo::semisup::run::<B>(&args, device)?;
            println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
            println!("written into {}", args.run.join("semisup").display());
            Ok(())
        }
        Command::Diagnose { run, what } => {
            let result = vlgo::diagnostics::run::<B>(&run, what, device)?;
            println!("{}", serde_json::to_string_pretty(&result).expect("json"));
            println!("written into {}", run.display());
            Ok(())
        }
        Command::Evaluate { run, probe } => {
            let summary = vlgo::pretrain::evaluate_run::<B>(&run, probe, device)?;
            println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    // Burn's CPU backends allocate a fresh buffer for nearly every tensor; keeping freed ones
    // in the heap spares the system's page zeroing (a third of the semi-supervised trainer's
    // time, `docs/semisup.md`, "Speed").
    vlgo_core::cpu::host::keep_freed_buffers();
    // The main thread runs the steps: in rayon's pool, it takes part in their parallel work
    // instead of handing each operation over and sleeping (`docs/pretrain.md`).
    vlgo_core::threads::pool_on_this_thread();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = parse(&args).and_then(|(named, command)| match command {
        // Help needs no backend (a bad VLGO_BACKEND must not hide it).
        Command::Help(text) => {
            print!("{text}");
            Ok(())
        }
        command => {
            let backend = BackendName::choose(named, std::env::var("VLGO_BACKEND").ok())?;
            backend.run(Execute(command))
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The parser's own message already says what is wrong and how to get help.
        Err(vlgo::CliError::Usage(text)) => {
            eprint!("{text}");
            ExitCode::from(2)
        }
        // Bad input, whichever layer named it, exits 2; failures while working exit 1.
        Err(
            e @ (vlgo::CliError::Invalid { .. }
            | vlgo::CliError::Clr(manifoldclr::ClrError::Invalid { .. })),
        ) => {
            eprintln!("vlgo: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("vlgo: {e}");
            ExitCode::FAILURE
        }
    }
}
