//! Helpers of the CLI and admin tests: the binary run as a process, a seeded database, a plain HTTP client, a WebDriver client,
//! and the `shardbox serve` process. Not every test file uses every helper.
#![allow(dead_code)]

pub mod binary;
pub mod http;
pub mod seed;
pub mod serve;
pub mod webdriver;
