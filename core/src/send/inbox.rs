//! The Inbox's sending face: `send` a command to one target, `post` an event to every
//! subscriber. Each call is one atomic write (an event with all its fan-out rows), then the
//! shard observers are told so that workers wake at once. Calls made while another write is
//! in flight are committed together in one transaction (see `write_queue`).
//!
//! Every id a call takes (target, tenant, signal, event source, and the ids subscribers route
//! an event to) is checked against the id limits of [`crate::model::ids`] before anything is
//! written: a bad one is [`DeliveryError::InvalidInput`] naming the field. So are the delay,
//! due time and TTL, against the limits of [`crate::model::time_limits`]: an out-of-range one
//! is [`DeliveryError::InvalidTime`] naming the field. So is every payload, against
//! `max_payload_bytes` ([`crate::model::payload_limit`]): a larger one is
//! [`DeliveryError::PayloadTooLarge`] naming its size and the limit.

use crate::entity::traits::{Aggregate, Message};
use crate::model::error::DeliveryError;
use crate::model::event::{EventSource, NewEvent};
use crate::model::ids::ShardIndex;
use crate::model::ids::{validate, validate_address, IdField, SignalId};
use crate::model::message::{InboxWrite, MessageKind, Metadata, NewMessage};
use crate::model::payload_limit::check_payload;
use crate::runner::env::DeliveryEnv;
use crate::send::options::{validate_times, SendOptions};
use crate::send::write_queue::WriteQueue;
use crate::storage::{EntityKey, WriteBatch, WriteReport};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// What a send or post did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    /// The signal id used.
    pub signal_id: SignalId,
    /// The storage write.
    pub report: WriteReport,
    /// The command's target (kind, tenant, id) and shard, whose outcome
    /// [`Inbox::outcome`] awaits; `None` for a post.
    pub target: Option<(EntityKey, ShardIndex)>,
}

/// Checks the ids of a posted event — its id (the signal id of every copy), tenant and
/// source — and its payload's size against `max_payload_bytes`.
fn validate_event(event: &NewEvent, max_payload_bytes: usize) -> Result<(), DeliveryError> {
    validate(IdField::SignalId, &event.id.0)?;
    validate(IdField::Tenant, &event.tenant)?;
    validate(IdField::SourceKind, &event.source.kind)?;
    validate(IdField::SourceId, &event.source.id)?;
    validate(IdField::EventType, &event.event_type)?;
    check_payload(&event.event_type, &event.payload, max_payload_bytes)?;
    Ok(())
}

/// Checks a command's ids and its payload's size against `max_payload_bytes`.
fn validate_command(message: &NewMessage, max_payload_bytes: usize) -> Result<(), DeliveryError> {
    validate_address(
        &message.tenant,
        &message.target_kind,
        &message.target_id,
        &message.signal_id,
    )?;
    validate(IdField::PayloadType, &message.payload_type)?;
    check_payload(&message.payload_type, &message.payload, max_payload_bytes)?;
    Ok(())
}

/// Sends commands and posts events into the sharded Inbox.
#[derive(Clone)]
pub struct Inbox {
    pub(super) env: Arc<DeliveryEnv>,
    /// Group commit of this Inbox's concurrent sends (shared by its clones).
    /// One group-commit queue per database of the storage (one for a storage of one), so
    /// that a database that is slow or down holds up only the sends to its own targets.
    writes: Arc<[WriteQueue]>,
}

/// The row of `command` to `A` instance `id`, sent with `options` at `now`.
fn new_command<A: Aggregate>(
    id: &str,
    command: &A::Command,
    options: &SendOptions,
    signal_id: SignalId,
    now: DateTime<Utc>,
) -> Result<NewMessage, DeliveryError> {
    Ok(NewMessage {
        signal_id,
        kind: MessageKind::Command,
        target_kind: A::KIND.to_owned(),
        target_id: id.to_owned(),
        tenant: options.tenant.clone(),
        payload: serialize(command)?,
        payload_type: <A::Command as Message>::TYPE.to_owned(),
        payload_version: <A::Command as Message>::VERSION,
        metadata: options.metadata.clone(),
        received_at: now,
        deliver_after: options.deliver_after(now)?,
        expires_at: options.expires_at(now)?,
    })
}

