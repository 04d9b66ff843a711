//! Times on the command line: what `--since`/`--until` take (the shared [`Since`]: an RFC
//! 3339 instant, or an age such as `30m`), and durations printed for people (the shared
//! [`human`], which the status view's attention lines use too).

pub use shardbox_admin::views::since::human;
pub use shardbox_admin::views::Since;
