//! The cluster: what the nodes of one database agree on through the lock table, apart from
//! how one node schedules its own work (`runner/`).
//!
//! ```text
//!  seat           NodeSeat: a node's place — the lock table, its id, its clock on the
//!                 storage's time line, the lease terms (all the parts below need of a node)
//!  storage_clock  the node's clock read off the storage's clock (leases on one time line)
//!  membership     the membership beat, and the assignment read from the live members
//!  assign         who should serve which shard: rendezvous hashing over the live members
//!  lease_renewal  renews a held lease while a stage runs
//!  lease_loss     a lost lease: a takeover (WARN) or a catch-up's re-fence (DEBUG)
//!  unreleased     leases whose release failed, kept to be released again
//!  reshard        online re-sharding, the operator's side: announce, gather every lease,
//!                 switch
//!  relay          copies one database's outbox rows into another database's Inbox,
//!                 fenced by the target's recorded position
//! ```
//!
//! Every part here reaches the storage through the lock table alone (`WorkRegistry`, held
//! by the [`NodeSeat`](seat::NodeSeat)); none knows the runner's workers, timers or wake
//! queue. "Lease renewal" keeps a shard's lease while a stage runs; the "membership beat"
//! keeps a node in the membership: two different things, two names.

pub mod assign;
pub(crate) mod lease_loss;
pub(crate) mod lease_renewal;
pub(crate) mod membership;
pub mod relay;
pub mod reshard;
pub mod seat;
pub mod storage_clock;
pub(crate) mod unreleased;
