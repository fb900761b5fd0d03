//! vlgo-datasets' integration suite (one test binary).

mod augment;
mod readers;
mod synthetic;

/// A fresh, empty folder for one test, removed when the returned guard drops (also when the
/// test fails).
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vlgo-datasets-{name}-"))
        .tempdir()
        .unwrap()
}
