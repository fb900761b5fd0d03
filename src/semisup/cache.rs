//! The frozen features of a run, extracted once (evaluation transform, evaluation mode) and kept
//! in `semisup/features.bin` beside the results, keyed by the checkpoint's step count so that a
//! run trained further is embedded anew.
//!
//! Layout (little-endian): the 8 bytes `VLGOFEAT`, u32 version 1, u64 checkpoint steps, u64
//! training rows, u64 test rows, u64 dimension, then the training values (f32), the training
//! labels (u16), the test values and the test labels.

use std::fs;
use std::path::Path;

use manifoldclr::Features;

use crate::error::{CliError, Result};

const MAGIC: &[u8; 8] = b"VLGOFEAT";
const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 4 * 8;

/// Writes both sets through a temporary file renamed over the old one.
pub fn write(path: &Path, steps: u64, train: &Features, test: &Features) -> Result<()> {
    let mut bytes = Vec::with_capacity(HEADER + 4 * (train.values.len() + test.values.len()));
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    for v in [
        steps,
        train.len() as u64,
        test.len() as u64,
        train.dim as u64,
    ] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    for set in [train, test] {
        bytes.extend(set.values.iter().flat_map(|v| v.to_le_bytes()));
        bytes.extend(set.labels.iter().flat_map(|l| l.to_le_bytes()));
    }
    let tmp = path.with_extension("bin.tmp");
    fs::write(&tmp, bytes).map_err(CliError::io(&tmp))?;
    fs::rename(&tmp, path).map_err(CliError::io(path))
}

/// The cached sets when the file holds features of checkpoint step `steps`; None when there is
/// no file or it belongs to another checkpoint; an error naming the file when it is damaged.
pub fn read(path: &Path, steps: u64) -> Result<Option<(Features, Features)>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CliError::io(path)(e)),
    };
    let bad = |expected: String| CliError::invalid("feature cache", path.display(), expected);
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(bad(format!(
            "a file starting with {:?} and a {HEADER}-byte header (delete it to re-extract)",
            String::from_utf8_lossy(MAGIC)
        )));
    }
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(format!("version {VERSION}, found {version}")));
    }
    if u64_at(12) != steps {
        return Ok(None);
    }
    let (n_train, n_test, dim) = (
        u64_at(20) as usize,
        u64_at(28) as usize,
        u64_at(36) as usize,
    );
    // Checked: a damaged header's counts must be an error, not an overflow.
    let want = (n_train.checked_add(n_test))
        .and_then(|rows| rows.checked_mul(dim.checked_mul(4)?.checked_add(2)?))
        .and_then(|body| body.checked_add(HEADER))
        .unwrap_or(usize::MAX);
    if bytes.len() != want {
        return Err(bad(format!(
            "{want} bytes for {n_train} + {n_test} rows of {dim}, found {} (delete it to \
             re-extract)",
            bytes.len()
        )));
    }
    let mut at = HEADER;
    let mut take = |rows: usize| -> Result<Features> {
        let values: Vec<f32> = bytes[at..at + 4 * rows * dim]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        at += 4 * rows * dim;
        let labels: Vec<u16> = bytes[at..at + 2 * rows]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes(c.try_into().expect("2 bytes")))
            .collect();
        at += 2 * rows;
        Ok(Features::new(values, dim, labels)?)
    };
    let train = take(n_train)?;
    let test = take(n_test)?;
    Ok(Some((train, test)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_round_trip_and_damage_is_named() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_path_buf();
        let path = dir.join("features.bin");
        let train = Features::new(vec![1.0, -2.0, 3.5, 0.25], 2, vec![0, 1]).unwrap();
        let test = Features::new(vec![7.0, 8.0], 2, vec![1]).unwrap();
        write(&path, 42, &train, &test).unwrap();
        assert_eq!(read(&path, 42).unwrap(), Some((train, test)));
        assert_eq!(read(&path, 43).unwrap(), None, "another checkpoint");
        let mut bytes = fs::read(&path).unwrap();
        bytes.pop();
        fs::write(&path, &bytes).unwrap();
        let err = read(&path, 42).unwrap_err().to_string();
        assert!(err.contains("found") && err.contains("bytes"), "{err}");
        // A header whose counts overflow: named, not a panic.
        let mut huge = fs::read(&path).unwrap();
        huge[36..44].copy_from_slice(&u64::MAX.to_le_bytes());
        fs::write(&path, &huge).unwrap();
        let err = read(&path, 42).unwrap_err().to_string();
        assert!(err.contains("found") && err.contains("bytes"), "{err}");
        fs::write(&path, b"not a cache").unwrap();
        assert!(
            read(&path, 42)
                .unwrap_err()
                .to_string()
                .contains("VLGOFEAT")
        );
        assert_eq!(read(&dir.join("absent.bin"), 0).unwrap(), None);
    }
}
