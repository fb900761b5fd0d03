//! vlgo-datasets' integration suite (one test binary).

mod augment;
mod readers;
mod synthetic;

/// A fresh, empty folder for one test.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vlgo-datasets-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
