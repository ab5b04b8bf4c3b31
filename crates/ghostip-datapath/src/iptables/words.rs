//! Byte comparisons eight bytes at a time, for chain names and the literals of kube-proxy's
//! rule layouts.
//!
//! Property test (`tests.rs`): `word_compares_agree_with_slices`.

/// Eight bytes of `b` from `at` as a little-endian word, if there are eight.
pub(super) fn word_at(b: &[u8], at: usize) -> Option<u64> {
    let w: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(w))
}

/// The lanes of `x` whose byte is a space or a control byte (below 0x21), as their high
/// bits. Exact for the lowest flagged lane (a borrow only flags lanes above a flagged one);
/// bytes from 0x80 up are never flagged.
pub(super) fn space_or_control_lanes(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    x.wrapping_sub(0x21 * ONES) & !x & (0x80 * ONES)
}

/// The length of the token `b` starts with: its bytes above the space (eight at a time).
pub(super) fn graphic_len(b: &[u8]) -> usize {
    let mut n = 0;
    while let Some(x) = word_at(b, n) {
        let low = space_or_control_lanes(x);
        if low != 0 {
            return n + (low.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + b
        .get(n..)
        .unwrap_or_default()
        .iter()
        .take_while(|&&c| c > b' ')
        .count()
}

/// Whether `b` starts with `s`, compared eight bytes at a time. Inlined with a literal
/// `s`, the loop unrolls into a few word compares instead of a call to `bcmp` (the
/// literals of kube-proxy's layouts are up to 42 bytes long).
#[inline(always)]
pub(super) fn starts_with_words(b: &[u8], s: &[u8]) -> bool {
    if b.len() < s.len() {
        return false;
    }
    if s.len() < 8 {
        return b.get(..s.len()) == Some(s);
    }
    let mut at = 0;
    while at + 8 <= s.len() {
        if word_at(b, at) != word_at(s, at) {
            return false;
        }
        at += 8;
    }
    // The last word overlaps the one before it.
    at == s.len() || word_at(b, s.len() - 8) == word_at(s, s.len() - 8)
}

/// Whether `a` and `b` are the same chain name ([`starts_with_words`] of equal lengths).
#[inline(always)]
pub(super) fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && starts_with_words(a, b)
}
