//! Label splits and the batch streams of the semi-supervised trainer.
//!
//! Every random choice is drawn from a host stream keyed by (seed, labels per class, split,
//! purpose), so every method of a split sees the same labelled set, the same initial classifier
//! and the same sequence of batches (a paired comparison), whatever the other splits trained
//! beside it.

use rand::Rng;
use rand::seq::index;
use vlgo_core::NoiseStreams;
use vlgo_core::StreamRng;

use crate::error::{ClrError, Result};

/// What a stream is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// The labelled rows of the split.
    Labels = 0,
    /// The classifier's initial weights.
    Init = 1,
    /// The labelled and unlabelled batches.
    Batches = 2,
    /// What a method draws on its own (mix partners and weights, prior noise, dropout).
    Method = 3,
}

/// The generator of `purpose` for split `split` at `per_class` labels per class.
pub(crate) fn stream(seed: u64, per_class: usize, split: u64, purpose: Purpose) -> StreamRng {
    let key = ((per_class as u64) << 40) ^ split;
    NoiseStreams::new(seed).generator(key, purpose as u64)
}

/// A class-balanced label split: `per_class` rows of each of `classes` classes, drawn without
/// replacement by the stream of (`seed`, `per_class`, `split`). Returns the row indices, class
/// by class, each class's rows in increasing order.
///
/// ```
/// use manifoldclr::semisup::label_split;
/// let labels = [0u16, 1, 0, 1, 0, 1, 2, 2];
/// let rows = label_split(&labels, 3, 2, 0, 7).unwrap();
/// assert_eq!(rows.len(), 6);
/// assert!(rows.iter().filter(|&&r| labels[r] == 2).count() == 2);
/// // A class with fewer rows than asked for is an error, not a smaller split.
/// assert!(label_split(&labels, 3, 3, 0, 7).is_err());
/// ```
pub fn label_split(
    labels: &[u16],
    classes: usize,
    per_class: usize,
    seed: u64,
    split: u64,
) -> Result<Vec<usize>> {
    if per_class == 0 || classes == 0 {
        return Err(ClrError::invalid(
            "labels per class",
            format!("{per_class} labels of {classes} classes"),
            "at least one label of at least one class",
        ));
    }
    let mut by_class = vec![Vec::new(); classes];
    for (row, &label) in labels.iter().enumerate() {
        let class = by_class.get_mut(usize::from(label)).ok_or_else(|| {
            ClrError::invalid(
                "label",
                format!("{label} at row {row}"),
                format!("a class below {classes}"),
            )
        })?;
        class.push(row);
    }
    if let Some((class, rows)) = by_class
        .iter()
        .enumerate()
        .find(|(_, rows)| rows.len() < per_class)
    {
        return Err(ClrError::invalid(
            "labels per class",
            per_class,
            format!(
                "at most the {} training rows of class {class} (the smallest class)",
                rows.len()
            ),
        ));
    }
    let mut rng = stream(seed, per_class, split, Purpose::Labels);
    let mut chosen = Vec::with_capacity(per_class * classes);
    for rows in &by_class {
        let mut picked: Vec<usize> = index::sample(&mut rng, rows.len(), per_class)
            .into_iter()
            .map(|i| rows[i])
            .collect();
        picked.sort_unstable();
        chosen.extend(picked);
    }
    Ok(chosen)
}

/// The rows of `0..rows` not in `labelled` (sorted): the unlabelled set, as in the published
/// code (the labelled rows are not reused without their labels).
pub(crate) fn unlabelled_rows(rows: usize, labelled: &[usize]) -> Vec<usize> {
    let mut taken = vec![false; rows];
    for &r in labelled {
        taken[r] = true;
    }
    (0..rows).filter(|&r| !taken[r]).collect()
}

/// `count` distinct entries of `pool`, uniformly (a random batch without replacement).
pub(crate) fn batch(rng: &mut StreamRng, pool: &[usize], count: usize) -> Vec<usize> {
    index::sample(rng, pool.len(), count)
        .into_iter()
        .map(|i| pool[i])
        .collect()
}

/// `count` draws of U(0, 1).
pub(crate) fn uniform(rng: &mut StreamRng, count: usize) -> Vec<f32> {
    (0..count).map(|_| rng.random::<f32>()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<u16> {
        (0..300).map(|i| (i % 3) as u16).collect()
    }

    #[test]
    fn a_split_is_class_balanced_distinct_and_reproducible() {
        let labels = labels();
        let a = label_split(&labels, 3, 5, 0, 1).unwrap();
        assert_eq!(a.len(), 15);
        for class in 0..3 {
            assert_eq!(a.iter().filter(|&&r| labels[r] == class).count(), 5);
        }
        let mut sorted = a.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 15, "rows drawn without replacement");
        assert_eq!(a, label_split(&labels, 3, 5, 0, 1).unwrap());
        assert_ne!(a, label_split(&labels, 3, 5, 0, 2).unwrap());
        assert_ne!(a, label_split(&labels, 3, 5, 1, 1).unwrap());
    }

    #[test]
    fn bad_splits_are_named_errors() {
        let labels = labels();
        let err = label_split(&labels, 3, 101, 0, 0).unwrap_err().to_string();
        assert!(
            err.contains("101") && err.contains("100 training rows"),
            "{err}"
        );
        assert!(label_split(&labels, 3, 0, 0, 0).is_err());
        let err = label_split(&labels, 2, 1, 0, 0).unwrap_err().to_string();
        assert!(err.contains("a class below 2"), "{err}");
    }

    #[test]
    fn unlabelled_rows_are_the_complement() {
        assert_eq!(unlabelled_rows(6, &[4, 1]), vec![0, 2, 3, 5]);
        let mut rng = stream(0, 5, 0, Purpose::Batches);
        let b = batch(&mut rng, &[10, 20, 30, 40], 4);
        let mut s = b.clone();
        s.sort_unstable();
        assert_eq!(s, vec![10, 20, 30, 40]);
    }
}
