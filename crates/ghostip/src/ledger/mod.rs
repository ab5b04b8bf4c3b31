//! SQLite history ledger (placeholder).
