//! Inbox cases: order, paging, delays, counts, replayed rows, concurrent writers.
//!
//! ```text
//!  pages   rows read in seq order, page by page, as they fall due (replayed rows among them)
//!  counts  counts by status, depths by wait and by kind
//!  writes  concurrent writers, a group's report per batch
//! ```

use crate::fixtures::*;
use chrono::Duration;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{InboxCounts, RowChange, RowUpdate, WriteBatch, WriteReport};
use shardbox_core::InboxWrite;
use shardbox_core::{MessageKind, MessageStatus, ShardIndex, SignalId, Storage};
use std::sync::Arc;

mod counts;
mod pages;
mod writes;

pub use counts::{counts_by_status, depths_by_kind, depths_by_wait};
pub use pages::{
    catch_up_rows_interleave_in_seq_order, deliver_after_is_respected,
    due_pages_take_the_first_rows_by_seq, paging_with_equal_timestamps_crosses_pages,
    write_then_read_in_seq_order,
};
pub use writes::{concurrent_writers_all_succeed, write_all_reports_each_batch};
