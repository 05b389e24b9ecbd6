//! What the benchmarks share. The other files of this folder (the executor fleet, the mock
//! gateway, latency flags, running role instances, a PostgreSQL cluster of the benchmark's
//! own and the database's work per charge read from it) are each included with `#[path]`
//! by the benchmarks that use them, so that no benchmark compiles helpers it leaves unused.

/// `12345.6` as `12,346`, the way docs/performance.md writes figures.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
