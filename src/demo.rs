//! `idemgate demo` (placeholder while the demo is written).

/// Runs the demonstration; returns whether every scenario behaved.
pub async fn run() -> Result<bool, String> {
    Ok(true)
}
