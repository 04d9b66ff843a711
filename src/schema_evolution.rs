//! Schema evolution on the builder: the upcasters of payloads ([`ShardboxBuilder::upcast`])
//! and of states ([`ShardboxBuilder::upcast_state`]), checked against the type's current
//! version here and held in the registry's [`Upcasters`](shardbox_core::Upcasters), which
//! every read of a stored payload or state goes through (see docs/entities.md, "Evolving
//! event schemas"). A refused registration is kept and returned by `build`.

use crate::builder::ShardboxBuilder;
use serde_json::Value;
use shardbox_core::{ConfigError, EntityKind, Message, Shape};

impl ShardboxBuilder {
    /// Registers the upcaster that turns a stored payload of type `T` at `from_version` into
    /// the payloads of version `from_version + 1` (see [`Message::VERSION`]): one for a
    /// rename, several for an event split in two or more (delivered in order, as one message),
    /// none to retire it. Payloads are upcast step by step to `T::VERSION` wherever they are
    /// read: live delivery, catch-up, routing, [`Shardbox::aggregate_events`]. A step gets and
    /// gives JSON; an `Err` names what failed, and the message fails permanently (its failure
    /// policy decides). One step per version; `build` refuses a second one, version 0, and a
    /// `from_version` that is not below `T::VERSION`.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)] struct Renamed { full_name: String }
    /// # impl shardbox::Message for Renamed { const TYPE: &'static str = "customer.renamed"; const VERSION: u32 = 2; }
    /// let builder = shardbox::Shardbox::builder().upcast::<Renamed>(1, |mut v1| {
    ///     // v1 called the field `name`.
    ///     let name = v1.as_object_mut().and_then(|o| o.remove("name")).ok_or("no `name`")?;
    ///     v1["full_name"] = name;
    ///     Ok(vec![v1])
    /// });
    /// ```
    ///
    /// [`Shardbox::aggregate_events`]: crate::Shardbox::aggregate_events
    pub fn upcast<T: Message>(
        mut self,
        from_version: u32,
        step: impl Fn(Value) -> Result<Vec<Value>, String> + Send + Sync + 'static,
    ) -> Self {
        let result = if from_version >= T::VERSION {
            Err(ConfigError::Invalid {
                field: "upcast",
                value: format!("{} version {from_version}", Shape::Payload(T::TYPE.into())),
                reason: "an upcaster reads a version below the type's Message::VERSION (raise VERSION, or fix the version the upcaster reads)",
            })
        } else {
            self.upcasters.register(T::TYPE, from_version, step)
        };
        self.refused(result)
    }

    /// Registers the upcaster that turns a stored state of entity type `E` (an aggregate,
    /// projection or process manager) at state version `from_version` into its state at
    /// `from_version + 1` (see `STATE_VERSION` on the entity traits): the step gets the old
    /// state as JSON and returns exactly one new one (`Ok(vec![state])`). States are upcast
    /// step by step to `E::STATE_VERSION` when delivery loads them and in the typed state
    /// reads ([`Shardbox::aggregate_state`](crate::Shardbox::aggregate_state)…); a state that
    /// cannot be is an error naming the kind, tenant, id and version, never a default. One
    /// step per version; `build` refuses a second one, version 0, and a `from_version` that is
    /// not below `E::STATE_VERSION`.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// # use shardbox::{Aggregate, Context, HandlerError, Message};
    /// # #[derive(Serialize, Deserialize)] struct Deposit(i64);
    /// # impl Message for Deposit { const TYPE: &'static str = "deposit"; }
    /// #[derive(Default, Serialize, Deserialize)]
    /// struct Account { cents: i64 } // version 1 kept `balance` in whole units
    ///
    /// impl Aggregate for Account {
    ///     const KIND: &'static str = "account";
    ///     const STATE_VERSION: u32 = 2;
    /// #   type Command = Deposit; type Event = Deposit;
    /// #   async fn handle(&self, _: &Deposit, _: &Context<'_>) -> Result<Vec<Deposit>, HandlerError> { Ok(vec![]) }
    /// #   fn apply(&mut self, _: &Deposit) {}
    ///     // …
    /// }
    ///
    /// let builder = shardbox::Shardbox::builder().upcast_state::<Account, _>(1, |v1| {
    ///     let balance = v1["balance"].as_i64().ok_or("no `balance`")?;
    ///     Ok(vec![serde_json::json!({ "cents": balance * 100 })])
    /// });
    /// ```
    pub fn upcast_state<E: EntityKind<F>, F>(
        mut self,
        from_version: u32,
        step: impl Fn(Value) -> Result<Vec<Value>, String> + Send + Sync + 'static,
    ) -> Self {
        let result = if from_version >= E::STATE_VERSION {
            Err(ConfigError::Invalid {
                field: "upcast_state",
                value: format!("{} version {from_version}", Shape::State(E::KIND.into())),
                reason: "a state upcaster reads a version below the entity's STATE_VERSION (raise STATE_VERSION, or fix the version the upcaster reads)",
            })
        } else {
            self.upcasters.register_state(E::KIND, from_version, step)
        };
        self.refused(result)
    }

    /// Keeps the first refused registration for `build`.
    fn refused(mut self, result: Result<(), ConfigError>) -> Self {
        if let Err(e) = result {
            self.upcast_error.get_or_insert(e);
        }
        self
    }
}
