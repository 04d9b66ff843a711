//! The diesel view of the schema, shared by both backends.
//!
//! The tables are created by the migrations under `storage/migrations/{sqlite,postgres}`; this
//! module only tells diesel their columns. Both backends use the same column types: times are
//! `BIGINT` microseconds since the Unix epoch, payloads `BLOB`/`BYTEA`, metadata JSON text, so
//! that one query serves both. See `docs/storage.md` for what each column means.

diesel::table! {
    /// One row per (message, target).
    inbox_messages (seq) {
        /// Insertion order, monotonic; delivery order.
        seq -> BigInt,
        shard -> Integer,
        signal_id -> Text,
        target_kind -> Text,
        target_id -> Text,
        tenant -> Text,
        /// `command`, `event` or `catch_up`.
        kind -> Text,
        /// `to_deliver`, `delivered`, `to_catch_up` or `blocked`.
        status -> Text,
        received_at -> BigInt,
        deliver_after -> Nullable<BigInt>,
        expires_at -> Nullable<BigInt>,
        keep_until -> Nullable<BigInt>,
        attempts -> Integer,
        last_error -> Nullable<Text>,
        payload -> Binary,
        payload_type -> Text,
        /// JSON object of string values.
        metadata -> Text,
        /// When the first attempt failed (kept across retries, cleared by a requeue).
        first_failed_at -> Nullable<BigInt>,
        /// When it was delivered (a delivered row: a handled command's outcome time).
        delivered_at -> Nullable<BigInt>,
        /// The version of the payload type's shape it was written in (1 before versions).
        payload_version -> Integer,
        /// JSON list of its last failed attempts (`ErrorHistory`); NULL if none failed.
        error_history -> Nullable<Text>,
    }
}

diesel::table! {
    /// The lock table: one row per shard ever picked up.
    shard_sessions (shard) {
        shard -> Integer,
        node_id -> Nullable<Text>,
        worker_id -> Nullable<BigInt>,
        /// Fencing token, +1 at every pick-up.
        epoch -> BigInt,
        picked_at -> Nullable<BigInt>,
        /// Free when NULL or passed.
        lease_until -> Nullable<BigInt>,
    }
}

diesel::table! {
    /// The event store.
    events (seq) {
        seq -> BigInt,
        id -> Text,
        event_type -> Text,
        source_kind -> Text,
        source_id -> Text,
        tenant -> Text,
        occurred_at -> BigInt,
        payload -> Binary,
        metadata -> Text,
        /// The version of the event type's shape it was written in (1 before versions).
        version -> Integer,
    }
}

diesel::table! {
    /// Framework-kept entity states.
    entity_states (kind, tenant, id) {
        kind -> Text,
        tenant -> Text,
        id -> Text,
        version -> BigInt,
        state -> Binary,
        updated_at -> BigInt,
        /// The version of the kind's state shape it was saved at (1 before versions).
        state_version -> Integer,
    }
}

diesel::table! {
    /// Catch-up jobs.
    catch_ups (id) {
        id -> BigInt,
        projection_kind -> Text,
        tenant -> Text,
        /// JSON array of ids; NULL means every instance.
        target_ids -> Nullable<Text>,
        since -> Nullable<BigInt>,
        /// `started`, `in_progress`, `finalizing`, `completed` or `cancelled`.
        status -> Text,
        /// `seq` of the last event replayed.
        cursor_seq -> BigInt,
        replayed -> BigInt,
        total_estimate -> BigInt,
        /// JSON array of shard numbers.
        affected_shards -> Text,
        created_at -> BigInt,
        updated_at -> BigInt,
        finished_at -> Nullable<BigInt>,
        /// When an operator asked to cancel the job (microseconds), if one did.
        cancel_requested_at -> Nullable<BigInt>,
        /// The read model whose new version the job builds (NULL: a plain catch-up).
        version_of -> Nullable<Text>,
        /// The event store's last `seq` when the job's first step ran.
        until_seq -> Nullable<BigInt>,
        /// A job over several databases: its set and its end's positions (JSON); NULL for one.
        spread -> Nullable<Text>,
    }
}

