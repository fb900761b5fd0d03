//! Run folders: `config.toml`, `metrics.jsonl`, `summary.json`, `plots/` (`docs/pretrain.md`).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{CliError, Result};

/// A run's output folder. Creating one never touches a folder that already holds files, so a
/// run cannot overwrite an earlier one.
#[derive(Debug)]
pub struct RunFolder {
    path: PathBuf,
}

impl RunFolder {
    /// Creates `path` (and its parents); refuses a non-empty existing folder or a file.
    pub fn create(path: &Path) -> Result<Self> {
        if path.exists() {
            let occupied = !path.is_dir()
                || fs::read_dir(path)
                    .map_err(CliError::io(path))?
                    .next()
                    .is_some();
            if occupied {
                return Err(CliError::invalid(
                    "--out",
                    path.display(),
                    "expected a new or empty folder (a run never overwrites another)",
                ));
            }
        }
        fs::create_dir_all(path).map_err(CliError::io(path))?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// An existing run folder, to continue or to add to.
    pub fn existing(path: &Path) -> Result<Self> {
        if !path.is_dir() {
            return Err(CliError::invalid(
                "run folder",
                path.display(),
                "an existing run folder",
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `plots/`, created on first use.
    pub fn plots_dir(&self) -> Result<PathBuf> {
        let dir = self.path.join("plots");
        fs::create_dir_all(&dir).map_err(CliError::io(&dir))?;
        Ok(dir)
    }

    /// Writes `value` as TOML.
    pub fn write_toml(&self, name: &str, value: &impl Serialize) -> Result<()> {
        let path = self.path.join(name);
        let text = toml::to_string_pretty(value)
            .map_err(|e| CliError::invalid(name, "an unserialisable value", e))?;
        fs::write(&path, text).map_err(CliError::io(path))
    }

    /// Writes `value` as pretty JSON, through a temporary file renamed over the old one, so an
    /// interrupted write leaves the previous file whole.
    pub fn write_json(&self, name: &str, value: &impl Serialize) -> Result<()> {
        let path = self.path.join(name);
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| CliError::invalid(name, "an unserialisable value", e))?;
        let tmp = self.path.join(format!(".{name}.tmp"));
        fs::write(&tmp, text + "\n").map_err(CliError::io(&tmp))?;
        fs::rename(&tmp, &path).map_err(CliError::io(path))
    }

    /// `summary.json` as it stands (an empty object when there is none yet).
    pub fn summary(&self) -> Result<serde_json::Value> {
        let path = self.path.join("summary.json");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(serde_json::json!({})),
            Err(e) => return Err(CliError::io(&path)(e)),
        };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            CliError::invalid("summary.json", path.display(), format!("valid JSON: {e}"))
        })?;
        match value.is_object() {
            true => Ok(value),
            false => Err(CliError::invalid(
                "summary.json",
                path.display(),
                "a JSON object",
            )),
        }
    }

    /// Sets `key` of `summary.json` to `value`, keeping everything else in it.
    pub fn update_summary(&self, key: &str, value: &serde_json::Value) -> Result<()> {
        let mut summary = self.summary()?;
        summary[key] = value.clone();
        self.write_json("summary.json", &summary)
    }

    /// Creates a JSON-lines file for writing one object per line.
    pub fn jsonl(&self, name: &str) -> Result<JsonLines> {
        self.open_jsonl(name, false)
    }

    /// Opens a JSON-lines file to append to what it holds (a resumed run).
    pub fn jsonl_append(&self, name: &str) -> Result<JsonLines> {
        self.open_jsonl(name, true)
    }

    fn open_jsonl(&self, name: &str, append: bool) -> Result<JsonLines> {
        let path = self.path.join(name);
        let file = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(CliError::io(&path))?;
        Ok(JsonLines {
            path,
            out: BufWriter::new(file),
        })
    }
}

/// A JSON-lines writer, flushed after every line so an interrupted run keeps what it logged.
#[derive(Debug)]
pub struct JsonLines {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonLines {
    /// Appends one object.
    pub fn write(&mut self, value: &serde_json::Value) -> Result<()> {
        let io = CliError::io(&self.path);
        writeln!(self.out, "{value}")
            .and_then(|()| self.out.flush())
            .map_err(io)
    }
}
