//! Positive pairs from nearest neighbours: a point's partner is drawn uniformly from its k1-th to
//! k2-th nearest neighbours (the point itself is not its own neighbour).

use rand::Rng;
use rand::seq::SliceRandom;

use crate::error::{DatasetError, Result};
use crate::rng::stream;

/// Exact neighbour lists (ranks k1..=k2, 1-based) of every point, computed once.
#[derive(Debug, Clone)]
pub struct NeighbourPairs {
    k1: usize,
    k2: usize,
    /// Row i holds the indices of point i's neighbours of rank k1..=k2, nearest first.
    ranks: Vec<usize>,
}

impl NeighbourPairs {
    /// Finds the neighbours by brute force (every distance, ties broken by index), so the lists
    /// are exact and reproducible. Needs 1 <= k1 <= k2 < number of points.
    ///
    /// ```
    /// use vlgo_datasets::NeighbourPairs;
    /// let line: Vec<[f32; 3]> = (0..10).map(|i| [i as f32, 0.0, 0.0]).collect();
    /// let pairs = NeighbourPairs::new(&line, 1, 2).unwrap();
    /// assert_eq!(pairs.neighbours(0), &[1, 2]);
    /// assert!(NeighbourPairs::new(&line, 3, 2).is_err());
    /// assert!(NeighbourPairs::new(&line, 1, 10).is_err());
    /// ```
    pub fn new(points: &[[f32; 3]], k1: usize, k2: usize) -> Result<Self> {
        if k1 == 0 {
            return Err(DatasetError::invalid(
                "k1",
                0,
                "must be >= 1 (rank 0 is the point itself)",
            ));
        }
        if k1 > k2 {
            return Err(DatasetError::invalid(
                "neighbour ranks k1..k2",
                format!("{k1}..{k2}"),
                "k1 must be <= k2",
            ));
        }
        if points.len() <= k2 {
            return Err(DatasetError::invalid(
                "number of points",
                points.len(),
                format!("needs more points than k2 = {k2} neighbours"),
            ));
        }
        if let Some(i) = points.iter().position(|p| p.iter().any(|x| !x.is_finite())) {
            return Err(DatasetError::invalid(
                "point coordinates",
                format!("{:?} at index {i}", points[i]),
                "must be finite",
            ));
        }
        let width = k2 - k1 + 1;
        let mut ranks = Vec::with_capacity(points.len() * width);
        let mut order: Vec<(f32, usize)> = Vec::with_capacity(points.len());
        for (i, p) in points.iter().enumerate() {
            order.clear();
            order.extend(
                points
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(j, q)| {
                        let d: f32 = p.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum();
                        (d, j)
                    }),
            );
            let by_distance =
                |a: &(f32, usize), b: &(f32, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
            order.select_nth_unstable_by(k2 - 1, by_distance);
            let nearest = &mut order[..k2];
            nearest.sort_unstable_by(by_distance);
            ranks.extend(nearest[k1 - 1..].iter().map(|&(_, j)| j));
        }
        Ok(Self { k1, k2, ranks })
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.ranks.len() / (self.k2 - self.k1 + 1)
    }

    /// Whether there are no points (never, once built).
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// Point i's neighbours of rank k1..=k2, nearest first.
    pub fn neighbours(&self, i: usize) -> &[usize] {
        let width = self.k2 - self.k1 + 1;
        &self.ranks[i * width..(i + 1) * width]
    }

    /// One epoch of (anchor, partner) batches: the anchors are a shuffle of all points keyed by
    /// (seed, epoch), cut into batches of `batch` (the last may be shorter); each partner is drawn
    /// uniformly from the anchor's k1..=k2 neighbours by a stream keyed by (seed, epoch, batch).
    pub fn epoch(&self, seed: u64, epoch: u64, batch: usize) -> Vec<Vec<(usize, usize)>> {
        let mut anchors: Vec<usize> = (0..self.len()).collect();
        anchors.shuffle(&mut stream(seed, epoch, u64::MAX));
        anchors
            .chunks(batch.max(1))
            .enumerate()
            .map(|(b, chunk)| {
                let mut rng = stream(seed, epoch, b as u64);
                chunk
                    .iter()
                    .map(|&i| {
                        let nb = self.neighbours(i);
                        (i, nb[rng.random_range(0..nb.len())])
                    })
                    .collect()
            })
            .collect()
    }
}
