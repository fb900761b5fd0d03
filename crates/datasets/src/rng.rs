//! Host random streams keyed by (seed, a, b): the same key gives the same numbers whatever ran
//! before, so shuffles and partner draws do not depend on call order or thread scheduling.

use rand::SeedableRng;

/// The named generator of the streams (ChaCha, 12 rounds; `rand`'s `StdRng` may change its
/// algorithm between versions). The same as `vlgo_core::StreamRng`.
pub type StreamRng = rand_chacha::ChaCha12Rng;

/// A generator for the stream (seed, a, b).
pub fn stream(seed: u64, a: u64, b: u64) -> StreamRng {
    // SplitMix64 finalisers decorrelate neighbouring keys before they seed the generator.
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    StreamRng::seed_from_u64(mix(mix(mix(seed) ^ a) ^ b.rotate_left(32)))
}
