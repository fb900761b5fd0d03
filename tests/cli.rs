//! The `vlgo` program as a user meets it: help, and a clear error with a non-zero exit for a
//! command it does not know (never a panic).

use std::process::Command;

fn vlgo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vlgo"))
        .args(args)
        .output()
        .expect("the vlgo binary runs")
}

#[test]
fn help_prints_usage() {
    let out = vlgo(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("usage: vlgo"));
}

#[test]
fn unknown_command_is_a_clear_error() {
    let out = vlgo(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown command \"frobnicate\""), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