/// The stored form of `event` produced by `source`, posted with `options` at `now`.
fn new_event<E: Message>(
    source: EventSource,
    event: &E,
    options: &SendOptions,
    id: SignalId,
    now: DateTime<Utc>,
) -> Result<NewEvent, DeliveryError> {
    Ok(NewEvent {
        id,
        event_type: E::TYPE.to_owned(),
        source,
        tenant: options.tenant.clone(),
        occurred_at: now,
        payload: serialize(event)?,
        version: E::VERSION,
        metadata: options.metadata.clone(),
    })
}

fn serialize<T: Message>(value: &T) -> Result<Vec<u8>, DeliveryError> {
    serde_json::to_vec(value).map_err(|e| DeliveryError::Serialize {
        payload_type: T::TYPE.to_owned(),
        source: e,
    })
}

impl Inbox {
    /// The Inbox of a delivery environment.
    pub fn new(env: Arc<DeliveryEnv>) -> Self {
        let databases = crate::databases::Databases::of(env.storage.as_ref())
            .map_or(1, |d| d.map().count() as usize);
        Inbox {
            env,
            writes: (0..databases).map(|_| WriteQueue::default()).collect(),
        }
    }

    /// Sends `command` to aggregate `A` instance `id`.
    pub async fn send<A: Aggregate>(
        &self,
        id: &str,
        command: &A::Command,
        options: SendOptions,
    ) -> Result<SendReceipt, DeliveryError> {
        let now = self.env.clock.now();
        let message = new_command::<A>(id, command, &options, options.signal(None), now)?;
        self.send_message(message).await
    }

    /// Sends many commands to instances of aggregate `A` in one write (one transaction on the
    /// durable backends): the way to load work in bulk. Each command gets its own fresh signal
    /// id unless `options.signal_id` is set, in which case `"{id}/{n}"` is used for the n-th.
    pub async fn send_many<A: Aggregate>(
        &self,
        commands: &[(&str, A::Command)],
        options: SendOptions,
    ) -> Result<WriteReport, DeliveryError> {
        self.env.registry.check_registered(A::KIND)?;
        let now = self.env.clock.now();
        let mut messages = Vec::with_capacity(commands.len());
        for (n, (id, command)) in commands.iter().enumerate() {
            let mut message =
                new_command::<A>(id, command, &options, options.signal(Some(n)), now)?;
            self.traced(&mut message.metadata);
            validate_command(&message, self.env.config.max_payload_bytes)?;
            messages.push(self.env.registry.address(message));
        }
        self.write_batch(WriteBatch {
            events: Vec::new(),
            messages,
        })
        .await
    }

    /// Sends an already serialized command. The target kind must be registered.
    pub async fn send_message(
        &self,
        mut message: NewMessage,
    ) -> Result<SendReceipt, DeliveryError> {
        self.traced(&mut message.metadata);
        validate_times(&message)?;
        validate_command(&message, self.env.config.max_payload_bytes)?;
        self.env.registry.check_registered(&message.target_kind)?;
        let signal_id = message.signal_id.clone();
        let write = self.env.registry.address(message);
        let target = EntityKey::new(
            &write.message.target_kind,
            &write.message.tenant,
            &write.message.target_id,
        );
        let shard = write.shard;
        let batch = WriteBatch {
            events: Vec::new(),
            messages: vec![write],
        };
        let mut receipt = self.write(signal_id, batch).await?;
        receipt.target = Some((target, shard));
        Ok(receipt)
    }

    /// Posts `event`, produced by `source`, to every subscribed kind.
    pub async fn post<E: Message>(
        &self,
        source: EventSource,
        event: &E,
        options: SendOptions,
    ) -> Result<SendReceipt, DeliveryError> {
        let now = self.env.clock.now();
        let event = new_event(source, event, &options, options.signal(None), now)?;
        self.post_event(event, options).await
    }

