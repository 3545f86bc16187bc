//! Which unflushed blocks survive a power cut.
//!
//! A real disk may have written part of its cache to the medium before the power went. Which
//! part is decided here, per block, by a hash of the seed and the block's number alone:
//! block `b` survives when `hash(seed, b)`, read as a number in [0, 1), is below the keep
//! fraction. So the choice does not depend on the order in which the writes arrived (the
//! daemon serves them on several threads, in an order the kernel decides): the same seed and
//! the same set of unflushed blocks give the same survivors, and two disks with different
//! seeds keep different subsets of the same blocks. The price: with one seed, a given block
//! number is always on the same side (for a fraction F, exactly the blocks whose hash is
//! below F), so tests that want variety use several seeds.

/// SplitMix64's finaliser (Steele, Lea and Flood, 2014): a bijection on u64 whose output bits
/// all depend on every input bit, which is all a per-block coin needs. No crate for one
/// function.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The block's coin for this seed, in [0, 1) with 53 bits of precision (an f64's mantissa).
pub fn coin(seed: u64, block: u64) -> f64 {
    // Hashing the block before mixing in the seed keeps seeds s and s ^ b from swapping the
    // coins of blocks b and 0.
    let h = splitmix64(seed ^ splitmix64(block));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// True when block `block`'s unflushed contents reach the medium before the power goes.
/// `fraction` 0 keeps nothing and 1 keeps everything (the coin is always below 1).
pub fn survives(seed: u64, block: u64, fraction: f64) -> bool {
    coin(seed, block) < fraction
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(seed: u64, blocks: impl Iterator<Item = u64>, f: f64) -> Vec<u64> {
        blocks.filter(|&b| survives(seed, b, f)).collect()
    }

    #[test]
    fn zero_keeps_nothing_and_one_keeps_everything() {
        for seed in [0, 1, 42, u64::MAX] {
            assert!(kept(seed, 0..10_000, 0.0).is_empty());
            assert_eq!(kept(seed, 0..10_000, 1.0).len(), 10_000);
        }
    }

    #[test]
    fn the_same_seed_keeps_the_same_blocks_whatever_the_order() {
        let forward = kept(7, 0..5000, 0.5);
        let mut backward = kept(7, (0..5000).rev(), 0.5);
        backward.reverse();
        assert_eq!(forward, backward);
        assert_eq!(forward, kept(7, 0..5000, 0.5));
    }

    #[test]
    fn different_seeds_keep_different_blocks() {
        let a = kept(1, 0..5000, 0.5);
        let b = kept(2, 0..5000, 0.5);
        assert_ne!(a, b);
        // Independent coins: about a quarter of the blocks are kept by both.
        let both = a.iter().filter(|x| b.binary_search(x).is_ok()).count();
        assert!((1000..1500).contains(&both), "kept by both: {both} of 5000");
    }

    #[test]
    fn the_fraction_kept_is_close_to_the_one_asked() {
        for f in [0.1, 0.5, 0.9] {
            let n = kept(99, 0..100_000, f).len() as f64 / 100_000.0;
            assert!((n - f).abs() < 0.01, "asked {f}, kept {n}");
        }
    }

    #[test]
    fn a_smaller_fraction_keeps_a_subset() {
        // The coin is fixed per block: lowering F only removes survivors. A test can rely on
        // this to compare runs with different fractions and one seed.
        let half = kept(5, 0..5000, 0.5);
        let tenth = kept(5, 0..5000, 0.1);
        assert!(tenth.iter().all(|b| half.binary_search(b).is_ok()));
    }

    #[test]
    fn coins_are_fixed_numbers() {
        // Pinned so that a change of the hash (which would change every test's survivors for
        // a given seed) is seen and done on purpose.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        let c = coin(0, 0);
        assert!((0.0..1.0).contains(&c));
    }
}
