//! Host random streams keyed by (seed, a, b): the same key gives the same numbers whatever ran
//! before, so shuffles and partner draws do not depend on call order or thread scheduling.

use rand::SeedableRng;
use rand::rngs::StdRng;

/// A generator for the stream (seed, a, b).
pub fn stream(seed: u64, a: u64, b: u64) -> StdRng {
    // SplitMix64 finalisers decorrelate neighbouring keys before they seed the generator.
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    StdRng::seed_from_u64(mix(mix(mix(seed) ^ a) ^ b.rotate_left(32)))
}
