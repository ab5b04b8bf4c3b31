//! Kubernetes truth adapter (placeholder).
