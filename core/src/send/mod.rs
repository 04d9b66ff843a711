//! The send path: from `send`/`post` to Inbox rows.
//!
//! ```text
//!  send / post ──► Inbox (address: kind + id ──► shard; serialize) ──► WriteQueue (group
//!                  commit of concurrent sends) ──► InboxStore::write ──► observers told
//! ```
//!
//! `options` holds what one send may ask for (tenant, signal, delay, due time, TTL) and the
//! times it makes, checked. `outcome` awaits what became of a sent command (a read and a
//! wait, no write).
//!
//! This folder writes new rows only; it never reads a page, holds a lease or runs a handler.

pub mod inbox;
pub mod options;
pub mod outcome;
pub mod projected;
pub(crate) mod write_queue;
