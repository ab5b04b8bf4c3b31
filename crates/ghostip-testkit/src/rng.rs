//! A small seeded random number generator for workloads and kill timings that must be
//! reproducible from a seed.

/// xorshift64*: enough randomness for test workloads, reproducible from its seed (which must
/// not be zero: a zero state stays zero).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n`; `n` must not be zero.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
