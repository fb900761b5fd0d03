//! Host random streams keyed by (seed, step, stream), so that a resumed run draws the same
//! numbers and results do not depend on thread scheduling (the backend RNG state cannot be saved).

use rand::{Rng, SeedableRng};

/// The generator of every seeded stream of the project: ChaCha with 12 rounds, named rather
/// than `rand::rngs::StdRng`, whose algorithm `rand` documents as free to change between
/// versions; a seed gives the same numbers whatever the dependency versions (the first values
/// are pinned by a test).
pub type StreamRng = rand_chacha::ChaCha12Rng;

/// SplitMix64 finaliser: decorrelates nearby keys before they seed a generator.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A family of independent random streams derived from one seed.
///
/// ```
/// use vlgo_core::NoiseStreams;
/// let streams = NoiseStreams::new(7);
/// // The same key always gives the same numbers, whatever was drawn before.
/// assert_eq!(streams.uniform_centered(3, 0, 4), streams.uniform_centered(3, 0, 4));
/// assert_ne!(streams.uniform_centered(3, 0, 4), streams.uniform_centered(3, 1, 4));
/// // Two shards of a batch draw the two halves of the whole batch's numbers.
/// let whole = streams.uniform_centered(3, 0, 4);
/// let halves = [0, 1].map(|rank| streams.shard(rank, 2).unwrap().uniform_centered(3, 0, 2));
/// assert_eq!(halves.concat(), whole);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NoiseStreams {
    seed: u64,
    /// Which of `shards` equal parts of every draw this is (see [`NoiseStreams::shard`]).
    #[serde(default)]
    shard: usize,
    #[serde(default = "one")]
    shards: usize,
}

fn one() -> usize {
    1
}

impl NoiseStreams {
    /// Streams for a run's seed.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            shard: 0,
            shards: 1,
        }
    }

    /// The streams of part `rank` of a batch split in `shards` equal parts (data-parallel
    /// training: one part per device): a draw of `count` numbers returns the `rank`-th block of
    /// `count` among the `count * shards` the whole batch draws, so a batch's noise does not
    /// depend on how many devices share it. A rank outside `0..shards` is an error.
    pub fn shard(self, rank: usize, shards: usize) -> Result<Self, crate::VlgoError> {
        if rank >= shards {
            return Err(crate::VlgoError::invalid(
                "noise shard",
                format!("part {rank} of {shards}"),
                "a part in 0..shards",
            ));
        }
        Ok(Self {
            shard: rank,
            shards,
            ..self
        })
    }

    /// The generator of stream `stream` at step `step` (the whole stream: not sharded).
    pub fn generator(&self, step: u64, stream: u64) -> StreamRng {
        StreamRng::seed_from_u64(mix(mix(self.seed ^ mix(step)) ^ mix(stream.wrapping_add(1))))
    }

    /// `count` draws from U(-1/2, 1/2) for (step, stream): the input of the Laplace
    /// reparameterisation. Row-major `[rows, m]` draws of a sharded stream are the shard's rows.
    pub fn uniform_centered(&self, step: u64, stream: u64, count: usize) -> Vec<f32> {
        let mut rng = self.generator(step, stream);
        // The blocks before this shard's are drawn and dropped: a shard costs at most `shards`
        // times the draws, negligible beside the step they feed.
        (0..count * (self.shard + 1))
            .map(|_| rng.random::<f32>() - 0.5)
            .skip(count * self.shard)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use rand::RngCore;

    use super::*;

    /// The first values of the streams, pinned: a dependency update that changes the generator
    /// (and with it every seeded result) fails here first, loudly.
    #[test]
    fn the_streams_first_values_are_pinned() {
        let streams = NoiseStreams::new(7);
        assert_eq!(
            streams.uniform_centered(3, 0, 3),
            [-0.4952463, 0.46124882, -0.13411093]
        );
        let mut g = streams.generator(0, 0);
        assert_eq!(
            [g.next_u64(), g.next_u64()],
            [16342986632998269409, 12458149381217011437]
        );
        let mut raw = StreamRng::seed_from_u64(0);
        assert_eq!(raw.next_u64(), 13486662071293341567);
    }
}
