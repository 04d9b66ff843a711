//! The web dashboard: one HTML page with inline CSS and JavaScript, no build step and nothing
//! fetched from elsewhere, served at the router's root. It polls the JSON API every two
//! seconds: the status (with the attention banner the CLI's `status` prints too), dead
//! letters (each one's payload and failures in a dialog), blocked targets, kinds, shards,
//! nodes, catch-ups, and the history the server keeps (`/api/history`) drawn as hand-made
//! SVG plots with time axes: depth, lag, delivered per second, failures per second. Its
//! buttons call the POST actions (shown only when the server allows them).
//!
//! Every count and row carries a stable id or data attribute (`#count-dead-letters`,
//! `tr[data-dead-letter="ID"]`, `button[data-requeue="ID"]`, `svg[data-plot]`, …) for
//! scripts and the browser test; `body[data-refreshes]` counts completed refreshes.

/// The page.
pub const PAGE: &str = include_str!("dashboard.html");
