//! Substring searchers for the extractors' literals, each built once per process.
//!
//! `memchr::memmem::find(hay, needle)` builds a searcher (needle analysis, SIMD setup) on every
//! call, which on candidate lines cost about as much as the search itself; [`lit!`] keeps one
//! [`Finder`](memchr::memmem::Finder) per literal in a `static`.

/// The `memmem` finder of a byte-string literal, built on first use and kept for the process.
macro_rules! lit {
    ($needle:literal) => {{
        static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new($needle));
        &*FINDER
    }};
}

pub(crate) use lit;

/// The literal searcher type [`lit!`] gives.
pub(crate) type Lit = memchr::memmem::Finder<'static>;
