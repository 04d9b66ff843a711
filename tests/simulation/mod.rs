//! The deterministic fault-injection simulation's harness (see `tests/simulation.rs`).

pub mod faulty;
pub mod invariants;
pub mod latency;
pub mod model;
#[cfg(test)]
mod regressions;
pub mod rng;
pub mod workload;