diesel::table! {
    /// Messages that exhausted their attempts, with the original row.
    dead_letters (id) {
        id -> BigInt,
        original_seq -> BigInt,
        shard -> Integer,
        tenant -> Text,
        target_kind -> Text,
        target_id -> Text,
        signal_id -> Text,
        kind -> Text,
        status -> Text,
        received_at -> BigInt,
        deliver_after -> Nullable<BigInt>,
        expires_at -> Nullable<BigInt>,
        keep_until -> Nullable<BigInt>,
        /// Attempts recorded on the inbox row before the last one.
        row_attempts -> Integer,
        /// Error recorded on the inbox row before the last attempt.
        row_last_error -> Nullable<Text>,
        /// Failed attempts, the last one included.
        attempts -> Integer,
        /// Why the message is dead (the last error).
        reason -> Text,
        /// When the first attempt failed; NULL if none did (expired, unroutable).
        first_attempt_at -> Nullable<BigInt>,
        last_attempt_at -> BigInt,
        payload -> Binary,
        payload_type -> Text,
        metadata -> Text,
        /// `first_failed_at` of the inbox row before the last attempt.
        row_first_failed_at -> Nullable<BigInt>,
        /// The original message's `payload_version`.
        payload_version -> Integer,
        /// The inbox row's error history, the attempt that killed it included.
        row_error_history -> Nullable<Text>,
    }
}

diesel::table! {
    /// Settings every node must agree on, recorded by the first node (e.g. `shard_count`).
    shardbox_settings (name) {
        name -> Text,
        value -> Text,
    }
}

diesel::table! {
    /// The kinds' stored controls: a pause and run-time settings (JSON), read by every node.
    shardbox_kind_controls (kind) {
        kind -> Text,
        /// When the kind was paused (NULL: not paused).
        paused_at -> Nullable<BigInt>,
        /// `KindSettings::to_stored`.
        settings -> Text,
        updated_at -> BigInt,
    }
}

diesel::table! {
    /// Read models' versions (blue/green rebuilds): the served kind and the one being built.
    shardbox_read_model_versions (model) {
        model -> Text,
        served_kind -> Text,
        building_kind -> Nullable<Text>,
        building_job -> Nullable<BigInt>,
        previous_kind -> Nullable<Text>,
        switched_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    /// Membership: the running nodes' heartbeats.
    shardbox_nodes (node_id) {
        node_id -> Text,
        started_at -> BigInt,
        beat_at -> BigInt,
        alive_until -> BigInt,
        kinds -> Text,
    }
}

diesel::table! {
    /// What became of each command a stage settled, kept for the deduplication window.
    command_outcomes (tenant, target_kind, target_id, signal_id) {
        tenant -> Text,
        target_kind -> Text,
        target_id -> Text,
        signal_id -> Text,
        shard -> Integer,
        /// `handled`, `dead_lettered`, `dropped`, `blocked` or `expired`.
        outcome -> Text,
        /// The reason of a failure outcome.
        detail -> Nullable<Text>,
        /// The emitted events' ids, a JSON array of strings.
        event_ids -> Text,
        decided_at -> BigInt,
        keep_until -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(inbox_messages, events);

diesel::table! {
    /// Messages for targets in another database, written in a stage's commit (the outbox).
    shardbox_outbox (id) {
        id -> BigInt,
        to_database -> Integer,
        shard -> Integer,
        /// The message as JSON, without its payload.
        envelope -> Text,
        payload -> Binary,
    }
}

diesel::table! {
    /// Up to which outbox id each source database's relay copied into this database.
    shardbox_relay_positions (from_database) {
        from_database -> Integer,
        position -> BigInt,
    }
}
