//! The web dashboard: one HTML page with inline CSS and JavaScript, no build step, served at
//! the router's root. It polls the JSON API every two seconds, keeps the last ten minutes
//! of inbox depth and lag in the browser and draws them as an inline SVG plot; its buttons
//! call the POST actions (shown only when the server allows them).
//!
//! Every count and row carries a stable id or data attribute (`#count-dead-letters`,
//! `tr[data-dead-letter="ID"]`, `button[data-requeue="ID"]`, …) for scripts and the browser
//! test; `body[data-refreshes]` counts completed refreshes.

/// The page.
pub const PAGE: &str = include_str!("dashboard.html");