    /// Posts many events in one write (one transaction on the durable backends), in order: the
    /// event store gives them increasing `seq` in the order given, and each subscriber's rows
    /// keep that order. The way to import history in bulk. Each event gets its own fresh
    /// signal id unless `options.signal_id` is set, in which case `"{id}/{n}"` is used for the
    /// n-th. Nothing is written if any event cannot be routed.
    pub async fn post_many<E: Message>(
        &self,
        events: &[(EventSource, E)],
        options: SendOptions,
    ) -> Result<WriteReport, DeliveryError> {
        let now = self.env.clock.now();
        let mut batch = WriteBatch {
            events: Vec::with_capacity(events.len()),
            messages: Vec::with_capacity(events.len()),
        };
        for (n, (source, event)) in events.iter().enumerate() {
            let mut event = new_event(
                source.clone(),
                event,
                &options,
                options.signal(Some(n)),
                now,
            )?;
            self.traced(&mut event.metadata);
            validate_event(&event, self.env.config.max_payload_bytes)?;
            self.fan_out(&event, &options, now, &mut batch.messages)?;
            batch.events.push(event);
        }
        self.write_batch(batch).await
    }

    /// Posts an already serialized event: appends it to the event store and writes one row
    /// per subscriber, atomically.
    pub async fn post_event(
        &self,
        mut event: NewEvent,
        options: SendOptions,
    ) -> Result<SendReceipt, DeliveryError> {
        self.traced(&mut event.metadata);
        validate_event(&event, self.env.config.max_payload_bytes)?;
        let now = self.env.clock.now();
        let mut messages = Vec::new();
        self.fan_out(&event, &options, now, &mut messages)?;
        let signal_id = event.id.clone();
        let batch = WriteBatch {
            events: vec![event],
            messages,
        };
        self.write(signal_id, batch).await
    }

    /// Writes the caller's current span into `metadata` as the trace context, when the
    /// delivery carries traces (see [`crate::entity::trace`]); a caller outside any trace
    /// leaves the metadata as given (a trace context it carries already is kept).
    fn traced(&self, metadata: &mut Metadata) {
        if let Some(trace) = self.env.registry.trace_propagator() {
            trace.inject(&tracing::Span::current(), metadata);
        }
    }

    /// Appends one row per subscriber of `event` to `messages`; an event some subscriber
    /// cannot route is refused.
    fn fan_out(
        &self,
        event: &NewEvent,
        options: &SendOptions,
        now: DateTime<Utc>,
        messages: &mut Vec<InboxWrite>,
    ) -> Result<(), DeliveryError> {
        let failures = self.env.registry.fan_out(
            event,
            now,
            options.deliver_after(now)?,
            options.expires_at(now)?,
            messages,
        );
        match failures.into_iter().next() {
            Some((kind, reason)) => Err(DeliveryError::Unroutable {
                kind: kind.to_owned(),
                event_type: event.event_type.clone(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// Writes a batch of already addressed rows (grouped with concurrent ones into one
    /// transaction, see `write_queue`), records it in the metrics and wakes the shards it
    /// wrote to: the one way rows enter the Inbox outside a stage (sends, posts, the
    /// framework's own catch-up ticks).
    #[doc(hidden)]
    pub async fn write_batch(&self, batch: WriteBatch) -> Result<WriteReport, DeliveryError> {
        let report = match crate::databases::Databases::of(self.env.storage.as_ref()) {
            None => self.write_queued(0, batch).await?,
            // Each database's part goes with that database's sends (a bulk send to several
            // databases waits for each in turn).
            Some(dbs) => {
                let mut report = WriteReport::default();
                for (d, part) in dbs.by_database(batch) {
                    report.merge(self.write_queued(d as usize, part).await?);
                }
                report
            }
        };
        self.env.metrics.record_write(&report);
        self.env.notify(&report.shards);
        Ok(report)
    }

    /// Writes `batch` through the group-commit queue of database `queue`.
    async fn write_queued(
        &self,
        queue: usize,
        batch: WriteBatch,
    ) -> Result<WriteReport, DeliveryError> {
        Ok(self.writes[queue]
            .write(
                &self.env.storage,
                &self.env.registry,
                &self.env.metrics,
                batch,
            )
            .await?)
    }

    async fn write(
        &self,
        signal_id: SignalId,
        batch: WriteBatch,
    ) -> Result<SendReceipt, DeliveryError> {
        let report = self.write_batch(batch).await?;
        if report.duplicates > 0 {
            tracing::debug!(%signal_id, duplicates = report.duplicates, "duplicate write ignored");
        }
        Ok(SendReceipt {
            signal_id,
            report,
            target: None,
        })
    }
}
